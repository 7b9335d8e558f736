# Runs PROGRAM (with ARGS, a ;-list) twice under `mpiexec -n PROCS` in a fresh WORK directory
# given to it as --checkpoint-dir: the first run's output must match FIRST, the second's SECOND
# (regular expressions). seeds/001's fault tolerance: the second run restores what the first
# saved.
file(REMOVE_RECURSE ${WORK})
foreach(run FIRST SECOND)
  execute_process(COMMAND ${MPIEXEC} -n ${PROCS} ${OVERSUBSCRIBE} ${PROGRAM} ${ARGS}
                          --checkpoint-dir ${WORK}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 300)
  message(STATUS "${run} run: exit ${rc}\n${out}${err}")
  if(NOT rc STREQUAL "0")
    message(FATAL_ERROR "the ${run} run failed")
  endif()
  if(NOT "${out}" MATCHES "${${run}}")
    message(FATAL_ERROR "the ${run} run's output does not match: ${${run}}")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK})
