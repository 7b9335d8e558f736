# FindTesselKokkos: Kokkos and Kokkos Kernels as Debian ships them (libtrilinos-kokkos-dev,
# libtrilinos-kokkos-kernels-dev). Their own CMake config leaves the include directory off
# Kokkos::kokkos, so this module makes imported targets that carry it (as a system directory:
# Kokkos 3.4's headers predate C++20 and would drown our warnings).
#
#   TesselKokkos::core     Kokkos core (Serial host execution space)
#   TesselKokkos::kernels  Kokkos Kernels (BLAS through the system BLAS, e.g. OpenBLAS)
include(FindPackageHandleStandardArgs)

find_path(TesselKokkos_INCLUDE_DIR Kokkos_Core.hpp PATH_SUFFIXES trilinos)
find_library(TesselKokkos_CORE_LIBRARY NAMES trilinos_kokkoscore kokkoscore)
find_library(TesselKokkos_KERNELS_LIBRARY NAMES trilinos_kokkoskernels kokkoskernels)

find_package_handle_standard_args(TesselKokkos
  REQUIRED_VARS TesselKokkos_INCLUDE_DIR TesselKokkos_CORE_LIBRARY TesselKokkos_KERNELS_LIBRARY
  REASON_FAILURE_MESSAGE
    "install Debian's packages: apt-get install libtrilinos-kokkos-dev libtrilinos-kokkos-kernels-dev libopenblas-dev")

if(TesselKokkos_FOUND AND NOT TARGET TesselKokkos::core)
  add_library(TesselKokkos::core UNKNOWN IMPORTED)
  set_target_properties(TesselKokkos::core PROPERTIES
    IMPORTED_LOCATION "${TesselKokkos_CORE_LIBRARY}"
    INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${TesselKokkos_INCLUDE_DIR}"
    INTERFACE_INCLUDE_DIRECTORIES "${TesselKokkos_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${CMAKE_DL_LIBS}")
  add_library(TesselKokkos::kernels UNKNOWN IMPORTED)
  set_target_properties(TesselKokkos::kernels PROPERTIES
    IMPORTED_LOCATION "${TesselKokkos_KERNELS_LIBRARY}"
    INTERFACE_LINK_LIBRARIES TesselKokkos::core)
endif()
mark_as_advanced(TesselKokkos_INCLUDE_DIR TesselKokkos_CORE_LIBRARY TesselKokkos_KERNELS_LIBRARY)
