# Runs ps_train_test's resume mode twice through scripts/ps_cluster.sh: the first chief is killed
# after epoch 2's backup (the job ends with a non-zero status, the backup left), the second
# resumes from it and ends equal to one device's 3 epochs, the backup's files removed. Between
# them, damaged copies of its position are refused and leave it as it was.
#   cmake -DPS_CLUSTER=<scripts/ps_cluster.sh> -DPROGRAM=<ps_train_test> -DDIR=<scratch dir>
#         -P expect_resume.cmake
file(REMOVE_RECURSE ${DIR})
execute_process(COMMAND ${PS_CLUSTER} --workers 1 --ps 2 --timeout 120 ${PROGRAM} resume ${DIR}
                RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(code EQUAL 0)
  message(FATAL_ERROR "the first run ended with status 0 although its chief was killed:\n${out}${err}")
endif()
if(NOT EXISTS ${DIR}/position.json OR NOT EXISTS ${DIR}/checkpoint.weights.h5)
  message(FATAL_ERROR "the first run left no backup in ${DIR}:\n${out}${err}")
endif()
# The backup read as untrusted input: a position.json damaged three ways (a negative count, a
# number written as text, a checksum that is not the weights file's) is refused naming the file
# and the field, and the backup is kept byte for byte.
file(READ ${DIR}/position.json good)
file(SHA256 ${DIR}/checkpoint.weights.h5 weights_sum)
string(REGEX REPLACE "\"crc32\":[0-9]+" "\"crc32\":7" other_crc "${good}")
foreach(case "epochs_done\":2|epochs_done\":-1|'epochs_done' is -1, not a whole number"
             "steps_per_epoch\":32|steps_per_epoch\":\"32\"|'steps_per_epoch' is \"32\", not a whole number"
             "crc32|crc32|'weights' records [0-9]+ bytes of CRC-32 7, but .*checkpoint.weights.h5 holds")
  string(REPLACE "|" ";" parts "${case}")
  list(GET parts 0 from)
  list(GET parts 1 to)
  list(GET parts 2 words)
  if(from STREQUAL "crc32")
    set(damaged "${other_crc}")
  else()
    string(REPLACE "${from}" "${to}" damaged "${good}")
  endif()
  file(WRITE ${DIR}/position.json "${damaged}")
  execute_process(COMMAND ${PS_CLUSTER} --workers 1 --ps 2 --timeout 120 ${PROGRAM} resume ${DIR}
                  RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  file(READ ${DIR}/position.json after)
  file(SHA256 ${DIR}/checkpoint.weights.h5 weights_after)
  if(code EQUAL 0 OR NOT "${out}${err}" MATCHES "BackupAndRestore: [^\n]*position.json: ${words}")
    message(FATAL_ERROR "a damaged position (${to}) was not refused naming its field:\n${out}${err}")
  endif()
  if(NOT after STREQUAL damaged OR NOT weights_after STREQUAL weights_sum)
    message(FATAL_ERROR "a refused backup was changed (${to})")
  endif()
  message(STATUS "refused, the backup kept: ${words}")
endforeach()
file(WRITE ${DIR}/position.json "${good}")
execute_process(COMMAND ${PS_CLUSTER} --workers 1 --ps 2 --timeout 120 ${PROGRAM} resume ${DIR}
                RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "second run, status ${code}:\n${out}${err}")
if(NOT code EQUAL 0 OR NOT out MATCHES "chief: restored the backup in .*: 2 epochs done, resuming at batch 64"
   OR NOT out MATCHES "ps_train_test resume: 0 failed")
  message(FATAL_ERROR "the second run did not resume and finish as one device")
endif()
file(REMOVE_RECURSE ${DIR})
