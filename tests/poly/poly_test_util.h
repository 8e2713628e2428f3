// Helpers for the polyhedral-core tests: parse a one-def module and compile it.
#pragma once

#include <isl/cpp.h>

#include <doctest/doctest.h>

#include <string>

#include "compiler/frontend/frontend.h"
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

}  // namespace tessel::test
