#include "compiler/emit_cuda/emit_simt.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <set>

#include "compiler/emit_cuda/cuda_expr.h"
#include "compiler/emit_cuda/simt_emitter.h"
#include "compiler/emit_cuda/simt_finalise.h"
#include "compiler/emit_cuda/simt_loop_chain.h"
#include "compiler/emit_cuda/simt_mapping.h"
#include "compiler/kernel/divisibility.h"
#include "isa/base/error.h"

namespace tessel::emit_cuda {

namespace simt {

using kernel::NodeKind;

std::string SimtEmitter::linear(int buffer, const std::string& tname, const std::vector<std::string>& g) {
  std::string s = "0" + L;
  if (buffer >= 0) {
    const auto& b = k.buffers.at(buffer);
    for (size_t d = 0; d < g.size(); ++d) {
      const int64_t stride = d + 1 == g.size() ? row_pitch(b) : b.extents[d];
      s = "(" + s + " * " + std::to_string(stride) + L + " + (" + g[d] + " - " + ie(b.offset[d]) + "))";
    }
  } else {
    const auto& t = tensor(tname);
    for (size_t d = 0; d < g.size(); ++d) s = "(" + s + " * " + std::to_string(t.shape[d]) + L + " + " + g[d] + ")";
  }
  return s;
}

std::string SimtEmitter::access(const std::string& tname, const std::vector<ir::AffineExpr>& idx, const std::map<std::string, int>& binding) {
  auto it = binding.find(tname);
  const int b = it == binding.end() ? -1 : it->second;
  std::vector<std::string> g;
  for (const auto& e : idx) g.push_back(affine(e));
  if (b >= 0 && direct.count(b)) return direct_read(tname, idx, g);
  if (b >= 0 && direct_out.count(b)) return "t_" + tname + "[" + linear(-1, tname, g) + "]";
  const std::string el = storage(b, tname) + "[" + linear(b, tname, g) + "]";
  return b < 0 && coherent.count(tname) ? "__ldcg(&" + el + ")" : el;  // coherent tensors are only read
}

// An element of a copy-in box read from the tensor itself: zero outside the tensor, as the copy
// would have filled it (folded padding reads there). A dim indexed by one index variable alone
// is inside the tensor (its range is inferred from, or checked against, the dimension).
std::string SimtEmitter::direct_read(const std::string& tname, const std::vector<ir::AffineExpr>& idx, const std::vector<std::string>& g) {
  const auto& t = tensor(tname);
  const std::string inside = direct_inside(tname, idx, g);
  const std::string at = "t_" + tname + "[" + linear(-1, tname, g) + "]";
  const std::string el = coherent.count(tname) ? "__ldcg(&" + at + ")" : at;
  if (inside.empty()) return el;
  return "((" + inside + ") ? " + el + " : " + store_value(t.dtype, "0") + ")";
}

std::string SimtEmitter::direct_inside(const std::string& tname, const std::vector<ir::AffineExpr>& idx, const std::vector<std::string>& g) {
  const auto& t = tensor(tname);
  std::string inside;
  for (size_t d = 0; d < g.size(); ++d) {
    const auto& e = idx[d];
    const bool bare = e.is_affine() && e.param_coeffs.empty() && e.constant == 0 && e.index_coeffs.size() == 1 &&
                      e.index_coeffs.begin()->second == 1;
    if (bare && reading) {
      const ir::IndexVar* v = reading->find_index(e.index_coeffs.begin()->first);
      bool within = false;
      try {
        within = v && v->lo.evaluate({}, k.sizes) >= 0 && v->hi.evaluate({}, k.sizes) <= t.shape[d];
      } catch (...) {  // a size the kernel does not bind: keep the guard
      }
      if (within) continue;
    }
    inside += std::string(inside.empty() ? "" : " && ") + "(unsigned long long)(" + g[d] + ") < " + std::to_string(t.shape[d]) + "ULL";
  }
  return inside;
}

// Whether the code so far ends with a block barrier (a second one right after it is redundant).
bool SimtEmitter::after_barrier() const {
  const std::string text = os.str();
  const size_t end = text.find_last_not_of(" \n");
  static const std::string kBarrier = "__syncthreads();";
  return end != std::string::npos && end + 1 >= kBarrier.size() && text.compare(end + 1 - kBarrier.size(), kBarrier.size(), kBarrier) == 0;
}

// Binds i_<index> for the statement's domain indices the node gives (only `dims` when set).
void SimtEmitter::bind_indices(const Node& n, const ir::Statement& s, const std::string& pad, const std::vector<size_t>* dims) {
  std::vector<size_t> vars;
  for (size_t i = 0; i < s.domain.size(); ++i)
    if (!n.init || !s.domain[i].is_reduction) vars.push_back(i);
  TESSEL_CHECK(vars.size() == n.indices.size(), "emit_cuda: compute node of " + s.name + " has the wrong arity");
  for (size_t j = 0; j < vars.size(); ++j)
    if (!dims || std::count(dims->begin(), dims->end(), vars[j]))
      os << pad << "const " << ix << " i_" << s.domain[vars[j]].name << " = " << ie(n.indices[j]) << ";\n";
}

// The statement's right-hand side for one instance (its indices bound).
std::string SimtEmitter::update_value(const Node& n, const ir::Statement& s) {
  ValueContext ctx;
  ctx.sizes = &k.sizes;
  ctx.affine = [&](const ir::AffineExpr& e) { return affine(e); };
  ctx.access = [&](const ir::Expr& e) {
    auto held = lane_vectors.find(&e);  // element u_ of the thread's lane vector
    if (held != lane_vectors.end()) return held->second + "[u_]";
    return access(e.name, e.indices, n.binding);
  };
  reading = &s;
  std::string v = value_expr(*s.rhs, ctx);
  reading = nullptr;
  return v;
}

void SimtEmitter::compute(const Node& n, const std::string& pad) {
  const ir::Statement& s = k.function->statements.at(n.statement);
  os << pad << "{\n";
  bind_indices(n, s, pad + "  ");
  const std::string lhs = access(s.output, s.out_indices, n.binding);
  const DType T = s.acc_type;
  if (n.init) {
    os << pad << "  " << lhs << " = " << store_value(T, reduction_identity(s.reduction, T)) << ";\n";
  } else {
    const std::string rhs = update_value(n, s);
    if (s.reduction == ir::Reduction::None) {
      os << pad << "  " << lhs << " = " << store_value(T, "(" + value_type(T) + ")" + rhs) << ";\n";
    } else {
      os << pad << "  { const " << value_type(T) << " cur_ = " << load_value(T, lhs) << ", v_ = (" << value_type(T) << ")" << rhs
         << ";\n"
         << pad << "    " << lhs << " = " << store_value(T, reduce_values(s.reduction, T, "cur_", "v_")) << "; }\n";
    }
  }
  os << pad << "}\n";
}

// A copy between a global tensor and a box, one element (or 16-byte chunk) per thread and pass. A
// copy in from global memory whose threads each make several passes loads a batch of them into
// registers before storing any (kCopyBatch16 chunks, kCopyBatchScalar elements): the loads of a
// batch are in flight together, where a load, store, load, ... loop has one per thread in flight.
void SimtEmitter::copy(const Node& n, const std::string& pad) {
  constexpr int64_t kCopyBatch16 = 8, kCopyBatchScalar = 16;  // registers: 32 (uint4) / 16
  const bool out = n.dst < 0;
  const kernel::Buffer& box = k.buffers.at(out ? n.src : n.dst);
  const auto& t = tensor(n.tensor);
  const size_t r = box.extents.size();
  // 128-bit accesses between a global tensor and a box where a chunk of V elements along the
  // last dimension is 16-byte aligned on both sides and wholly inside or outside the tensor: the
  // tensor's row and the box's row are multiples of V and the box's offset along it is one
  // (kernel::divisor; the buffer starts 16-byte aligned)
  const int64_t V = 16 / int64_t(dtype_bytes(box.dtype));
  const int64_t off = r >= 1 ? kernel::divisor(box.offset.back(), divisors) : 1;
  const bool vec = r >= 1 && (out || n.src < 0) && V >= 2 && box.extents.back() % V == 0 && t.shape.back() % V == 0 &&
                   (off == 0 || off % V == 0);
  const int64_t count = box.elements() / (vec ? V : 1), passes = (count + threads - 1) / threads;
  const int64_t batch = out || n.src >= 0 ? 1 : std::min(passes, vec ? kCopyBatch16 : kCopyBatchScalar);
  if (!after_barrier()) os << pad << "__syncthreads();\n";
  const std::string what = std::string("copy ") + (out ? "out " : "in ") + box.name + (vec ? ", 16 B per thread" : "");
  const std::string body_pad = batch > 1 ? pad + "    " : pad + "  ";  // the batch's loops indent the element's code
  if (batch > 1) {
    os << pad << "for (" << ix << " e0_ = threadIdx.x; e0_ < " << count << L << "; e0_ += " << batch
       << " * blockDim.x) { /* " << what << ", " << batch << " loads in flight */\n";
    os << pad << "  " << (vec ? std::string("uint4") : storage_type(box.dtype)) << " v_[" << batch << "];\n";
  } else {
    os << pad << "for (" << ix << " e_ = threadIdx.x; e_ < " << count << L << "; e_ += blockDim.x) { /* " << what << " */\n";
  }
  const std::string ux = narrow ? "unsigned" : ix;
  std::vector<std::string> g(r);
  auto coords = [&](const std::string& p) {  // y<d> of element (chunk) e_
    std::ostringstream c;
    c << p << ux << " r_ = e_;\n";
    for (int d = int(r) - 1; d >= 0; --d) {
      const int64_t per = vec && d == int(r) - 1 ? V : 1;
      c << p << "const " << ix << " y" << d << " = " << ie(box.offset[d]) << " + (" << ix << ")(r_ % " << box.extents[d] / per << L
        << ")" << (per > 1 ? " * " + std::to_string(per) : "") << "; r_ /= " << box.extents[d] / per << L << ";\n";
    }
    return c.str();
  };
  std::string in_tensor = "true", in_src = "true";
  for (size_t d = 0; d < r; ++d) {
    g[d] = "y" + std::to_string(d);
    if (!(vec && d + 1 == r && box.extents[d] == t.shape[d] && off == 0))
      in_tensor += " && " + g[d] + " >= 0 && " + g[d] + " < " + std::to_string(t.shape[d]) + L;
  }
  std::string load, store;  // the source value of element e_ (in); the statement writing `value` (both)
  const std::string dst_lin = linear(box.id, n.tensor, g);
  if (vec) {
    const std::string b = "*(uint4*)&" + storage(box.id, n.tensor) + "[" + dst_lin + "]";
    const std::string gl = "*(uint4*)&t_" + n.tensor + "[" + linear(-1, n.tensor, g) + "]";
    const std::string gl_in = coherent.count(n.tensor) ? "__ldcg((const uint4*)&t_" + n.tensor + "[" + linear(-1, n.tensor, g) + "])" : gl;
    if (out) store = "if (" + in_tensor + ") " + gl + " = " + b + ";";
    else load = "(" + in_tensor + ") ? " + gl_in + " : make_uint4(0, 0, 0, 0)", store = b + " = @;";
  } else if (out) {
    store = "if (" + in_tensor + ") t_" + n.tensor + "[" + linear(-1, n.tensor, g) + "] = " + storage(box.id, n.tensor) + "[" + dst_lin + "];";
  } else {
    if (n.src >= 0) {
      const kernel::Buffer& sb = k.buffers.at(n.src);
      for (size_t d = 0; d < r; ++d) {
        std::string rel = "(" + g[d] + " - " + ie(sb.offset[d]) + ")";
        in_src += " && " + rel + " >= 0 && " + rel + " < " + std::to_string(sb.extents[d]) + L;
      }
    }
    const std::string src = storage(n.src, n.tensor) + "[" + linear(n.src, n.tensor, g) + "]";
    load = "(" + in_tensor + " && " + in_src + ") ? " + (n.src < 0 && coherent.count(n.tensor) ? "__ldcg(&" + src + ")" : src) + " : " +
           store_value(box.dtype, "0");
    store = storage(box.id, n.tensor) + "[" + dst_lin + "] = @;";
  }
  auto with = [](std::string text, const std::string& value) { return text.replace(text.find('@'), 1, value); };
  if (batch == 1) {
    os << coords(body_pad) << body_pad << (out ? store : with(store, load)) << "\n";
  } else {
    for (const bool storing : {false, true}) {
      os << pad << "  #pragma unroll\n" << pad << "  for (int u_ = 0; u_ < " << batch << "; ++u_) {\n";
      os << pad << "    const " << ix << " e_ = e0_ + u_ * (" << ix << ")blockDim.x;\n" << pad << "    if (e_ < " << count << L
         << ") {\n";
      os << coords(body_pad + "  ") << body_pad << "  " << (storing ? with(store, "v_[u_]") : "v_[u_] = " + load + ";") << "\n";
      os << pad << "    }\n" << pad << "  }\n";
    }
  }
  os << pad << "}\n" << pad << "__syncthreads();\n";
}

void SimtEmitter::matmul(const kernel::MatmulOp& m, const std::string& pad) {
  const auto& A = k.buffers.at(m.a);
  const auto& B = k.buffers.at(m.b);
  const auto& C = k.buffers.at(m.c);
  // element coordinates of A[m,k], B[k,n], C[m,n] over frag_m / frag_n / frag_k (img2col views too)
  auto at = [&](const kernel::Buffer& b, const std::vector<Expr>& coords) {
    std::vector<std::string> g;
    for (const auto& c : coords) g.push_back(ie(c));
    return buffer_ptr.at(b.id) + "[" + linear(b.id, b.tensor, g) + "]";
  };
  const bool fl = dtype_is_float(m.acc_type);
  const std::string acc = value_type(m.acc_type);
  os << pad << "{ /* matmul fragment " << m.unit_m << "x" << m.unit_n << "x" << m.unit_k << (m.img2col ? ", img2col view" : "")
     << " (SIMT) */\n"
     << pad << "  const " << ix << " em = " << ie(m.em) << ", en = " << ie(m.en) << ", ek = " << ie(m.ek) << ";\n"
     << pad << "  for (" << ix << " e_ = threadIdx.x; e_ < em * en; e_ += blockDim.x) {\n"
     << pad << "    const " << ix << " frag_m = " << ie(m.m0) << " + e_ / en, frag_n = " << ie(m.n0) << " + e_ % en;\n"
     << pad << "    " << acc << " s_ = " << load_value(m.acc_type, at(C, m.c_coords)) << ";\n"
     << pad << "    for (" << ix << " fk = 0; fk < ek; ++fk) {\n"
     << pad << "      const " << ix << " frag_k = " << ie(m.k0) << " + fk;\n"
     << pad << "      const " << acc << " a_ = (" << acc << ")" << load_value(A.dtype, at(A, m.a_coords)) << ", b_ = (" << acc << ")"
     << load_value(B.dtype, at(B, m.b_coords)) << ";\n";
  if (fl)
    os << pad << "      s_ = s_ + a_ * b_;\n";
  else
    os << pad << "      s_ = (" << acc << ")((long long)s_ + (long long)a_ * (long long)b_);\n";
  os << pad << "    }\n"
     << pad << "    " << at(C, m.c_coords) << " = " << store_value(C.dtype, "s_") << ";\n"
     << pad << "  }\n"
     << pad << "}\n"
     << pad << "__syncthreads();\n";
}

// Declares n<i>_ / lo<i>_ and the flat trip count `total` of `dims`; then, inside a loop that sets
// `flat`, decode_dims binds their variables and gives the condition that the iteration is real
// (for dims counted by an upper bound; "true" otherwise).
void SimtEmitter::count_dims(const std::vector<Dim>& dims, const std::string& tag, const std::string& pad) {
  std::string total = "1" + L;
  for (size_t i = 0; i < dims.size(); ++i) {
    const Dim& d = dims[i];
    const std::string id = tag + std::to_string(i);
    const TripCount tc = trip_count(d);
    os << pad << "const " << ix << " lo" << id << "_ = " << ie(d.lo) << ";\n";
    if (tc.exact || tc.bound)
      os << pad << "constexpr " << ix << " n" << id << "_ = " << (tc.exact ? *tc.exact : *tc.bound) << ";\n";
    else
      os << pad << "const " << ix << " n" << id << "_ = (" << ie(d.hi) << " - lo" << id << "_ + " << d.step - 1 << L << ") / " << d.step
         << L << ";\n";
    total += " * (n" + id + "_ > 0 ? n" + id + "_ : 0" + L + ")";
  }
  os << pad << "const " << ix << " total" << tag << "_ = " << total << ";\n";
}

// The flat index is non-negative: with 32-bit indices it is decoded as unsigned, whose division
// and remainder by a constant are a multiply-high and a shift (signed ones need sign fix-ups).
// With `split` > 1 the innermost dim (an exact count n, a multiple of split) is decoded only to
// its residue q_ in [0, n / split): the thread then runs the body for q_ + u * n / split, u in
// [0, split) (split_dim_value), so one decoding serves `split` iterations and neighbouring
// threads still touch neighbouring elements.
std::string SimtEmitter::decode_dims(const std::vector<Dim>& dims, const std::string& tag, const std::string& flat, const std::string& pad,
                        int64_t split) {
  const std::string ux = narrow ? "unsigned" : ix;
  os << pad << ux << " r" << tag << "_ = " << flat << ";\n";
  std::string real = "true";
  for (int i = int(dims.size()) - 1; i >= 0; --i) {
    const Dim& d = dims[i];
    const std::string id = tag + std::to_string(i);
    const std::string v = d.point ? d.point->var : d.loop->var;
    const std::string n = "(" + ux + ")n" + id + "_";
    if (split > 1 && i + 1 == int(dims.size())) {
      os << pad << "const " << ix << " q" << tag << "_ = (" << ix << ")(r" << tag << "_ % (" << n << " / " << split << "u)); r" << tag
         << "_ /= " << n << " / " << split << "u;\n";
      continue;
    }
    os << pad << "const " << ix << " " << v << " = lo" << id << "_ + (" << ix << ")(r" << tag << "_ % " << n << ") * " << d.step << L
       << "; r" << tag << "_ /= " << n << ";\n";
    tile_of_point(d, id, pad);
    const TripCount tc = trip_count(d);
    if (!tc.exact && tc.bound) real += " && " + v + " < " + ie(d.hi);
  }
  return real;
}

void SimtEmitter::tile_of_point(const Dim& d, const std::string& id, const std::string& pad) {
  if (d.point)
    os << pad << "const " << ix << " " << d.loop->var << " = lo" << id << "_ + " << tile_index(d.point->var + " - lo" + id + "_", d.loop->step)
       << " * " << d.loop->step << L << ";\n";
}

// The unrolled loop over the `split` iterations of the innermost dim (decode_dims with split),
// opened at `pad` and binding that dim's variable for the u_-th; the loop's body indentation.
std::string SimtEmitter::open_split_loop(const std::vector<Dim>& dims, const std::string& tag, int64_t split, const std::string& pad,
                                         bool contiguous) {
  os << pad << "#pragma unroll\n" << pad << "for (int u_ = 0; u_ < " << split << "; ++u_) {\n";
  const std::string p = pad + "  ";
  const Dim& d = dims.back();
  const std::string id = tag + std::to_string(dims.size() - 1);
  const std::string v = d.point ? d.point->var : d.loop->var;
  if (contiguous)
    os << p << "const " << ix << " " << v << " = lo" << id << "_ + (q" << tag << "_ * " << split << " + u_) * " << d.step << L << ";\n";
  else
    os << p << "const " << ix << " " << v << " = lo" << id << "_ + (q" << tag << "_ + u_ * (n" << id << "_ / " << split << ")) * "
       << d.step << L << ";\n";
  tile_of_point(d, id, p);
  return p;
}

// How many iterations of the innermost mapped dim one thread runs per decoding: 4 or 2 where the
// dims' counts are exact, the innermost is a multiple of it and the block still has an iteration
// for every thread.
int64_t SimtEmitter::inner_split(const std::vector<Dim>& dims) const {
  int64_t total = 1;
  for (const auto& d : dims) {
    const TripCount tc = trip_count(d);
    if (!tc.exact) return 1;
    total *= *tc.exact;
  }
  const int64_t n = *trip_count(dims.back()).exact;
  for (int64_t s : {4, 2})
    if (n % s == 0 && total / s >= int64_t(threads)) return s;
  return 1;
}

void SimtEmitter::thread_node(const Node& n, const std::string& pad) {
  switch (n.kind) {
    case NodeKind::Block:
      for (const auto& c : n.children) thread_node(*c, pad);
      return;
    case NodeKind::Loop:
      os << pad << "for (" << ix << " " << n.var << " = " << ie(n.lo) << "; " << n.var << " < " << ie(n.hi) << "; "
         << n.var << " += " << n.step << L << ") {\n";
      for (const auto& c : n.children) thread_node(*c, pad + "  ");
      os << pad << "}\n";
      return;
    case NodeKind::If:
      os << pad << "if (" << ie(n.cond) << ") {\n";
      for (const auto& c : n.children) thread_node(*c, pad + "  ");
      if (!n.else_children.empty()) {
        os << pad << "} else {\n";
        for (const auto& c : n.else_children) thread_node(*c, pad + "  ");
      }
      os << pad << "}\n";
      return;
    case NodeKind::Let: os << pad << n.var << " = " << ie(n.value) << ";\n"; return;
    case NodeKind::Compute: compute(n, pad); return;
    default: TESSEL_CHECK(false, "emit_cuda: copy or matmul inside a thread-parallel compute nest");
  }
}

// The longest prefix of the chain whose loops threads may share, as dims with independent bounds.
size_t SimtEmitter::thread_prefix(const std::vector<ChainLevel>& chain) {
  size_t to = 0;
  while (to < chain.size() && threads_may_share(*chain[to].loop)) ++to;
  while (to > 0) {
    std::vector<ChainLevel> mapped(chain.begin(), chain.begin() + to);
    if (bounds_independent(dims_of(chain, 0, to), bound_in(mapped))) break;
    --to;
  }
  return to;
}

void SimtEmitter::parallel_region(const std::vector<ChainLevel>& chain, size_t mapped, const std::string& pad) {
  const auto dims = dims_of(chain, 0, mapped);
  os << pad << "{ /* compute nest over threads: " << mapped << " parallel loop(s) */\n";
  count_dims(dims, "t", pad + "  ");
  // one element-wise statement: a lane vector per thread where its reads and store allow one
  const Node* one = lane_vector_candidate(chain, mapped);
  const int64_t width = one ? lane_vector_width(dims, *one, k.function->statements.at(one->statement), true) : 1;
  const int64_t split = width > 1 ? width : inner_split(dims);
  os << pad << "  for (" << ix << " it_ = threadIdx.x; it_ < totalt_" << (split > 1 ? " / " + std::to_string(split) : "")
     << "; it_ += blockDim.x) {\n";
  const std::string real = decode_dims(dims, "t", "it_", pad + "    ", split);
  std::string p = pad + "    ";
  if (real != "true") os << p << "if (!(" << real << ")) continue;\n";
  if (width > 1) {
    lane_vector_region(dims, width, *one, p);
  } else {
    if (split > 1) p = open_split_loop(dims, "t", split, p);
    for (size_t i = 0; i + 1 < mapped; ++i)
      for (const Node* let : chain[i].lets) thread_node(*let, p);
    for (const auto& c : chain[mapped - 1].loop->children) thread_node(*c, p);
    if (split > 1) os << pad << "    }\n";
  }
  os << pad << "  }\n" << pad << "}\n" << pad << "__syncthreads();\n";
}

// The loop of a block-uniform walk whose body is Lets, copies of boxes read or written straight
// from global memory (no code) and one loop nest: owner_stable may then leave the nest's barrier
// to the end of the loop.
std::set<std::string> SimtEmitter::loop_private_candidate(const Node& n) const {
  std::set<std::string> vars{n.var};
  int nests = 0;
  for (const auto& c : n.children) {
    if (c->kind == NodeKind::Let && nests) return {};  // the lets run before the nest
    if (c->kind == NodeKind::Let) vars.insert(c->var);
    else if (c->kind == NodeKind::Copy && ((c->dst >= 0 && direct.count(c->dst)) || (c->dst < 0 && direct_out.count(c->src)))) continue;
    else if (c->kind == NodeKind::Loop && compute_nest(*c)) ++nests;
    else return {};
  }
  return nests == 1 ? vars : std::set<std::string>{};
}

// Nodes in order; an init nest followed by a loop whose reduction nest runs inside the thread
// (reduction_nest with `outer`) and initialises the same outputs is left out, the nest storing
// its result instead of adding it to the identity. Tried by emitting the loop first: when it
// does not take the init over, its text is dropped and both are emitted in order.
void SimtEmitter::sequence(const std::vector<const Node*>& nodes, const std::string& pad) {
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = *nodes[i];
    if (i + 1 < nodes.size() && n.kind == NodeKind::Loop && compute_nest(n) && nodes[i + 1]->kind == NodeKind::Loop &&
        !compute_nest(*nodes[i + 1])) {
      const std::string before = os.str();
      pending_init = &n;
      init_folded = false;
      uniform_node(*nodes[i + 1], pad);
      pending_init = nullptr;
      if (init_folded) {
        init_folded = false;
        ++i;
        continue;
      }
      os.str(before);
      os.seekp(0, std::ios_base::end);
    }
    uniform_node(n, pad);
  }
}

void SimtEmitter::uniform_node(const Node& n, const std::string& pad) {
  switch (n.kind) {
    case NodeKind::Block: {
      std::vector<const Node*> nodes;
      for (const auto& c : n.children) nodes.push_back(c.get());
      sequence(nodes, pad);
      return;
    }
    case NodeKind::Loop: {
      if (compute_nest(n)) {
        // a reduction first: mapping only its output loops would leave each thread a whole row
        if (reduction_nest(n, pad)) return;
        const auto chain = loop_chain(n);
        if (const size_t mapped = thread_prefix(chain)) return parallel_region(chain, mapped, pad);
        // no loop of the nest may be shared: one thread runs it whole
        os << pad << "if (threadIdx.x == 0) { /* sequential: the nest's loops carry dependences */\n";
        thread_node(n, pad + "  ");
        os << pad << "}\n" << pad << "__syncthreads();\n";
        return;
      }
      const Node* init = pending_init;  // only this loop's own nest may fold it in
      pending_init = nullptr;
      const std::set<std::string> outer_owned = owned_loop_vars;
      owned_loop_vars = loop_private_candidate(n);
      if (!owned_loop_vars.empty()) {
        const Node* nest = nullptr;
        for (const auto& c : n.children)
          if (c->kind == NodeKind::Loop) nest = c.get();
        pending_init = init;
        const bool inside = reduction_nest(*nest, pad, &n);
        pending_init = nullptr;
        if (inside) {
          owned_loop_vars = outer_owned;
          return;
        }
      }
      os << pad << "for (" << ix << " " << n.var << " = " << ie(n.lo) << "; " << n.var << " < " << ie(n.hi) << "; "
         << n.var << " += " << n.step << L << ") { /* " << kernel::loop_kind_name(n.loop_kind) << " */\n";
      barrier_left_to_loop = false;
      for (const auto& c : n.children) uniform_node(*c, pad + "  ");
      owned_loop_vars = outer_owned;
      os << pad << "}\n";
      if (barrier_left_to_loop) os << pad << "/* the nest kept each output on one thread in every iteration */ __syncthreads();\n";
      barrier_left_to_loop = false;
      return;
    }
    case NodeKind::If:
      os << pad << "if (" << ie(n.cond) << ") {\n";
      for (const auto& c : n.children) uniform_node(*c, pad + "  ");
      if (!n.else_children.empty()) {
        os << pad << "} else {\n";
        for (const auto& c : n.else_children) uniform_node(*c, pad + "  ");
      }
      os << pad << "}\n";
      return;
    case NodeKind::Let: os << pad << n.var << " = " << ie(n.value) << ";\n"; return;
    case NodeKind::Copy:
      if (n.dst >= 0 && direct.count(n.dst)) return;  // its readers read the tensor
      if (n.dst < 0 && direct_out.count(n.src)) return;  // its writers wrote the tensor
      copy(n, pad);
      return;
    case NodeKind::Compute:
      os << pad << "if (threadIdx.x == 0) {\n";
      compute(n, pad + "  ");
      os << pad << "}\n" << pad << "__syncthreads();\n";
      return;
    case NodeKind::Matmul: matmul(n.matmul, pad); return;
  }
}

}  // namespace simt

namespace {

using kernel::Node;
using kernel::NodeKind;
using simt::constant_expr;
using simt::expr_vars;
using simt::SimtEmitter;

// registers per thread assumed when sizing the grid (the generated code's loops and a few values)
constexpr unsigned kRegistersPerThread = 32;

// The kernel body's top-level nodes as kernels: each ParallelCores loop nest with constant bounds
// is one; a run of other top-level nodes (sequential code, copies, lets) is one single-block
// kernel, so its buffers live in one shared memory. `lets_before`: the top-level lets each kernel
// must replay.
struct SimtGroups {
  std::vector<kernel::NodePtr> groups;
  std::vector<std::vector<const Node*>> lets_before;
};
SimtGroups top_level_groups(const kernel::Kernel& k) {
  std::vector<kernel::NodePtr> top;
  if (k.body->kind == NodeKind::Block)
    top = k.body->children;
  else
    top.push_back(k.body);
  auto is_grid_loop = [](const Node& n) {
    int64_t v;
    return n.kind == NodeKind::Loop && n.loop_kind == kernel::LoopKind::ParallelCores && constant_expr(n.lo, &v) &&
           constant_expr(n.hi, &v);
  };
  SimtGroups g;
  std::vector<const Node*> lets_seen;
  for (const auto& n : top) {
    if (is_grid_loop(*n)) {
      g.groups.push_back(n);
      g.lets_before.push_back(lets_seen);
    } else {
      if (g.groups.empty() || is_grid_loop(*g.groups.back())) {
        auto b = std::make_shared<Node>();
        b->kind = NodeKind::Block;
        g.groups.push_back(b);
        g.lets_before.push_back(lets_seen);
      }
      g.groups.back()->children.push_back(n);
    }
    if (n->kind == NodeKind::Let) lets_seen.push_back(n.get());
  }
  return g;
}

// Where a group's buffers live: dynamic shared memory up to the block's budget, then global
// scratch per block. `decl` declares their pointers; e's pitch and buffer_ptr are set. Shared
// memory from `start` on (`shared`: where it ends).
struct BufferPlacement {
  uint32_t shared = 0;
  uint64_t per_block_scratch = 0;
  std::string decl;
};
BufferPlacement place_buffers(const kernel::Kernel& k, const isa::GpuMachine& m, const std::set<int>& used, SimtEmitter& e,
                              uint32_t start = 0) {
  const uint64_t budget = m.shared_bytes_per_block_optin;
  BufferPlacement p;
  p.shared = start;
  std::ostringstream decl;
  const auto round_up = [&](uint64_t x) { return (x + m.vector_access_bytes - 1) / m.vector_access_bytes * m.vector_access_bytes; };
  for (int id : used) {
    const auto& b = k.buffers.at(id);
    uint64_t bytes = round_up(uint64_t(b.bytes()));
    const std::string ty = storage_type(b.dtype);
    // Rows a whole number of bank rows long put a column in one bank: a thread per row reading
    // a column (a transpose, a reduction over rows) would conflict 32 ways. Such rows get one
    // vector access of padding (rows stay 16-byte aligned; a column spreads over 8 banks).
    const uint64_t eb = dtype_bytes(b.dtype);
    if (b.extents.size() >= 2 && b.elements() > b.extents.back() && (b.extents.back() * eb) % (uint64_t(m.shared_banks) * m.shared_bank_width_bytes) == 0) {
      const int64_t padded = b.extents.back() + int64_t(m.vector_access_bytes / eb);
      const uint64_t padded_bytes = round_up(uint64_t(b.elements() / b.extents.back() * padded) * eb);
      if (p.shared + padded_bytes <= budget) {
        e.pitch[id] = padded;
        bytes = padded_bytes;
      }
    }
    if (p.shared + bytes <= budget) {
      decl << "  " << ty << "* " << b.name << " = (" << ty << "*)(smem_ + " << p.shared << "); /* " << b.level << " ("
           << isa::role_name(b.role) << "), shared */\n";
      p.shared += uint32_t(bytes);
    } else {
      decl << "  " << ty << "* " << b.name << " = (" << ty << "*)(scratch_block_ + " << p.per_block_scratch << "LL); /* " << b.level
           << ", global scratch: over the shared budget */\n";
      p.per_block_scratch += bytes;
    }
    e.buffer_ptr[id] = b.name;
  }
  p.decl = decl.str();
  return p;
}

// Copies of input boxes placed the same for every block tile (a bias, gamma, a weight row): they
// run once per block, before the loop over its tiles.
std::vector<const Node*> hoisted_copies(const kernel::Kernel& k, const kernel::NodePtr& group, const GridLoops& grid) {
  std::vector<const Node*> hoisted;
  if (grid.loops.empty()) return hoisted;
  std::set<std::string> bound_inside;
  for (const Node* l : grid.loops) bound_inside.insert(l->var);
  kernel::for_each_node(group, [&](const Node& x, int) {
    if (x.kind == NodeKind::Let || x.kind == NodeKind::Loop) bound_inside.insert(x.var);
  });
  for (const auto& c : grid.loops.back()->children) {
    if (c->kind != NodeKind::Copy || c->dst < 0 || c->src >= 0) continue;
    const kernel::GlobalTensor* t = k.find_tensor(c->tensor);
    if (!t || t->kind != ir::TensorKind::Input) continue;
    std::set<std::string> used;
    for (const auto& o : k.buffers.at(c->dst).offset) expr_vars(o, used);
    bool invariant = true;
    for (const auto& v : used) invariant &= !bound_inside.count(v);
    if (invariant) hoisted.push_back(c.get());
  }
  return hoisted;
}

// The hoisted copies' code, printed by an emitter that shares e's buffers and mapping.
std::string hoisted_code(const kernel::Kernel& k, const SimtEmitter& e, const std::vector<const Node*>& hoisted) {
  std::ostringstream before;
  SimtEmitter h{k, before, e.buffer_ptr};
  h.set_narrow(e.narrow);
  h.divisors = e.divisors;
  h.pitch = e.pitch;
  h.direct = e.direct;
  h.direct_out = e.direct_out;
  h.coherent = e.coherent;
  h.threads = e.threads;
  for (const Node* c : hoisted) h.uniform_node(*c, "  ");
  return before.str();
}

// Blocks launched: one wave of resident blocks (shared memory and registers per SM from the
// machine model, a block of `threads` at up to kRegistersPerThread each), at most the block tiles
// (and 1,024 where blocks have global scratch); the blocks loop over the tiles.
int64_t resident_grid(const isa::GpuMachine& m, uint32_t shared, unsigned threads, int64_t blocks, uint64_t per_block_scratch) {
  const uint64_t by_shared = m.shared_bytes_per_sm / std::max<uint64_t>(1, shared + m.shared_bytes_reserved_per_block);
  const uint64_t by_registers = m.registers_per_sm / (uint64_t(threads) * kRegistersPerThread);
  const int64_t resident = int64_t(std::max<uint64_t>(1, std::min(by_shared, by_registers)));
  const int64_t wave = int64_t(std::max<uint32_t>(1, m.sm_count)) * resident;
  return std::max<int64_t>(1, std::min<int64_t>({blocks, per_block_scratch ? 1024 : (1 << 20), wave}));
}

}  // namespace

std::string kernel_parameters(const kernel::Kernel& k) {
  std::string p;
  for (const auto& t : k.tensors) p += storage_type(t.dtype) + "* __restrict__ t_" + t.name + ", ";
  return p + "unsigned char* __restrict__ scratch";
}

namespace {

// One group's tile code: its grid variables decoded from br_, the tile's nodes, the hoisted copies
// (run once per block), where its buffers live and what the block needs.
struct GroupCode {
  GridLoops grid;
  std::string decode, body, before;
  BufferPlacement place;
  unsigned threads = 0;
  bool reductions = false, ends_with_barrier = false;
};

// `threads` 0: the group's own choice; `shared_start`: where its shared buffers begin; `coherent`:
// global tensors it reads through L2 (another block of the launch wrote them); `hoist`: copies of
// tile-invariant inputs before the loop over tiles; `finalising`: the group runs in the last
// block of another group's launch (simt_finalise.h), alone on the machine.
GroupCode group_code(const kernel::Kernel& k, const isa::GpuMachine& m, const kernel::Divisors& divisors, const kernel::NodePtr& group,
                     unsigned threads, uint32_t shared_start, const std::set<std::string>& coherent, bool hoist, bool finalising) {
  GroupCode c;
  const Node& root = *group;
  c.grid = grid_loops(root);
  const std::vector<const Node*>& pcs = c.grid.loops;
  std::set<int> used = simt_buffers_used(root);
  std::ostringstream body;
  SimtEmitter e{k, body, {}};
  e.set_narrow(simt_narrow_indices(k));
  e.divisors = divisors;
  e.coherent = coherent;
  e.finalising = finalising;
  const SimtDirectBuffers direct = simt_direct_buffers(k, group);
  e.direct = direct.in;
  e.direct_out = direct.out;
  e.threads = threads ? threads : simt_block_threads(k, m, used, c.grid.blocks);
  for (int id : e.direct) used.erase(id);
  for (int id : e.direct_out) used.erase(id);
  c.place = place_buffers(k, m, used, e, shared_start);
  std::ostringstream decode;
  for (int i = int(pcs.size()) - 1; i >= 0; --i)
    decode << "    const " << e.ix << " " << pcs[i]->var << " = " << e.ie(pcs[i]->lo) << " + (br_ % " << c.grid.trips[i] << e.L << ") * "
           << pcs[i]->step << e.L << "; br_ /= " << c.grid.trips[i] << e.L << ";\n";
  c.decode = decode.str();
  const std::vector<const Node*> hoisted = hoist ? hoisted_copies(k, group, c.grid) : std::vector<const Node*>{};
  if (pcs.empty())
    e.uniform_node(root, "    ");
  else {
    std::vector<const Node*> nodes;
    for (const auto& n : pcs.back()->children)
      if (std::find(hoisted.begin(), hoisted.end(), n.get()) == hoisted.end()) nodes.push_back(n.get());
    e.sequence(nodes, "    ");
  }
  c.before = hoisted_code(k, e, hoisted);
  c.body = body.str();
  c.threads = e.threads;
  c.reductions = e.reductions > 0;
  c.ends_with_barrier = e.after_barrier();
  return c;
}

// The code after an A tile that runs its B tile when it is the last to arrive (simt_finalise.h).
std::string finalisation_code(const GroupCode& a, const GroupCode& b, const Finalisation& f, size_t b_index, const SimtEmitter& fmt) {
  const std::string& ix = fmt.ix;
  std::ostringstream os;
  std::string tile = "0";
  for (size_t d = 0; d < a.grid.loops.size(); ++d)
    if (f.strides[d])
      tile += " + " + std::to_string(f.strides[d]) + " * ((" + a.grid.loops[d]->var + " - " + fmt.ie(a.grid.loops[d]->lo) + ") / " +
              std::to_string(a.grid.loops[d]->step) + ")";
  os << "    { /* the last of the " << f.arrivals << " tiles arriving at a tile of group " << b_index << " runs it */\n";
  os << "      const " << ix << " fin_ = " << tile << ";\n";
  // the barrier orders the block's stores before thread 0's fence (cumulative), the count after it
  if (!a.ends_with_barrier) os << "      __syncthreads();\n";
  os << "      if (threadIdx.x == 0) {\n        __threadfence();\n";
  os << "        fin_last_ = atomicAdd(fin_count_ + fin_, 1u) == " << f.arrivals - 1 << "u;\n";
  os << "        if (fin_last_) {\n          atomicExch(fin_count_ + fin_, 0u);  /* ready for the next launch */\n";
  os << "          __threadfence();\n        }\n";
  os << "      }\n      __syncthreads();\n";
  os << "      if (fin_last_) {\n";
  os << "        " << ix << " br_ = fin_;\n        (void)br_;\n";
  os << b.decode << b.body;
  os << (b.ends_with_barrier ? "" : "        __syncthreads();\n") << "      }\n    }\n";
  return os.str();
}

}  // namespace

void emit_simt(const kernel::Kernel& k, const isa::GpuMachine& m, std::ostringstream& os, std::vector<Launch>& launches,
               uint64_t& scratch_bytes, bool finalise) {
  const SimtGroups top = top_level_groups(k);
  const kernel::Divisors divisors = kernel::variable_divisors(k);
  std::ostringstream unused;
  SimtEmitter fmt{k, unused, {}};  // index types and expressions
  fmt.set_narrow(simt_narrow_indices(k));
  const std::string &ix = fmt.ix, &L = fmt.L;
  for (size_t gi = 0; gi < top.groups.size(); ++gi) {
    GroupCode c = group_code(k, m, divisors, top.groups[gi], 0, 0, {}, true, false);
    if (c.reductions) {  // one 8-byte slot per warp for the reduction nests' cross-warp step
      c.place.decl += "  unsigned char* red_smem_ = smem_ + " + std::to_string(c.place.shared) + "; /* reduction nests: a value per warp */\n";
      c.place.shared += uint32_t(8 * ((c.threads + m.warp_size - 1) / m.warp_size));
    }
    // the next group finalised by this one's last-arriving blocks (simt_finalise.h)
    std::optional<Finalisation> fin;
    std::optional<GroupCode> fc;
    if (finalise && gi + 1 < top.groups.size() && top.lets_before[gi + 1] == top.lets_before[gi])
      fin = plan_finalisation(k, *top.groups[gi], *top.groups[gi + 1]);
    if (fin) {
      fc = group_code(k, m, divisors, top.groups[gi + 1], c.threads, c.place.shared, fin->tensors, false, true);
      const bool red_needed = fc->reductions && !c.reductions;
      const uint64_t total = fc->place.shared + (red_needed ? 8 * ((c.threads + m.warp_size - 1) / m.warp_size) : 0);
      if (fc->place.per_block_scratch || c.place.per_block_scratch || total > m.shared_bytes_per_block_optin) {
        fin.reset();
        fc.reset();
      } else {
        c.place.decl += fc->place.decl;
        if (red_needed) c.place.decl += "  unsigned char* red_smem_ = smem_ + " + std::to_string(fc->place.shared) + "; /* reduction nests: a value per warp */\n";
        c.place.shared = uint32_t(total);
      }
    }
    uint64_t counters = 0;
    if (fin) {
      counters = (uint64_t(fin->b_tiles) * 4 + 15) / 16 * 16;
      c.place.decl += "  unsigned* fin_count_ = (unsigned*)(scratch + " + std::to_string(scratch_bytes) + "LL); /* arrivals per tile of group " +
                      std::to_string(gi + 1) + " */\n  __shared__ unsigned fin_last_;\n";
    }
    const int64_t grid_blocks = resident_grid(m, c.place.shared, c.threads, c.grid.blocks, c.place.per_block_scratch);
    const std::string name = "tessel_simt_g" + std::to_string(gi);
    os << "\n/* group " << gi << ": " << c.grid.loops.size() << " ParallelCores loop(s) -> " << c.grid.blocks << " block tiles, " << c.place.shared
       << " B shared, " << c.place.per_block_scratch << " B scratch per block"
       << (fin ? "; finalises group " + std::to_string(gi + 1) + " (" + std::to_string(fin->b_tiles) + " tiles)" : std::string()) << " */\n";
    os << "extern \"C\" __global__ void __launch_bounds__(" << c.threads << ") " << name << "(" << kernel_parameters(k) << ") {\n";
    os << "  extern __shared__ __align__(16) unsigned char smem_[];\n";
    os << "  unsigned char* scratch_block_ = scratch + " << scratch_bytes + counters << "LL + (long long)blockIdx.x * " << c.place.per_block_scratch
       << "LL;\n  (void)scratch_block_;\n";
    os << c.place.decl;
    std::set<std::string> lets(k.let_vars.begin(), k.let_vars.end());
    for (const auto& l : lets) os << "  " << ix << " " << l << " = 0; (void)" << l << ";\n";
    for (const Node* l : top.lets_before[gi]) os << "  " << l->var << " = " << fmt.ie(l->value) << ";\n";
    os << c.before;
    os << "  for (" << ix << " bid_ = blockIdx.x; bid_ < " << c.grid.blocks << L << "; bid_ += gridDim.x) {\n";
    os << "    " << ix << " br_ = bid_;\n";
    os << c.decode << c.body;
    if (fin) os << finalisation_code(c, *fc, *fin, gi + 1, fmt);
    // tiles are separated by a barrier (the body's last one where it ends with one)
    os << (c.ends_with_barrier || fin ? "" : "    __syncthreads();\n") << "  }\n}\n";
    scratch_bytes += counters + c.place.per_block_scratch * uint64_t(grid_blocks);
    Launch l;
    l.kernel = name;
    l.grid[0] = unsigned(grid_blocks);
    l.block = c.threads;
    l.dynamic_shared_bytes = c.place.shared;
    launches.push_back(l);
    if (fin) ++gi;  // the next group runs inside this one
  }
}

}  // namespace tessel::emit_cuda
