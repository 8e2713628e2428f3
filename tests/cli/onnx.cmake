# tessel import + tessel run --target c --expect on a fixed sample of ONNX's backend node tests
# (Debian's libonnx-testdata, installed by scripts/setup.sh); skipped where the package is absent or
# tessel was built without ONNX. The whole package is run by scripts/onnx_tests.py.
set(TESSEL_ONNX_NODE_TESTS /usr/share/libonnx-testdata/data/node)
if(TARGET tessel_onnx AND IS_DIRECTORY ${TESSEL_ONNX_NODE_TESTS})
  foreach(t test_relu test_add_bcast test_matmul_3d test_conv_with_strides_padding test_maxpool_2d_pads
            test_softmax_axis_1 test_reshape_negative_dim test_gemm_all_attributes test_batchnorm_example
            test_averagepool_2d_pads_count_include_pad test_transpose_all_permutations_2 test_slice_neg_steps
            test_concat_2d_axis_1 test_where_example test_reduce_mean_keepdims_example)
    add_test(NAME cli.onnx.${t}
      COMMAND ${CMAKE_COMMAND} -DT=$<TARGET_FILE:tessel> -DMODEL_DIR=${TESSEL_ONNX_NODE_TESTS}/${t}
              -DOUT=${CMAKE_CURRENT_BINARY_DIR}/onnx -P ${CMAKE_CURRENT_SOURCE_DIR}/onnx_node_test.cmake)
    set_tests_properties(cli.onnx.${t} PROPERTIES TIMEOUT 120 LABELS onnx)
  endforeach()
  # the contract a test runner classifies by: exit 1 and "node 'NAME' (OpType): unsupported: REASON"
  add_test(NAME cli.onnx.unsupported_op COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:tessel>
           "-DARGS=import|${TESSEL_ONNX_NODE_TESTS}/test_gridsample/model.onnx|-o|${CMAKE_CURRENT_BINARY_DIR}/onnx/gridsample.tsl"
           -DEXPECT_CODE=1 "-DEXPECT=node 'Y' (GridSample): unsupported: GridSample's grid (where each output element reads) ('Grid') is not a constant" -P ${CMAKE_CURRENT_SOURCE_DIR}/expect_failure.cmake)
  add_test(NAME cli.onnx.malformed_file COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:tessel>
           "-DARGS=import|${CMAKE_CURRENT_SOURCE_DIR}/onnx.cmake|-o|${CMAKE_CURRENT_BINARY_DIR}/onnx/bad.tsl"
           -DEXPECT_CODE=1 "-DEXPECT=not an ONNX model" -P ${CMAKE_CURRENT_SOURCE_DIR}/expect_failure.cmake)
  # --expect against a wrong tensor fails the run, naming the tensor and the worst element
  add_test(NAME cli.onnx.expect_mismatch COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:tessel>
           "-DARGS=run|${CMAKE_CURRENT_BINARY_DIR}/onnx/test_relu.tsl|--target|c|--input|x=${TESSEL_ONNX_NODE_TESTS}/test_relu/test_data_set_0/input_0.pb|--expect|y=${TESSEL_ONNX_NODE_TESTS}/test_abs/test_data_set_0/output_0.pb"
           -DEXPECT_CODE=1 "-DEXPECT=--expect y: " -P ${CMAKE_CURRENT_SOURCE_DIR}/expect_failure.cmake)
  set_tests_properties(cli.onnx.expect_mismatch PROPERTIES DEPENDS cli.onnx.test_relu)
  # double data beyond f32's range (2.4e198...) is held in f64: imported, run on c, each output as expected
  set(TESSEL_ONNX_OPERATOR_TESTS /usr/share/libonnx-testdata/data/pytorch-operator)
  add_test(NAME cli.onnx.f64_test_operator_add_broadcast
    COMMAND ${CMAKE_COMMAND} -DT=$<TARGET_FILE:tessel> -DMODEL_DIR=${TESSEL_ONNX_OPERATOR_TESTS}/test_operator_add_broadcast
            -DOUT=${CMAKE_CURRENT_BINARY_DIR}/onnx "-DINPUT_NAMES=0|1" -P ${CMAKE_CURRENT_SOURCE_DIR}/onnx_node_test.cmake)
  set_tests_properties(cli.onnx.f64_test_operator_add_broadcast PROPERTIES TIMEOUT 120 LABELS onnx)
  # ... and refused by an NPU description, which lists no f64 unit: exit 1 naming the tensor
  add_test(NAME cli.onnx.f64_refused_on_npu COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:tessel>
           "-DARGS=compile|${CMAKE_CURRENT_BINARY_DIR}/onnx/test_operator_add_broadcast.tsl|--target|davinci-910"
           -DEXPECT_CODE=1 "-DEXPECT=is f64: no unit of the NPU description davinci-910 takes f64" -P ${CMAKE_CURRENT_SOURCE_DIR}/expect_failure.cmake)
  set_tests_properties(cli.onnx.f64_refused_on_npu PROPERTIES DEPENDS cli.onnx.f64_test_operator_add_broadcast LABELS onnx)
endif()
