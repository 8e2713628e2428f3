# Issue 31 items 2, 3 and 5: description variants either verify or are refused by the validator
# (naming the key and the rule), and sizes are checked before memory is spent. Included from
# tests/cli/CMakeLists.txt (uses expect_exit from hardening.cmake).
set(RELU ${SRC}/workloads/relu.tsl)
set(RELU_SHAPE N=1,C=16,H=8,W=16)

# 2. the issue's repros: SIGFPE, mismatches and a cycle count that wrapped are now refusals
expect_exit(variant_repeat_1 1 "unit 'vector' bytes_per_repeat: got 1; a repeat must be a power of two"
            run ${RELU} --target ${D} --shape ${RELU_SHAPE} --set vector.bytes_per_repeat=1)
expect_exit(variant_ub_granule_1 1 "level 'UB' granularity_bytes and alignment_bytes: granularity 1 must be a multiple of the alignment 32"
            run ${RELU} --target ${D} --shape ${RELU_SHAPE} --set UB.granularity_bytes=1)
expect_exit(variant_repeat_16 1 "unit 'vector' bytes_per_repeat: got 16"
            run ${RELU} --target ${D} --shape ${RELU_SHAPE} --set vector.bytes_per_repeat=16)
expect_exit(variant_ub_granule_3 1 "level 'UB' granularity_bytes: the vector unit's block must be a power of two"
            run ${RELU} --target ${D} --shape ${RELU_SHAPE} --set UB.granularity_bytes=3,UB.alignment_bytes=1)
expect_exit(variant_tiny_bandwidth 1 "path GM -> UB bandwidth_bytes_per_cycle: got 1e-20 bytes/cycle, outside the plausible range"
            run ${RELU} --target ${D} --shape ${RELU_SHAPE} "--set=GM->UB.bandwidth_bytes_per_cycle=1e-20")
expect_exit(variant_ub_alignment 1 "level 'UB' alignment_bytes: got 512; the compiler places vector buffers at multiples of 32 bytes"
            run ${RELU} --target ${D} --shape ${RELU_SHAPE} --set UB.alignment_bytes=512)
expect_exit(variant_layout 1 "level 'L0A' layout: 'fractal_nz' is not implemented for role operand_a"
            run ${RELU} --target ${D} --shape ${RELU_SHAPE} --set L0A.layout=fractal_nz)

if(TESSEL_PYTHON3)
  # The description-variant fuzzer, bounded: a fixed seed, 30 variants of davinci-910 / davinci-310,
  # each run on relu, matmul and softmax (about 20 s on 2 cores). By hand: --seconds 600 --jobs 2.
  add_test(NAME cli.description_fuzz
    COMMAND ${TESSEL_PYTHON3} ${SRC}/scripts/description_fuzz.py --tessel ${T} --seed 31 --count 30 --jobs 2 --timeout 60)
  set_tests_properties(cli.description_fuzz PROPERTIES TIMEOUT 300 PASS_REGULAR_EXPRESSION "30 variants in .*; 0 bug\\(s\\)")
  # 5. hostile sizes: a 640-byte .npy claiming 4 GiB, a 20 MB YAML list, /dev/zero as every input, a 6 GiB scratch
  add_test(NAME cli.size_limits
    COMMAND ${TESSEL_PYTHON3} ${SRC}/tests/cli/size_limits.py ${T} ${SRC} ${CMAKE_CURRENT_BINARY_DIR}/size_limits)
  set_tests_properties(cli.size_limits PROPERTIES TIMEOUT 120)
endif()
