# Runs two_hosts_test through scripts/two_hosts.sh with the second host's process killing itself
# (SIGKILL) at step 5, and checks that the job ends (a non-zero exit code, within 60 s, the
# surviving process not left waiting) with one message naming the killed process and its host.
#   cmake -DTWO_HOSTS=<scripts/two_hosts.sh> -DPROGRAM=<two_hosts_test> -P expect_host_lost.cmake
string(TIMESTAMP start "%s")
execute_process(COMMAND ${TWO_HOSTS} --timeout 120 ${PROGRAM} --kill-at 5
                RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(TIMESTAMP stop "%s")
math(EXPR seconds "${stop} - ${start}")
set(all "${out}${err}")
message(STATUS "exit code ${code} after ${seconds} s")
if(code EQUAL 2 AND all MATCHES "two_hosts.sh: ")
  message(FATAL_ERROR "the two hosts could not be made:\n${all}")
endif()
if(code EQUAL 0)
  message(FATAL_ERROR "the job ended with exit code 0 although a process was killed:\n${all}")
endif()
if(seconds GREATER 60)
  message(FATAL_ERROR "the job took ${seconds} s to end after a process was killed:\n${all}")
endif()
set(named "process rank 1 with PID [0-9]+ on node 10\\.77\\.0\\.2 exited on signal 9")
string(REGEX MATCHALL "${named}" found "${all}")
list(LENGTH found times)
if(NOT times EQUAL 1)
  message(FATAL_ERROR "expected one message naming the killed process (rank 1 on 10.77.0.2), "
                      "found ${times}:\n${all}")
endif()
if(all MATCHES "two_hosts_test: 2 workers")
  message(FATAL_ERROR "the surviving process finished training without its peer:\n${all}")
endif()
message(STATUS "the job ended in ${seconds} s naming the killed process once")
