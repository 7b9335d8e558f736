# FindTesselKokkos: Kokkos and Kokkos Kernels as Debian ships them (libtrilinos-kokkos-dev,
# libtrilinos-kokkos-kernels-dev). Their own CMake config leaves the include directory off
# Kokkos::kokkos, so this module makes imported targets that carry it (as a system directory:
# Kokkos 3.4's headers predate C++20 and would drown our warnings).
#
#   TesselKokkos::core     Kokkos core (Serial host execution space)
#   TesselKokkos::kernels  Kokkos Kernels and the BLAS (OpenBLAS: cblas_sgemm)
#   TesselKokkos::xsmm     libxsmm (libxsmm-dev), if found: JIT kernels for the small GEMMs;
#                          defines TESSEL_HAVE_LIBXSMM
include(FindPackageHandleStandardArgs)

find_path(TesselKokkos_INCLUDE_DIR Kokkos_Core.hpp PATH_SUFFIXES trilinos)
find_library(TesselKokkos_CORE_LIBRARY NAMES trilinos_kokkoscore kokkoscore)
find_library(TesselKokkos_KERNELS_LIBRARY NAMES trilinos_kokkoskernels kokkoskernels)
find_library(TesselKokkos_BLAS_LIBRARY NAMES openblas blas)
find_path(TesselKokkos_XSMM_INCLUDE_DIR libxsmm.h)
find_library(TesselKokkos_XSMM_LIBRARY NAMES libxsmm.a xsmm)

find_package_handle_standard_args(TesselKokkos
  REQUIRED_VARS TesselKokkos_INCLUDE_DIR TesselKokkos_CORE_LIBRARY TesselKokkos_KERNELS_LIBRARY
                TesselKokkos_BLAS_LIBRARY
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
    INTERFACE_LINK_LIBRARIES "TesselKokkos::core;${TesselKokkos_BLAS_LIBRARY}")
endif()
if(TesselKokkos_FOUND AND TesselKokkos_XSMM_INCLUDE_DIR AND TesselKokkos_XSMM_LIBRARY
   AND NOT TARGET TesselKokkos::xsmm)
  # The static library calls the BLAS (sgemm_) for what it does not generate, and needs threads,
  # dlopen and clock_gettime.
  find_package(Threads REQUIRED)
  add_library(TesselKokkos::xsmm UNKNOWN IMPORTED)
  set_target_properties(TesselKokkos::xsmm PROPERTIES
    IMPORTED_LOCATION "${TesselKokkos_XSMM_LIBRARY}"
    INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${TesselKokkos_XSMM_INCLUDE_DIR}"
    INTERFACE_COMPILE_DEFINITIONS TESSEL_HAVE_LIBXSMM
    INTERFACE_LINK_LIBRARIES "${TesselKokkos_BLAS_LIBRARY};Threads::Threads;${CMAKE_DL_LIBS};rt")
endif()
mark_as_advanced(TesselKokkos_INCLUDE_DIR TesselKokkos_CORE_LIBRARY TesselKokkos_KERNELS_LIBRARY
                 TesselKokkos_BLAS_LIBRARY TesselKokkos_XSMM_INCLUDE_DIR TesselKokkos_XSMM_LIBRARY)
