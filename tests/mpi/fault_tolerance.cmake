# Kills a training run with SIGKILL at a random batch and restarts it (fault_tolerance_test.cpp,
# backup_and_restore every 4 batches, double_checkpoint): the restarted run must end with the
# weights and logs of an uninterrupted run, bit for bit. Then again with the newest backup
# damaged (a flipped byte): the restart must say so, restore the backup before it, and still end
# bit for bit as the uninterrupted run. And with the backups written in the background.
# -DPROGRAM, -DPROCS (0: alone, without mpiexec), -DWORK
# (a scratch directory), -DMPIEXEC, -DOVERSUBSCRIBE; -DKILL_AT fixes the batch (else random).
if(PROCS EQUAL 0)
  set(launch ${PROGRAM})
  set(rank 0)
else()
  set(launch ${MPIEXEC} -n ${PROCS} ${OVERSUBSCRIBE} ${PROGRAM})
  math(EXPR rank "${PROCS} - 1")
endif()
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

function(run what expect_ok)
  execute_process(COMMAND ${launch} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err TIMEOUT 120)
  message(STATUS "${what}: exit ${rc}\n${out}${err}")
  if(expect_ok AND NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed")
  endif()
  if(NOT expect_ok AND rc EQUAL 0)
    message(FATAL_ERROR "${what} exited 0, but a process was to kill itself")
  endif()
  set(output "${out}${err}" PARENT_SCOPE)
endfunction()

function(same a b what)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${a} ${b} RESULT_VARIABLE differ)
  if(differ)
    message(FATAL_ERROR "${what}: the final weights and logs differ from the uninterrupted run's")
  endif()
  message(STATUS "${what}: the final weights and logs equal the uninterrupted run's, bit for bit")
endfunction()

run("the uninterrupted run" TRUE ${WORK}/reference ${WORK}/reference.bin)

# 18 batches in all; a random one to die after.
if(NOT DEFINED KILL_AT)
  string(RANDOM LENGTH 4 ALPHABET 0123456789 r)
  math(EXPR KILL_AT "${r} % 17 + 1")
endif()
message(STATUS "killing process ${rank} after batch ${KILL_AT}")
run("the run killed after batch ${KILL_AT}" FALSE ${WORK}/backup ${WORK}/resumed.bin
    --kill-at ${KILL_AT} --kill-rank ${rank})
if(NOT output MATCHES "sending itself SIGKILL")
  message(FATAL_ERROR "the process did not kill itself")
endif()
run("the restarted run" TRUE ${WORK}/backup ${WORK}/resumed.bin)
same(${WORK}/reference.bin ${WORK}/resumed.bin "restarted after a kill at batch ${KILL_AT}")

# The newest of two backups damaged: killed after batch 14 (backups after batches 8 and 12).
run("the run killed after batch 14" FALSE ${WORK}/backup2 ${WORK}/fallback.bin
    --kill-at 14 --kill-rank ${rank})
file(GLOB backups LIST_DIRECTORIES true ${WORK}/backup2/checkpoint-*)
list(SORT backups COMPARE NATURAL)
list(LENGTH backups n)
if(NOT n EQUAL 2)
  message(FATAL_ERROR "expected 2 backups (double_checkpoint), found: ${backups}")
endif()
list(GET backups 1 newest)
execute_process(COMMAND ${PROGRAM} --flip ${newest}/shard-00000.bin RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cannot damage ${newest}/shard-00000.bin")
endif()
run("the restarted run with its newest backup damaged" TRUE ${WORK}/backup2 ${WORK}/fallback.bin)
if(NOT output MATCHES "cannot be restored.*restoring the previous one")
  message(FATAL_ERROR "the restart did not say that the newest backup is damaged")
endif()
same(${WORK}/reference.bin ${WORK}/fallback.bin "restarted from the previous backup")

# The backups written in the background: a kill may come while one is being written, which is
# then not committed, and the restart goes on from the one before.
math(EXPR KILL_BG "(${KILL_AT} * 7) % 17 + 1")
run("the run saving in the background, killed after batch ${KILL_BG}" FALSE ${WORK}/backup3
    ${WORK}/background.bin --kill-at ${KILL_BG} --kill-rank ${rank} --background 1)
run("the restarted run saving in the background" TRUE ${WORK}/backup3 ${WORK}/background.bin
    --background 1)
same(${WORK}/reference.bin ${WORK}/background.bin
     "saving in the background, restarted after a kill at batch ${KILL_BG}")
file(REMOVE_RECURSE ${WORK})
