#include "compiler/emit_cuda/simt_mapping.h"

#include <algorithm>

#include "compiler/emit_cuda/simt_loop_chain.h"

namespace tessel::emit_cuda {

using kernel::Node;
using kernel::NodeKind;

void reads_of(const ir::Expr& e, const std::string& t, std::vector<const std::vector<ir::AffineExpr>*>& out) {
  if (e.kind == ir::ExprKind::Access && e.name == t) out.push_back(&e.indices);
  for (const auto& a : e.args) reads_of(*a, t, out);
}

namespace {

// Whether a read's innermost index walks the tensor's contiguous dim with the index the block's
// threads take innermost: the output's last index (a compute nest over threads, a column
// reduction), or the last reduction index (strided over a reduction's lanes).
bool contiguous_read(const ir::Statement& s, const std::vector<ir::AffineExpr>& idx) {
  if (idx.empty()) return true;
  const auto& last = idx.back();
  if (last.has_div()) return false;
  std::string inner_out, inner_red;
  if (!s.out_indices.empty()) {
    const auto& o = s.out_indices.back();
    if (!o.has_div() && o.index_coeffs.size() == 1 && o.index_coeffs.begin()->second == 1) inner_out = o.index_coeffs.begin()->first;
  }
  for (const auto& v : s.domain)
    if (v.is_reduction) inner_red = v.name;
  for (const auto& [v, c] : last.index_coeffs)
    if (c == 1 && (v == inner_out || v == inner_red)) return true;
  return false;
}

}  // namespace

// Staging a box in shared memory costs a block barrier and a round trip through shared memory and
// keeps a block's loads from overlapping its arithmetic.
SimtDirectBuffers simt_direct_buffers(const kernel::Kernel& k, const kernel::NodePtr& root) {
  std::set<int> copied_in, kept, copied_out, kept_out;
  std::set<std::string> written;  // tensors the group copies out to
  kernel::for_each_node(root, [&](const Node& n, int) {
    if (n.kind == NodeKind::Copy) {
      if (n.dst < 0) written.insert(n.tensor);
      if (n.dst >= 0 && n.src < 0) {
        copied_in.insert(n.dst);
        kept_out.insert(n.dst);
      } else if (n.dst < 0 && n.src >= 0) {
        copied_out.insert(n.src);
        kept.insert(n.src);
      } else {
        if (n.src >= 0) kept.insert(n.src), kept_out.insert(n.src);
        if (n.dst >= 0) kept.insert(n.dst), kept_out.insert(n.dst);
      }
    } else if (n.kind == NodeKind::Matmul) {
      kept.insert({n.matmul.a, n.matmul.b, n.matmul.c});
      kept_out.insert({n.matmul.a, n.matmul.b, n.matmul.c});
    } else if (n.kind == NodeKind::Compute) {
      const ir::Statement& s = k.function->statements.at(n.statement);
      for (const auto& [t, b] : n.binding) {
        if (b < 0) continue;
        if (t == s.output) {
          kept.insert(b);
          const auto& o = s.out_indices;
          const bool inner_last = !o.empty() && !o.back().has_div() && o.back().index_coeffs.size() == 1 &&
                                  o.back().index_coeffs.begin()->second == 1 && o.back().param_coeffs.empty();
          if (s.reduction != ir::Reduction::None || !inner_last) kept_out.insert(b);
          std::vector<const std::vector<ir::AffineExpr>*> reads;
          reads_of(*s.rhs, t, reads);
          if (!reads.empty()) kept_out.insert(b);
          continue;
        }
        if (n.init) continue;
        std::vector<const std::vector<ir::AffineExpr>*> reads;
        reads_of(*s.rhs, t, reads);
        if (!reads.empty()) kept_out.insert(b);  // read by a statement
        for (const auto* r : reads)
          if (!contiguous_read(s, *r)) kept.insert(b);
      }
    }
  });
  SimtDirectBuffers out;
  for (int b : copied_in) {
    if (kept.count(b)) continue;
    // an input, or a temporary an earlier kernel wrote and this one does not
    const kernel::GlobalTensor* t = k.find_tensor(k.buffers.at(b).tensor);
    if (t && (t->kind == ir::TensorKind::Input || (t->temporary && !written.count(t->name)))) out.in.insert(b);
  }
  for (int b : copied_out)
    if (!kept_out.count(b)) out.out.insert(b);
  return out;
}

unsigned simt_block_threads(const kernel::Kernel& k, const isa::GpuMachine& m, const std::set<int>& buffers, int64_t blocks) {
  unsigned threads = kSimtThreads;
  if (blocks >= int64_t(m.sm_count)) return threads;
  int64_t largest = 0;
  for (int id : buffers) largest = std::max(largest, k.buffers.at(id).elements());
  while (threads * 2 <= m.max_threads_per_block && int64_t(threads) * 2 * 4 <= largest) threads *= 2;
  return threads;
}

namespace {

void buffers_used(const Node& n, std::set<int>& out) {
  if (n.kind == NodeKind::Copy) {
    if (n.src >= 0) out.insert(n.src);
    if (n.dst >= 0) out.insert(n.dst);
  }
  if (n.kind == NodeKind::Compute)
    for (const auto& [t, b] : n.binding)
      if (b >= 0) out.insert(b);
  if (n.kind == NodeKind::Matmul) {
    out.insert(n.matmul.a);
    out.insert(n.matmul.b);
    out.insert(n.matmul.c);
  }
  for (const auto& c : n.children) buffers_used(*c, out);
  for (const auto& c : n.else_children) buffers_used(*c, out);
}

}  // namespace

std::set<int> simt_buffers_used(const Node& group) {
  std::set<int> out;
  buffers_used(group, out);
  return out;
}

GridLoops grid_loops(const Node& root) {
  GridLoops g;
  const Node* n = &root;
  while (n->kind == NodeKind::Loop && n->loop_kind == kernel::LoopKind::ParallelCores && n->parallel) {
    int64_t lo, hi;
    if (!simt::constant_expr(n->lo, &lo) || !simt::constant_expr(n->hi, &hi)) break;
    g.loops.push_back(n);
    if (n->children.size() != 1) break;
    n = n->children[0].get();
  }
  for (const Node* l : g.loops) {
    const int64_t t = std::max<int64_t>(0, (l->hi.evaluate({}) - l->lo.evaluate({}) + l->step - 1) / l->step);
    g.trips.push_back(t);
    g.blocks *= t;
  }
  return g;
}

bool simt_narrow_indices(const kernel::Kernel& k) {
  constexpr int64_t kLimit = int64_t(1) << 30;
  for (const auto& t : k.tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= std::max<int64_t>(1, d);
    if (n >= kLimit) return false;
  }
  for (const auto& b : k.buffers)
    if (b.elements() >= kLimit) return false;
  for (const auto& [p, v] : k.sizes)
    if (v >= kLimit || v <= -kLimit) return false;
  return true;
}

}  // namespace tessel::emit_cuda
