# The reference interpreter's row max over rows holding NaN (rows 1, 2), +inf (row 3) and -inf
# (row 0): NaN, NaN, +inf, and row 0's largest number 56. Reads the f32 output's bytes.
execute_process(COMMAND ${T} eval ${SRC}/tests/cli/nan/nan.tsl --def rowmax --shape M=4,N=512
                        --input X=${SRC}/tests/cli/nan/x.npy --output Y=${OUT}
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "tessel eval exited ${rc}: ${err}")
endif()
file(READ ${OUT} data HEX)
string(LENGTH "${data}" n)
math(EXPR start "${n} - 32")
string(SUBSTRING "${data}" ${start} 32 values)
# 56.0f = 0x42600000, NaN = 0x7fc00000, +inf = 0x7f800000, little-endian
if(NOT values STREQUAL "000060420000c07f0000c07f0000807f")
  message(FATAL_ERROR "row maxima bytes ${values}, expected 000060420000c07f0000c07f0000807f")
endif()
