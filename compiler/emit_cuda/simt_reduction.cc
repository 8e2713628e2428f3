// Reduction nests of the SIMT walk (simt_emitter.h, emit_simt.h): a loop chain down to one
// update whose output loops go to groups of threads and whose reduced loops run over a group's
// lanes, combined by warp shuffles; and the checks that let a nest run inside a thread across an
// enclosing loop (owner_stable, outputs_private) and take its output's initialisation over.
#include <algorithm>
#include <optional>
#include <set>

#include "compiler/emit_cuda/cuda_expr.h"
#include "compiler/emit_cuda/simt_emitter.h"
#include "compiler/emit_cuda/simt_loop_chain.h"
#include "compiler/emit_cuda/simt_mapping.h"

namespace tessel::emit_cuda::simt {

using kernel::NodeKind;

namespace {

// iterations of a reduction's lane loop unrolled: their loads are independent (only the
// accumulation is a chain), so a lane keeps this many in flight
constexpr int kReductionUnroll = 8;

}  // namespace

// The shape of a reduction nest (reduction_nest): its chain split into output levels O (shared by
// threads) and reduced levels R, their dims, the one update and the lets before it in the last
// level, the update's output dims (its statement's non-reduction domain dims) and the variables
// the reduced levels bind.
struct ReductionShape {
  std::vector<ChainLevel> O, R;
  std::vector<Dim> odims, rdims;
  const Node* update = nullptr;
  const ir::Statement* s = nullptr;
  std::vector<const Node*> last_lets;
  std::vector<size_t> out_dims;
  std::set<std::string> r_vars;
};

// How a reduction nest's work is spread over the block: G threads per output (0: decided at run
// time), a column reduction (a thread per output walking its column), the reduced dims flattened
// over the lanes, and the output and reduced element counts where known.
struct LaneMapping {
  int64_t G = 0;
  int64_t split = 1;  // a column reduction's outputs per thread: the innermost output dim split this many ways
  bool contiguous = false;  // ... into consecutive runs of `split` (lane vectors), not `split` runs
  std::string acc() const { return split > 1 ? "acc_[u_]" : "acc_"; }  // the accumulator of the output at hand
  bool column = false, flat = false;
  std::optional<int64_t> outputs, reduced;
};

namespace {

// The nest at `root` as a reduction nest, or nothing where it is not one: a chain down to one
// update of a reduction whose output element depends on the O levels (and outer variables) only,
// with output dims decodable from one flat index.
std::optional<ReductionShape> reduction_shape(const kernel::Kernel& k, const Node& root) {
  const auto chain = loop_chain(root);
  const Node& last = *chain.back().loop;
  ReductionShape r;
  for (const auto& c : last.children) {
    if (c->kind == NodeKind::Let && !r.update) r.last_lets.push_back(c.get());
    else if (c->kind == NodeKind::Compute && !c->init && !r.update) r.update = c.get();
    else return std::nullopt;
  }
  if (!r.update) return std::nullopt;
  r.s = &k.function->statements.at(r.update->statement);
  if (r.s->reduction == ir::Reduction::None) return std::nullopt;
  for (const auto& l : chain) {
    if (threads_may_share(*l.loop)) r.O.push_back(l);
    else if (l.loop->rebinds_buffers) return std::nullopt;
    else r.R.push_back(l);
  }
  if (r.R.empty()) return std::nullopt;  // (no O loop: one output element, the whole block reduces it)
  r.odims = dims_of(r.O, 0, r.O.size());
  r.rdims = dims_of(r.R, 0, r.R.size());
  std::set<std::string> chain_vars = bound_in(chain);
  r.r_vars = bound_in(r.R);
  for (const Node* l : r.last_lets) r.r_vars.insert(l->var), chain_vars.insert(l->var);
  if (!bounds_independent(r.odims, chain_vars)) return std::nullopt;
  // the output element depends on O loops (and outer variables) only
  for (size_t i = 0; i < r.s->domain.size(); ++i) {
    if (r.s->domain[i].is_reduction) continue;
    std::set<std::string> used;
    expr_vars(r.update->indices.at(i), used);
    for (const auto& v : used)
      if (r.r_vars.count(v)) return std::nullopt;
    r.out_dims.push_back(i);
  }
  for (const auto& l : r.O)
    for (const Node* let : l.lets) {
      std::set<std::string> used;
      expr_vars(let->value, used);
      for (const auto& v : used)
        if (r.r_vars.count(v)) return std::nullopt;
    }
  // inner R dims bounds may read O vars, outer R vars and lets: fine (they run nested)
  return r;
}

// The group size: a warp, doubled while the outputs still give every group of the block one
// (known when the output counts are; the block has `threads` threads). A column reduction with a
// thread's worth of outputs per thread group: one thread per output, each walking its column
// (neighbouring threads read neighbouring elements; no combine). The reduced elements of one
// output, all R dims flattened over the lanes where their bounds read no R variable; a short
// reduction takes fewer lanes (at least 4 elements each, down to a thread per output: its elements
// in the interpreter's order).
LaneMapping lane_mapping(const ReductionShape& r, unsigned threads, bool one_round) {
  LaneMapping m;
  m.outputs = 1;
  for (const auto& d : r.odims) {
    const TripCount tc = trip_count(d);
    m.outputs = tc.exact && m.outputs ? std::optional<int64_t>(*m.outputs * *tc.exact) : std::nullopt;
  }
  m.column = ir::is_column_reduction(*r.s) && m.outputs && *m.outputs >= int64_t(threads) / 2;
  m.flat = r.rdims.size() > 1 && bounds_independent(r.rdims, r.r_vars);
  m.reduced = 1;
  for (size_t i = m.flat ? 0 : r.rdims.size() - 1; i < r.rdims.size(); ++i) {
    const TripCount tc = trip_count(r.rdims[i]);
    const std::optional<int64_t> c = tc.exact ? tc.exact : tc.bound;
    m.reduced = c && m.reduced ? std::optional<int64_t>(*m.reduced * *c) : std::nullopt;
  }
  int64_t lanes_cap = int64_t(threads);
  if (m.reduced) {
    lanes_cap = 1;
    while (lanes_cap < int64_t(threads) && lanes_cap * 2 * 4 <= *m.reduced) lanes_cap *= 2;
  }
  // a 16-bit product rounds at every step: one thread per output, in the interpreter's order (a
  // tree of partial products rounds differently: conformance reduce.prod_2d_lead.f16, 7 of 32
  // outputs one f16 step off on sm90)
  if (m.column || ir::is_ordered_product(*r.s)) {
    m.G = 1;
  } else if (one_round && m.outputs) {  // every output at once: G lanes each, G a power of two
    m.G = 1;
    while (m.G * 2 * *m.outputs <= int64_t(threads)) m.G *= 2;
    m.G = std::min(m.G, lanes_cap);
  } else if (m.outputs || lanes_cap < 32) {
    m.G = 32;
    if (m.outputs)
      while (m.G < int64_t(threads) && *m.outputs * 2 * m.G <= int64_t(threads)) m.G *= 2;
    m.G = std::min(m.G, lanes_cap);
  }
  return m;
}

}  // namespace

// A reduction nest: a loop chain down to one update, whose loops are either shared by threads
// (the output's loops, O) or not (R: they walk the reduced elements of one output). O loops go
// to groups of G threads (a warp or more), R loops run inside the group with the innermost
// strided over its lanes; lanes combine by warp shuffles (xor butterfly, then warps in order
// through shared memory), and lane 0 folds the result into the output once. The order is fixed
// (deterministic) but is not the interpreter's: float sums are reassociated.
//
// With `outer` (a sequential loop whose body is Lets, copies that emit no code and this nest,
// loop_private_candidate), the nest is emitted only when a thread owns each output over the whole
// loop and a thread reduces an output alone (G = 1): the loop then runs inside the thread, around
// the reduced loops, so an output's updates keep their order and its loads of every iteration
// are in flight together; otherwise nothing is emitted and false returned.
bool SimtEmitter::reduction_nest(const Node& root, const std::string& pad, const Node* outer) {
  const std::optional<ReductionShape> shape = reduction_shape(k, root);
  if (!shape) return false;
  const ReductionShape& r = *shape;
  const ir::Statement& s = *r.s;
  LaneMapping lanes = lane_mapping(r, threads, finalising);
  if (lanes.column) column_split(r, lanes);
  const int64_t S = lanes.split;
  if (outer && !(lanes.G == 1 && owner_stable(r.odims, s, *r.update) && outputs_private(r.O, s, *r.update, r.out_dims))) return false;
  const bool fuse_init = outer && pending_init && initialises(*pending_init, r.O, *r.update, r.out_dims);
  if (fuse_init) init_folded = true;
  ++reductions;
  const std::string p1 = pad + "  ";
  os << pad << "{ /* reduction over lanes: " << r.O.size() << " output loop(s) to thread groups, " << r.R.size()
     << " reduced loop(s) over the group's lanes" << (outer ? ", inside the thread: the enclosing loop over " + outer->var : "")
     << " */\n";
  count_dims(r.odims, "o", p1);
  const std::string VT = value_type(s.acc_type);
  if (lanes.column) {
    os << p1 << "constexpr int G_ = 1; /* column reduction: a thread per output"
       << (S > 1 && lanes.contiguous ? ", " + std::to_string(S) + " consecutive ones (a lane vector along the innermost output loop)"
           : S > 1                  ? ", " + std::to_string(S) + " of them (the innermost output loop split " + std::to_string(S) + " ways)"
                                    : "")
       << " */\n";
  } else if (lanes.G) {
    os << p1 << "constexpr int G_ = " << lanes.G << ";"
       << (lanes.G < 32 ? " /* a short reduction: " + std::to_string(*lanes.reduced) + " element(s) per output */" : "") << "\n";
  } else {
    os << p1 << "int G_ = 32;\n"
       << p1 << "while (G_ < (int)blockDim.x && totalo_ * 2 * G_ <= (" + ix + ")blockDim.x) G_ *= 2;\n";
  }
  os << p1 << "const int lane_ = threadIdx.x % G_, group_ = threadIdx.x / G_, groups_ = blockDim.x / G_;\n";
  const std::string per = S > 1 ? " / " + std::to_string(S) : "";
  os << p1 << "for (" << ix << " base_ = 0; base_ < totalo_" << per << "; base_ += groups_) {\n"
     << p1 << "  const " << ix << " o_ = base_ + group_;\n";
  if (S > 1)
    os << p1 << "  " << VT << " acc_[" << S << "];\n"
       << p1 << "  for (int u_ = 0; u_ < " << S << "; ++u_) acc_[u_] = " << reduction_identity(s.reduction, s.acc_type) << ";\n";
  else
    os << p1 << "  " << VT << " acc_ = " << reduction_identity(s.reduction, s.acc_type) << ";\n";
  os << p1 << "  bool real_ = o_ < totalo_" << per << ";\n"
     << p1 << "  if (real_) {\n";
  const std::string p3 = p1 + "    ";
  const std::string real = decode_dims(r.odims, "o", "o_", p3, S);
  os << p3 << "real_ = " << real << ";\n" << p3 << "if (real_) {\n";
  for (const auto& l : r.O)
    for (const Node* let : l.lets) thread_node(*let, p3);
  reduce_over_lanes(r, lanes, outer, p3);
  os << p3 << "}\n" << p1 << "  }\n";
  combine_lanes(r, lanes, p1);
  fold_into_output(r, lanes, fuse_init, p1);
  os << p1 << "}\n" << pad << "}\n";
  if (!outer && owner_stable(r.odims, s, *r.update))
    barrier_left_to_loop = true;
  else
    os << pad << "__syncthreads();\n";
  return true;
}

// The reduced loops of one output into acc_ (inside `outer`, where given, per thread): all R dims
// flattened over the lanes, or the outer ones whole and the innermost strided by lane.
void SimtEmitter::reduce_over_lanes(const ReductionShape& r, const LaneMapping& lanes, const Node* outer, const std::string& p3) {
  const ir::Statement& s = *r.s;
  const std::string VT = value_type(s.acc_type);
  std::string p = p3;
  if (outer) {
    os << p << "for (" << ix << " " << outer->var << " = " << ie(outer->lo) << "; " << outer->var << " < " << ie(outer->hi) << "; "
       << outer->var << " += " << outer->step << L << ") { /* " << kernel::loop_kind_name(outer->loop_kind) << ", per thread */\n";
    p += "  ";
    for (const auto& c : outer->children)
      if (c->kind == NodeKind::Let) thread_node(*c, p);
  }
  if (lanes.flat) {
    count_dims(r.rdims, "r", p);
    os << p << "#pragma unroll " << kReductionUnroll << "\n" << p << "for (" << ix << " f_ = lane_; f_ < totalr_; f_ += G_) {\n";
    p += "  ";
    const std::string rreal = decode_dims(r.rdims, "r", "f_", p);
    if (rreal != "true") os << p << "if (!(" << rreal << ")) continue;\n";
    for (const ChainLevel& l : r.R)
      for (const Node* let : l.lets) thread_node(*let, p);
  }
  for (size_t i = 0; i < (lanes.flat ? 0 : r.rdims.size()); ++i) {
    const Dim& d = r.rdims[i];
    const bool inner = i + 1 == r.rdims.size();
    const std::string v = d.point ? d.point->var : d.loop->var;
    if (inner) os << p << "#pragma unroll " << kReductionUnroll << "\n";
    os << p << "for (" << ix << " " << v << " = " << ie(d.lo) << (inner ? " + lane_ * " + std::to_string(d.step) + L : "") << "; "
       << v << " < " << ie(d.hi) << "; " << v << " += " << d.step << L << (inner ? " * G_" : "") << ") {\n";
    p += "  ";
    if (d.point)
      os << p << "const " << ix << " " << d.loop->var << " = " << ie(d.lo) << " + " << tile_index(v + " - " + ie(d.lo), d.loop->step)
         << " * " << d.loop->step << L << ";\n";
    for (const ChainLevel& l : r.R)
      if (l.loop == d.loop || l.loop == d.point)
        for (const Node* let : l.lets) thread_node(*let, p);
  }
  for (const Node* let : r.last_lets) thread_node(*let, p);
  const std::string acc = lanes.acc();
  // the thread's outputs: their loads and updates side by side (a lane vector's reads loaded once)
  std::string q = p;
  if (lanes.contiguous) {
    load_lane_vectors(r.odims, "o", lanes.split, *r.update, s, p);
    q = open_split_loop(r.odims, "o", lanes.split, p + "  ", true);
  } else if (lanes.split > 1) {
    q = open_split_loop(r.odims, "o", lanes.split, p);
  }
  os << q << "{\n";
  bind_indices(*r.update, s, q + "  ");
  os << q << "  const " << VT << " v_ = (" << VT << ")" << update_value(*r.update, s) << ";\n"
     << q << "  " << acc << " = " << reduce_values(s.reduction, s.acc_type, acc, "v_") << ";\n"
     << q << "}\n";
  if (lanes.contiguous) {
    os << p << "  }\n" << p << "}\n";
    lane_vectors.clear();
  } else if (lanes.split > 1) {
    os << p << "}\n";
  }
  for (size_t i = 0; i < (lanes.flat ? 1 : r.rdims.size()) + (outer ? 1 : 0); ++i) {
    p.resize(p.size() - 2);
    os << p << "}\n";
  }
}

// The group's lanes combined into lane 0's acc_: a butterfly inside each warp (or inside a group
// smaller than a warp), then the group's warps in order through red_smem_.
void SimtEmitter::combine_lanes(const ReductionShape& r, const LaneMapping& lanes, const std::string& p1) {
  const ir::Statement& s = *r.s;
  const DType T = s.acc_type;
  const std::string VT = value_type(T);
  if (lanes.split > 1) return;  // (a thread per output: nothing to combine)
  if (lanes.G == 0 || lanes.G >= 32)
    os << p1 << "  for (int s_ = 16; s_ > 0; s_ >>= 1) { const " << VT << " w_ = __shfl_xor_sync(0xffffffffu, acc_, s_); acc_ = "
       << reduce_values(s.reduction, T, "acc_", "w_") << "; }\n";
  else if (lanes.G > 1)  // groups inside a warp: xor offsets below G stay in the group
    os << p1 << "  for (int s_ = " << lanes.G / 2 << "; s_ > 0; s_ >>= 1) { const " << VT
       << " w_ = __shfl_xor_sync(0xffffffffu, acc_, s_); acc_ = " << reduce_values(s.reduction, T, "acc_", "w_") << "; }\n";
  os
     << p1 << "  if (G_ > 32) {\n"
     << p1 << "    __syncthreads();\n"
     << p1 << "    if (threadIdx.x % 32 == 0) ((" << VT << "*)red_smem_)[threadIdx.x / 32] = acc_;\n"
     << p1 << "    __syncthreads();\n"
     << p1 << "    if (lane_ == 0) for (int w_ = 1; w_ < G_ / 32; ++w_) { const " << VT << " x_ = ((" << VT
     << "*)red_smem_)[threadIdx.x / 32 + w_]; acc_ = " << reduce_values(s.reduction, T, "acc_", "x_") << "; }\n"
     << p1 << "  }\n";
}

// Lane 0 folds acc_ into its output element once (or stores it, the output's initialisation
// folded in).
void SimtEmitter::fold_into_output(const ReductionShape& r, const LaneMapping& lanes, bool fuse_init, const std::string& p1) {
  const ir::Statement& s = *r.s;
  const DType T = s.acc_type;
  const std::string VT = value_type(T);
  os << p1 << "  if (lane_ == 0 && real_) {\n";
  std::string p = p1 + "    ";
  decode_dims(r.odims, "o", "o_", p, lanes.split);
  for (const auto& l : r.O)
    for (const Node* let : l.lets) thread_node(*let, p);
  const std::string acc = lanes.acc();
  if (lanes.split > 1) p = open_split_loop(r.odims, "o", lanes.split, p, lanes.contiguous);
  bind_indices(*r.update, s, p, &r.out_dims);
  const std::string lhs = access(s.output, s.out_indices, r.update->binding);
  if (fuse_init)  // the whole reduction of the output: its identity need not be stored first
    os << p << lhs << " = " << store_value(T, acc) << "; /* the output's initialisation folded in */\n";
  else
    os << p << "const " << VT << " cur_ = " << load_value(T, lhs) << ";\n"
       << p << lhs << " = " << store_value(T, reduce_values(s.reduction, T, "cur_", acc)) << ";\n";
  if (lanes.split > 1) os << p1 << "    }\n";
  os << p1 << "  }\n";
}

// Outputs of a column reduction one thread reduces together, where no let of the nest reads the
// innermost output dim's variable (they are evaluated once per thread, outside the split): a lane
// vector of consecutive outputs whose contiguous reads are one wide load each
// (lane_vector_width), else the innermost output dim split inner_split ways (its index arithmetic
// shared, neighbouring threads still on neighbouring elements).
void SimtEmitter::column_split(const ReductionShape& r, LaneMapping& lanes) const {
  lanes.split = 1;
  lanes.contiguous = false;
  const Dim& d = r.odims.back();
  std::set<std::string> inner{d.loop->var};
  if (d.point) inner.insert(d.point->var);
  std::set<std::string> used;
  auto read = [&](const Node* let) { expr_vars(let->value, used); };
  for (const auto& l : r.O) std::for_each(l.lets.begin(), l.lets.end(), read);
  for (const auto& l : r.R) std::for_each(l.lets.begin(), l.lets.end(), read);
  std::for_each(r.last_lets.begin(), r.last_lets.end(), read);
  for (const auto& v : inner)
    if (used.count(v)) return;
  lanes.split = lane_vector_width(r.odims, *r.update, *r.s);
  lanes.contiguous = lanes.split > 1;
  if (!lanes.contiguous) lanes.split = inner_split(r.odims);
}

// Inside a sequential loop whose body is this reduction nest alone (owned_loop_vars: the loop's
// variable and the lets of its body), a thread finds the same outputs in every iteration when
// the output dims' bounds read none of those variables and the update reads no element of its
// own output: then only it touches its outputs across iterations and the block barrier between
// iterations can go (one after the loop instead), so a thread's loads of successive iterations
// overlap.
bool SimtEmitter::owner_stable(const std::vector<Dim>& odims, const ir::Statement& s, const Node& update) const {
  if (owned_loop_vars.empty() || !bounds_independent(odims, owned_loop_vars)) return false;
  std::vector<const std::vector<ir::AffineExpr>*> reads;
  reads_of(*s.rhs, s.output, reads);
  return reads.empty() && update.kind == NodeKind::Compute;
}

// Whether `init` (a nest of init statements) sets exactly the outputs a reduction nest with output
// levels O updates, on the same loops: its chain is O's loops (same variables and bounds, no
// lets) down to one init of the update's statement at the update's output indices.
bool SimtEmitter::initialises(const Node& init, const std::vector<ChainLevel>& O, const Node& update, const std::vector<size_t>& out_dims) {
  const auto chain = loop_chain(init);
  if (chain.size() != O.size()) return false;
  for (size_t i = 0; i < O.size(); ++i) {
    const Node& a = *chain[i].loop;
    const Node& b = *O[i].loop;
    if (a.var != b.var || a.step != b.step || ie(a.lo) != ie(b.lo) || ie(a.hi) != ie(b.hi) || !chain[i].lets.empty() ||
        !O[i].lets.empty())
      return false;
  }
  const Node& last = *chain.back().loop;
  if (last.children.size() != 1) return false;
  const Node& c = *last.children[0];
  if (c.kind != NodeKind::Compute || !c.init || c.statement != update.statement || c.indices.size() != out_dims.size()) return false;
  for (size_t j = 0; j < out_dims.size(); ++j)
    if (ie(c.indices[j]) != ie(update.indices.at(out_dims[j]))) return false;
  return true;
}

// Whether the output element and the O levels' lets read none of owned_loop_vars (so one
// decoding of the outputs serves every iteration of the enclosing loop).
bool SimtEmitter::outputs_private(const std::vector<ChainLevel>& O, const ir::Statement& s, const Node& update,
                     const std::vector<size_t>& out_dims) const {
  std::set<std::string> used;
  for (const auto& l : O)
    for (const Node* let : l.lets) expr_vars(let->value, used);
  size_t j = 0;
  for (size_t i = 0; i < s.domain.size(); ++i)
    if (!update.init || !s.domain[i].is_reduction) {
      if (std::count(out_dims.begin(), out_dims.end(), i)) expr_vars(update.indices.at(j), used);
      ++j;
    }
  for (const auto& v : used)
    if (owned_loop_vars.count(v)) return false;
  return true;
}

}  // namespace tessel::emit_cuda::simt
