# Runs ps_train_test's resume mode twice through scripts/ps_cluster.sh: the first chief is killed
# after epoch 2's backup (the job ends with a non-zero status, the backup left), the second
# resumes from it and ends equal to one device's 3 epochs, the backup's files removed.
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
execute_process(COMMAND ${PS_CLUSTER} --workers 1 --ps 2 --timeout 120 ${PROGRAM} resume ${DIR}
                RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "second run, status ${code}:\n${out}${err}")
if(NOT code EQUAL 0 OR NOT out MATCHES "chief: restored the backup in .*: 2 epochs done, resuming at batch 64"
   OR NOT out MATCHES "ps_train_test resume: 0 failed")
  message(FATAL_ERROR "the second run did not resume and finish as one device")
endif()
file(REMOVE_RECURSE ${DIR})
