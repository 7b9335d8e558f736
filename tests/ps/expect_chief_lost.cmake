# Runs ps_train_test's chief_lost mode through scripts/ps_cluster.sh --wait-all: the chief is
# killed 1 s in, and the worker and the ps must end on their own within 30 s (chief_timeout is
# 10 s in the test), each with a line saying the chief is gone.
#   cmake -DPS_CLUSTER=<scripts/ps_cluster.sh> -DPROGRAM=<ps_train_test> -P expect_chief_lost.cmake
execute_process(COMMAND ${PS_CLUSTER} --workers 1 --ps 1 --port 41720 --wait-all 40 --timeout 120
                        ${PROGRAM} chief_lost
                RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(all "${out}${err}")
message(STATUS "exit code ${code}:\n${all}")
if(code EQUAL 3)
  message(FATAL_ERROR "tasks were still running 40 s after the chief died")
endif()
if(NOT all MATCHES "worker 0: the chief at 127\\.0\\.0\\.1:41720 stopped answering; ending")
  message(FATAL_ERROR "the worker did not say that the chief is gone")
endif()
if(NOT all MATCHES "ps 0: the chief has sent nothing for 10 s; the job is over, ending")
  message(FATAL_ERROR "the ps did not say that the chief is gone")
endif()
if(NOT all MATCHES "the other tasks ended ([0-9]+) s after the chief")
  message(FATAL_ERROR "no report of when the other tasks ended")
endif()
if(CMAKE_MATCH_1 GREATER 30)
  message(FATAL_ERROR "the other tasks took ${CMAKE_MATCH_1} s to end after the chief")
endif()
message(STATUS "the worker and the ps ended ${CMAKE_MATCH_1} s after the chief")
