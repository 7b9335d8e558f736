# FindTesselHDF5: the serial HDF5 C library as Debian ships it (libhdf5-dev), for Keras's
# .weights.h5 files (tessel/saving/h5.hpp). CMake's FindHDF5 cannot be used here: it compiles a
# C test program, so it needs the C language enabled in every project that finds tessel, and it
# may pick the MPI build (libhdf5-openmpi-dev) where both are installed. This module looks only
# at the serial one (Debian installs it under hdf5/serial) and makes an imported target:
#
#   TesselHDF5::hdf5   libhdf5 (serial), its headers as a system directory
include(FindPackageHandleStandardArgs)

find_path(TesselHDF5_INCLUDE_DIR hdf5.h PATH_SUFFIXES hdf5/serial)
find_library(TesselHDF5_LIBRARY NAMES hdf5_serial PATH_SUFFIXES hdf5/serial)
if(NOT TesselHDF5_LIBRARY)
  find_library(TesselHDF5_LIBRARY NAMES hdf5 PATH_SUFFIXES hdf5/serial)
endif()
if(TesselHDF5_INCLUDE_DIR AND EXISTS "${TesselHDF5_INCLUDE_DIR}/H5public.h")
  file(STRINGS "${TesselHDF5_INCLUDE_DIR}/H5public.h" _tessel_hdf5_version
       REGEX "^#define H5_VERS_(MAJOR|MINOR|RELEASE)[ \t]")
  string(REGEX REPLACE ".*H5_VERS_MAJOR[ \t]+([0-9]+).*H5_VERS_MINOR[ \t]+([0-9]+).*H5_VERS_RELEASE[ \t]+([0-9]+).*"
         "\\1.\\2.\\3" TesselHDF5_VERSION "${_tessel_hdf5_version}")
  unset(_tessel_hdf5_version)
endif()

find_package_handle_standard_args(TesselHDF5
  REQUIRED_VARS TesselHDF5_LIBRARY TesselHDF5_INCLUDE_DIR
  VERSION_VAR TesselHDF5_VERSION
  REASON_FAILURE_MESSAGE "install Debian's serial HDF5: apt-get install libhdf5-dev")

if(TesselHDF5_FOUND AND NOT TARGET TesselHDF5::hdf5)
  add_library(TesselHDF5::hdf5 UNKNOWN IMPORTED)
  set_target_properties(TesselHDF5::hdf5 PROPERTIES
    IMPORTED_LOCATION "${TesselHDF5_LIBRARY}"
    INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${TesselHDF5_INCLUDE_DIR}"
    INTERFACE_INCLUDE_DIRECTORIES "${TesselHDF5_INCLUDE_DIR}")
endif()
mark_as_advanced(TesselHDF5_INCLUDE_DIR TesselHDF5_LIBRARY)
