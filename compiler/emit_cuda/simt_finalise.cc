#include "compiler/emit_cuda/simt_finalise.h"

#include <algorithm>
#include <map>

#include "compiler/emit_cuda/simt_loop_chain.h"
#include "compiler/emit_cuda/simt_mapping.h"

namespace tessel::emit_cuda {

namespace {

using kernel::Node;
using kernel::NodeKind;

struct Box {
  std::vector<int64_t> lo, hi;  // half-open, clamped to the tensor
};
bool intersect(const Box& a, const Box& b) {
  for (size_t d = 0; d < a.lo.size() && d < b.lo.size(); ++d)
    if (std::max(a.lo[d], b.lo[d]) >= std::min(a.hi[d], b.hi[d])) return false;
  return true;
}

// The global boxes one tile reads and writes, by tensor.
struct TileBoxes {
  std::map<std::string, std::vector<Box>> reads, writes;
};

void accessed(const ir::Expr& e, std::set<std::string>& out) {
  if (e.kind == ir::ExprKind::Access) out.insert(e.name);
  for (const auto& a : e.args) accessed(*a, out);
}

class TileWalk {
 public:
  TileWalk(const kernel::Kernel& k, std::map<std::string, int64_t> env) : k_(k), env_(std::move(env)) {}

  // The tile's top-level nodes: lets evaluated in order, copies placed at their values.
  void top(const std::vector<kernel::NodePtr>& nodes) {
    for (const auto& c : nodes) {
      if (c->kind == NodeKind::Let) {
        if (bound(c->value))
          env_[c->var] = c->value.evaluate(env_);
        else
          env_.erase(c->var);
      } else if (c->kind == NodeKind::Copy) {
        copy(*c, true);
      } else {
        nested(*c);
      }
    }
  }
  TileBoxes boxes;

 private:
  bool bound(const kernel::Expr& e) const {
    std::set<std::string> vars;
    simt::expr_vars(e, vars);
    for (const auto& v : vars)
      if (!env_.count(v)) return false;
    return true;
  }
  Box whole(const std::string& tensor) const {
    Box b;
    for (int64_t d : k_.find_tensor(tensor)->shape) b.lo.push_back(0), b.hi.push_back(d);
    return b;
  }
  void copy(const Node& c, bool placed) {
    if (c.src >= 0 && c.dst >= 0) return;  // between buffers
    const bool out = c.dst < 0;
    const kernel::Buffer& buf = k_.buffers.at(out ? c.src : c.dst);
    Box b = whole(c.tensor);
    bool at = placed;
    for (const auto& o : buf.offset) at = at && bound(o);
    if (at)
      for (size_t d = 0; d < buf.offset.size() && d < b.lo.size(); ++d) {
        const int64_t lo = buf.offset[d].evaluate(env_);
        b.hi[d] = std::clamp<int64_t>(lo + buf.extents[d], 0, b.hi[d]);
        b.lo[d] = std::clamp<int64_t>(lo, 0, b.hi[d]);
      }
    (out ? boxes.writes : boxes.reads)[c.tensor].push_back(b);
  }
  // Below the top level: copies move anything of their tensor; statements touching global tensors
  // themselves, all of them.
  void nested(const Node& n) {
    kernel::for_each_node(std::make_shared<Node>(n), [&](const Node& x, int) {
      if (x.kind == NodeKind::Copy) copy(x, false);
      if (x.kind != NodeKind::Compute) return;
      const ir::Statement& s = k_.function->statements.at(x.statement);
      const auto global = [&](const std::string& t) {
        auto it = x.binding.find(t);
        return (it == x.binding.end() || it->second < 0) && k_.find_tensor(t);
      };
      std::set<std::string> reads;
      if (s.rhs) accessed(*s.rhs, reads);
      if (s.reduction != ir::Reduction::None) reads.insert(s.output);
      for (const auto& t : reads)
        if (global(t)) boxes.reads[t].push_back(whole(t));
      if (global(s.output)) boxes.writes[s.output].push_back(whole(s.output));
    });
  }
  const kernel::Kernel& k_;
  std::map<std::string, int64_t> env_;
};

// The nodes of a group's tile and the loop values of tile t.
const std::vector<kernel::NodePtr>& tile_nodes(const Node& root, const GridLoops& g, std::vector<kernel::NodePtr>& one) {
  if (!g.loops.empty()) return g.loops.back()->children;
  one = {std::make_shared<Node>(root)};
  if (root.kind == NodeKind::Block) return root.children;
  return one;
}
std::map<std::string, int64_t> tile_env(const GridLoops& g, int64_t t, std::vector<int64_t>* iterations = nullptr) {
  std::map<std::string, int64_t> env;
  if (iterations) iterations->assign(g.loops.size(), 0);
  for (int d = int(g.loops.size()) - 1; d >= 0; --d) {
    const int64_t i = t % g.trips[d];
    t /= g.trips[d];
    env[g.loops[d]->var] = g.loops[d]->lo.evaluate({}) + i * g.loops[d]->step;
    if (iterations) (*iterations)[d] = i;
  }
  return env;
}
TileBoxes boxes_of(const kernel::Kernel& k, const Node& root, const GridLoops& g, int64_t t, std::vector<int64_t>* iterations = nullptr) {
  std::vector<kernel::NodePtr> one;
  TileWalk w(k, tile_env(g, t, iterations));
  w.top(tile_nodes(root, g, one));
  return w.boxes;
}

std::set<std::string> tensor_names(const std::map<std::string, std::vector<Box>>& m) {
  std::set<std::string> s;
  for (const auto& [t, _] : m) s.insert(t);
  return s;
}

// B's loops matched to A's: strides[d] for A's loop d (0: unmatched), or nullopt.
std::optional<std::vector<int64_t>> match_loops(const GridLoops& ga, const GridLoops& gb) {
  std::vector<int64_t> strides(ga.loops.size(), 0);
  std::vector<bool> used(ga.loops.size(), false);
  int64_t weight = 1;
  for (int j = int(gb.loops.size()) - 1; j >= 0; --j) {
    const Node& lb = *gb.loops[j];
    bool found = false;
    for (size_t i = 0; i < ga.loops.size() && !found; ++i) {
      const Node& la = *ga.loops[i];
      if (used[i] || la.step != lb.step || la.lo.evaluate({}) != lb.lo.evaluate({}) || la.hi.evaluate({}) != lb.hi.evaluate({})) continue;
      used[i] = found = true;
      strides[i] = weight;
    }
    if (!found) return std::nullopt;
    weight *= gb.trips[j];
  }
  return strides;
}

}  // namespace

std::optional<Finalisation> plan_finalisation(const kernel::Kernel& k, const Node& a, const Node& b) {
  const GridLoops ga = grid_loops(a), gb = grid_loops(b);
  if (ga.loops.empty() || ga.blocks > kMaxFinaliseTiles || gb.blocks > kMaxFinaliseTiles || ga.blocks < 2 || gb.blocks < 1) return std::nullopt;
  if (ga.blocks * gb.blocks > (int64_t(1) << 22)) return std::nullopt;  // the pairs checked below
  const auto strides = match_loops(ga, gb);
  if (!strides) return std::nullopt;
  Finalisation f;
  f.strides = *strides;
  f.b_tiles = gb.blocks;
  f.arrivals = ga.blocks / gb.blocks;
  std::vector<TileBoxes> bt;
  for (int64_t t = 0; t < gb.blocks; ++t) bt.push_back(boxes_of(k, b, gb, t));
  std::set<std::string> a_reads, a_writes, b_reads, b_writes;
  std::vector<int64_t> it;
  for (int64_t t = 0; t < ga.blocks; ++t) {
    const TileBoxes at = boxes_of(k, a, ga, t, &it);
    int64_t own = 0;
    for (size_t d = 0; d < it.size(); ++d) own += f.strides[d] * it[d];
    for (const auto& [tensor, written] : at.writes) {
      a_writes.insert(tensor);
      for (int64_t u = 0; u < gb.blocks; ++u) {
        if (u == own) continue;
        auto r = bt[u].reads.find(tensor);
        if (r == bt[u].reads.end()) continue;
        for (const Box& w : written)
          for (const Box& x : r->second)
            if (intersect(w, x)) return std::nullopt;  // another B tile reads what this A tile writes
      }
    }
    for (const auto& t2 : tensor_names(at.reads)) a_reads.insert(t2);
  }
  for (const auto& x : bt) {
    for (const auto& t : tensor_names(x.reads)) b_reads.insert(t);
    for (const auto& t : tensor_names(x.writes)) b_writes.insert(t);
  }
  for (const auto& t : b_writes)
    if (a_reads.count(t) || a_writes.count(t)) return std::nullopt;
  for (const auto& t : a_writes)
    if (b_reads.count(t)) f.tensors.insert(t);
  if (f.tensors.empty()) return std::nullopt;  // B does not wait for A: nothing to finalise
  return f;
}

}  // namespace tessel::emit_cuda
