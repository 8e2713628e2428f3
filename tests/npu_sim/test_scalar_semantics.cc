// Scalar edge cases and run bounds (isa/README.md "Scalar edge cases"): every scalar op is defined
// (two's-complement wrap, or a UserError naming the instruction), loops cannot run away through a
// wrapping counter, and a run's length and record are bounded. Issue 17, items 1 and 2.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>

#include "isa/base/error.h"
#include "sim_test_util.h"

using namespace tessel;
using namespace tessel::npu_sim;
using namespace tessel::npu_sim::testing;

namespace {

// A program must end with pipe_barrier ALL; the tests' texts leave it out unless they need it earlier.
std::string complete(const std::string& text) {
  return text.find("pipe_barrier ALL") == std::string::npos ? text + "pipe_barrier ALL\n" : text;
}

// The run's UserError, or "" when it succeeds. Timing-only: the checks on scalars and addresses stay.
std::string error_of(const std::string& text, SimOptions o = {}) {
  o.timing_only = true;
  try {
    simulate(npu::assemble_program(complete(text), "edge.npu"), davinci(), {}, o);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// r1 used as an L1 byte offset: a negative value is reported with its value, so the message shows r1.
const std::string kShowR1 = "\ndma_in L1[r1], GM[0], 1, 32, 0, 0\npipe_barrier ALL\n.tensor G f16 [16] at GM+0 scratch\n";

// Executed instructions, the final pipe_barrier ALL not counted.
uint64_t executed(const std::string& text, SimOptions o = {}) {
  o.timing_only = true;
  return simulate(npu::assemble_program(complete(text), "loop.npu"), davinci(), {}, o).record.instructions.size() - 1;
}

}  // namespace

TEST_CASE("div INT64_MIN, -1 wraps to INT64_MIN (issue 17's SIGFPE reproduction)") {
  const std::string e = error_of("mov r2, -9223372036854775808\ndiv r1, r2, -1" + kShowR1);
  CHECK(contains(e, "L1-9223372036854775808 (negative offset)"));
  CHECK(contains(e, "edge.npu:3:1: 'dma_in"));
}

TEST_CASE("div by -1 of any other value is the negation, div truncates toward zero") {
  CHECK(error_of("mov r2, 7\ndiv r1, r2, -1" + kShowR1).find("L1-7 (negative offset)") != std::string::npos);
  CHECK(error_of("div r1, -7, 2" + kShowR1).find("L1-3 (negative offset)") != std::string::npos);
  CHECK(error_of("div r1, 64, -1\ndiv r1, r1, -1" + kShowR1) == "");  // 64 / -1 / -1 = 64: a valid offset
}

TEST_CASE("div by zero is an error naming the instruction, line and core") {
  const std::string e = error_of("mov r2, 0\ndiv r1, 5, r2\n");
  CHECK(contains(e, "edge.npu:2:1: 'div r1, 5, r2' on core 0: division by zero"));
  CHECK(contains(error_of("div r1, -9223372036854775808, 0\n"), "division by zero"));
}

TEST_CASE("add, sub and mul wrap modulo 2^64") {
  CHECK(contains(error_of("add r1, 9223372036854775807, 1" + kShowR1), "L1-9223372036854775808"));
  CHECK(contains(error_of("sub r1, -9223372036854775808, 1\nsub r1, 0, r1" + kShowR1), "L1-9223372036854775807"));
  CHECK(contains(error_of("mul r1, 4611686018427387904, 2" + kShowR1), "L1-9223372036854775808"));
  // negation of INT64_MIN (0 - x) is INT64_MIN
  CHECK(contains(error_of("sub r1, 0, -9223372036854775808" + kShowR1), "L1-9223372036854775808"));
}

TEST_CASE("shl by a negative amount or by 64 and more is an error naming the amount") {
  for (const char* amount : {"64", "65", "-1", "9223372036854775807", "-9223372036854775808"}) {
    const std::string e = error_of(std::string("shl r1, 1, ") + amount + "\n");
    CHECK(contains(e, "edge.npu:1:1: 'shl r1, 1, "));
    CHECK(contains(e, std::string("shift amount ") + amount + " is outside 0..63"));
  }
  CHECK(contains(error_of("shl r1, 1, 63" + kShowR1), "L1-9223372036854775808"));  // 1 << 63 = INT64_MIN
}

TEST_CASE("an address whose register + offset overflows wraps and fails the bounds check") {
  const std::string e = error_of("mov r1, 9223372036854775807\ndma_in L1[r1+1], GM[0], 1, 32, 0, 0\npipe_barrier ALL\n"
                                 ".tensor G f16 [16] at GM+0 scratch\n");
  CHECK(contains(e, "edge.npu:2:1"));
  CHECK(contains(e, "negative offset"));
}

TEST_CASE("a loop whose counter would wrap past INT64_MAX runs its trip count and ends (issue 17)") {
  // 9223372036854775800, ...805: two iterations; the next value would pass INT64_MAX.
  CHECK(executed("loop r1, 9223372036854775800, 9223372036854775807, 5\nendloop\n") == 3);
  CHECK(executed("loop r1, -9223372036854775808, 9223372036854775807, 9223372036854775807\nendloop\n") == 4);
  CHECK(executed("loop r1, 0, 10, 3\nendloop\n") == 5);  // 0 3 6 9
  CHECK(executed("loop r1, 5, 5, 1\nendloop\n") == 1);   // empty: only the loop
}

TEST_CASE("a body that writes the counter does not change the trip count") {
  CHECK(executed("loop r1, 0, 4, 1\nmov r1, 0\nendloop\n") == 1 + 4 * 2);
  CHECK(executed("loop r1, 0, 4, 1\nsub r1, r1, 100\nendloop\n") == 1 + 4 * 2);
}

TEST_CASE("after a loop the counter holds begin + trips * step") {
  CHECK(contains(error_of("loop r1, -10, -1, 3\nendloop" + kShowR1), "L1-1 (negative offset)"));  // -10 -7 -4, then -1
}

TEST_CASE("a loop step of 0 or below is an error naming the loop") {
  CHECK(contains(error_of("loop r1, 0, 10, 0\nendloop\n"), "edge.npu:1:1: 'loop r1, 0, 10, 0' on core 0: loop step 0 must be positive"));
  CHECK(contains(error_of("loop r1, 0, 10, -9223372036854775808\nendloop\n"), "must be positive"));
}

TEST_CASE("a huge trip count stops at the instruction limit within seconds, with bounded memory") {
  const auto start = std::chrono::steady_clock::now();
  const std::string e = error_of("loop r1, 0, 9223372036854775807, 1\nmov r2, r1\nendloop\n");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(contains(e, "executed more than 8388608 instructions"));
  CHECK(contains(e, "on core 0"));
  CHECK(seconds < 20.0);
}

TEST_CASE("the instruction and cycle limits are options, a run within them is unaffected") {
  SimOptions few;
  few.max_recorded_events = 10;
  CHECK(contains(error_of("loop r1, 0, 100, 1\nendloop\n", few), "edge.npu:2:1: 'endloop' on core 0: the run executed more than 10"));
  CHECK(error_of("loop r1, 0, 4, 1\nendloop\n", few) == "");
  SimOptions short_run;
  short_run.max_cycles = 50;
  CHECK(contains(error_of("loop r1, 0, 100, 1\nendloop\n", short_run), "passed --max-cycles 50"));
  SimOptions zero;  // 0: the default bound, never "unbounded"
  zero.max_cycles = 0;
  CHECK(error_of("mov r1, 0\n", zero) == "");
  CHECK(contains(error_of("loop r1, 0, 9223372036854775807, 1\nendloop\n", zero), "executed more than 8388608"));
  SimOptions huge;
  huge.max_cycles = ~uint64_t(0);
  CHECK(contains(error_of("mov r1, 0\n", huge), "is outside 0..1000000000000000"));
}

TEST_CASE("vector i32 division and remainder of INT32_MIN by -1 wrap, they never trap") {
  const npu::Program p = npu::assemble_program(R"(
.tensor I i32 [2, 64] at GM+0 in
.tensor O i32 [2, 64] at GM+512 out
dma_in UB[0], GM[0], 1, 512, 0, 0
set_flag MTE2, V, 0
wait_flag MTE2, V, 0
vdiv i32, UB[512], UB[0], UB[256], 1, 1, 1, 1, 8, 8, 8
vmod i32, UB[768], UB[0], UB[256], 1, 1, 1, 1, 8, 8, 8
set_flag V, MTE3, 0
wait_flag V, MTE3, 0
dma_out GM[512], UB[512], 1, 512, 0, 0
pipe_barrier ALL
)",
                                               "intmin.npu");
  NpyArray ints;
  ints.dtype = DType::I32;
  ints.shape = {2, 64};
  ints.data.resize(2 * 64 * 4);
  for (int l = 0; l < 64; ++l) {
    const int32_t a = INT32_MIN, b = -1;
    std::memcpy(ints.data.data() + 4 * l, &a, 4);
    std::memcpy(ints.data.data() + 4 * (64 + l), &b, 4);
  }
  const SimResult r = simulate(p, davinci(), {{"I", ints}});
  const NpyArray o = r.tensor(p, "O");
  int32_t q, m;
  std::memcpy(&q, o.data.data(), 4);
  std::memcpy(&m, o.data.data() + 256, 4);
  CHECK(q == INT32_MIN);
  CHECK(m == 0);
}
