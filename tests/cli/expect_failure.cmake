# Runs CMD with ARGS ('|'-separated), and passes when it exits with EXPECT_CODE and its stderr
# contains EXPECT literally (and not NOT_EXPECT, when set). With STDOUT set, standard output goes to that file (/dev/full: a
# failed write of the command's output).
string(REPLACE "|" ";" arg_list "${ARGS}")
if(DEFINED STDOUT)
  execute_process(COMMAND ${CMD} ${arg_list} RESULT_VARIABLE code OUTPUT_FILE ${STDOUT} ERROR_VARIABLE err TIMEOUT 60)
  set(out "(written to ${STDOUT})")
else()
  execute_process(COMMAND ${CMD} ${arg_list} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
endif()
if(NOT "${code}" STREQUAL "${EXPECT_CODE}")
  message(FATAL_ERROR "expected exit status ${EXPECT_CODE}, got '${code}'\nstdout: ${out}\nstderr: ${err}")
endif()
string(FIND "${err}" "${EXPECT}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "stderr does not contain '${EXPECT}'\nstderr: ${err}")
endif()
# With NOT_EXPECT set, stderr must not contain it.
if(DEFINED NOT_EXPECT)
  string(FIND "${err}" "${NOT_EXPECT}" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "stderr contains '${NOT_EXPECT}'\nstderr: ${err}")
  endif()
endif()
