// Helpers for the polyhedral-core tests: parse a one-def module and compile it; check a rewrite of a
// function against the original under the reference interpreter.
#pragma once

#include <isl/cpp.h>

#include <doctest/doctest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compiler/emit_c/run_c.h"
#include "compiler/frontend/frontend.h"
#include "compiler/interp/interpreter.h"
#include "compiler/pipeline.h"

namespace tessel::test {

inline const char* kMatmul =
    "def matmul(f16[M, K] A, f16[K, N] B) -> (f32[M, N] C) {\n"
    "  C(m, n) +=! f32(A(m, k)) * f32(B(k, n))\n"
    "}\n";

inline const char* kMatmulBiasRelu =
    "def matmul_bias_relu(f16[M, K] A, f16[K, N] B, f32[N] bias) -> (f16[M, N] D) {\n"
    "  C(m, n) +=! f32(A(m, k)) * f32(B(k, n))\n"
    "  D(m, n) = f16(max(C(m, n) + bias(n), 0))\n"
    "}\n";

// isl equality of a computed union map with the expected one in isl notation.
inline bool same(const isl::union_map& got, const std::string& expected) {
  return got.is_equal(isl::union_map(got.ctx(), expected));
}
inline bool same(const isl::union_set& got, const std::string& expected) {
  return got.is_equal(isl::union_set(got.ctx(), expected));
}

// The first `count` time dimensions of a flat schedule.
inline isl::union_map outer_dims(const isl::union_map& schedule, int count) {
  int n = 0;
  schedule.foreach_map([&](isl::map m) { n = int(m.range_tuple_dim()); });
  REQUIRE_MESSAGE(n >= count, "schedule " << poly::str(schedule) << " has fewer than " << count << " dimensions");
  std::string in, out;
  for (int i = 0; i < n; ++i) in += (i ? ", t" : "t") + std::to_string(i);
  for (int i = 0; i < count; ++i) out += (i ? ", t" : "t") + std::to_string(i);
  return schedule.apply_range(isl::union_map(isl::map(schedule.ctx(), "{ [" + in + "] -> [" + out + "] }")));
}

inline std::unique_ptr<Compilation> compile_text(const frontend::Module& m, std::map<std::string, int64_t> sizes,
                                                 std::optional<std::string> tile, CompileOptions o = {}) {
  o.sizes = std::move(sizes);
  o.tile = std::move(tile);
  return compile(m.functions.at(0), o);
}

// A one-def module parsed from source text, and its def.
struct OneDef {
  frontend::Module m;
  const ir::Function* f;
};
inline OneDef load_one_def(const std::string& src) {
  OneDef c{frontend::parse_module(src, "test.tsl"), nullptr};
  c.f = &c.m.functions.front();
  return c;
}

// A rewrite's result: what it found, and the rewritten function (none when it found nothing).
template <class Found>
struct Rewritten {
  std::vector<Found> found;
  std::optional<ir::Function> g;
};

// Def `def` of module source `src` rewritten by `rewrite(f, sizes, &found)`: a function exactly when
// it found something; then the rewrite's outputs equal the original's under the reference
// interpreter element by element (exactly: no arithmetic changes) on random inputs of `seed`, and
// its statements are renumbered S0, S1, ...
template <class Found, class Rewrite>
Rewritten<Found> check_same(const char* src, const char* def, const std::map<std::string, int64_t>& sizes, uint64_t seed,
                            Rewrite rewrite) {
  frontend::Module m = frontend::parse_module(src, "test.tsl");
  const ir::Function& f = frontend::select_function(m, def);
  Rewritten<Found> r;
  r.g = rewrite(f, sizes, &r.found);
  REQUIRE(r.g.has_value() == !r.found.empty());
  if (!r.g) return r;
  const auto inputs = interp::random_inputs(f, sizes, seed);
  const emit_c::Verification v = emit_c::verify(interp::evaluate(f, sizes, inputs), interp::evaluate(*r.g, sizes, inputs), 0.0);
  CHECK_MESSAGE(v.verified, v.first_mismatch);
  for (size_t i = 0; i < r.g->statements.size(); ++i) CHECK(r.g->statements[i].name == "S" + std::to_string(i));
  return r;
}

}  // namespace tessel::test
