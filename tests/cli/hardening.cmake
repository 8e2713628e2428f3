# Issue 17 items 1-4: hostile inputs end with exit 1 and the place and reason (never a crash, a
# runaway or a silent success), or with the defined result. Included from tests/cli/CMakeLists.txt.
set(D ${SRC}/isa/targets/davinci-910.yaml)
set(NPU ${SRC}/tests/cli/npu)

function(expect_exit name code expected)
  list(JOIN ARGN "|" args)
  add_test(NAME cli.hardening.${name}
    COMMAND ${CMAKE_COMMAND} -DCMD=${T} "-DARGS=${args}" -DEXPECT_CODE=${code} "-DEXPECT=${expected}"
            -P ${SRC}/tests/cli/expect_failure.cmake)
endfunction()

# 1. scalar semantics: wrap, or an error naming the instruction
add_test(NAME cli.hardening.sim_div_int_min COMMAND ${T} sim ${NPU}/div_int_min.npu --target ${D})
set_tests_properties(cli.hardening.sim_div_int_min PROPERTIES PASS_REGULAR_EXPRESSION "cycles on 1 core\\(s\\) of davinci-910 \\(3 instructions")
expect_exit(sim_div_zero 1 "div_zero.npu:3:1: 'div r1, 5, r2' on core 0: division by zero" sim ${NPU}/div_zero.npu --target ${D})
expect_exit(sim_shl_64 1 "shl_64.npu:2:1: 'shl r1, 1, 64' on core 0: shift amount 64 is outside 0..63" sim ${NPU}/shl_64.npu --target ${D})

# 2. runaways: a wrapping counter and a self-modifying loop end; a huge trip count and bad limits are errors
add_test(NAME cli.hardening.sim_loop_wrap COMMAND ${T} sim ${NPU}/loop_wrap.npu --target ${D} --timing-only)
set_tests_properties(cli.hardening.sim_loop_wrap PROPERTIES PASS_REGULAR_EXPRESSION "\\(4 instructions")
add_test(NAME cli.hardening.sim_loop_self_modifying COMMAND ${T} sim ${NPU}/loop_self_modifying.npu --target ${D})
set_tests_properties(cli.hardening.sim_loop_self_modifying PROPERTIES PASS_REGULAR_EXPRESSION "\\(22 instructions")
expect_exit(sim_loop_huge 1 "loop_huge.npu:3:1: 'endloop' on core 0: the run executed more than 8388608 instructions"
            sim ${NPU}/loop_huge.npu --target ${D} --timing-only)
set_tests_properties(cli.hardening.sim_loop_huge PROPERTIES TIMEOUT 60)
expect_exit(sim_loop_huge_limit 1 "the run passed --max-cycles 1000" sim ${NPU}/loop_huge.npu --target ${D} --max-cycles 1000)
expect_exit(sim_max_cycles_negative 1 "--max-cycles -1: must be in 1..1000000000000000"
            sim ${NPU}/loop_huge.npu --target ${D} --max-cycles -1)
expect_exit(sim_max_cycles_zero 1 "--max-cycles 0: must be in 1.." sim ${NPU}/loop_huge.npu --target ${D} --max-cycles 0)
expect_exit(sim_max_instructions_small 1 "the run executed more than 5 instructions"
            sim ${NPU}/loop_huge.npu --target ${D} --max-instructions 5)

# 3. absurd description numbers: tests/errors/hierarchy/huge_*.yaml (check-hierarchy); `run` on them too
expect_exit(run_huge_l1 1 "levels[1].capacity_bytes: got 9223372036854775807, outside the plausible range 0..1073741824"
            run ${SRC}/workloads/matmul.tsl --target ${SRC}/tests/errors/hierarchy/huge_l1_capacity.yaml --shape M=16,N=16,K=16)
expect_exit(run_huge_cores 1 "cores: got 4294967297, outside the plausible range 0..4096"
            run ${SRC}/workloads/matmul.tsl --target ${SRC}/tests/errors/hierarchy/huge_cores.yaml --shape M=16,N=16,K=16)

# 4. --shape sizes whose bytes overflow or exceed the description's global memory
expect_exit(shape_overflow 1 "--shape: tensor 'A' (f16 4611686018427387904 x 16) needs more than 9223372036854775807 bytes"
            compile ${SRC}/workloads/matmul.tsl --target ${D} --shape M=4611686018427387904,N=16,K=16)
expect_exit(shape_past_gm 1 "--shape: tensor 'A' (f16 99999999999 x 16) needs 3199999999968 bytes; with the tensors before it the program needs 3199999999968 bytes of global memory, but GM of davinci-910 holds 34359738368 bytes"
            compile ${SRC}/workloads/matmul.tsl --target ${D} --shape M=99999999999,N=16,K=16)
expect_exit(shape_2_31 1 "--shape: tensor 'A' (f16 2147483648 x 16) needs 68719476736 bytes"
            compile ${SRC}/workloads/matmul.tsl --target ${D} --shape M=2147483648,N=16,K=16)
expect_exit(shape_2_40 1 "--shape: tensor 'A' (f16 1099511627776 x 16) needs 35184372088832 bytes"
            compile ${SRC}/workloads/matmul.tsl --target ${D} --shape M=1099511627776,N=16,K=16)
expect_exit(shape_output_past_gm 1 "--shape: tensor 'C' (f32 65536 x 262144) needs 68719476736 bytes"
            compile ${SRC}/workloads/matmul.tsl --target ${D} --shape M=65536,N=262144,K=16)
expect_exit(shape_too_many_digits 1 "--shape: 'M=99999999999999999999': size must be at most 9223372036854775807"
            compile ${SRC}/workloads/matmul.tsl --target ${D} --shape M=99999999999999999999,N=16,K=16)
expect_exit(shape_overflow_c 1 "--shape: tensor 'A' (f16 4611686018427387904 x 16) needs more than"
            compile ${SRC}/workloads/matmul.tsl --target c --shape M=4611686018427387904,N=16,K=16)
# inputs and outputs fit, the emitter's padded scratch does not: named by the NPU emitter, not left to `sim`
# (N = 6: B's rows are shorter than a tile row, so the tails go through padded copies, not in place)
expect_exit(emit_scratch_past_gm 1 "kernel matmul: tensor 'A_padded' (scratch, 4608 bytes at GM+4032) ends at byte 8640, past the 8192 bytes of GM of davinci-910"
            compile ${SRC}/workloads/matmul.tsl --target ${SRC}/tests/cli/hierarchy/davinci-910-8k-gm.yaml --shape M=40,N=6,K=33 -o /dev/null)
expect_exit(shape_fits_not_with_others 1 "--shape: tensor 'B' (f16 33 x 24) needs 1584 bytes; with the tensors before it the program needs 4224 bytes of global memory, but GM of davinci-910 holds 4096 bytes"
            compile ${SRC}/workloads/matmul.tsl --target ${SRC}/tests/cli/hierarchy/davinci-910-4k-gm.yaml --shape M=40,N=24,K=33)

# 5. many small operand tiles (256^3 in 16x16x16 operand tiles: ~180k naive sync pairs) compile in
# seconds with the same pruned program as before (sync counts), and the time printed is the wall time
add_test(NAME cli.hardening.compile_many_small_tiles
  COMMAND ${T} compile ${SRC}/workloads/matmul.tsl --target ${D} --shape M=256,N=256,K=256
          --tile m=128/16,n=128/16,k=64/16 -o ${CMAKE_CURRENT_BINARY_DIR}/many_small_tiles.npu)
set_tests_properties(cli.hardening.compile_many_small_tiles PROPERTIES TIMEOUT 30
  PASS_REGULAR_EXPRESSION "4886 instructions \\(2443 pairs, 0 barrier fall-backs\\); naive 363279 -> pruned 4886\ntessel compile: matmul \\(m=128/16,n=128/16,k=64/16\\) compiled in [0-9.]+ ms")

# 14. NaN semantics: min/max propagate NaN (IEEE maximum/minimum) in the interpreter, the C target and
# the NPU simulator alike; `run` compares every output element with the interpreter's (NaN matches NaN)
# on inputs holding NaN and infinities, so a target that drops a NaN fails (exit 1, MISMATCH)
foreach(def minsqrt rowmax rowmin relu)
  foreach(target c davinci)
    set(tgt ${target})
    if(target STREQUAL "davinci")
      set(tgt ${D})
    endif()
    add_test(NAME cli.hardening.nan_${def}_${target}
      COMMAND ${T} run ${SRC}/tests/cli/nan/nan.tsl --def ${def} --target ${tgt} --shape M=4,N=512
              --input X=${SRC}/tests/cli/nan/x.npy)
    set_tests_properties(cli.hardening.nan_${def}_${target} PROPERTIES PASS_REGULAR_EXPRESSION "${def} on (c|npu) .*: verified")
  endforeach()
endforeach()
add_test(NAME cli.hardening.nan_rowmax16_davinci
  COMMAND ${T} run ${SRC}/tests/cli/nan/nan.tsl --def rowmax16 --target ${D} --shape M=4,N=512 --input X=${SRC}/tests/cli/nan/x16.npy)
set_tests_properties(cli.hardening.nan_rowmax16_davinci PROPERTIES PASS_REGULAR_EXPRESSION "rowmax16 on npu .*: verified")
# the interpreter's own values: NaN where an operand is NaN
add_test(NAME cli.hardening.nan_interpreter_values
  COMMAND ${CMAKE_COMMAND} -DT=${T} -DSRC=${SRC} -DOUT=${CMAKE_CURRENT_BINARY_DIR}/nan_rowmax.npy
          -P ${SRC}/tests/cli/nan/eval_rowmax.cmake)

# 13. a .tensor whose size wraps: exit 1 naming the line
expect_exit(sim_tensor_wrap 1 "tensor_wrap.npu:1:1: tensor 'A' needs more than 9223372036854775807 bytes; its size overflows"
            sim ${NPU}/tensor_wrap.npu --target ${D})

# Item 2: a timing-only run keeps per-instruction totals (a folded record), so 300 million executed
# instructions run in a 4 GB address space (the full record would need ~17 GB: 56 bytes an event).
add_test(NAME cli.hardening.sim_long_loop_bounded_memory
         COMMAND bash -c "ulimit -v 4000000 && \"$<TARGET_FILE:tessel>\" sim ${NPU}/long_loop.npu --target ${D} --timing-only --max-instructions 1000000000")
set_tests_properties(cli.hardening.sim_long_loop_bounded_memory PROPERTIES TIMEOUT 120
  PASS_REGULAR_EXPRESSION "300000003 cycles on 1 core\\(s\\) of davinci-910 \\(300000003 instructions")
add_test(NAME cli.hardening.sim_timing_only_csv_keeps_events
         COMMAND ${T} sim ${NPU}/loop_wrap.npu --target ${D} --timing-only --csv /dev/null)
set_tests_properties(cli.hardening.sim_timing_only_csv_keeps_events PROPERTIES PASS_REGULAR_EXPRESSION "instructions")

# A tile spec whose program has too many cross-pipe dependences for the sync pass: exit 1 in a few
# seconds naming the counts and the remedy (it was killed at 24 GB after 80 s).
expect_exit(compile_too_many_dependences 1
  "matmul.npu: 42338 static instructions with more than 20000000 conflicting pairs across pipes: too many for sync insertion"
  compile ${SRC}/workloads/matmul.tsl --target ${D} --shape M=1024,N=1024,K=1024 --tile m=1024/16,n=64/16,k=64/16 -o /dev/null)
set_tests_properties(cli.hardening.compile_too_many_dependences PROPERTIES TIMEOUT 120)

# Found by the .npu fuzzer: a dilated kernel larger than the padded map (no output pixel) divided
# by zero in load3d (SIGFPE); now an error naming both sizes.
expect_exit(sim_load3d_dilation_too_large 1
  "load3d_dilation_too_large.npu:8:1: 'load3d f16, L0A[0], L1[0], 16, 0, 64, 0, 9' on core 0: img2col: the dilated kernel (3 x 11) is larger than the padded feature map (10 x 10): no output pixel"
  sim ${NPU}/load3d_dilation_too_large.npu --target ${D})
