// Product reductions on the NPU (compiler/emit_npu/nest.cc): the general vector lowering multiplies
// with vmul from the identity 1 (idle lanes included); a product along the lanes, for which the
// unit has no cross-lane instruction, is halved block-wise and spread by vbrcb (Nest::lanes_product);
// a tile's rows go straight into the accumulator in the interpreter's order; a product whose output
// is too small to give every core work is split over the cores, partials combined by a product.
// Every output against the interpreter element by element (exact where the order is the
// interpreter's: columns, integers, f16; within the reassociation tolerance along f32 lanes),
// naive and pruned syncs, race-free, on davinci-910 and davinci-310 (workloads/reduction_product.tsl).
#include <doctest/doctest.h>

#include <string>

#include "npu_case.h"

using namespace tessel;
using namespace tessel::npu_test;

namespace {

const char* kFile = "reduction_product.tsl";

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// DEF at SHAPE on both chips: verified (exactly where `exact`), race-free, naive and pruned.
void check_both(const std::string& def, const std::string& shape, bool exact) {
  for (const std::string& target : {kTarget, kTarget310}) {
    CAPTURE(def);
    CAPTURE(shape);
    CAPTURE(target);
    auto c = compile_case(kFile, def, shape, "", true, target);
    CAPTURE(kernel_notes(*c));
    verified_cycles(*c, exact, false, run_any);
  }
}

int count(const Case& c, npu::Opcode o) {
  int n = 0;
  for (const auto& i : c.kernel.program.code) n += i.opcode == o;
  return n;
}

}  // namespace

TEST_CASE("a row product along the lanes: block halving and vbrcb, within the reassociation tolerance") {
  check_both("prod_rows", "M=37,N=300", false);
  check_both("prod_rows", "M=300,N=45", false);
  auto c = compile_case(kFile, "prod_rows", "M=37,N=300");
  CHECK(has(kernel_notes(*c), "lanes n"));
  CHECK(count(*c, npu::Opcode::Vbrcb) > 0);
  CHECK(count(*c, npu::Opcode::Vcadd) == 0);
}

// davinci-310 puts 168 rows of 64 lanes in a block of the row pipeline: 1,344 elements to spread,
// more than one vbrcb's 255 repeats (chunks of 248, each starting on a 32-byte block).
TEST_CASE("a row product of many short rows per block spreads its lanes in several vbrcb chunks") {
  check_both("prod_rows", "M=4096,N=64", false);
  check_both("prod_rows_i32", "M=4096,N=70", true);
}

TEST_CASE("a column product multiplies whole rows in the interpreter's order, exact") {
  check_both("prod_cols", "M=300,N=37", true);
  check_both("prod_cols", "M=1000,N=300", true);
}

TEST_CASE("a product of every element to a 0-d output") {
  check_both("prod_all", "M=9,N=70", false);
  check_both("prod_all", "M=1,N=1", true);
}

TEST_CASE("i32 and i8 products wrap as the interpreter's, exact") {
  check_both("prod_rows_i32", "M=37,N=300", true);
  check_both("prod_rows_i8", "M=37,N=300", true);
  check_both("prod_rows_i8", "M=4096,N=64", true);
}

// An f16 product rounds after every step: its lanes stay off the reduced indices (none at all for a
// product to one value: an element per row) and every row goes into the accumulator in order, so
// the result is bit for bit the interpreter's.
TEST_CASE("f16 products multiply in the interpreter's order, exact") {
  check_both("prod_rows_f16", "M=37,N=200", true);
  check_both("prod_rows_f16", "M=8,N=1000", true);
  auto c = compile_case(kFile, "prod_rows_f16", "M=37,N=200");
  CHECK(has(kernel_notes(*c), "lanes m"));
  check_both("prod_all_f16", "M=5,N=60", true);
  check_both("prod_all_f16", "M=16,N=300", true);
}

// The channel-last row kernel (channels.cc): a per-channel product over N x H x W multiplies its
// rows into the channel accumulators one vmul each, in the interpreter's order.
TEST_CASE("a per-channel product in NHWC on the channel-last kernel, exact") {
  check_both("prod_channels_nhwc", "N=2,H=3,W=5,C=43", true);
  auto c = compile_case(kFile, "prod_channels_nhwc", "N=2,H=3,W=5,C=43");
  CHECK(has(kernel_notes(*c), "channel-last"));
  CHECK(count(*c, npu::Opcode::Vmul) > 0);
}

TEST_CASE("a product of products of two reads is no matrix multiply: vector unit, no mmad, exact") {
  check_both("prod_pairs", "M=64,N=48,K=16", true);
  auto c = compile_case(kFile, "prod_pairs", "M=64,N=48,K=16");
  CHECK(count(*c, npu::Opcode::Mmad) == 0);
  CHECK(count(*c, npu::Opcode::Vmul) > 0);
}

TEST_CASE("*= multiplies into the value an earlier statement wrote") {
  check_both("prod_accumulate", "M=37,N=100", false);
  check_both("prod_then_scale", "M=37,N=100", false);
}

// 1024 x 1024 f32: split as the sum of every element is (test_reduction_cores.cc), 32 partial
// products in GM, one sync_all, the partials multiplied by one core (its idle lanes at 1).
TEST_CASE("a product over every element is split over the cores and its partials multiplied (davinci-910)") {
  auto c = compile_case(kFile, "prod_all_long", "M=1024,N=1024");
  const std::string n = kernel_notes(*c);
  CAPTURE(n);
  CHECK(c->kernel.program.cores == 32);
  CHECK(count(*c, npu::Opcode::SyncAll) == 1);
  CHECK(has(n, "reductions split over cores: Y along m_n over 32 cores"));
  verified_cycles(*c, false, false, run_any);
  auto c310 = compile_case(kFile, "prod_all_long", "M=256,N=512", "", true, kTarget310);
  CHECK(c310->kernel.program.cores == 2);
  verified_cycles(*c310, false, false, run_any);
}

TEST_CASE("an f16 product is not split over the cores (partials would reassociate it)") {
  auto c = compile_case(kFile, "prod_all_f16", "M=512,N=512", "", false);
  CHECK(count(*c, npu::Opcode::SyncAll) == 0);
  CHECK(c->kernel.program.cores == 1);
}
