# Runs a program under mpiexec (-DMPIEXEC, -DPROGRAM, -DPROCS, -DARGS: a ;-list) whose process
# fails on purpose, and requires: a non-zero exit code, every regular expression of EXPECT (a
# ;-list) in the output, and less than LIMIT seconds from start to end (a hung job is stopped by
# the TIMEOUT below and fails). ENV (a ;-list of VAR=value) is set for the job.
foreach(e IN LISTS ENV)
  string(REGEX MATCH "^([^=]+)=(.*)$" _ "${e}")
  set(ENV{${CMAKE_MATCH_1}} "${CMAKE_MATCH_2}")
endforeach()
math(EXPR hard_limit "${LIMIT} + 60")
string(TIMESTAMP start "%s")
execute_process(
  COMMAND ${MPIEXEC} -n ${PROCS} ${OVERSUBSCRIBE} ${PROGRAM} ${ARGS}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT ${hard_limit})
string(TIMESTAMP end "%s")
math(EXPR elapsed "${end} - ${start}")
message(STATUS "exit: ${rc}; ${elapsed} s\n--- stdout\n${out}\n--- stderr\n${err}")
if(rc STREQUAL "0")
  message(FATAL_ERROR "the job exited 0 although one of its processes failed")
endif()
if(NOT rc MATCHES "^[0-9]+$")
  message(FATAL_ERROR "the job did not end by itself: ${rc}")
endif()
if(elapsed GREATER LIMIT)
  message(FATAL_ERROR "the job took ${elapsed} s to end after a process failed (limit ${LIMIT} s)")
endif()
foreach(expected IN LISTS EXPECT)
  if(NOT "${out}${err}" MATCHES "${expected}")
    message(FATAL_ERROR "the output does not match: ${expected}")
  endif()
endforeach()
message(STATUS "the job ended with exit code ${rc} in ${elapsed} s, with the expected messages")
