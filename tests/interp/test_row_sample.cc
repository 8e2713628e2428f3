// interp::row_sample: which functions can be checked on a sample of rows, the blocks chosen, and
// the sampled rows equal to the same rows of the full evaluation; a corrupted element inside the
// sample is found at its full-output position.
#include <doctest/doctest.h>

#include <cstring>

#include "compiler/emit_c/run_c.h"
#include "compiler/frontend/frontend.h"
#include "compiler/interp/row_sample.h"

using namespace tessel;

namespace {

const char* kSource =
    "def matmul(f16[M, K] A, f16[K, N] B) -> (f32[M, N] C) {\n  C(m, n) +=! f32(A(m, k)) * f32(B(k, n))\n}\n"
    "def softmax(f16[M, N] X) -> (f16[M, N] Y) {\n"
    "  Mx(m) max=! f32(X(m, n))\n  E(m, n) = exp(f32(X(m, n)) - Mx(m))\n  Den(m) +=! E(m, n)\n  Y(m, n) = f16(E(m, n) / Den(m))\n}\n"
    "def transpose(f16[M, N] X) -> (f16[N, M] Y) {\n  Y(n, m) = X(m, n)\n}\n"
    "def colsum(f32[M, N] X) -> (f32[N] S) {\n  S(n) +=! X(m, n)\n}\n"
    "def total(f32[N] X) -> (f32[] T) {\n  T() +=! X(i)\n}\n"
    "def shifted(f32[M, N] X) -> (f32[M, N] Y, f32[M, N] Z) {\n  Y(m, n) = X(m, n) + 1.0\n  Z(m, n) = Y(m - 1, n) where m in 1:M\n}\n";

const ir::Function& def(const frontend::Module& m, const char* name) { return frontend::select_function(m, name); }

float f32_at(const NpyArray& a, int64_t i) {
  float v;
  std::memcpy(&v, a.data.data() + i * 4, 4);
  return v;
}

}  // namespace

TEST_CASE("row separability: contractions and row kernels are, scalars and cross-row reads are not") {
  frontend::Module m = frontend::parse_module(kSource, "s.tsl");
  const std::map<std::string, int64_t> sizes{{"M", 40}, {"N", 24}, {"K", 16}};
  auto sep = [&](const char* name) { return interp::row_separability(def(m, name), sizes); };
  CHECK(sep("matmul").separable);
  CHECK(sep("matmul").rows == 40);
  CHECK(sep("softmax").separable);  // Mx, E, Den read at their own row
  CHECK(sep("transpose").separable);  // writes Y's rows through n: rows of Y are columns of X, still separable
  CHECK(sep("transpose").rows == 24);
  CHECK(sep("colsum").separable);  // S's rows are n; the reduction over m reads only the input
  CHECK_FALSE(sep("total").separable);
  CHECK(sep("total").reason.find("without dimensions") != std::string::npos);
  const auto s = sep("shifted");
  CHECK_FALSE(s.separable);
  CHECK(s.reason.find("S1") == 0);
  CHECK(interp::iteration_points(def(m, "matmul"), sizes) == 40.0 * 24 * 16);
}

TEST_CASE("row blocks: both edges covered, overlaps merged, every row when the sample would cover them") {
  const auto b = interp::choose_row_blocks(8192, 4, 2, 1);
  REQUIRE(b.size() >= 2);
  CHECK(b.front().begin == 0);
  CHECK(b.back().end == 8192);
  int64_t n = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    n += b[i].end - b[i].begin;
    if (i) CHECK(b[i].begin > b[i - 1].end);
  }
  CHECK(n <= 8);
  const auto all = interp::choose_row_blocks(6, 4, 2, 1);
  REQUIRE(all.size() == 1);
  CHECK(all[0].begin == 0);
  CHECK(all[0].end == 6);
  CHECK(interp::describe_row_blocks(all, 6) == "every row (6)");
  CHECK(interp::describe_row_blocks({{0, 2}, {10, 12}}, 100) ==
        "2 block(s), 4 of 100 rows (4.00 % of every output): rows 0-1, 10-11");
  CHECK(interp::unsample_position("C[3, 7]: expected 1, got 2", {{0, 2}, {10, 12}}) == "C[11, 7]: expected 1, got 2");
}

TEST_CASE("sampled rows equal the full evaluation's, and a wrong element in the sample is found where it is") {
  frontend::Module m = frontend::parse_module(kSource, "s.tsl");
  for (const char* name : {"matmul", "softmax"}) {
    CAPTURE(name);
    const ir::Function& f = def(m, name);
    const std::map<std::string, int64_t> sizes{{"M", 37}, {"N", 24}, {"K", 16}};
    const auto inputs = interp::random_inputs(f, sizes, 3);
    const auto full = interp::evaluate(f, sizes, inputs);
    const std::vector<interp::RowBlock> blocks = {{0, 2}, {17, 20}, {36, 37}};
    const auto sampled = interp::evaluate_rows(f, sizes, inputs, blocks);
    const auto same = interp::take_rows(full, blocks);
    REQUIRE(sampled.size() == same.size());
    for (const auto& [t, a] : same) {
      CHECK(sampled.at(t).shape == a.shape);
      CHECK(sampled.at(t).shape[0] == 6);
      CHECK(sampled.at(t).data == a.data);  // bit for bit: the same order of evaluation
    }
  }
  // a wrong element at row 18, column 5 of C: inside the sample, reported at its full position
  const ir::Function& f = def(m, "matmul");
  const std::map<std::string, int64_t> sizes{{"M", 37}, {"N", 24}, {"K", 16}};
  const auto inputs = interp::random_inputs(f, sizes, 3);
  auto full = interp::evaluate(f, sizes, inputs);
  const std::vector<interp::RowBlock> blocks = {{0, 2}, {17, 20}};
  NpyArray& c = full.at("C");
  const float wrong = f32_at(c, 18 * 24 + 5) + 1.0f;
  std::memcpy(c.data.data() + (18 * 24 + 5) * 4, &wrong, 4);
  emit_c::Verification v =
      emit_c::verify(interp::evaluate_rows(f, sizes, inputs, blocks), interp::take_rows(full, blocks), 1e-5);
  CHECK_FALSE(v.verified);
  CHECK(v.mismatches == 1);
  CHECK(interp::unsample_position(v.first_mismatch, blocks).rfind("C[18, 5]", 0) == 0);
  // outside the sample (row 30) it is not seen: the coverage the command prints
  auto full2 = interp::evaluate(f, sizes, inputs);
  std::memcpy(full2.at("C").data.data() + (30 * 24 + 5) * 4, &wrong, 4);
  CHECK(emit_c::verify(interp::evaluate_rows(f, sizes, inputs, blocks), interp::take_rows(full2, blocks), 1e-5).verified);
}
