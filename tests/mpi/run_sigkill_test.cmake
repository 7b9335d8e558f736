# Runs sigkill_test under mpiexec (-DMPIEXEC, -DPROGRAM, -DPROCS) and requires: a non-zero exit
# code, the launcher's message naming the killed process's signal, and less than 30 seconds from
# start to end (a hung job is stopped by the TIMEOUT and fails).
string(TIMESTAMP start "%s")
execute_process(
  COMMAND ${MPIEXEC} -n ${PROCS} ${OVERSUBSCRIBE} ${PROGRAM}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
string(TIMESTAMP end "%s")
math(EXPR elapsed "${end} - ${start}")
message(STATUS "exit: ${rc}; ${elapsed} s\n--- stdout\n${out}\n--- stderr\n${err}")
if(rc STREQUAL "0")
  message(FATAL_ERROR "the job exited 0 although one of its processes was killed")
endif()
if(NOT rc MATCHES "^[0-9]+$")
  message(FATAL_ERROR "the job did not end by itself: ${rc}")
endif()
if(elapsed GREATER 30)
  message(FATAL_ERROR "the job took ${elapsed} s to end after a process was killed (limit 30 s)")
endif()
if(NOT "${out}${err}" MATCHES "killing itself with SIGKILL")
  message(FATAL_ERROR "the process never reached the step where it kills itself")
endif()
if(NOT "${out}${err}" MATCHES "signal 9|Killed")
  message(FATAL_ERROR "no message names the killed process's signal")
endif()
message(STATUS "the job ended with exit code ${rc} in ${elapsed} s, with the launcher's message")
