#include "compiler/poly/split_division_tails.h"

#include <fmt/format.h>

#include <functional>
#include <memory>
#include <numeric>
#include <set>

namespace tessel::poly {

namespace {

constexpr int kMaxCutsPerStatement = 3;  // at most 2^3 statements from one
constexpr int64_t kMaxResidues = 12;      // at most 12 statements from one index divided by several constants

// Visits every affine expression of a statement: output indices, reads' indices, index values.
void for_each_affine(const ir::Statement& s, const std::function<void(const ir::AffineExpr&)>& fn) {
  for (const auto& e : s.out_indices) fn(e);
  std::function<void(const ir::Expr&)> walk = [&](const ir::Expr& e) {
    for (const auto& x : e.indices) fn(x);
    if (e.kind == ir::ExprKind::IndexValue) fn(e.affine);
    for (const auto& a : e.args) walk(*a);
  };
  if (s.rhs) walk(*s.rhs);
}

// The constant part of a numerator i + c (c: constant and size parameters) under `sizes`.
int64_t numerator_offset(const ir::AffineExpr& num, const std::map<std::string, int64_t>& sizes) {
  int64_t c = num.constant;
  for (const auto& [p, k] : num.param_coeffs) c += k * sizes.at(p);
  return c;
}

// The divisors of `index` in `s` and their numerators' offsets, or nothing where a division of it
// is not of the form floor((index + c) / q).
struct Divisions {
  std::set<int64_t> divisors;
  std::vector<int64_t> offsets;
};
std::optional<Divisions> divisions_of(const ir::Statement& s, const std::string& index, const std::map<std::string, int64_t>& sizes) {
  Divisions out;
  bool ok = true;
  for_each_affine(s, [&](const ir::AffineExpr& e) {
    for (const auto& t : e.divs) {
      std::map<std::string, int64_t> idx, params;
      t.numerator.collect_names(&idx, &params);
      if (!idx.count(index)) continue;
      const auto& n = t.numerator;
      if (n.has_div() || n.index_coeffs.size() != 1 || n.index_coeffs.begin()->second != 1) {
        ok = false;
        continue;
      }
      out.divisors.insert(t.divisor);
      out.offsets.push_back(numerator_offset(n, sizes));
    }
  });
  if (!ok || out.divisors.empty()) return std::nullopt;
  return out;
}

// `e` with every division of `index` replaced by its value at index = `at` (all tail points share
// it: the tail is shorter than q and starts a quotient).
ir::AffineExpr fix_quotients(const ir::AffineExpr& e, const std::string& index, int64_t at, const std::map<std::string, int64_t>& sizes) {
  ir::AffineExpr out = ir::AffineExpr::constant_of(e.constant);
  for (const auto& [n, k] : e.index_coeffs) out = out + ir::AffineExpr::index(n, k);
  for (const auto& [p, k] : e.param_coeffs) out = out + ir::AffineExpr::param(p, k);
  for (const auto& t : e.divs) {
    if (t.numerator.index_coeffs.count(index))
      out = out + ir::AffineExpr::constant_of(t.coeff * ir::floor_div(at + numerator_offset(t.numerator, sizes), t.divisor));
    else
      out = out + ir::AffineExpr::floor_div_of(t.numerator, t.divisor).scaled(t.coeff);
  }
  return out;
}

// `e` with `fn` applied to each of its affine expressions (indices, index values).
ir::ExprPtr map_affine(const ir::ExprPtr& e, const std::function<ir::AffineExpr(const ir::AffineExpr&)>& fn) {
  auto x = std::make_shared<ir::Expr>(*e);
  if (x->kind == ir::ExprKind::IndexValue) x->affine = fn(x->affine);
  for (auto& i : x->indices) i = fn(i);
  for (auto& a : x->args) a = map_affine(a, fn);
  return x;
}

// One cut of `s`: its first output index with a division tail, as the whole quotients and the
// tail; nothing where it has none.
std::optional<std::pair<ir::Statement, ir::Statement>> cut_one(const ir::Statement& s, const std::map<std::string, int64_t>& sizes,
                                                                DivisionTail& what) {
  for (size_t d = 0; d < s.domain.size(); ++d) {
    const ir::IndexVar& iv = s.domain[d];
    if (iv.is_reduction) continue;
    const auto div = divisions_of(s, iv.name, sizes);
    if (!div || div->divisors.size() != 1) continue;
    const int64_t q = *div->divisors.begin();
    const std::vector<int64_t>& offsets = div->offsets;
    const int64_t lo = iv.lo.evaluate({}, sizes), hi = iv.hi.evaluate({}, sizes);
    if (hi - lo <= 0 || (hi - lo) % q == 0) continue;
    bool starts = true;
    for (int64_t c : offsets) starts = starts && ir::floor_mod(lo + c, q) == 0;
    if (!starts) continue;
    const int64_t cut = lo + (hi - lo) / q * q;
    ir::Statement whole = s, tail = s;
    whole.domain[d].hi = ir::AffineExpr::constant_of(cut);
    tail.domain[d].lo = ir::AffineExpr::constant_of(cut);
    tail.domain[d].hi = ir::AffineExpr::constant_of(hi);
    const auto fix = [&](const ir::AffineExpr& e) { return fix_quotients(e, iv.name, cut, sizes); };
    for (auto& e : tail.out_indices) e = fix(e);
    tail.rhs = map_affine(tail.rhs, fix);
    what = {s.name, iv.name, q, lo, cut, hi};
    return std::make_pair(whole, tail);
  }
  return std::nullopt;
}

// `e` with `index` = L * index + k (k = lo + r): its plain terms scaled, and each division of it by
// a divisor q of L affine again, (L / q) * index + floor((k + c) / q).
ir::AffineExpr substitute_residue(const ir::AffineExpr& e, const std::string& index, int64_t L, int64_t k,
                                  const std::map<std::string, int64_t>& sizes) {
  ir::AffineExpr out = ir::AffineExpr::constant_of(e.constant);
  for (const auto& [n, c] : e.index_coeffs)
    out = out + (n == index ? ir::AffineExpr::index(n, c * L) + ir::AffineExpr::constant_of(c * k) : ir::AffineExpr::index(n, c));
  for (const auto& [p, c] : e.param_coeffs) out = out + ir::AffineExpr::param(p, c);
  for (const auto& t : e.divs) {
    if (!t.numerator.index_coeffs.count(index)) {
      out = out + ir::AffineExpr::floor_div_of(t.numerator, t.divisor).scaled(t.coeff);
      continue;
    }
    const int64_t q = t.divisor;
    out = out + ir::AffineExpr::index(index, t.coeff * (L / q)) +
          ir::AffineExpr::constant_of(t.coeff * ir::floor_div(k + numerator_offset(t.numerator, sizes), q));
  }
  return out;
}

// An output index divided by several constants (floor(i / 3) and i % 2): one statement per
// residue r of i modulo L = lcm of the divisors, i = L * i' + lo + r, in which every division of i
// is affine in i'. Nothing where `s` has no such index or L passes kMaxResidues.
std::optional<std::vector<ir::Statement>> split_residues(const ir::Statement& s, const std::map<std::string, int64_t>& sizes,
                                                         DivisionTail& what) {
  for (size_t d = 0; d < s.domain.size(); ++d) {
    const ir::IndexVar& iv = s.domain[d];
    if (iv.is_reduction) continue;
    const auto div = divisions_of(s, iv.name, sizes);
    if (!div || div->divisors.size() < 2) continue;
    int64_t L = 1;
    for (int64_t q : div->divisors) L = std::lcm(L, q);
    if (L > kMaxResidues) continue;
    const int64_t lo = iv.lo.evaluate({}, sizes), hi = iv.hi.evaluate({}, sizes);
    std::vector<ir::Statement> parts;
    for (int64_t r = 0; r < L && lo + r < hi; ++r) {
      ir::Statement p = s;
      p.domain[d].lo = ir::AffineExpr::constant_of(0);
      p.domain[d].hi = ir::AffineExpr::constant_of((hi - lo - r + L - 1) / L);
      const auto sub = [&](const ir::AffineExpr& e) { return substitute_residue(e, iv.name, L, lo + r, sizes); };
      for (auto& e : p.out_indices) e = sub(e);
      p.rhs = map_affine(p.rhs, sub);
      parts.push_back(std::move(p));
    }
    what = {s.name, iv.name, L, lo, -1, hi};
    return parts;
  }
  return std::nullopt;
}

}  // namespace

std::string DivisionTail::to_string() const {
  if (cut < 0)
    return fmt::format("{}: index {} ({}:{}) divided by several constants: one statement per residue modulo {}", statement, index,
                       lo, hi, divisor);
  return fmt::format("{}: index {} ({}:{}) divided by {}: whole quotients {}:{} and the tail {}:{}", statement, index, lo, hi,
                     divisor, lo, cut, cut, hi);
}

std::optional<ir::Function> split_division_tails(const ir::Function& f, const std::map<std::string, int64_t>& sizes,
                                                 std::vector<DivisionTail>* tails) {
  ir::Function out = f;
  out.statements.clear();
  bool changed = false;
  for (const ir::Statement& s : f.statements) {
    std::vector<ir::Statement> parts{s};
    DivisionTail residues;
    if (auto r = split_residues(s, sizes, residues)) {
      parts = std::move(*r);
      if (tails) tails->push_back(residues);
      changed = true;
    }
    for (int round = 0; round < kMaxCutsPerStatement; ++round) {
      std::vector<ir::Statement> next;
      bool cut_any = false;
      for (const auto& p : parts) {
        DivisionTail what;
        if (auto two = cut_one(p, sizes, what)) {
          next.push_back(two->first);
          next.push_back(two->second);
          if (tails) tails->push_back(what);
          cut_any = true;
        } else {
          next.push_back(p);
        }
      }
      parts = std::move(next);
      if (!cut_any) break;
      changed = true;
    }
    // an empty whole-quotient part (a range shorter than q) does nothing
    for (auto& p : parts) {
      bool empty = false;
      for (const auto& iv : p.domain) empty = empty || iv.hi.evaluate({}, sizes) <= iv.lo.evaluate({}, sizes);
      if (!empty) out.statements.push_back(std::move(p));
    }
  }
  if (!changed) return std::nullopt;
  for (size_t i = 0; i < out.statements.size(); ++i) out.statements[i].name = "S" + std::to_string(i);
  return out;
}

}  // namespace tessel::poly
