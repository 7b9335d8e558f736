# Builds the libFuzzer harnesses (tests/fuzz/fuzz_*.cpp) with clang++ and
# -fsanitize=fuzzer,address,undefined, and, when RUNS is given, runs each over its seed corpus
# (tests/fuzz/corpus/<name>/) for RUNS inputs. Fails, never skips, when clang++ or libFuzzer's
# runtime is missing. Used by the CTest test fuzz.build_harnesses and by scripts/fuzz.sh.
#
#   cmake -DBINARY_DIR=<dir> [-DCXX=clang++] [-DSOURCE_DIR=<repo>] [-DSYSTEM_INCLUDES=a;b]
#         [-DZLIB_INCLUDE_DIRS=..] [-DZLIB_LIBRARIES=..] [-DHDF5_LIBRARIES=..]
#         [-DZMQ_LIBRARIES=..] [-DRUNS=200]
#         [-DHARNESSES=idx;regex] [-DOPTIMIZE=-O0;-g1] -P tests/fuzz/build_harnesses.cmake
#
# OPTIMIZE is the optimization and debug flags, -O1 -g by default (long runs: scripts/fuzz.sh);
# the CTest test's short run over the seeds builds at -O0 -g1, in half the time.
#
# The saving harnesses include headers that reach libhdf5's (saving/h5.hpp) and nlohmann's JSON:
# SYSTEM_INCLUDES carries their directories, and every harness links HDF5_LIBRARIES (a harness
# never hands its input to libhdf5: see docs/testing.md#fuzzing).
cmake_minimum_required(VERSION 3.20)

get_filename_component(here "${CMAKE_CURRENT_LIST_DIR}" ABSOLUTE)
if(NOT SOURCE_DIR)
  get_filename_component(SOURCE_DIR "${here}/../.." ABSOLUTE)
endif()
if(NOT BINARY_DIR)
  message(FATAL_ERROR "build_harnesses.cmake: pass -DBINARY_DIR=<directory for the harnesses>")
endif()
string(CONCAT install_hint "install Debian's packages clang, libclang-rt-dev and llvm (listed "
              "in scripts/packages.txt; scripts/install-deps.sh installs them)")

if(NOT CXX)  # not given, or given as <var>-NOTFOUND
  find_program(clangxx NAMES clang++ clang++-14)
  set(CXX "${clangxx}")
elseif(NOT IS_ABSOLUTE "${CXX}")  # a name to look for on the PATH
  find_program(clangxx NAMES "${CXX}")
  if(clangxx)
    set(CXX "${clangxx}")
  endif()
endif()
if(NOT CXX OR NOT EXISTS "${CXX}")
  message(FATAL_ERROR "fuzz: clang++ not found (CXX='${CXX}'): the harnesses need clang's "
                      "libFuzzer; ${install_hint}")
endif()
execute_process(COMMAND "${CXX}" --version OUTPUT_VARIABLE version RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT version MATCHES "clang")
  message(FATAL_ERROR "fuzz: '${CXX}' is not clang++ (libFuzzer comes with clang); ${install_hint}")
endif()
execute_process(COMMAND "${CXX}" -print-runtime-dir OUTPUT_VARIABLE runtime_dir
                OUTPUT_STRIP_TRAILING_WHITESPACE)
file(GLOB fuzzer_runtime "${runtime_dir}/libclang_rt.fuzzer-*.a" "${runtime_dir}/*/libclang_rt.fuzzer.a")
if(NOT fuzzer_runtime)
  message(FATAL_ERROR "fuzz: libFuzzer's runtime (libclang_rt.fuzzer-*.a) is not in '${runtime_dir}', "
                      "where ${CXX} looks for it; ${install_hint}")
endif()

# A script (cmake -P) has no system prefixes or library architecture to search as a project has:
# the usual prefixes, and Debian's multiarch directory as the compiler names it.
list(APPEND CMAKE_SYSTEM_PREFIX_PATH /usr/local /usr)
if(NOT CMAKE_LIBRARY_ARCHITECTURE)
  execute_process(COMMAND "${CXX}" -print-multiarch OUTPUT_VARIABLE CMAKE_LIBRARY_ARCHITECTURE
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
endif()

if(NOT DEFINED SYSTEM_INCLUDES)
  # As the project's build has them: Kokkos's headers found as cmake/FindTesselKokkos.cmake
  # finds them (Debian: /usr/include/trilinos), MPI's from Open MPI's compiler wrapper.
  find_path(kokkos_include Kokkos_Core.hpp PATH_SUFFIXES trilinos)
  set(SYSTEM_INCLUDES "")
  if(kokkos_include)
    list(APPEND SYSTEM_INCLUDES "${kokkos_include}")
  endif()
  # Debian's serial HDF5 as cmake/FindTesselHDF5.cmake finds it.
  find_path(hdf5_include hdf5.h PATH_SUFFIXES hdf5/serial)
  if(hdf5_include)
    list(APPEND SYSTEM_INCLUDES "${hdf5_include}")
  endif()
  find_program(mpicxx NAMES mpicxx)
  if(mpicxx)
    execute_process(COMMAND "${mpicxx}" --showme:incdirs OUTPUT_VARIABLE mpi_includes
                    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    separate_arguments(mpi_includes UNIX_COMMAND "${mpi_includes}")
    list(APPEND SYSTEM_INCLUDES ${mpi_includes})
  endif()
endif()
if(NOT OPTIMIZE)
  set(OPTIMIZE -O1 -g)
endif()
# MPI's C++ bindings left out, as the main build leaves them (at -O0 their inline functions would
# be emitted and need libmpi).
set(flags -std=c++20 ${OPTIMIZE} -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX -fno-omit-frame-pointer
          -fsanitize=fuzzer,address,undefined
          -fno-sanitize-recover=undefined -Wall -Wextra -Wpedantic -Werror -I${SOURCE_DIR}/include)
foreach(dir IN LISTS SYSTEM_INCLUDES ZLIB_INCLUDE_DIRS)
  # -isystem /usr/include would reorder the default directories and break libstdc++'s
  # #include_next; it is searched anyway.
  if(NOT dir STREQUAL "/usr/include")
    list(APPEND flags -isystem ${dir})
  endif()
endforeach()
if(NOT ZLIB_LIBRARIES)
  set(ZLIB_LIBRARIES -lz)
endif()
# The parameter-server harnesses read ZeroMQ's messages (libzmq, Debian's libzmq3-dev).
if(NOT ZMQ_LIBRARIES)
  set(ZMQ_LIBRARIES -lzmq)
endif()
if(NOT HDF5_LIBRARIES)
  find_library(hdf5_library NAMES hdf5_serial hdf5 PATH_SUFFIXES hdf5/serial)
  if(NOT hdf5_library)
    message(FATAL_ERROR "fuzz: libhdf5 not found (the saving harnesses link it); install "
                        "Debian's libhdf5-dev, or pass -DHDF5_LIBRARIES=<library>")
  endif()
  set(HDF5_LIBRARIES "${hdf5_library}")
endif()
# Where a harness finds data files of its own (fuzz_keras_config's model config).
list(APPEND flags "-DTESSEL_FUZZ_DIR=\"${here}\"")

if(NOT HARNESSES)
  file(GLOB sources "${here}/fuzz_*.cpp")
  foreach(src IN LISTS sources)
    get_filename_component(name "${src}" NAME_WE)
    string(REGEX REPLACE "^fuzz_" "" name "${name}")
    list(APPEND HARNESSES ${name})
  endforeach()
endif()

file(MAKE_DIRECTORY "${BINARY_DIR}")
foreach(name IN LISTS HARNESSES)
  set(src "${here}/fuzz_${name}.cpp")
  if(NOT EXISTS "${src}")
    message(FATAL_ERROR "fuzz: no harness '${name}' (${src})")
  endif()
  string(TIMESTAMP t0 "%s")
  execute_process(COMMAND "${CXX}" ${flags} "${src}" -o "${BINARY_DIR}/fuzz_${name}"
                          ${HDF5_LIBRARIES} ${ZLIB_LIBRARIES} ${ZMQ_LIBRARIES}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  string(TIMESTAMP t1 "%s")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "fuzz: building fuzz_${name} failed:\n${out}")
  endif()
  math(EXPR secs "${t1} - ${t0}")
  message(STATUS "fuzz: built ${BINARY_DIR}/fuzz_${name} (${secs} s)")
endforeach()

if(RUNS)
  foreach(name IN LISTS HARNESSES)
    # New inputs go to a scratch corpus in the build directory, never into the seeds.
    set(corpus "${BINARY_DIR}/corpus-ctest/${name}")
    file(REMOVE_RECURSE "${corpus}")
    file(MAKE_DIRECTORY "${corpus}")
    execute_process(
      COMMAND "${BINARY_DIR}/fuzz_${name}" -runs=${RUNS} -seed=1 -timeout=10
              -print_final_stats=1 "-artifact_prefix=${BINARY_DIR}/${name}-"
              "${corpus}" "${here}/corpus/${name}"
      RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "fuzz: fuzz_${name} failed (exit ${rc}) on its seed corpus:\n${out}")
    endif()
    string(REGEX MATCH "stat::number_of_executed_units: *[0-9]+" execs "${out}")
    string(REGEX MATCHALL "cov: [0-9]+ ft: [0-9]+" cov "${out}")
    list(GET cov -1 cov)  # the last report
    message(STATUS "fuzz: fuzz_${name}: ${execs}, ${cov}")
  endforeach()
endif()
