# Runs ps_train_test's ps_lost mode through scripts/ps_cluster.sh (ps 1 kills itself 2 s in) and
# checks that the job ends (a non-zero exit code, within 30 s of the kill) with one message naming
# ps 1 and its address.
#   cmake -DPS_CLUSTER=<scripts/ps_cluster.sh> -DPROGRAM=<ps_train_test> -P expect_ps_lost.cmake
string(TIMESTAMP start "%s")
execute_process(COMMAND ${PS_CLUSTER} --workers 1 --ps 2 --port 41700 --timeout 120 ${PROGRAM}
                        ps_lost
                RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(TIMESTAMP stop "%s")
math(EXPR seconds "${stop} - ${start}")
set(all "${out}${err}")
message(STATUS "exit code ${code} after ${seconds} s")
if(code EQUAL 0)
  message(FATAL_ERROR "the job ended with exit code 0 although a ps task was killed:\n${all}")
endif()
# The kill comes 2 s after the ps starts; the job must end within 30 s of it.
if(seconds GREATER 32)
  message(FATAL_ERROR "the job took ${seconds} s to end after a ps task was killed:\n${all}")
endif()
string(REGEX MATCHALL "ps 1 at 127\\.0\\.0\\.1:41703 did not answer" found "${all}")
list(LENGTH found times)
if(NOT times EQUAL 1)
  message(FATAL_ERROR "expected one message naming ps 1 and its address, found ${times}:\n${all}")
endif()
message(STATUS "the job ended in ${seconds} s naming the lost ps once:\n${all}")
