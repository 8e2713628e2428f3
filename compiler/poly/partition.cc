#include "compiler/poly/partition.h"

#include <algorithm>
#include <set>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/strong_components.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "isa/base/error.h"

namespace tessel::poly {

namespace {

std::set<std::string> tensors_read(const ir::Statement& s) {
  std::set<std::string> r;
  ir::for_each_access(*s.rhs, [&](const ir::Expr& a) { r.insert(a.name); });
  return r;
}

// The product of two reads under casts: `A(..) * B(..)`, `f32(A(..)) * f32(B(..))`.
bool is_read(const ir::Expr& e) {
  if (e.kind == ir::ExprKind::Access) return true;
  return e.kind == ir::ExprKind::Apply && e.op == ir::Op::Cast && is_read(*e.args[0]);
}

bool is_elementwise(const ir::Statement& s) {
  if (s.reduction != ir::Reduction::None) return false;
  return std::none_of(s.domain.begin(), s.domain.end(), [](const ir::IndexVar& v) { return v.is_reduction; });
}

// The extents of a statement's output space, as a sorted list of their printed forms.
std::vector<std::string> output_space(const ir::Statement& s) {
  std::vector<std::string> r;
  for (const auto& v : s.domain)
    if (!v.is_reduction) r.push_back((v.hi - v.lo).to_string());
  std::sort(r.begin(), r.end());
  return r;
}

using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;

// Strongly connected components of the statement dependence graph, as lists of statements in
// program order, ordered by their first statement.
std::vector<std::vector<int>> dependence_units(const ir::Function& f) {
  const int n = int(f.statements.size());
  Graph g(n);
  std::map<std::string, std::vector<int>> writers;
  for (int i = 0; i < n; ++i) {
    const ir::Statement& s = f.statements[size_t(i)];
    for (const auto& t : tensors_read(s))
      for (int w : writers[t]) boost::add_edge(size_t(w), size_t(i), g);
    for (int w : writers[s.output]) {  // several writers of one tensor: one component
      boost::add_edge(size_t(w), size_t(i), g);
      boost::add_edge(size_t(i), size_t(w), g);
    }
    writers[s.output].push_back(i);
  }
  std::vector<int> component(size_t(n), 0);
  const int count = n == 0 ? 0 : int(boost::strong_components(g, component.data()));
  std::vector<std::vector<int>> units(static_cast<size_t>(count));
  for (int i = 0; i < n; ++i) units[size_t(component[size_t(i)])].push_back(i);
  std::sort(units.begin(), units.end(), [](const auto& a, const auto& b) { return a.front() < b.front(); });
  return units;
}

struct Builder {
  const ir::Function& f;
  ProgramPartition p;
  std::set<std::string> written;  // by the current group

  KernelGroup& current() { return p.groups.back(); }
  void start(int anchor) {
    p.groups.push_back(KernelGroup{{}, anchor, ""});
    written.clear();
  }
  void add(const std::vector<int>& unit, const std::string& why) {
    for (int i : unit) {
      current().statements.push_back(i);
      written.insert(f.statements[size_t(i)].output);
      p.decisions.push_back(fmt::format("{} ({}) -> kernel {}: {}", f.statements[size_t(i)].name,
                                        f.statements[size_t(i)].output, p.groups.size() - 1, why));
    }
  }
  bool reads_group(const std::vector<int>& unit) const {
    for (int i : unit)
      for (const auto& t : tensors_read(f.statements[size_t(i)]))
        if (written.count(t)) return true;
    return false;
  }
  // Why `unit` cannot join the current group ("" when it can).
  std::string why_not_join(const std::vector<int>& unit, int unit_anchor) const {
    if (p.groups.empty()) return "the first statement";
    const KernelGroup& g = p.groups.back();
    if (unit_anchor >= 0)
      return g.anchor >= 0 ? "a second contraction starts its own kernel" : "a contraction starts its own kernel";
    if (g.fused) return "the fused softmax kernel takes no other statement";
    if (!reads_group(unit)) return "reads nothing the current kernel writes";
    if (g.anchor >= 0) {
      const ir::Statement& a = f.statements[size_t(g.anchor)];
      for (int i : unit) {
        const ir::Statement& s = f.statements[size_t(i)];
        if (!is_elementwise(s)) return "a reduction after a contraction is not an epilogue";
        if (output_space(s) != output_space(a))
          return fmt::format("iterates over another space than {} ({})", a.output, a.name);
      }
      return "";
    }
    if (g.statements.size() + unit.size() > size_t(kMaxVectorStatements))
      return fmt::format("the element-wise / row kernel has {} statements already", g.statements.size());
    return "";
  }
};

}  // namespace

PartitionMode parse_partition_mode(const std::string& text, const std::string& flag) {
  if (text == "auto") return PartitionMode::Auto;
  if (text == "one") return PartitionMode::One;
  if (text == "split") return PartitionMode::Split;
  throw UserError(flag + ": '" + text + "' is not a partition mode (auto, one, split)");
}

bool is_contraction(const ir::Statement& s) {
  if (s.reduction != ir::Reduction::Sum) return false;
  if (std::none_of(s.domain.begin(), s.domain.end(), [](const ir::IndexVar& v) { return v.is_reduction; })) return false;
  const ir::Expr& e = *s.rhs;
  if (!(e.kind == ir::ExprKind::Apply && e.op == ir::Op::Mul && is_read(*e.args[0]) && is_read(*e.args[1]))) return false;
  // a sum of squares (`C(t, i) * C(t, i)`) is a row reduction, not a product of two operands
  const ir::Expr* a = e.args[0].get();
  const ir::Expr* b = e.args[1].get();
  while (a->kind != ir::ExprKind::Access) a = a->args[0].get();
  while (b->kind != ir::ExprKind::Access) b = b->args[0].get();
  return !(a->name == b->name && a->indices == b->indices);
}

ProgramPartition partition_program(const ir::Function& f, PartitionMode mode, const std::vector<std::vector<int>>& fused) {
  std::vector<std::vector<int>> units = dependence_units(f);
  // each fused set becomes one unit at the place of its last member
  std::vector<bool> is_fused(units.size(), false);
  for (const auto& set : fused) {
    const std::set<int> members(set.begin(), set.end());
    std::vector<int> merged;
    size_t last = 0;
    std::vector<std::vector<int>> kept;
    std::vector<bool> kept_fused;
    for (size_t u = 0; u < units.size(); ++u) {
      const bool in = std::any_of(units[u].begin(), units[u].end(), [&](int i) { return members.count(i); });
      if (!in) {
        kept.push_back(units[u]);
        kept_fused.push_back(is_fused[u]);
        continue;
      }
      merged.insert(merged.end(), units[u].begin(), units[u].end());
      last = kept.size();
    }
    std::sort(merged.begin(), merged.end());
    if (merged != std::vector<int>(members.begin(), members.end()))
      throw InternalError("partition: a fused statement set shares a dependence unit with other statements");
    kept.insert(kept.begin() + long(last), merged);
    kept_fused.insert(kept_fused.begin() + long(last), true);
    units = std::move(kept);
    is_fused = std::move(kept_fused);
  }
  std::vector<int> anchors;
  for (const auto& u : units) {
    int a = -1;
    for (int i : u)
      if (a < 0 && is_contraction(f.statements[size_t(i)])) a = i;
    anchors.push_back(a);
  }
  Builder b{f, {}, {}};
  b.p.contraction_units = int(std::count_if(anchors.begin(), anchors.end(), [](int a) { return a >= 0; }));
  const bool cut = mode == PartitionMode::Split ||
                   (mode == PartitionMode::Auto &&
                    (b.p.contraction_units >= 2 || int(f.statements.size()) > kMaxOneKernelStatements ||
                     (!fused.empty() && units.size() > 1)));
  if (!cut) {
    b.start(-1);
    for (size_t i = 0; i < f.statements.size(); ++i) {
      b.current().statements.push_back(int(i));
      if (b.current().anchor < 0 && is_contraction(f.statements[i])) b.current().anchor = int(i);
    }
    b.p.decisions.push_back(mode == PartitionMode::One ? "one kernel (--partition one)"
                                                       : fmt::format("one kernel: {} statements, {} contraction(s)",
                                                                     f.statements.size(), b.p.contraction_units));
  } else {
    for (size_t u = 0; u < units.size(); ++u) {
      if (is_fused[u]) {
        b.start(anchors[u]);
        b.current().fused = true;
        b.add(units[u], "a softmax fused into its context contraction (online softmax): one kernel");
        b.written.clear();  // nothing joins it
        continue;
      }
      const std::string why = b.why_not_join(units[u], anchors[u]);
      if (why.empty()) {
        b.add(units[u], b.current().anchor >= 0 ? "joins as an epilogue of the contraction" : "joins the row chain");
      } else {
        b.start(anchors[u]);
        b.add(units[u], "starts a kernel: " + why);
      }
    }
  }
  for (size_t g = 0; g < b.p.groups.size(); ++g)
    b.p.groups[g].name = b.p.groups.size() == 1 ? f.name : fmt::format("{}_k{}", f.name, g);
  return b.p;
}

std::map<std::string, TensorUse> tensor_uses(const ir::Function& f, const ProgramPartition& p) {
  std::map<std::string, TensorUse> uses;
  for (const auto& t : f.tensors) uses[t.name];
  for (size_t g = 0; g < p.groups.size(); ++g)
    for (int i : p.groups[g].statements) {
      const ir::Statement& s = f.statements[size_t(i)];
      uses[s.output].producer = int(g);
      for (const auto& t : tensors_read(s)) uses[t].last_reader = std::max(uses[t].last_reader, int(g));
    }
  return uses;
}

namespace {

void collect_params(const ir::AffineExpr& e, std::set<std::string>& params) {
  std::map<std::string, int64_t> idx, ps;
  e.collect_names(&idx, &ps);
  for (const auto& [n, _] : ps) params.insert(n);
}

void collect_params(const ir::Expr& e, std::set<std::string>& params) {
  if (e.kind == ir::ExprKind::SizeParam) params.insert(e.name);
  if (e.kind == ir::ExprKind::IndexValue) collect_params(e.affine, params);
  for (const auto& i : e.indices) collect_params(i, params);
  for (const auto& a : e.args) collect_params(*a, params);
}

}  // namespace

ir::Function kernel_function(const ir::Function& f, const ProgramPartition& p, size_t g) {
  if (g >= p.groups.size()) throw InternalError("kernel_function: no group " + std::to_string(g));
  const KernelGroup& group = p.groups[g];
  const std::map<std::string, TensorUse> uses = tensor_uses(f, p);
  ir::Function k;
  k.name = group.name;
  k.loc = f.loc;
  std::set<std::string> written, read;
  for (int i : group.statements) {
    ir::Statement s = f.statements[size_t(i)];
    s.name = "S" + std::to_string(k.statements.size());
    written.insert(s.output);
    for (const auto& t : tensors_read(s)) read.insert(t);
    k.statements.push_back(std::move(s));
  }
  // A tensor written here is an output when the def returns it or another kernel reads it.
  auto read_elsewhere = [&](const std::string& t) {
    for (size_t h = 0; h < p.groups.size(); ++h) {
      if (h == g) continue;
      for (int i : p.groups[h].statements)
        if (tensors_read(f.statements[size_t(i)]).count(t)) return true;
    }
    return false;
  };
  std::vector<ir::Tensor> ins, outs, locals;
  for (const auto& t : f.tensors) {
    ir::Tensor c = t;
    if (written.count(t.name)) {
      const bool out = t.kind == ir::TensorKind::Output || read_elsewhere(t.name) ||
                       (t.kind == ir::TensorKind::Local && uses.at(t.name).last_reader < 0);
      c.kind = out ? ir::TensorKind::Output : ir::TensorKind::Local;
      (out ? outs : locals).push_back(std::move(c));
    } else if (read.count(t.name)) {
      c.kind = ir::TensorKind::Input;
      ins.push_back(std::move(c));
    }
  }
  for (auto* part : {&ins, &outs, &locals})
    for (auto& t : *part) k.tensors.push_back(std::move(t));
  std::set<std::string> used;
  for (const auto& t : k.tensors)
    for (const auto& d : t.shape) collect_params(d, used);
  for (const auto& s : k.statements) {
    for (const auto& v : s.domain) {
      collect_params(v.lo, used);
      collect_params(v.hi, used);
    }
    for (const auto& o : s.out_indices) collect_params(o, used);
    collect_params(*s.rhs, used);
  }
  for (const auto& n : f.params)
    if (used.count(n)) k.params.push_back(n);
  return k;
}

std::string to_string(const ProgramPartition& p, const ir::Function& f) {
  std::string r = fmt::format("{} kernel(s) from {} statements ({} contraction unit(s))\n", p.groups.size(),
                              f.statements.size(), p.contraction_units);
  for (size_t g = 0; g < p.groups.size(); ++g) {
    const KernelGroup& k = p.groups[g];
    std::vector<std::string> names;
    for (int i : k.statements) names.push_back(f.statements[size_t(i)].name + ":" + f.statements[size_t(i)].output);
    r += fmt::format("  kernel {} {}: {}{}\n", g, k.name, fmt::join(names, " "),
                     k.anchor >= 0 ? " (contraction " + f.statements[size_t(k.anchor)].output + ")" : "");
  }
  for (const auto& d : p.decisions) r += "  " + d + "\n";
  return r;
}

}  // namespace tessel::poly
