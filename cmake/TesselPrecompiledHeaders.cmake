# tessel_precompiled_headers(<target> [CATCH2])
#
# Gives <target> (a test, example or benchmark of this project, built against tessel::tessel)
# the precompiled <tessel/tessel.hpp> (and with CATCH2, <catch2/catch.hpp>): parsed once for the
# whole build instead of once per translation unit (about 230,000 lines after preprocessing). The
# header is compiled by a holder target with the same flags as its users; a user whose flags differ
# (GCC checks the macros the header uses) parses the header as usual, so it only costs time, never
# correctness. Off with -DTESSEL_PRECOMPILED_HEADERS=OFF. A directory whose targets compile with
# options of their own (tests/: -O1) sets TESSEL_PCH_SUFFIX, and gets holders of its own.
option(TESSEL_PRECOMPILED_HEADERS "Precompile tessel.hpp for the tests, examples and benchmarks" ON)

function(tessel_precompiled_headers target)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "CATCH2" "" "")
  if(NOT TESSEL_PRECOMPILED_HEADERS)
    return()
  endif()
  set(holder tessel_pch${TESSEL_PCH_SUFFIX})
  if(ARG_CATCH2)
    set(holder tessel_pch_catch2${TESSEL_PCH_SUFFIX})
  endif()
  if(NOT TARGET ${holder})
    set(source ${PROJECT_BINARY_DIR}/${holder}.cpp)
    file(CONFIGURE OUTPUT ${source} CONTENT "// the holder of ${holder}'s precompiled header\n")
    add_library(${holder} STATIC EXCLUDE_FROM_ALL ${source})
    target_link_libraries(${holder} PRIVATE tessel::tessel tessel_warnings)
    if(ARG_CATCH2)
      target_link_libraries(${holder} PRIVATE Catch2::Catch2)
      target_precompile_headers(${holder} PRIVATE <tessel/tessel.hpp> <catch2/catch.hpp>)
    else()
      target_precompile_headers(${holder} PRIVATE <tessel/tessel.hpp>)
    endif()
  endif()
  target_precompile_headers(${target} REUSE_FROM ${holder})
endfunction()

# tessel_precompiled_headers_for_directory([CATCH2])
#
# tessel_precompiled_headers for every executable and object library of the calling directory
# that links tessel::tessel, not tessel::cuda, and does not set a limit of the library (a macro
# its headers read).
function(tessel_precompiled_headers_for_directory)
  get_property(targets DIRECTORY PROPERTY BUILDSYSTEM_TARGETS)
  foreach(t IN LISTS targets)
    get_target_property(type ${t} TYPE)
    get_target_property(libs ${t} LINK_LIBRARIES)
    # A target that sets one of the library's limits (TESSEL_MAX_OPS...) compiles the headers
    # differently: GCC refuses the shared header for it (-Winvalid-pch, an error here).
    get_target_property(definitions ${t} COMPILE_DEFINITIONS)
    set(own_limits FALSE)
    if(definitions AND definitions MATCHES "TESSEL_MAX_")
      set(own_limits TRUE)
    endif()
    # A program linked with tessel::cuda (TESSEL_HAVE_CUDA) compiles them differently too.
    # tessel::ps is tessel::tessel with ZeroMQ.
    if((type STREQUAL "EXECUTABLE" OR type STREQUAL "OBJECT_LIBRARY")
       AND ("tessel::tessel" IN_LIST libs OR "tessel::ps" IN_LIST libs)
       AND NOT own_limits
       AND NOT "tessel::cuda" IN_LIST libs AND NOT "tessel::cuda_compiled" IN_LIST libs)
      tessel_precompiled_headers(${t} ${ARGN})
    endif()
  endforeach()
endfunction()
