// Loop chains of the SIMT emitter (emit_simt.h) and the thread-mapped dims they give: which
// loops of a nest form a chain, which stage-tile / point loop pairs merge into one dim, whether a
// set of dims can be decoded from one flat index, and their trip counts known at compile time.
// Analysis only: reads the kernel IR, prints nothing.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "compiler/kernel/kernel_ir.h"

namespace tessel::emit_cuda::simt {

using kernel::Expr;
using kernel::Node;

// Variables an expression reads, added to `out`.
void expr_vars(const Expr& e, std::set<std::string>& out);
// Whether `e` is a constant (then *v is its value).
bool constant_expr(const Expr& e, int64_t* v);
// Whether a node holds only compute statements, lets, loops and ifs (no copy, no matmul fragment).
bool compute_nest(const Node& n);

// Loops nested one in another, each holding only Lets before the next (root first).
struct ChainLevel {
  const Node* loop;
  std::vector<const Node*> lets;  // Lets among its children, before the next level
};
std::vector<ChainLevel> loop_chain(const Node& root);
// A loop whose iterations threads may share: marked parallel and rebinding no buffer.
bool threads_may_share(const Node& loop);

// One thread-mapped dimension: a loop, or a stage-tile loop merged with the point loop inside
// it (v in [lo, hi): tile = lo + floor((v - lo) / step) * step, point = v).
struct Dim {
  const Node* loop = nullptr;
  const Node* point = nullptr;  // merged point loop
  Expr lo, hi;
  int64_t step = 1;
};

// Linear form of an integer expression (variables with coefficients + a constant), if it is one.
struct Linear {
  std::map<std::string, int64_t> coeff;
  int64_t constant = 0;
  bool operator==(const Linear& o) const {
    auto nz = [](const std::map<std::string, int64_t>& m) {
      std::map<std::string, int64_t> r;
      for (const auto& [v, c] : m)
        if (c) r[v] = c;
      return r;
    };
    return constant == o.constant && nz(coeff) == nz(o.coeff);
  }
};
std::optional<Linear> linear(const Expr& e);

// A stage-tile loop `t` and the point loop `p` directly inside it that walks exactly its tile:
// p in [t, t + step) with (hi - lo) a multiple of step, or p in [t, min(t + step, hi)).
bool merges(const Node& t, const Node& p);
// Groups consecutive levels [from, to) of a chain into dims (merging tile/point pairs).
std::vector<Dim> dims_of(const std::vector<ChainLevel>& chain, size_t from, size_t to);
// Whether dims' bounds read none of the variables the chain binds (so they can be decoded from
// one flat index).
bool bounds_independent(const std::vector<Dim>& dims, const std::set<std::string>& bound_in_chain);
// The variables a chain binds: its loops' and their lets'.
std::set<std::string> bound_in(const std::vector<ChainLevel>& chain);

// Trip count of a dim known at compile time: exact, or an upper bound (hi = min(lo + c, x)) with
// the iteration checked against hi at run time. Constant counts make the flat index's decoding
// a division by a constant (a multiply and a shift) instead of a runtime division.
struct TripCount {
  std::optional<int64_t> exact, bound;
};
TripCount trip_count(const Dim& d);

}  // namespace tessel::emit_cuda::simt
