# scripts/onnx_tests.py (issue 34 item 3) on a fixed sample of ONNX's backend node tests
# (tests/cli/data/onnx_sample_expected.json: 25 tests on c and davinci-910, their outcomes when the
# sample was chosen). Fails when a test the file has passing no longer passes; a test that starts to
# pass needs no change here. Skipped where libonnx-testdata is absent or tessel was built without
# ONNX. Included after TESSEL_PYTHON3 is found. The whole package: docs/results/onnx_node_tests_c_davinci.md.
if(TESSEL_PYTHON3 AND TARGET tessel_onnx AND IS_DIRECTORY /usr/share/libonnx-testdata/data/node)
  add_test(NAME cli.onnx_runner_sample
    COMMAND ${TESSEL_PYTHON3} ${SRC}/scripts/onnx_tests.py --tessel ${T} --targets c,davinci-910
            --suites node --baseline ${SRC}/tests/cli/data/onnx_sample_expected.json --only-baseline
            --jobs 2 --timeout 60 --quiet --json ${CMAKE_CURRENT_BINARY_DIR}/onnx_runner_sample.json)
  set_tests_properties(cli.onnx_runner_sample PROPERTIES TIMEOUT 300 LABELS onnx)  # 49 tests: 82 s alone at load 9 on 2 cores
  # the documented expected differences (Adam's epsilon, f32 -> bf16 rounding) stay documented on c:
  # each check holds on ONNX's data and the run passes against data made by tessel's rule
  add_test(NAME cli.onnx_runner_documented
    COMMAND ${TESSEL_PYTHON3} ${SRC}/scripts/onnx_tests.py --tessel ${T} --targets c
            --suites node --baseline ${SRC}/tests/cli/data/onnx_documented_expected.json --only-baseline
            --jobs 2 --timeout 60 --quiet --json ${CMAKE_CURRENT_BINARY_DIR}/onnx_runner_documented.json)
  set_tests_properties(cli.onnx_runner_documented PROPERTIES TIMEOUT 120 LABELS onnx)
endif()
