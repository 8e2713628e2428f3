// Lane vectors of the SIMT walk (simt_emitter.h): a thread runs `width` consecutive iterations of
// the innermost mapped dim, and each read of the update whose last index walks the statement index
// that dim drives (unit coefficient, no other dim reading it) is one 4-, 8- or 16-byte load of
// `width` elements instead of `width` scalar loads. Where the threads took `width` iterations
// `n / width` apart (open_split_loop without contiguous), each load moved one element: a depthwise
// NHWC convolution's 2-byte channels kept the SM latency-bound (ncu on the H200: L1 42 %, SM 39 %).
//
// Contract: lane_vector_width decides (analysis: reads the kernel IR and the divisors, prints
// nothing); load_lane_vectors prints the loads and fills lane_vectors, which update_value's access
// then reads element u_ of. A width is taken only where every such read is aligned to it: the
// tensor's row (a buffer's pitch) and the buffer's offset along it are multiples of the width and
// so is the read's last index at the vector's first iteration (kernel::divisor over the update's
// index expressions, the innermost variable's first value lo + q * width). A global read's guard
// (direct_inside) then holds for the whole vector or for none of it. Elsewhere the width is 1 and
// the walk keeps its scalar split (the tail path: odd rows, unaligned offsets, strided indices),
// and so where a read walks the index in another dim (a transpose reading its staged box by
// columns: a warp's threads `width` rows apart would meet in one shared-memory bank; measured on
// the H200, permute.3d_021.f16 3.29 -> 6.15 us with vector stores).
#include <numeric>
#include <optional>
#include <set>

#include "compiler/emit_cuda/cuda_expr.h"
#include "compiler/emit_cuda/simt_emitter.h"
#include "compiler/emit_cuda/simt_loop_chain.h"

namespace tessel::emit_cuda::simt {

namespace {

// Bytes of one vector load and the CUDA type that moves them.
std::string vector_type(int64_t bytes) {
  switch (bytes) {
    case 4: return "unsigned int";
    case 8: return "uint2";
    case 16: return "uint4";
    default: return "";
  }
}

std::string vector_zero(int64_t bytes) {
  switch (bytes) {
    case 4: return "0u";
    case 8: return "make_uint2(0u, 0u)";
    default: return "make_uint4(0u, 0u, 0u, 0u)";
  }
}

// The statement's domain positions a compute node's indices bind (as bind_indices).
std::vector<size_t> bound_positions(const Node& n, const ir::Statement& s) {
  std::vector<size_t> vars;
  for (size_t i = 0; i < s.domain.size(); ++i)
    if (!n.init || !s.domain[i].is_reduction) vars.push_back(i);
  return vars;
}

// The statement index the innermost dim walks: the one index of the node that reads the dim's
// variable, with coefficient 1 ("" where none, several, or the merged tile variable is read).
std::string walked_index(const Dim& d, const Node& update, const ir::Statement& s) {
  const std::string v = d.point ? d.point->var : d.loop->var;
  const std::vector<size_t> pos = bound_positions(update, s);
  if (pos.size() != update.indices.size()) return "";
  std::string walked;
  for (size_t j = 0; j < pos.size(); ++j) {
    std::set<std::string> used;
    expr_vars(update.indices[j], used);
    if (d.point && used.count(d.loop->var)) return "";
    if (!used.count(v)) continue;
    const auto lin = linear(update.indices[j]);
    if (!walked.empty() || !lin || !lin->coeff.count(v) || lin->coeff.at(v) != 1) return "";
    walked = s.domain[pos[j]].name;
  }
  return walked;
}

// The dtype of an access as stored: its buffer's where the node binds one, else the tensor's
// (null where neither is known).
std::optional<DType> stored_dtype(const kernel::Kernel& k, const std::string& name, const Node& n) {
  auto b = n.binding.find(name);
  if (b != n.binding.end() && b->second >= 0) return k.buffers.at(b->second).dtype;
  if (const kernel::GlobalTensor* t = k.find_tensor(name)) return t->dtype;
  return std::nullopt;
}

// Whether an access's last index walks `walked` (and so moves with the innermost iteration).
bool walks(const ir::Expr& e, const std::string& walked) {
  if (e.indices.empty()) return false;
  std::map<std::string, int64_t> idx, params;
  e.indices.back().collect_names(&idx, &params);
  return idx.count(walked) > 0;
}

}  // namespace

int64_t SimtEmitter::lane_vector_width(const std::vector<Dim>& dims, const Node& update, const ir::Statement& s, bool store) const {
  if (dims.empty() || update.kind != kernel::NodeKind::Compute) return 1;
  int64_t total = 1;
  for (const auto& d : dims) {
    const TripCount tc = trip_count(d);
    if (!tc.exact) return 1;
    total *= *tc.exact;
  }
  const Dim& d = dims.back();
  const int64_t n = *trip_count(d).exact;
  const std::string walked = walked_index(d, update, s);
  if (walked.empty() || d.step != 1 || (d.point && d.point->step != 1)) return 1;
  // the accesses moved as vectors: (tensor, indices), the output's last where it is stored so
  std::vector<std::pair<std::string, const std::vector<ir::AffineExpr>*>> moved;
  bool across = false;  // a read walks it in another dim (a transpose's): a vector would spread a warp's reads
  ir::for_each_access(*s.rhs, [&](const ir::Expr& e) {
    if (e.name == s.output) return;
    if (walks(e, walked)) moved.emplace_back(e.name, &e.indices);
    for (size_t i = 0; i + 1 < e.indices.size(); ++i) {
      std::map<std::string, int64_t> idx, params;
      e.indices[i].collect_names(&idx, &params);
      across = across || idx.count(walked);
    }
  });
  if (across) return 1;
  if (store) {
    if (s.out_indices.empty() || !s.out_indices.back().index_coeffs.count(walked)) return 1;
    moved.emplace_back(s.output, &s.out_indices);
  }
  if (moved.empty()) return 1;
  // the update's index expressions, by statement index name
  std::map<std::string, Expr> index_expr;
  const std::vector<size_t> pos = bound_positions(update, s);
  for (size_t j = 0; j < pos.size(); ++j) index_expr[s.domain[pos[j]].name] = update.indices[j];
  const std::string v = d.point ? d.point->var : d.loop->var;
  for (int64_t V : {8, 4, 2}) {
    if (n % V != 0 || total / V < int64_t(threads) || (d.point && d.loop->step % V != 0)) continue;
    kernel::Divisors dv = divisors;  // the innermost variable at a vector's first iteration: lo + q * V
    const int64_t lo_div = kernel::divisor(d.lo, divisors);
    dv[v] = lo_div == 0 ? V : std::gcd(lo_div, V);
    auto aligned = [&](const Expr& e) {
      const int64_t dd = kernel::divisor(e, dv);
      return dd == 0 || dd % V == 0;
    };
    bool all = true;
    for (const auto& [name, indices] : moved) {
      const ir::AffineExpr& last = indices->back();
      auto b = update.binding.find(name);
      const int buffer = b == update.binding.end() ? -1 : b->second;
      const kernel::GlobalTensor* t = k.find_tensor(name);
      const std::optional<DType> dt = stored_dtype(k, name, update);
      const bool is_output = name == s.output;
      const bool global = buffer < 0 || direct.count(buffer) || direct_out.count(buffer);
      bool ok = dt && (t || !global) && last.is_affine() && last.index_coeffs.count(walked) && last.index_coeffs.at(walked) == 1 &&
                !(buffer >= 0 && direct_out.count(buffer) && !is_output) && !(is_output && coherent.count(name));
      for (size_t i = 0; ok && i + 1 < indices->size(); ++i) {
        std::map<std::string, int64_t> idx, params;
        (*indices)[i].collect_names(&idx, &params);
        ok = !idx.count(walked);
      }
      if (ok) {
        const int64_t bytes = V * int64_t(dtype_bytes(*dt));
        ok = !vector_type(bytes).empty();
      }
      if (ok && !global) {
        const kernel::Buffer& buf = k.buffers.at(buffer);
        ok = row_pitch(buf) % V == 0 && aligned(buf.offset.back());
      } else if (ok) {
        ok = !t->shape.empty() && t->shape.back() % V == 0;
      }
      if (ok) {
        for (const auto& term : last.index_coeffs) ok = ok && index_expr.count(term.first);
        ok = ok && aligned(kernel::from_affine(last, k.sizes, [&](const std::string& i) { return index_expr.at(i); }));
      }
      all = all && ok;
    }
    if (all) return V;
  }
  return 1;
}

void SimtEmitter::load_lane_vectors(const std::vector<Dim>& dims, const std::string& tag, int64_t width, const Node& update,
                                    const ir::Statement& s, const std::string& pad) {
  const std::string p = pad + "  ";
  const Dim& d = dims.back();
  const std::string id = tag + std::to_string(dims.size() - 1);
  const std::string v = d.point ? d.point->var : d.loop->var;
  const std::string walked = walked_index(d, update, s);
  os << pad << "{ /* a lane vector: " << width << " consecutive " << v << ", each contiguous read one load */\n";
  os << p << "const " << ix << " " << v << " = lo" << id << "_ + q" << tag << "_ * " << width << " * " << d.step << L << ";\n";
  tile_of_point(d, id, p);
  bind_indices(update, s, p);
  lane_vectors.clear();
  std::map<std::string, std::string> loaded;  // a load already made (a tensor read twice at one place) -> its local
  reading = &s;  // (direct_inside's reading of the statement's index ranges)
  ir::for_each_access(*s.rhs, [&](const ir::Expr& e) {
    if (e.name == s.output || !walks(e, walked)) return;
    const DType dt = *stored_dtype(k, e.name, update);
    const int64_t bytes = width * int64_t(dtype_bytes(dt));
    const std::string VT = vector_type(bytes);
    auto b = update.binding.find(e.name);
    const int buffer = b == update.binding.end() ? -1 : b->second;
    std::vector<std::string> g;
    for (const auto& x : e.indices) g.push_back(affine(x));
    std::string load;
    if (buffer >= 0 && !direct.count(buffer)) {
      load = "*(const " + VT + "*)&" + storage(buffer, e.name) + "[" + linear(buffer, e.name, g) + "]";
    } else {
      const std::string at = "(const " + VT + "*)&t_" + e.name + "[" + linear(-1, e.name, g) + "]";
      load = coherent.count(e.name) ? "__ldcg(" + at + ")" : "*" + at;
      const std::string inside = buffer >= 0 ? direct_inside(e.name, e.indices, g) : "";
      if (!inside.empty()) load = "((" + inside + ") ? " + load + " : " + vector_zero(bytes) + ")";
    }
    std::string& name = loaded[load];
    if (name.empty()) {
      name = "lv" + std::to_string(lane_vectors_made++) + "_";
      os << p << "const " << VT << " " << name << " = " << load << "; /* " << e.name << ", " << bytes << " B */\n";
    }
    lane_vectors[&e] = "((const " + storage_type(dt) + "*)&" + name + ")";
  });
  reading = nullptr;
}

const Node* SimtEmitter::lane_vector_candidate(const std::vector<ChainLevel>& chain, size_t mapped) const {
  for (size_t i = 0; i < mapped; ++i)
    if (!chain[i].lets.empty()) return nullptr;
  const Node& inner = *chain[mapped - 1].loop;
  if (inner.children.size() != 1 || inner.children[0]->kind != kernel::NodeKind::Compute || inner.children[0]->init) return nullptr;
  const Node* c = inner.children[0].get();
  const ir::Statement& s = k.function->statements.at(c->statement);
  const std::optional<DType> out = stored_dtype(k, s.output, *c);
  if (s.reduction != ir::Reduction::None || !out || *out != s.acc_type) return nullptr;
  return c;
}

void SimtEmitter::lane_vector_region(const std::vector<Dim>& dims, int64_t width, const Node& update, const std::string& pad) {
  const ir::Statement& s = k.function->statements.at(update.statement);
  const DType T = s.acc_type;
  const int64_t bytes = width * int64_t(dtype_bytes(T));
  const std::string VT = vector_type(bytes), out = "lv" + std::to_string(lane_vectors_made++) + "_";
  load_lane_vectors(dims, "t", width, update, s, pad);
  const std::string p = pad + "  ";
  os << p << VT << " " << out << "; /* " << s.output << ", stored as one " << bytes << " B vector */\n";
  const std::string q = open_split_loop(dims, "t", width, p, true);
  os << q << "{\n";
  bind_indices(update, s, q + "  ");
  os << q << "  ((" << storage_type(T) << "*)&" << out << ")[u_] = " << store_value(T, "(" + value_type(T) + ")" + update_value(update, s))
     << ";\n"
     << q << "}\n"
     << p << "}\n";
  // the vector's first element (load_lane_vectors bound its indices)
  os << p << "*(" << VT << "*)&" << access(s.output, s.out_indices, update.binding) << " = " << out << ";\n" << pad << "}\n";
  lane_vectors.clear();
}

}  // namespace tessel::emit_cuda::simt
