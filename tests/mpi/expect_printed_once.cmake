# Runs PROGRAM (with ARGS) under `mpiexec -n PROCS` and requires each regular expression in ONCE
# to match exactly one line of its standard output: on a distributed model only process 0
# prints the summary, the progress and the results.
execute_process(COMMAND ${MPIEXEC} -n ${PROCS} ${OVERSUBSCRIBE} ${PROGRAM} ${ARGS}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 300)
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "exit ${rc}\n${out}\n${err}")
endif()
string(REPLACE "\n" ";" lines "${out}")
foreach(pattern IN LISTS ONCE)
  set(count 0)
  foreach(line IN LISTS lines)
    if(line MATCHES "${pattern}")
      math(EXPR count "${count} + 1")
    endif()
  endforeach()
  if(NOT count EQUAL 1)
    message(FATAL_ERROR "'${pattern}' printed ${count} times by ${PROCS} processes (expected once)\n${out}")
  endif()
  message(STATUS "'${pattern}': printed once by ${PROCS} processes")
endforeach()
