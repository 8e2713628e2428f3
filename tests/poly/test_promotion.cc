// Promotion: footprints per tile level as boxes with hand-computed bytes, levels by role, the
// capacity check (double buffering reserves half) and its message.
#include <doctest/doctest.h>

#include "isa/base/error.h"
#include "tests/poly/poly_test_util.h"

using namespace tessel;

namespace {
const kernel::Buffer& buffer_of(const kernel::Kernel& k, const std::string& tensor, isa::Role role) {
  for (const auto& b : k.buffers)
    if (b.tensor == tensor && b.role == role) return b;
  FAIL("no buffer of " << tensor << " with role " << isa::role_name(role));
  return k.buffers.front();
}
std::string capacity_error(const frontend::Module& m, const std::string& tile) {
  try {
    test::compile_text(m, {{"M", 1024}, {"N", 1024}, {"K", 1024}}, tile);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("footprints of a 128/64 GEMM tile equal hand-computed bytes at each level") {
  frontend::Module m = frontend::parse_module(test::kMatmul, "mm.tsl");
  auto c = test::compile_text(m, {{"M", 1024}, {"N", 1024}, {"K", 1024}}, "m=128/64,n=128/64,k=64/32");
  const kernel::Kernel& k = c->kernel;
  // stage (L1): A 128x64 f16, B 64x128 f16
  const auto& a1 = buffer_of(k, "A", isa::Role::Stage);
  CHECK(a1.extents == std::vector<int64_t>{128, 64});
  CHECK(a1.bytes() == 128 * 64 * 2);
  CHECK(a1.level == "L1");
  const auto& b1 = buffer_of(k, "B", isa::Role::Stage);
  CHECK(b1.extents == std::vector<int64_t>{64, 128});
  CHECK(b1.bytes() == 64 * 128 * 2);
  // operand level: A 64x32 in L0A, B 32x64 in L0B
  const auto& a0 = buffer_of(k, "A", isa::Role::OperandA);
  CHECK(a0.extents == std::vector<int64_t>{64, 32});
  CHECK(a0.bytes() == 4096);
  CHECK(a0.level == "L0A");
  const auto& b0 = buffer_of(k, "B", isa::Role::OperandB);
  CHECK(b0.extents == std::vector<int64_t>{32, 64});
  CHECK(b0.bytes() == 4096);
  CHECK(b0.level == "L0B");
  // partial sums: C 128x128 f32 in the accumulator, not double-buffered
  const auto& acc = buffer_of(k, "C", isa::Role::Accumulator);
  CHECK(acc.extents == std::vector<int64_t>{128, 128});
  CHECK(acc.bytes() == 65536);
  CHECK(acc.level == "L0C");
  CHECK_FALSE(acc.double_buffered);
  CHECK(a1.double_buffered);
  // offsets are the tile origins
  CHECK(a1.offset[0].to_string() == "g0_m_o");
  CHECK(a1.offset[1].to_string() == "g0_k_o");
  CHECK(a0.offset[0].to_string() == "g0_m_i");
}

TEST_CASE("footprints on sm90 land in shared memory and fragments by role") {
  frontend::Module m = frontend::parse_module(test::kMatmul, "mm.tsl");
  CompileOptions o;
  o.hierarchy = "isa/targets/sm90.yaml";
  auto c = test::compile_text(m, {{"M", 256}, {"N", 256}, {"K", 256}}, "m=128/64,n=128/64,k=32/16", o);
  CHECK(buffer_of(c->kernel, "A", isa::Role::Stage).level == "shared");
  CHECK(buffer_of(c->kernel, "A", isa::Role::OperandA).level == "frag_a");
  CHECK(buffer_of(c->kernel, "C", isa::Role::Accumulator).level == "frag_acc");
}

TEST_CASE("an oversize tile is rejected naming the level, the bytes needed and the capacity") {
  frontend::Module m = frontend::parse_module(test::kMatmul, "mm.tsl");
  // operand tiles 256x256 f16 = 128 KiB, double-buffered 256 KiB > L0A 64 KiB
  std::string e = capacity_error(m, "m=256/256,n=256/256,k=256/256");
  CHECK(e.find("level L0A (operand_a)") != std::string::npos);
  CHECK(e.find("needs 262144 bytes") != std::string::npos);
  CHECK(e.find("capacity is 65536 bytes") != std::string::npos);
  // stage: A 1024x512 f16 = 1 MiB, double-buffered, exceeds L1's 1 MiB
  e = capacity_error(m, "m=1024/16,n=16/16,k=512/16");
  CHECK(e.find("level L1 (stage)") != std::string::npos);
  CHECK(e.find("double buffering reserves half") != std::string::npos);
  // exactly half of L0A double-buffered fits: 128x128 f16 = 32 KiB, x2 = 64 KiB
  CHECK(capacity_error(m, "m=128/128,n=16/16,k=128/128") == "");
}

TEST_CASE("a footprint hull wider than its tensor is the tensor's own extent, offset 0") {
  // Reads that move against each other over the tile origins (seed 8803 program 264 of the
  // program fuzzer): the hull of X(r1, i, r0) and X(r0, r1, i) per tile of one point is 57 wide
  // in each dimension of a 29^3 tensor (offset origin - 28); every access stays inside X.
  frontend::Module m = frontend::parse_module(
      "def crossed(i32[M, M, M] X) -> (i32[M] Y) {\n  Y(i) +=! X(r1, i, r0) + X(r0, r1, i)\n}\n", "crossed.tsl");
  auto c = test::compile_text(m, {{"M", 29}}, "i=1/1,r1=1/1,r0=1/1");
  const auto& x = buffer_of(c->kernel, "X", isa::Role::Stage);
  CHECK(x.extents == std::vector<int64_t>{29, 29, 29});
  for (const auto& o : x.offset) CHECK(o.to_string() == "0");
  // a box inside the tensor keeps its tile-sized extent and origin offset
  frontend::Module t = frontend::parse_module("def rowsum(i32[M, M] X) -> (i32[M] Y) {\n  Y(i) +=! X(i, r)\n}\n", "rowsum.tsl");
  auto d = test::compile_text(t, {{"M", 29}}, "i=1/1,r=1/1");
  const auto& y = buffer_of(d->kernel, "X", isa::Role::Stage);
  CHECK(y.extents == std::vector<int64_t>{1, 1});
}
