#include "compiler/tile/tile_spec.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "isa/base/error.h"

namespace tessel::tile {

const AxisTile* TileSpec::find(const std::string& axis) const {
  for (const auto& a : axes)
    if (a.axis == axis) return &a;
  return nullptr;
}

void TileSpec::set(const std::string& axis, int64_t outer, int64_t inner) {
  for (auto& a : axes)
    if (a.axis == axis) {
      a.outer = outer;
      a.inner = inner;
      return;
    }
  axes.push_back({axis, outer, inner});
}

std::string TileSpec::to_string() const {
  std::string s;
  for (const auto& a : axes) {
    if (!s.empty()) s += ",";
    s += a.axis + "=" + std::to_string(a.outer) + "/" + std::to_string(a.inner);
  }
  return s;
}

namespace {

int64_t parse_size(const std::string& text, const std::string& entry) {
  if (text.empty() || !std::all_of(text.begin(), text.end(), [](char c) { return std::isdigit((unsigned char)c); }))
    throw UserError("--tile: '" + entry + "': expected a positive integer size, got '" + text +
                    "' (form: axis=outer/inner, e.g. m=128/64)");
  if (text.size() > 12) throw UserError("--tile: '" + entry + "': size " + text + " is too large");
  int64_t v = std::stoll(text);
  if (v == 0) throw UserError("--tile: '" + entry + "': tile sizes must be at least 1, got 0");
  return v;
}

}  // namespace

TileSpec parse_tile_spec(const std::string& text) {
  TileSpec spec;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string entry = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? text.size() + 1 : comma + 1;
    if (entry.empty()) throw UserError("--tile '" + text + "': empty entry (form: m=128/64,n=128/32,k=64/16)");
    size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0)
      throw UserError("--tile: '" + entry + "': expected axis=outer/inner, e.g. m=128/64");
    std::string axis = entry.substr(0, eq);
    if (!(std::isalpha((unsigned char)axis[0]) || axis[0] == '_') ||
        !std::all_of(axis.begin(), axis.end(), [](char c) { return std::isalnum((unsigned char)c) || c == '_'; }))
      throw UserError("--tile: '" + entry + "': '" + axis + "' is not an index name");
    std::string sizes = entry.substr(eq + 1);
    size_t slash = sizes.find('/');
    int64_t outer = parse_size(sizes.substr(0, slash), entry);
    int64_t inner = slash == std::string::npos ? outer : parse_size(sizes.substr(slash + 1), entry);
    if (inner > outer)
      throw UserError("--tile: '" + entry + "': the inner (operand-level) size " + std::to_string(inner) +
                      " is larger than the outer (stage-level) size " + std::to_string(outer) +
                      "; inner tiles must fit in outer ones");
    if (spec.find(axis)) throw UserError("--tile: axis '" + axis + "' is given twice");
    spec.axes.push_back({axis, outer, inner});
  }
  return spec;
}

void check_tile_spec(const TileSpec& spec, const ir::Function& f) {
  std::set<std::string> names;
  for (const auto& s : f.statements)
    for (const auto& v : s.domain) names.insert(v.name);
  for (const auto& a : spec.axes)
    if (!names.count(a.axis)) {
      std::string known;
      for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
      throw UserError("--tile: unknown axis '" + a.axis + "': " + f.name + " has the index names " + known);
    }
}

TileSpec default_tile_spec(const ir::Function& f, const std::map<std::string, int64_t>& sizes,
                           const isa::Hierarchy& h) {
  int um = 16, un = 16, uk = 16;
  for (const auto* u : h.units_of_kind(isa::UnitKind::Matrix))
    if (!u->shapes.empty()) {
      um = u->shapes[0].m;
      un = u->shapes[0].n;
      uk = u->shapes[0].k;
      break;
    }
  TileSpec spec;
  auto extent = [&](const ir::IndexVar& v) { return std::max<int64_t>(1, (v.hi - v.lo).evaluate({}, sizes)); };
  auto add = [&](const ir::IndexVar& v, int64_t outer, int64_t inner) {
    if (spec.find(v.name)) return;
    outer = std::min(outer, extent(v));
    spec.axes.push_back({v.name, outer, std::min(inner, outer)});
  };
  // Reductions first: they anchor the fused groups. The innermost two parallel axes and the
  // innermost reduction axis of a contraction play m, n, k; outer axes get point tiles (1) so a
  // tile stays a GEMM-shaped block. Other reductions keep their innermost reduction axis whole
  // (softmax / layer-norm rows in one tile).
  for (const auto& s : f.statements) {
    if (s.reduction == ir::Reduction::None) continue;
    const bool contraction = s.rhs && s.rhs->kind == ir::ExprKind::Apply && s.rhs->op == ir::Op::Mul;
    std::vector<const ir::IndexVar*> par, red;
    for (const auto& v : s.domain) (v.is_reduction ? red : par).push_back(&v);
    for (size_t i = 0; i < par.size(); ++i) {
      const bool inner_two = i + 2 >= par.size();
      if (!inner_two) add(*par[i], 1, 1);
      else if (contraction) add(*par[i], 8 * std::max(um, un), 4 * std::max(um, un));
      else add(*par[i], 8 * std::max(um, un), 8 * std::max(um, un));
    }
    for (size_t i = 0; i < red.size(); ++i) {
      const bool innermost = i + 1 == red.size();
      if (!innermost) add(*red[i], 1, 1);
      else if (contraction) add(*red[i], 4 * uk, uk);
    }
  }
  // Element-wise statements: the innermost two axes in blocks, outer axes point by point.
  for (const auto& s : f.statements) {
    if (s.reduction != ir::Reduction::None) continue;
    for (size_t i = 0; i < s.domain.size(); ++i) {
      const bool inner_two = i + 2 >= s.domain.size();
      add(s.domain[i], inner_two ? 8 * std::max(um, un) : 1, inner_two ? 8 * std::max(um, un) : 1);
    }
  }
  return spec;
}

}  // namespace tessel::tile
