cmake_minimum_required(VERSION 3.20)
# Runs `PROGRAM abort-after-start` under `mpiexec -n PROCS` RUNS times (its last process ends the
# job with MPI_Abort as soon as the guard is open) and requires that no shared-memory segment of
# the collective watchdog (/dev/shm/tessel-watchdog-*) that a run created is left once it ended.
# SHIM, if given, is preloaded into every process (a slow shm_unlink: slow_shm_unlink.cpp).
if(SHIM)
  set(ENV{LD_PRELOAD} "${SHIM}")
  # Under AddressSanitizer a preloaded library must not come before its runtime: let it.
  set(ENV{ASAN_OPTIONS} "$ENV{ASAN_OPTIONS}:verify_asan_link_order=0")
endif()
set(left "")
foreach(run RANGE 1 ${RUNS})
  file(GLOB before /dev/shm/tessel-watchdog-*)
  execute_process(COMMAND ${MPIEXEC} -n ${PROCS} ${OVERSUBSCRIBE} ${PROGRAM} abort-after-start
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
  if(rc STREQUAL "0" OR NOT err MATCHES "lifecycle_test: process [0-9]+ ends the job")
    message(FATAL_ERROR "run ${run}: the job did not end as planned (exit ${rc})\n${out}\n${err}")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} -E sleep 1)
  file(GLOB after /dev/shm/tessel-watchdog-*)
  foreach(f IN LISTS after)
    if(NOT f IN_LIST before)
      list(APPEND left ${f})
    endif()
  endforeach()
  message(STATUS "run ${run}: exit ${rc}; segments left so far: ${left}")
endforeach()
if(left)
  file(REMOVE ${left})
  message(FATAL_ERROR "shared memory left behind by the jobs: ${left}")
endif()
message(STATUS "${RUNS} jobs of ${PROCS} processes ended by one of them: no shared memory left")
