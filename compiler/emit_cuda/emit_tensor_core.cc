#include "compiler/emit_cuda/emit_tensor_core.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "compiler/emit_cuda/cuda_expr.h"
#include "compiler/emit_cuda/emit_simt.h"
#include "isa/base/error.h"

namespace tessel::emit_cuda {

namespace {

int sm_of(const std::string& arch) {
  try {
    return std::stoi(arch.substr(arch.find('_') + 1));
  } catch (...) {
    return 0;
  }
}

int elem_bytes(DType t) { return t == DType::I8 || t == DType::U8 ? 1 : 2; }

std::string S(int64_t v) { return std::to_string(v); }

// How one operand is staged in shared memory.
struct OperandPlan {
  const ContractionOperand* op = nullptr;
  const std::vector<ContractionDim>* outer = nullptr;  // M dims for A, N dims for B
  const std::vector<ContractionDim>* kdims = nullptr;
  int tile_outer = 0, bk = 0;
  int vec = 1;           // elements per load (1: scalar, synchronous)
  bool k_inner = true;   // shared tile [outer][bk + pad]; else [bk][outer + pad]
  int pad = 0;
  // wgmma: 128-byte-swizzled canonical layout, no padding. K-inner: rows of 64 elements (128 B),
  // 16-byte chunk c of row r at chunk c ^ (r % 8). Outer-inner: 64-wide atoms of bk rows (K) of
  // 128 B, atom after atom, chunk c of K row r at c ^ (r % 8). Stages 1024-byte aligned.
  bool swz = false;
  int64_t outer_size = 0;
  std::set<std::string> guard_vars;  // anchor indices the guards depend on
  std::vector<int> bounded;          // tensor dims needing a bounds check
  int ld() const { return (k_inner ? bk : tile_outer) + pad; }
  int stage_elems() const { return (k_inner ? tile_outer : bk) * ld(); }
};

// Dimensions of the operand whose index may leave the tensor (folded padding, im2col windows).
std::vector<int> bounded_dims(const ContractionOperand& op, const Contraction& c, const std::map<std::string, int64_t>& sizes) {
  std::map<std::string, int64_t> extent;
  for (const auto* ds : {&c.m, &c.n, &c.k, &c.batch})
    for (const auto& d : *ds) extent[d.var] = d.extent;
  std::vector<int> out;
  for (size_t d = 0; d < op.indices.size(); ++d) {
    const auto& e = op.indices[d];
    int64_t lo = e.constant, hi = e.constant;  // range over the anchor's domain
    for (const auto& [p, q] : e.param_coeffs) lo += q * sizes.at(p), hi += q * sizes.at(p);
    for (const auto& [v, q] : e.index_coeffs) {
      const int64_t ext = extent.count(v) ? extent.at(v) : 1;
      if (q > 0) hi += q * (ext - 1);
      else lo += q * (ext - 1);
    }
    if (lo < 0 || hi >= op.shape[d]) out.push_back(int(d));
  }
  return out;
}

void guard_anchor_vars(const ContractionOperand& op, std::set<std::string>& out) {
  if (!op.guard) return;
  std::vector<const ir::Expr*> stack = {op.guard};
  while (!stack.empty()) {
    const ir::Expr* e = stack.back();
    stack.pop_back();
    if (e->kind == ir::ExprKind::IndexValue) {
      ir::AffineExpr a = substitute(e->affine, op.producer_binding);
      for (const auto& [v, c] : a.index_coeffs) out.insert(v);
    }
    for (const auto& a : e->args) stack.push_back(a.get());
  }
}

bool vectorisable(const ContractionOperand& op, const std::vector<ContractionDim>& dims, int vec, const std::set<std::string>& guard) {
  if (dims.empty()) return false;
  const ContractionDim& last = dims.back();
  auto it = op.coeff.find(last.var);
  if (it == op.coeff.end() || it->second != 1 || last.extent % vec != 0) return false;
  if (guard.count(last.var)) return false;
  for (const auto& [v, c] : op.coeff)
    if (v != last.var && c % vec != 0) return false;
  return op.base % vec == 0;
}

OperandPlan plan_operand(const ContractionOperand& op, const Contraction& c, const std::map<std::string, int64_t>& sizes,
                         const std::vector<ContractionDim>& outer, const std::vector<ContractionDim>& kd, int tile_outer, int bk,
                         int64_t outer_size, bool swizzle = false) {
  OperandPlan p;
  p.op = &op;
  p.outer = &outer;
  p.kdims = &kd;
  p.tile_outer = tile_outer;
  p.bk = bk;
  p.outer_size = outer_size;
  guard_anchor_vars(op, p.guard_vars);
  p.bounded = bounded_dims(op, c, sizes);
  for (int d : p.bounded)
    for (const auto& [v, q] : op.indices[d].index_coeffs) p.guard_vars.insert(v);
  const int vec = 16 / elem_bytes(op.dtype);
  p.pad = swizzle ? 0 : vec;
  p.swz = swizzle;
  if (vectorisable(op, kd, vec, p.guard_vars) && bk % vec == 0) {
    p.vec = vec;
    p.k_inner = true;
  } else if (vectorisable(op, outer, vec, p.guard_vars) && tile_outer % vec == 0) {
    p.vec = vec;
    p.k_inner = false;
  }
  return p;
}

// How the bulk copy engine fetches one stage of an operand tile (TcConfig::bulk): `rows` copies of
// `row_elems` contiguous elements, `row_stride` elements apart in global memory, into shared rows
// ld() apart; `whole`: the rows are adjacent in global memory, so the stage is one copy into
// unpadded shared rows. `why` says why the operand keeps cp.async.
struct BulkPlan {
  bool ok = false, whole = false;
  int rows = 0, row_elems = 0;
  int64_t row_stride = 0, k_stride = 0;  // global elements per outer row / per K step
  std::string outer_var, k_var;
  std::string why;
};

BulkPlan bulk_plan(const OperandPlan& p, const Contraction& c) {
  BulkPlan b;
  const ContractionOperand& op = *p.op;
  const int eb = elem_bytes(op.dtype);
  if (op.producer || op.guard || !p.bounded.empty()) return b.why = "an im2col view", b;
  if (p.outer->size() != 1 || p.kdims->size() != 1) return b.why = "several outer or K dims", b;
  if (p.outer_size % p.tile_outer || c.size_k() % p.bk) return b.why = "tiles do not divide the operand", b;
  b.outer_var = p.outer->front().var, b.k_var = p.kdims->front().var;
  const int64_t co = op.coeff.count(b.outer_var) ? op.coeff.at(b.outer_var) : 0, ck = op.coeff.count(b.k_var) ? op.coeff.at(b.k_var) : 0;
  b.k_stride = ck;
  if (p.k_inner && ck == 1) {
    b.rows = p.tile_outer, b.row_elems = p.bk, b.row_stride = co;
  } else if (!p.k_inner && co == 1) {
    b.rows = p.bk, b.row_elems = p.tile_outer, b.row_stride = ck;
    b.whole = ck == p.tile_outer;  // the tile spans the whole contiguous dim: the stage is one run
  } else {
    return b.why = "the tile's rows are not contiguous", b;
  }
  if (!b.whole && int64_t(b.row_elems) * eb < 256) return b.why = "rows of " + S(int64_t(b.row_elems) * eb) + " B (bulk copies need >= 256 B)", b;
  if (!b.whole && b.rows > 128) return b.why = S(b.rows) + " copies per stage", b;
  if ((op.base * eb) % 16 || (b.row_stride * eb) % 16 || (int64_t(b.row_elems) * eb) % 16 || (b.k_stride * p.bk * eb) % 16)
    return b.why = "rows not 16-byte aligned", b;
  for (const auto& d : c.batch)
    if (op.coeff.count(d.var) && (op.coeff.at(d.var) * eb) % 16) return b.why = "batch stride not 16-byte aligned", b;
  b.ok = true;
  return b;
}

struct TcEmitter {
  const kernel::Kernel& k;
  const Contraction& c;
  const TcConfig& cfg;
  std::ostringstream& os;
  bool async = false;
  int threads = 0;

  // C expression of an affine expression over anchor indices, with `var` mapping each index.
  std::string affine(const ir::AffineExpr& a, const std::function<std::string(const std::string&)>& var) {
    int64_t cst = a.constant;
    for (const auto& [p, q] : a.param_coeffs) cst += q * k.sizes.at(p);
    std::string s = "(" + S(cst);
    for (const auto& [v, q] : a.index_coeffs) s += " + " + S(q) + " * (" + var(v) + ")";
    return s + ")";
  }

  // decomposes `lin` over dims (outer -> inner) into `prefix<var>` locals
  void decompose(const std::string& pad, const std::string& lin, const std::vector<ContractionDim>& dims, const std::string& prefix,
                 const std::string& suffix = "") {
    if (dims.empty()) return;
    os << pad << "{ int r_ = " << lin << ";\n";
    for (int d = int(dims.size()) - 1; d > 0; --d)
      os << pad << "  " << prefix << dims[d].var << suffix << " = r_ % " << dims[d].extent << "; r_ /= " << dims[d].extent << ";\n";
    os << pad << "  " << prefix << dims[0].var << suffix << " = r_; }\n";
  }

  void loader(const std::string& name, const OperandPlan& p, const std::string& smem_name) {
    const std::string pad = "  ";
    const int chunks = p.tile_outer * p.bk / p.vec;
    const int per_thread = (chunks + threads - 1) / threads;
    const std::string st = storage_type(p.op->dtype);
    const std::string origin = name == "a" ? "m0_" : "n0_";
    os << pad << "/* " << name << " = " << p.op->tensor << (p.op->producer ? " through " + p.op->producer->name + "'s padding (im2col view)" : "")
       << ": " << (p.vec > 1 ? S(p.vec * elem_bytes(p.op->dtype) * 8) + "-bit loads along " + std::string(p.k_inner ? "K" : "the tile's outer dim") : "scalar loads")
       << ", shared tile [" << (p.k_inner ? p.tile_outer : p.bk) << "][" << p.ld() << "] */\n";
    // per-chunk outer coordinates, fixed for the whole K loop
    // 32-bit per-chunk offsets where the tensor has under 2^30 elements (fewer registers: the wgmma
    // tiles keep 128 accumulators per thread)
    int64_t elems = 1;
    for (int64_t d : p.op->shape) elems *= d;
    const std::string off_type = elems < (int64_t(1) << 30) ? "int" : "long long";
    os << pad << "int " << name << "_o[" << per_thread << "]; bool " << name << "_ok[" << per_thread << "]; " << off_type << " " << name << "_off["
       << per_thread << "];\n";
    for (const auto& d : *p.outer) os << pad << "int " << name << "_v_" << d.var << "[" << per_thread << "];\n";
    os << pad << "#pragma unroll\n" << pad << "for (int i = 0; i < " << per_thread << "; ++i) {\n";
    os << pad << "  const int c_ = threadIdx.x + i * " << threads << ";\n";
    if (p.k_inner)
      os << pad << "  const int o_ = c_ / " << p.bk / p.vec << ";\n";
    else
      os << pad << "  const int o_ = (c_ % " << p.tile_outer / p.vec << ") * " << p.vec << ";\n";
    os << pad << "  " << name << "_o[i] = o_;\n";
    os << pad << "  " << name << "_ok[i] = c_ < " << chunks << " && " << origin << " + o_ < " << p.outer_size << ";\n";
    os << pad << "  const int g_ = " << name << "_ok[i] ? " << origin << " + o_ : 0;\n";
    for (const auto& d : *p.outer) os << pad << "  int ov_" << d.var << ";\n";
    decompose(pad + "  ", "g_", *p.outer, "ov_");
    std::string off = "0LL";
    for (const auto& d : *p.outer) {
      os << pad << "  " << name << "_v_" << d.var << "[i] = ov_" << d.var << ";\n";
      auto it = p.op->coeff.find(d.var);
      if (it != p.op->coeff.end()) off += " + " + S(it->second) + "LL * ov_" + d.var;
    }
    for (const auto& d : c.batch) {
      auto it = p.op->coeff.find(d.var);
      if (it != p.op->coeff.end()) off += " + " + S(it->second) + "LL * bv_" + d.var;
    }
    os << pad << "  " << name << "_off[i] = (" << off_type << ")(" << S(p.op->base) << "LL + " << off << ");\n";
    os << pad << "}\n";
    // the stage loader
    os << pad << "auto load_" << name << " = [&](int stage_, int kt_) {\n";
    os << pad << "  " << st << "* dst_ = " << smem_name << " + stage_ * " << p.stage_elems() << ";\n";
    os << pad << "  #pragma unroll\n" << pad << "  for (int i = 0; i < " << per_thread << "; ++i) {\n";
    os << pad << "    const int c_ = threadIdx.x + i * " << threads << ";\n";
    // guards that always hold are left out (no predicate selects or divergent exits per copy)
    const bool chunks_exact = chunks % threads == 0;
    const bool k_exact = c.size_k() % p.bk == 0;
    const bool outer_exact = chunks_exact && p.outer_size % p.tile_outer == 0;
    if (!chunks_exact) os << pad << "    if (c_ >= " << chunks << ") break;\n";
    else os << pad << "    (void)c_;\n";
    if (p.k_inner)
      os << pad << "    const int kl_ = (" << (threads % (p.bk / p.vec) == 0 ? "threadIdx.x" : "c_") << " % " << p.bk / p.vec << ") * " << p.vec
         << ";\n";  // the same for every i when the block is a multiple of the chunks per row
    else
      os << pad << "    const int kl_ = c_ / " << p.tile_outer / p.vec << ";\n";
    os << pad << "    const int kk_ = kt_ * " << p.bk << " + kl_;\n";
    for (const auto& d : *p.kdims) os << pad << "    int kv_" << d.var << ";\n";
    decompose(pad + "    ", k_exact ? std::string("kk_") : "kk_ < " + S(c.size_k()) + " ? kk_ : 0", *p.kdims, "kv_");
    std::string addr = name + "_off[i]";
    for (const auto& d : *p.kdims) {
      auto it = p.op->coeff.find(d.var);
      if (it != p.op->coeff.end()) addr += " + " + S(it->second) + "LL * kv_" + d.var;
    }
    std::string guard = "true";
    if (!outer_exact) guard += " && " + name + "_ok[i]";
    if (!k_exact) guard += " && kk_ < " + S(c.size_k());
    auto cvar = [&](const std::string& v) -> std::string {
      for (const auto& d : *p.kdims)
        if (d.var == v) return "kv_" + v;
      for (const auto& d : c.batch)
        if (d.var == v) return "bv_" + v;
      return name + "_v_" + v + "[i]";
    };
    for (int d : p.bounded) {
      const std::string ix = affine(p.op->indices[d], cvar);
      guard += " && " + ix + " >= 0 && " + ix + " < " + S(p.op->shape[d]);
    }
    if (p.op->guard) {
      ValueContext ctx;
      ctx.sizes = &k.sizes;
      ctx.affine = [&](const ir::AffineExpr& a) {
        return affine(substitute(a, p.op->producer_binding), [&](const std::string& v) {
          for (const auto& d : *p.kdims)
            if (d.var == v) return "kv_" + v;
          for (const auto& d : c.batch)
            if (d.var == v) return "bv_" + v;
          return name + "_v_" + v + "[i]";
        });
      };
      ctx.access = [](const ir::Expr& e) -> std::string { throw UserError("CUDA emitter: a padding guard reads tensor " + e.name); };
      guard += " && " + value_expr(*p.op->guard, ctx);
    }
    std::string dst = p.k_inner ? name + "_o[i] * " + S(p.ld()) + " + kl_" : "kl_ * " + S(p.ld()) + " + " + name + "_o[i]";
    if (p.swz && p.k_inner)
      dst = name + "_o[i] * 64 + ((((kl_ >> 3) ^ " + name + "_o[i]) & 7) << 3)";
    else if (p.swz)
      dst = "(" + name + "_o[i] >> 6) * " + S(64 * p.bk) + " + kl_ * 64 + (((((" + name + "_o[i] >> 3) ^ kl_) & 7)) << 3)";
    os << pad << "    const bool ok_ = " << guard << ";\n";
    os << pad << "    const " << st << "* src_ = t_" << p.op->tensor << " + (ok_ ? " << addr << " : 0LL);\n";
    if (p.vec > 1) {
      if (async)
        os << pad << "    tessel_cp_async16" << (cfg.keep_operands ? "_el" : "") << "(dst_ + " << dst << ", src_, ok_"
           << (cfg.keep_operands ? ", l2pol_" : "") << ");\n";
      else
        os << pad << "    *(uint4*)(dst_ + " << dst << ") = ok_ ? *(const uint4*)src_ : make_uint4(0u, 0u, 0u, 0u);\n";
    } else {
      os << pad << "    dst_[" << dst << "] = ok_ ? *src_ : " << store_value(p.op->dtype, "0.0f") << ";\n";
    }
    os << pad << "  }\n" << pad << "};\n";
  }
};

bool direct_store(const Contraction& c, const TcConfig& g) {
  return c.plain_output && g.k_split == 1 && g.k_blocks == 1 && c.size_m() % 16 == 0 && c.size_n() % 16 == 0;
}

int64_t k_tiles(const Contraction& c, const TcConfig& g) { return (c.size_k() + g.bk - 1) / g.bk; }
// K tiles per split-K block (the last block may get fewer, never none: config_obstacle)
int64_t k_tiles_per_block(const Contraction& c, const TcConfig& g) { return (k_tiles(c, g) + g.k_blocks - 1) / g.k_blocks; }
int64_t output_tiles(const Contraction& c, const TcConfig& g) {
  return c.size_batch() * ((c.size_m() + g.bm - 1) / g.bm) * ((c.size_n() + g.bn - 1) / g.bn);
}
constexpr int64_t kCounterBytes = 256;  // alignment of the partial tiles after the counters

}  // namespace

std::string TcConfig::to_string() const {
  return S(bm) + "x" + S(bn) + "x" + S(bk) + "/" + S(wm) + "x" + S(wn) + "/ks" + S(k_split) + "/st" + S(stages) +
         (k_blocks > 1 ? "/kb" + S(k_blocks) : "") + (mma ? "/mma" : "") + (atomic_out ? "/red" : "") + (cluster ? "/cl" : "") + (wgmma ? (wg_deep ? "/wgd" : "/wg") : "") + (stream_out ? "/cs" : "") + (keep_operands ? "/el" : "") + (copies_first ? "/cf" : "") + (bulk ? "/bc" : "");
}

TcConfig TcConfig::parse(const std::string& text) {
  // "BMxBNxBK/WMxWN/ksK/stS" then any of /kbN /mma /red /cl /wg /wgd /cs /el /cf /bc (to_string's form)
  auto fail = [&](const std::string& why) -> TcConfig {
    throw UserError("GPU tiles '" + text + "': " + why + " (expected BMxBNxBK/WMxWN/ksK/stS[/kbN][/mma][/red][/cl][/wg|/wgd][/cs][/el][/cf][/bc], "
                    "as `tessel compile --explain` prints them)");
  };
  auto split = [](const std::string& s, char sep) {
    std::vector<std::string> out;
    for (size_t at = 0; at <= s.size();) {
      const size_t end = std::min(s.find(sep, at), s.size());
      out.push_back(s.substr(at, end - at));
      at = end + 1;
    }
    return out;
  };
  const std::vector<std::string> parts = split(text, '/');
  auto number = [&](const std::string& s, const char* what) {
    if (s.empty() || s.size() > 6 || s.find_first_not_of("0123456789") != std::string::npos) fail(std::string("bad ") + what + " '" + s + "'");
    return std::stoi(s);
  };
  auto dims = [&](const std::string& s, size_t n, const char* what) {
    std::vector<int> v;
    for (const auto& part : split(s, 'x')) v.push_back(number(part, what));
    if (v.size() != n) fail(std::string(what) + " needs " + std::to_string(n) + " sizes");
    return v;
  };
  if (parts.size() < 4) fail("too few fields");
  TcConfig g;
  const auto b = dims(parts[0], 3, "block tile"), w = dims(parts[1], 2, "warp tile");
  g.bm = b[0], g.bn = b[1], g.bk = b[2], g.wm = w[0], g.wn = w[1];
  if (parts[2].rfind("ks", 0) != 0) fail("third field must be ksN");
  g.k_split = number(parts[2].substr(2), "k split");
  if (parts[3].rfind("st", 0) != 0) fail("fourth field must be stN");
  g.stages = number(parts[3].substr(2), "stages");
  for (size_t i = 4; i < parts.size(); ++i) {
    const std::string& f = parts[i];
    if (f.rfind("kb", 0) == 0) g.k_blocks = number(f.substr(2), "k blocks");
    else if (f == "mma") g.mma = true;
    else if (f == "red") g.atomic_out = true;
    else if (f == "cl") g.cluster = true;
    else if (f == "wg") g.wgmma = true;
    else if (f == "wgd") g.wgmma = g.wg_deep = true;
    else if (f == "cs") g.stream_out = true;
    else if (f == "el") g.keep_operands = true;
    else if (f == "cf") g.copies_first = true;
    else if (f == "bc") g.bulk = true;
    else fail("unknown field '" + f + "'");
  }
  if (g.to_string() != text) fail("fields out of order or repeated (this reads as " + g.to_string() + ")");
  return g;
}

uint64_t tc_scratch_bytes(const Contraction& c, const TcConfig& g) {
  if (g.k_blocks <= 1 || g.atomic_out || g.cluster) return 0;
  const int64_t tiles = output_tiles(c, g);
  const int64_t counters = (tiles * 4 + kCounterBytes - 1) / kCounterBytes * kCounterBytes;
  return uint64_t(counters + tiles * g.k_blocks * g.bm * g.bn * 4);
}

std::string config_obstacle(const Contraction& c, const TcConfig& g, const std::string& arch) {
  if (g.bm % 16 || g.bn % 16 || g.wm % 16 || g.wn % 16 || g.bk % 16) return "tile sizes must be multiples of 16";
  if (g.bm % g.wm || g.bn % g.wn) return "the warp tile must divide the block tile";
  if (g.k_split < 1 || g.bk % (16 * g.k_split)) return "bk must be a multiple of 16 * k_split";
  if (g.stages < 2) return "at least 2 shared-memory stages";
  if (g.k_blocks < 1) return "k_blocks must be at least 1";
  if (g.mma && (sm_of(arch) < 80 || c.in_type != DType::F16 || g.k_split != 1 || g.k_blocks != 1))
    return "mma.sync tiles need sm_80+, f16 operands and no K split";
  if (g.atomic_out && (g.k_blocks < 2 || !c.plain_output)) return "atomic split-K needs k_blocks > 1 and a plain output";
  if (g.cluster && (sm_of(arch) < 90 || g.k_blocks < 2 || g.k_blocks > 8 || g.atomic_out))
    return "cluster split-K needs sm_90+ and 2..8 blocks per tile";
  if (g.k_blocks > 1 && (g.k_blocks - 1) * k_tiles_per_block(c, g) >= k_tiles(c, g))
    return "split-K over " + S(g.k_blocks) + " blocks leaves a block without K tiles";
  if (g.warps() > 16) return "more than 16 warps per block";
  if (g.stream_out && !g.wgmma && !g.mma) return "streaming stores are for the wgmma and mma.sync accumulators";
  if (g.keep_operands && !g.wgmma) return "evict-last operand copies are for wgmma tiles";
  if (g.copies_first && !g.wgmma) return "copies before the MMA issue are a wgmma variant";
  if (g.bulk) {
    if (sm_of(arch) < 90 || g.wgmma || g.k_blocks != 1) return "bulk operand copies need sm_90+, WMMA or mma.sync tiles and no split-K across blocks";
    const OperandPlan a = plan_operand(c.a, c, c.sizes, c.m, c.k, g.bm, g.bk, c.size_m());
    const OperandPlan b = plan_operand(c.b, c, c.sizes, c.n, c.k, g.bn, g.bk, c.size_n());
    const BulkPlan ba = bulk_plan(a, c), bb = bulk_plan(b, c);
    if (!ba.ok && !bb.ok) return "bulk operand copies: neither operand qualifies (A: " + ba.why + "; B: " + bb.why + ")";
  }
  if (g.wgmma) {
    if (sm_of(arch) < 90 || c.in_type != DType::F16) return "wgmma tiles need sm_90 (compiled for sm_90a) and f16 operands";
    if (g.mma || g.k_split != 1 || g.k_blocks != 1) return "wgmma tiles take no K split and no mma.sync";
    if (g.stream_out && !direct_store(c, g)) return "streaming stores need a plain output";
    if (g.keep_operands && !g.stream_out) return "evict-last operand copies go with evict-first output stores";
    if (g.copies_first && g.wg_deep) return "copies before the MMA issue need the stages - 2 distance (no /wgd)";
    if (g.bk != 64 || g.wm % 64 || g.wn != g.bn || g.bn > 256 || g.wm / 64 > 2) return "wgmma tiles need bk = 64, wm = 64 or 128, wn = bn <= 256";
    if (g.stages < 3) return "wgmma tiles need at least 3 stages (one MMA group stays in flight)";
    if (g.warps() > 12) return "wgmma tiles take at most 3 warpgroups";
    const OperandPlan a = plan_operand(c.a, c, c.sizes, c.m, c.k, g.bm, g.bk, c.size_m(), true);
    const OperandPlan b = plan_operand(c.b, c, c.sizes, c.n, c.k, g.bn, g.bk, c.size_n(), true);
    if (a.vec != 8 || b.vec != 8) return "wgmma tiles need 16-byte loads of both operands";
    if ((!a.k_inner && g.wm % 64) || (!b.k_inner && g.bn % 64)) return "wgmma: an M- or N-contiguous operand needs tiles of 64";
    const int64_t pipe = int64_t(g.stages) * (g.bm + g.bn) * g.bk * 2 + 1024;
    const int64_t epi = direct_store(c, g) ? 0 : int64_t(g.bm) * (g.bn + 4) * 4 + 1024;
    if (std::max(pipe, epi) + 256 > shared_budget_bytes(arch)) return "shared memory over the " + arch + " budget";
    return "";
  }
  if ((g.wm / 16) * (g.wn / 16) > 16) return "more than 16 accumulator fragments per warp";
  const int eb = elem_bytes(c.in_type), vec = 16 / eb;
  const int64_t a = std::max<int64_t>(int64_t(g.bm) * (g.bk + vec), int64_t(g.bk) * (g.bm + vec));
  const int64_t b = std::max<int64_t>(int64_t(g.bn) * (g.bk + vec), int64_t(g.bk) * (g.bn + vec));
  const int64_t pipe = g.stages * (a + b) * eb;
  const int64_t epi = direct_store(c, g) ? 0 : int64_t(g.k_split) * g.bm * (g.bn + 4) * 4;
  if (std::max(pipe, epi) + 256 > shared_budget_bytes(arch)) return "shared memory over the " + arch + " budget";
  (void)c;
  return "";
}

std::vector<TcConfig> tc_candidates(const Contraction& c, const std::string& arch, int sm_count) {
  const int64_t M = c.size_m(), N = c.size_n(), K = c.size_k(), B = c.size_batch();
  std::vector<TcConfig> out;
  auto add = [&](TcConfig g) {
    if (config_obstacle(c, g, arch).empty()) out.push_back(g);
  };
  const int64_t tiles128 = B * ((M + 127) / 128) * ((N + 127) / 128);
  if (M >= 256 && N >= 256 && K >= 256 && tiles128 >= 64) {
    if (sm_of(arch) >= 90 && c.in_type == DType::F16) {  // warpgroup MMA (sm_90a)
      // measured on an H200 (bench gpu): 128x256 and 256x128 with 4 stages fastest, 128x256/wg/cs
      // on 4096^3, 256x128/wg/cs/cf on the seed conv; /wgd keeps one more copy in flight for a
      // second barrier per K tile (slower)
      for (TcConfig g : std::initializer_list<TcConfig>{{128, 256, 64, 64, 256, 1, 4},
                                                        {256, 128, 64, 128, 128, 1, 4},
                                                        {128, 128, 64, 64, 128, 1, 6},
                                                        {128, 128, 64, 64, 128, 1, 3}}) {
        g.wgmma = true;
        if (direct_store(c, g)) {  // evict-first output stores (measured +10 % on 4096^3, +17 % on the seed conv) first
          g.stream_out = true;
          add(g);
          g.copies_first = true;  // copies issued before the MMAs of the K tile (-9 % on the seed conv)
          add(g);
          g.copies_first = false;
          g.wg_deep = true;
          add(g);
          g.stream_out = g.wg_deep = false;
        }
        add(g);
        g.wg_deep = true;
        add(g);
      }
      TcConfig g3{192, 256, 64, 64, 256, 1, 4};  // 3 warpgroups: fewer L2 bytes per flop, but spills today
      g3.wgmma = true;
      add(g3);
    }
    add({128, 256, 64, 64, 64, 1, 3});  // the fastest measured for 4096^3 on an H200 (bench gpu)
    if (sm_of(arch) >= 80 && c.in_type == DType::F16) {  // ldmatrix + mma.sync: as fast (+-3%) on an H200
      for (TcConfig g : std::initializer_list<TcConfig>{{128, 256, 32, 64, 64, 1, 4},
                                                        {128, 256, 64, 64, 64, 1, 3},
                                                        {256, 128, 32, 64, 64, 1, 4},
                                                        {128, 128, 32, 64, 64, 1, 4},
                                                        {128, 128, 32, 32, 64, 1, 4},
                                                        {128, 256, 64, 64, 64, 1, 4}}) {
        g.mma = true;
        add(g);
      }
    }
    add({128, 256, 32, 64, 64, 1, 4});
    add({128, 128, 32, 32, 64, 1, 4});  // 8 warps of 32x64, two blocks per SM: more warps to hide latency
    add({128, 256, 32, 32, 64, 1, 4});  // 16 warps of 32x64
    add({128, 128, 64, 32, 64, 1, 3});
    add({128, 256, 64, 64, 64, 1, 4});  // 208 KiB: sm_90's opt-in shared memory
    add({128, 256, 64, 32, 64, 1, 3});
    add({256, 128, 32, 64, 64, 1, 4});
    add({128, 128, 32, 64, 64, 1, 4});
    add({128, 256, 32, 64, 64, 1, 3});
    add({128, 128, 64, 64, 64, 1, 3});
    add({128, 128, 32, 64, 64, 1, 2});  // pre-Ampere shared-memory budgets
  }
  // skinny and small problems: few output tiles, so the K range of a tile is split over warps
  auto round16 = [](int64_t v) { return int((v + 15) / 16 * 16); };
  for (int bn : {64, 32, 16, 128}) {
    if (bn > round16(N) && bn != std::min(128, round16(N))) continue;
    for (int bm : {16, 32, 64}) {
      for (int bk : {128, 64, 256, 512}) {
        if (bk == 512 && K > 512) continue;
        const int bkk = int(std::min<int64_t>(bk, round16(K)));
        TcConfig g;
        g.bm = bm;
        g.bn = std::min(bn, round16(N));
        g.bk = bkk;
        g.wm = std::min(bm, 32);
        g.wn = std::min(g.bn, 64);
        const int wtiles = (g.bm / g.wm) * (g.bn / g.wn);
        g.k_split = std::max(1, std::min(8 / wtiles, g.bk / 16));
        const int64_t kt = (K + g.bk - 1) / g.bk;
        // latency-bound: every K tile in flight from the prologue when they fit
        g.stages = int(std::max<int64_t>(2, std::min<int64_t>(6, kt + 1)));
        if (!config_obstacle(c, g, arch).empty()) g.stages = int(std::max<int64_t>(2, std::min<int64_t>(4, kt)));
        add(g);
        if (g.k_split >= 4 && bkk <= 128) {  // fewer warps: less to reduce, shorter launch
          g.k_split /= 2;
          add(g);
        }
      }
    }
  }
  // split-K across blocks: a problem with fewer output tiles than SMs is latency-bound; K is split
  // so that about one (or two) blocks per SM each stream a slice of K, at least 2 K tiles of 64 per
  // slice where K allows (fewer, longer slices amortise the partial-tile round trip through L2)
  const int sms = sm_count > 0 ? sm_count : 0;
  if (sms > 0) {
    std::vector<TcConfig> split;
    for (const TcConfig& g0 : out) {
      if (g0.bm >= 128) continue;
      const int64_t tiles = output_tiles(c, g0);
      if (tiles * 2 > sms) continue;  // at least half the SMs idle without a split
      for (int bk : {64, 32, 128}) {
        TcConfig g = g0;
        g.bk = int(std::min<int64_t>(bk, round16(K)));
        g.k_split = std::max(1, std::min(g0.k_split, g.bk / 16));
        for (int waves : {1, 2}) {
          int64_t kb = std::min<int64_t>((int64_t(sms) * waves + tiles - 1) / tiles, k_tiles(c, g));
          kb = std::min<int64_t>(kb, 8);
          while (kb > 1 && (kb - 1) * ((k_tiles(c, g) + kb - 1) / kb) >= k_tiles(c, g)) --kb;
          if (kb < 2) continue;
          g.k_blocks = int(kb);
          g.stages = int(std::max<int64_t>(2, std::min<int64_t>(6, k_tiles_per_block(c, g) + 1)));
          if (!config_obstacle(c, g, arch).empty()) g.stages = 2;
          if (config_obstacle(c, g, arch).empty()) split.push_back(g);
          g.atomic_out = true;
          if (config_obstacle(c, g, arch).empty()) split.push_back(g);
          g.atomic_out = false;
          g.cluster = true;
          if (config_obstacle(c, g, arch).empty()) split.push_back(g);
          g.cluster = false;
        }
      }
    }
    out.insert(out.end(), split.begin(), split.end());
  }
  // sm_90: the latency-bound tiles again with bulk operand copies (cp.async.bulk + mbarrier). On an
  // H200 a load-only kernel fetches a skinny GEMM's tiles faster through the copy engine (64 KiB per
  // block: 2.0 vs 2.6 us per call in a CUDA graph), but in the whole kernel only 16x16x512 on
  // 512x16x512 gained (2.03 vs 2.09 us with PDL) and row copies of 256 B lost badly (32 per
  // stage: 6.2 us): measured, ranked after the cp.async tiles
  if (sm_of(arch) >= 90 && sms > 0) {
    std::vector<TcConfig> bulk;
    for (TcConfig g : out) {
      if (g.wgmma || g.k_blocks != 1 || output_tiles(c, g) > 2 * sms) continue;
      g.bulk = true;
      if (config_obstacle(c, g, arch).empty()) bulk.push_back(g);
    }
    out.insert(out.end(), bulk.begin(), bulk.end());
  }
  {  // distinct configurations only (several base candidates map to one split-K variant)
    std::set<std::string> seen;
    std::vector<TcConfig> uniq;
    for (const auto& g : out)
      if (seen.insert(g.to_string()).second) uniq.push_back(g);
    out = std::move(uniq);
  }
  // order the small-problem candidates: enough blocks to cover the SMs first, then larger tiles
  const double sm_f = sms > 0 ? double(sms) : 128.0;
  std::stable_sort(out.begin(), out.end(), [&](const TcConfig& x, const TcConfig& y) {
    auto score = [&](const TcConfig& g) {
      const int64_t blocks = output_tiles(c, g) * g.k_blocks;
      if (g.bm >= 128) return blocks >= 64 ? 0.0 : 10.0;
      const double occupancy = std::min<double>(double(blocks), sm_f) / sm_f;
      // split-K blocks: measured slower than K split over the warps of one block on an H200 in
      // the CUDA-graph harness (README: one more dependent round trip per call than the ~1 us it
      // saves), so they follow the unsplit tiles: cluster reduction first, global ones last;
      // among them 16-row tiles (more output tiles, fewer splits) and 64-deep K tiles
      if (g.k_blocks > 1)
        return (g.cluster ? 5.0 : 9.0) + (1.0 - occupancy) * 4 + (g.bk == 64 ? 0 : 0.2) + (g.bm == 16 ? 0 : 0.1) + (blocks > 2 * sm_f ? 0.3 : 0);
      // unsplit small tiles, from the H200 bench (bench_h200.json: the fastest of up to 40 measured
      // candidates on each seed GEMM): K split over 4 warps, about 4 K tiles, and about one block
      // per two SMs (64 on 132 SMs: fewer leave SMs idle, more re-read the shared operand) won
      // on every shape, squarer tiles on ties; the first candidate is then the measured best or
      // within 1 % of it
      if (sms > 0 && blocks <= 2 * sm_f)
        return 1.0 + 0.5 * std::abs(std::log2(double(blocks) / (sm_f / 2))) + 0.3 * std::abs(std::log2(g.k_split / 4.0)) +
               0.3 * std::abs(std::log2(double(k_tiles(c, g)) / 4.0)) + 0.05 * std::abs(std::log2(double(g.bm) / g.bn)) +
               (g.bulk ? 0.6 : 0.0);
      return 1.0 + (1.0 - occupancy) * 4 + (g.bk == 128 ? 0 : 0.5) + (g.bn == std::min<int64_t>(N, 64) ? 0 : 0.3) + (g.bulk ? 0.6 : 0.0);
    };
    return score(x) < score(y);
  });
  out.erase(std::unique(out.begin(), out.end(),
                        [](const TcConfig& x, const TcConfig& y) { return x.to_string() == y.to_string(); }),
            out.end());
  return out;
}

Launch emit_tensor_core(const kernel::Kernel& k, const Contraction& c, const TcConfig& cfg, const std::string& arch,
                        std::ostringstream& os, std::vector<std::string>& explain, int sm_count_hint, std::vector<Launch>* before,
                        bool pdl, int pdl_prefetch) {
  const std::string obstacle = config_obstacle(c, cfg, arch);
  if (!obstacle.empty()) throw UserError("CUDA emitter: tile configuration " + cfg.to_string() + ": " + obstacle);
  TcEmitter e{k, c, cfg, os};
  e.async = sm_of(arch) >= 80;
  e.threads = cfg.warps() * 32;
  const int64_t M = c.size_m(), N = c.size_n(), K = c.size_k();
  const bool wg = cfg.wgmma;
  OperandPlan pa = plan_operand(c.a, c, k.sizes, c.m, c.k, cfg.bm, cfg.bk, M, wg);
  OperandPlan pb = plan_operand(c.b, c, k.sizes, c.n, c.k, cfg.bn, cfg.bk, N, wg);
  BulkPlan ba, bb;  // TcConfig::bulk: which operands the bulk copy engine fetches
  if (cfg.bulk) {
    ba = bulk_plan(pa, c), bb = bulk_plan(pb, c);
    if (ba.whole) pa.pad = 0;  // one copy per stage: the shared rows are the global ones
    if (bb.whole) pb.pad = 0;
  }
  const bool i8 = c.in_type == DType::I8;
  const std::string ft = i8 ? "signed char" : "__half";
  const std::string acct = i8 ? "int" : "float";
  // matrix_a is [m][k] row-major when its tile is K-inner; matrix_b is [k][n] row-major when N-inner
  const std::string la = pa.k_inner ? "wmma::row_major" : "wmma::col_major";
  const std::string lb = pb.k_inner ? "wmma::col_major" : "wmma::row_major";
  const int warps_m = cfg.bm / cfg.wm, warps_n = cfg.bn / cfg.wn, fm = cfg.wm / 16, fn = cfg.wn / 16;
  const int ldc = cfg.bn + 4;
  const int eb = elem_bytes(c.in_type);
  const int64_t a_stage = pa.stage_elems(), b_stage = pb.stage_elems();
  const int64_t pipe_bytes = cfg.stages * (a_stage + b_stage) * eb;
  const bool direct = direct_store(c, cfg);
  const int64_t epi_bytes = direct ? 0 : int64_t(cfg.k_split) * cfg.bm * ldc * 4;
  const int64_t smem = (std::max(pipe_bytes, epi_bytes) + 127) / 128 * 128 + (wg ? 1024 : 0);  // wgmma: 1024-byte alignment
  const int64_t tiles_m = (M + cfg.bm - 1) / cfg.bm, tiles_n = (N + cfg.bn - 1) / cfg.bn;
  // wgmma tiles with at most 64 accumulators per thread whose shared memory fits twice in an SM
  // (228 KiB, 1 KiB reserved per block) ask for 2 blocks per SM (<= 128 registers): one block's
  // prologue and epilogue overlap the other's main loop
  const int wg_min_blocks = wg && (cfg.wm / 64) * cfg.bn / 2 <= 64 && 2 * (smem + 1024) <= 228 * 1024 ? 2 : 1;
  const std::string name = "tessel_wmma_" + k.name;
  // The contraction kernel's launch: output tiles x K blocks x batch (e.threads is known once emitted).
  auto main_launch = [&] {
    Launch l;
    l.kernel = name;
    l.grid[0] = unsigned(tiles_m * tiles_n);
    l.grid[1] = unsigned(cfg.k_blocks);
    l.grid[2] = unsigned(c.size_batch());
    l.block = unsigned(e.threads);
    l.dynamic_shared_bytes = uint32_t(smem);
    return l;
  };
  const ir::Statement& anchor = k.function->statements.at(c.anchor);

  auto dims_text = [](const std::vector<ContractionDim>& ds) {
    std::string s;
    for (const auto& d : ds) s += (s.empty() ? "" : ",") + d.var + "=" + S(d.extent);
    return s.empty() ? std::string("-") : s;
  };
  explain.push_back("TensorCores: " + anchor.name + " is a matrix multiply: M(" + dims_text(c.m) + ")=" + S(M) + " N(" +
                    dims_text(c.n) + ")=" + S(N) + " K(" + dims_text(c.k) + ")=" + S(K) + " batch(" + dims_text(c.batch) + ")");
  explain.push_back("  matrix_a = " + c.a.tensor + " (" + la.substr(6) + "), matrix_b = " + c.b.tensor + " (" + lb.substr(6) +
                    "), wmma m16n16k16 " + (i8 ? "s8 -> s32" : "f16 -> f32") + (c.swapped ? "; operands swapped so stores run along N" : ""));
  if (!pa.bounded.empty() || !pb.bounded.empty())
    explain.push_back("  implicit GEMM: " + std::string(!pa.bounded.empty() ? c.a.tensor : c.b.tensor) +
                      " is read through an im2col view; out-of-bounds elements (padding) are zero-filled by the shared-memory load");
  if (c.a.producer || c.b.producer)
    explain.push_back("  implicit GEMM: " + std::string(c.a.producer ? c.a.producer->output : c.b.producer->output) +
                      " is not materialised; its padding guard and im2col addressing are in the shared-memory load");
  explain.push_back("  tiles " + cfg.to_string() + ": block " + S(cfg.bm) + "x" + S(cfg.bn) + " (stage level), " + S(cfg.warps()) +
                    " warps, each " + S(cfg.wm) + "x" + S(cfg.wn) + " = " + S(fm * fn) + " fragments" +
                    (cfg.k_split > 1 ? ", K of each tile split over " + S(cfg.k_split) + " warps and reduced in shared memory" : "") +
                    "; grid " + S(tiles_m * tiles_n) + (cfg.k_blocks > 1 ? " x " + S(cfg.k_blocks) : "") + " x " + S(c.size_batch()));
  if (cfg.k_blocks == 1 && sm_count_hint > 0 && tiles_m * tiles_n * c.size_batch() * 2 <= sm_count_hint && cfg.bm < 128)
    explain.push_back("  split-K across blocks: not used: " + S(tiles_m * tiles_n * c.size_batch()) + " output tiles for " + S(sm_count_hint) +
                      " SMs, but split-K candidates (cluster / last-block / atomic reduction) measured slower than K split over the warps "
                      "of one block on an H200 (emit_cuda/README.md); they are ranked after the unsplit tiles");
  if (cfg.k_blocks > 1)
    explain.push_back("  split-K across blocks: " + S(tiles_m * tiles_n * c.size_batch()) + " output tiles for " +
                      (sm_count_hint > 0 ? S(sm_count_hint) + " SMs" : std::string("the SMs")) + ", so K (" + S(k_tiles(c, cfg)) +
                      " tiles of " + S(cfg.bk) + ") is split over " + S(cfg.k_blocks) + " blocks of " + S(k_tiles_per_block(c, cfg)) +
                      " K tiles (" + S(tiles_m * tiles_n * c.size_batch() * cfg.k_blocks) +
                      " blocks); " +
                      (cfg.cluster ? std::string("the blocks of a tile are one thread-block cluster (sm_90): partial tiles stay in shared memory, "
                                                 "each block sums a 1/" + S(cfg.k_blocks) + " slice of the tile over the cluster's shared memory "
                                                 "(distributed shared memory, rank order) and runs its part of the epilogue")
                       : cfg.atomic_out ? std::string("partial tiles are atomically added into the zeroed output")
                                        : std::string("partial tiles in global scratch, the last block of a tile (atomic counter) sums them in "
                                                      "split order and runs the epilogue")));
  explain.push_back("  shared memory: " + S(cfg.stages) + " stages (" + (e.async ? "cp.async, sm_80+" : "synchronous 128-bit loads, pre-sm_80") +
                    "), rows padded by 16 B against bank conflicts, " + S(smem) + " B; A " +
                    (pa.vec > 1 ? "128-bit" : "scalar") + " loads, B " + (pb.vec > 1 ? "128-bit" : "scalar") + " loads");
  if (!c.epilogue.empty()) {
    std::string s;
    for (int i : c.epilogue) s += (s.empty() ? "" : ", ") + k.function->statements.at(i).name;
    explain.push_back("  fused epilogue on the accumulators before the global store: " + s);
  }

  os << "\n/* TensorCore kernel for " << anchor.name << " (" << cfg.to_string() << ") */\n";
  if (cfg.cluster) {
    os << "static __device__ __forceinline__ unsigned tessel_cluster_addr(const void* p, unsigned rank) {\n"
          "  unsigned r;\n"
          "  asm volatile(\"mapa.shared::cluster.u32 %0, %1, %2;\\n\" : \"=r\"(r) : \"r\"((unsigned)__cvta_generic_to_shared(p)), \"r\"(rank));\n"
          "  return r;\n}\n"
          // no memory clobber: the loads between the two cluster barriers may be issued together
          "static __device__ __forceinline__ float4 tessel_cluster_ld4(const float* p, unsigned rank) {\n"
          "  float4 v;\n  asm volatile(\"ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\\n\" : \"=f\"(v.x), \"=f\"(v.y), \"=f\"(v.z), \"=f\"(v.w) : \"r\"(tessel_cluster_addr(p, rank)));\n  return v;\n}\n"
          "static __device__ __forceinline__ int4 tessel_cluster_ld4(const int* p, unsigned rank) {\n"
          "  int4 v;\n  asm volatile(\"ld.shared::cluster.v4.s32 {%0, %1, %2, %3}, [%4];\\n\" : \"=r\"(v.x), \"=r\"(v.y), \"=r\"(v.z), \"=r\"(v.w) : \"r\"(tessel_cluster_addr(p, rank)));\n  return v;\n}\n"
          "static __device__ __forceinline__ void tessel_cluster_sync() {\n"
          "  asm volatile(\"barrier.cluster.arrive.release.aligned;\\nbarrier.cluster.wait.acquire.aligned;\\n\" ::: \"memory\");\n}\n";
  }
  if (cfg.bulk)
    os << "static __device__ __forceinline__ void tessel_bulk_g2s(void* smem, const void* gmem, unsigned bytes, unsigned long long* bar) {\n"
          "  asm volatile(\"cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\\n\"\n"
          "               ::\"r\"((unsigned)__cvta_generic_to_shared(smem)), \"l\"(gmem), \"r\"(bytes), \"r\"((unsigned)__cvta_generic_to_shared(bar)) : \"memory\");\n}\n"
          "static __device__ __forceinline__ void tessel_mbar_expect(unsigned long long* bar, unsigned bytes) {\n"
          "  asm volatile(\"mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\\n\" ::\"r\"((unsigned)__cvta_generic_to_shared(bar)), \"r\"(bytes) : \"memory\");\n}\n"
          "static __device__ __forceinline__ void tessel_mbar_wait(unsigned long long* bar, unsigned parity) {\n"
          "  asm volatile(\"{\\n.reg .pred p;\\nTESSEL_WAIT_%=:\\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\\n@!p bra TESSEL_WAIT_%=;\\n}\\n\"\n"
          "               ::\"r\"((unsigned)__cvta_generic_to_shared(bar)), \"r\"(parity) : \"memory\");\n}\n";
  if (wg) {
    const std::string ta = pa.k_inner ? "0" : "1", tb = pb.k_inner ? "0" : "1";
    const int nreg = cfg.bn / 2;
    os << "static __device__ __forceinline__ unsigned long long tessel_wg_desc(const void* p, unsigned lbo) {\n"
          "  const unsigned a = (unsigned)__cvta_generic_to_shared(p);  /* 128-byte swizzle, SBO 1024 B */\n"
          "  return (unsigned long long)((a & 0x3FFFFu) >> 4) | ((unsigned long long)(lbo >> 4) << 16) | (64ull << 32) | (1ull << 62);\n}\n"
          "static __device__ __forceinline__ void tessel_wg_fence() { asm volatile(\"wgmma.fence.sync.aligned;\\n\" ::: \"memory\"); }\n"
          "static __device__ __forceinline__ void tessel_wg_commit() { asm volatile(\"wgmma.commit_group.sync.aligned;\\n\" ::: \"memory\"); }\n"
          "template <int N> static __device__ __forceinline__ void tessel_wg_wait() { asm volatile(\"wgmma.wait_group.sync.aligned %0;\\n\" ::\"n\"(N) : \"memory\"); }\n"
          "static __device__ __forceinline__ void tessel_fence_proxy_async() { asm volatile(\"fence.proxy.async.shared::cta;\\n\" ::: \"memory\"); }\n";
    os << "#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)\n#error \"wgmma tiles must be compiled for sm_90a\"\n#endif\n";
    if (cfg.keep_operands)
      os << "static __device__ __forceinline__ void tessel_cp_async16_el(void* smem, const void* gmem, bool pred, unsigned long long pol) {\n"
            "  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);  /* L2 evict-last: the operands stay, the output streams */\n"
            "  asm volatile(\"cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\\n\" ::\"r\"(s), \"l\"(gmem), \"r\"(pred ? 16 : 0), \"l\"(pol));\n"
            "}\n";
    os << "static __device__ __forceinline__ void tessel_wgmma_n" << cfg.bn << "_" << ta << tb
       << "(float* d, unsigned long long da, unsigned long long db) {\n  asm volatile(\"wgmma.mma_async.sync.aligned.m64n" << cfg.bn
       << "k16.f32.f16.f16 {";
    for (int r = 0; r < nreg; ++r) os << (r ? ", " : "") << "%" << r;
    os << "}, %" << nreg << ", %" << nreg + 1 << ", 1, 1, 1, " << ta << ", " << tb << ";\\n\"\n    : ";
    for (int r = 0; r < nreg; ++r) os << (r ? ", " : "") << "\"+f\"(d[" << r << "])";
    os << "\n    : \"l\"(da), \"l\"(db));\n}\n";
  }
  os << "extern \"C\" __global__ void " << (cfg.cluster ? "__cluster_dims__(1, " + S(cfg.k_blocks) + ", 1) " : "") << "__launch_bounds__("
     << e.threads << (wg ? ", " + S(wg_min_blocks) : "") << ") " << name << "(" << kernel_parameters(k) << ") {\n";
  os << "  using namespace nvcuda;\n";
  if (wg) {  // the swizzle pattern repeats every 1024 bytes: stages start on 1024-byte boundaries
    os << "  extern __shared__ __align__(1024) unsigned char smem_raw_[];\n";
    os << "  unsigned char* smem_ = smem_raw_ + ((1024u - ((unsigned)__cvta_generic_to_shared(smem_raw_) & 1023u)) & 1023u);\n";
  } else {
    os << "  extern __shared__ __align__(128) unsigned char smem_[];\n";
  }
  os << "  " << ft << "* As_ = (" << ft << "*)smem_;\n";
  os << "  " << ft << "* Bs_ = (" << ft << "*)(smem_ + " << cfg.stages * a_stage * eb << ");\n";
  os << "  (void)scratch;\n";
  if (cfg.bulk) {  // one transaction barrier per stage; phase u of stage s completes tile u * stages + s
    os << "  __shared__ __align__(8) unsigned long long tessel_bar_[" << cfg.stages << "];\n";
    os << "  if (threadIdx.x == 0) {\n    #pragma unroll\n    for (int s = 0; s < " << cfg.stages
       << "; ++s) asm volatile(\"mbarrier.init.shared::cta.b64 [%0], 1;\\n\" ::\"r\"((unsigned)__cvta_generic_to_shared(tessel_bar_ + s)));\n";
    os << "    asm volatile(\"fence.mbarrier_init.release.cluster;\\n\" ::: \"memory\");  /* visible to the copy engine */\n  }\n";
    os << "  __syncthreads();\n";
  }
  if (wg && cfg.keep_operands)
    os << "  unsigned long long l2pol_;\n  asm volatile(\"createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\\n\" : \"=l\"(l2pol_));\n";
  // grouped rasterisation: 8 block rows share B tiles in L2
  os << "  const int pid_ = blockIdx.x, group_ = 8 * " << tiles_n << ", first_m_ = (pid_ / group_) * 8;\n";
  os << "  const int gsize_ = min(" << tiles_m << " - first_m_, 8);\n";
  os << "  const int tile_m_ = first_m_ + (pid_ % group_) % gsize_, tile_n_ = (pid_ % group_) / gsize_;\n";
  os << "  const int m0_ = tile_m_ * " << cfg.bm << ", n0_ = tile_n_ * " << cfg.bn << ";\n";
  for (const auto& d : c.batch) os << "  int bv_" << d.var << ";\n";
  e.decompose("  ", "blockIdx.z", c.batch, "bv_");
  // unified thread index: every lane of a warp works on the same fragments
  os << "  const int warp_ = threadIdx.x / 32;\n";
  if (wg) {  // warpgroup g: rows g*wm.., warp w of it: rows w*16.. of each m64 tile (accumulator layout)
    os << "  const int ks_ = 0, wg_ = warp_ / 4;\n";
    os << "  const int wm_ = wg_ * " << cfg.wm << " + (warp_ % 4) * 16, wn_ = 0;\n";
  } else {
    os << "  const int ks_ = warp_ / " << warps_m * warps_n << ", wi_ = warp_ % " << warps_m * warps_n << ";\n";
    os << "  const int wm_ = (wi_ / " << warps_n << ") * " << cfg.wm << ", wn_ = (wi_ % " << warps_n << ") * " << cfg.wn << ";\n";
  }
  const int64_t bulk_bytes = (ba.ok ? int64_t(ba.rows) * ba.row_elems * eb : 0) + (bb.ok ? int64_t(bb.rows) * bb.row_elems * eb : 0);
  // the bulk copies of one stage: warp 0 announces the stage's bytes on its barrier, then its lanes
  // issue one copy per row (or one for a whole stage)
  auto bulk_loader = [&](const std::string& name, const OperandPlan& p, const BulkPlan& b, const std::string& smem_name, bool first) {
    const std::string origin = name == "a" ? "m0_" : "n0_";
    std::string base = S(p.op->base) + "LL + " + S(p.op->coeff.at(b.outer_var)) + "LL * " + origin;
    for (const auto& d : c.batch)
      if (p.op->coeff.count(d.var)) base += " + " + S(p.op->coeff.at(d.var)) + "LL * bv_" + d.var;
    const int64_t row_bytes = int64_t(b.row_elems) * eb;
    os << "  /* " << name << " = " << p.op->tensor << ": bulk copies (cp.async.bulk), "
       << (b.whole ? "one copy of " + S(b.rows * row_bytes) + " B per stage into unpadded rows"
                   : S(b.rows) + " rows of " + S(row_bytes) + " B per stage") << ", shared tile [" << (p.k_inner ? p.tile_outer : p.bk) << "]["
       << p.ld() << "] */\n";
    os << "  auto load_" << name << " = [&](int stage_, int kt_) {\n";
    os << "    if (warp_ != 0) return;\n";
    if (first) os << "    if (threadIdx.x == 0) tessel_mbar_expect(tessel_bar_ + stage_, " << bulk_bytes << "u);\n    __syncwarp();\n";
    os << "    " << storage_type(p.op->dtype) << "* dst_ = " << smem_name << " + stage_ * " << p.stage_elems() << ";\n";
    os << "    const " << storage_type(p.op->dtype) << "* src_ = t_" << p.op->tensor << " + (" << base << " + " << b.k_stride << "LL * (kt_ * "
       << p.bk << "));\n";
    if (b.whole)
      os << "    if (threadIdx.x == 0) tessel_bulk_g2s(dst_, src_, " << b.rows * row_bytes << "u, tessel_bar_ + stage_);\n";
    else
      os << "    for (int r_ = threadIdx.x; r_ < " << b.rows << "; r_ += 32) tessel_bulk_g2s(dst_ + r_ * " << p.ld() << ", src_ + r_ * "
         << b.row_stride << "LL, " << row_bytes << "u, tessel_bar_ + stage_);\n";
    os << "  };\n";
  };
  if (ba.ok) bulk_loader("a", pa, ba, "As_", true);
  else e.loader("a", pa, "As_");
  if (bb.ok) bulk_loader("b", pb, bb, "Bs_", !ba.ok);
  else e.loader("b", pb, "Bs_");
  if (cfg.bulk) {
    std::string how;
    for (const auto& [nm, b] : {std::pair<std::string, const BulkPlan*>{c.a.tensor, &ba}, {c.b.tensor, &bb}})
      how += (how.empty() ? "" : "; ") + nm + (b->ok ? b->whole ? ": one bulk copy per stage" : ": " + S(b->rows) + " bulk row copies per stage"
                                                     : ": cp.async (" + b->why + ")");
    explain.push_back("  bulk copy engine (sm_90): " + how + "; one transaction barrier (mbarrier) per stage");
  }
  const bool mma = cfg.mma || wg;  // wgmma accumulators have the mma.sync m16n8 layout per warp
  const int fn8 = cfg.wn / 8;  // m16n8 accumulator tiles along N (mma path)
  const int rstep = wg ? 64 : 16;  // rows between accumulator tiles i of a warp
  const int fmx = wg ? cfg.wm / 64 : fm;
  if (wg) {
    os << "  const int lane_ = threadIdx.x % 32;\n";
    os << "  float acc_[" << fmx << "][" << fn8 << "][4];\n";
    os << "  #pragma unroll\n  for (int i = 0; i < " << fmx << "; ++i)\n    #pragma unroll\n    for (int j = 0; j < " << fn8
       << "; ++j) acc_[i][j][0] = acc_[i][j][1] = acc_[i][j][2] = acc_[i][j][3] = 0.0f;\n";
    explain.push_back("  wgmma path (sm_90a): " + S(cfg.warps() / 4) + " warpgroup(s), each " + S(fmx) + " x wgmma.m64n" + S(cfg.bn) +
                      "k16 f16 -> f32 per 16-deep K step; A " + (pa.k_inner ? "K" : "M") + "-major, B " + (pb.k_inner ? "K" : "N") +
                      "-major in 128-byte-swizzled shared memory filled by cp.async; one MMA group in flight while the next tiles load");
  } else if (mma) {
    os << "  const int lane_ = threadIdx.x % 32;\n";
    os << "  float acc_[" << fm << "][" << fn8 << "][4];\n";
    os << "  #pragma unroll\n  for (int i = 0; i < " << fm << "; ++i)\n    #pragma unroll\n    for (int j = 0; j < " << fn8
       << "; ++j) acc_[i][j][0] = acc_[i][j][1] = acc_[i][j][2] = acc_[i][j][3] = 0.0f;\n";
    // ldmatrix lane addresses (x4: lanes 8q..8q+7 address the rows of matrix q)
    if (pa.k_inner)  // [m][k]: a0..a3 = (m0-7,k0-7) (m8-15,k0-7) (m0-7,k8-15) (m8-15,k8-15)
      os << "  const int a_lrow_ = lane_ & 15, a_lcol_ = (lane_ >> 4) * 8;  /* A ldmatrix: row m, col k */\n";
    else  // [k][m], transposed
      os << "  const int a_lrow_ = (lane_ & 7) + ((lane_ >> 4) << 3), a_lcol_ = ((lane_ >> 3) & 1) * 8;  /* A ldmatrix.trans: row k, col m */\n";
    if (pb.k_inner)  // [n][k]: (n0-7,k0-7)=b0 n8#0, (n0-7,k8-15)=b1 #0, (n8-15,k0-7)=b0 #1, (n8-15,k8-15)=b1 #1
      os << "  const int b_lrow_ = (lane_ & 7) + ((lane_ >> 4) << 3), b_lcol_ = ((lane_ >> 3) & 1) * 8;  /* B ldmatrix: row n, col k */\n";
    else  // [k][n], transposed: (k0-7,n0-7) (k8-15,n0-7) (k0-7,n8-15) (k8-15,n8-15)
      os << "  const int b_lrow_ = lane_ & 15, b_lcol_ = (lane_ >> 4) * 8;  /* B ldmatrix.trans: row k, col n */\n";
    explain.push_back("  mma.sync path (sm_80+): ldmatrix" + std::string(pa.k_inner ? "" : ".trans") + " A, ldmatrix" +
                      (pb.k_inner ? "" : ".trans") + " B from the padded (conflict-free) shared rows, mma.sync.m16n8k16 f16 -> f32, " +
                      S(fm * fn8) + " m16n8 accumulator tiles per warp");
  } else {
  os << "  wmma::fragment<wmma::accumulator, 16, 16, 16, " << acct << "> acc_[" << fm << "][" << fn << "];\n";
  os << "  #pragma unroll\n  for (int i = 0; i < " << fm << "; ++i)\n    #pragma unroll\n    for (int j = 0; j < " << fn
     << "; ++j) wmma::fill_fragment(acc_[i][j], 0);\n";
  }
  const int64_t kt_total = (K + cfg.bk - 1) / cfg.bk;
  if (cfg.k_blocks > 1) {
    const int64_t per = k_tiles_per_block(c, cfg);
    os << "  const int kt0_ = blockIdx.y * " << per << ";  /* split-K: this block's first K tile */\n";
    os << "  const int kt_total_ = min(" << per << ", " << kt_total << " - kt0_);\n";
  } else {
    os << "  const int kt0_ = 0, kt_total_ = " << kt_total << ";\n";
  }
  // PDL prefetch: the prologue copies of an operand no earlier kernel writes (CudaOptions::
  // pdl_prefetch) go before the wait, in a cp.async group of their own that precedes the
  // pipeline's groups (so every wait_group below still covers them)
  const bool pre_a = pdl && (pdl_prefetch & 1) && !ba.ok, pre_b = pdl && (pdl_prefetch & 2) && !bb.ok;
  const int prologue = wg ? (cfg.wg_deep ? cfg.stages - 1 : cfg.stages - 2) : cfg.stages - 1;
  const std::string prologue_loads = std::string(pre_a ? "" : "load_a(s, kt0_ + s); ") + (pre_b ? "" : "load_b(s, kt0_ + s); ");
  if (pre_a || pre_b) {
    os << "  /* PDL: " << (pre_a ? c.a.tensor : "") << (pre_a && pre_b ? " and " : "") << (pre_b ? c.b.tensor : "")
       << " (not written by earlier kernels) copied before the wait */\n";
    os << "  #pragma unroll\n  for (int s = 0; s < " << prologue << "; ++s)\n    if (s < kt_total_) { " << (pre_a ? "load_a(s, kt0_ + s); " : "")
       << (pre_b ? "load_b(s, kt0_ + s); " : "") << "}\n  tessel_cp_commit();\n";
    explain.push_back("  programmatic dependent launch: the first " + S(std::min<int64_t>(prologue, k_tiles_per_block(c, cfg))) + " K tiles of " + (pre_a ? c.a.tensor : "") +
                      (pre_a && pre_b ? " and " : "") + (pre_b ? c.b.tensor : "") + " are copied before griddepcontrol.wait (declared not written by earlier kernels)");
  }
  if (pdl) {  // the trigger after the wait: at most one kernel waits behind this one
    os << "  asm volatile(\"griddepcontrol.wait;\\n\" ::: \"memory\");  /* PDL: the previous kernel has finished and flushed */\n";
    os << "  asm volatile(\"griddepcontrol.launch_dependents;\\n\" ::: \"memory\");  /* PDL: the next kernel may launch */\n";
  }
  if (wg) {
    // the MMAs of tile kt are issued first (the tensor cores always hold a queued group), then the
    // copies of tile kt + D. D = stages - 2: their slot was last read by the MMAs of tile kt - 2,
    // complete in every warpgroup (wait_group 1 in iteration kt - 1, then this iteration's
    // barrier). wg_deep, D = stages - 1: slot of tile kt - 1, complete after this iteration's
    // wait_group 1 and a second barrier.
    const int S_ = cfg.stages;
    const int D_ = cfg.wg_deep ? S_ - 1 : S_ - 2;
    const std::string ta = pa.k_inner ? "0" : "1", tb = pb.k_inner ? "0" : "1";
    const std::string fnname = "tessel_wgmma_n" + S(cfg.bn) + "_" + ta + tb;
    os << "  #pragma unroll\n  for (int s = 0; s < " << D_ << "; ++s) {\n    if (s < kt_total_) { " << prologue_loads << "}\n    tessel_cp_commit();\n  }\n";
    os << "  for (int kt = 0; kt < kt_total_; ++kt) {\n";
    os << "    tessel_cp_wait<" << D_ - 1 << ">();\n    tessel_fence_proxy_async();  /* cp.async data -> the async proxy (wgmma) */\n    __syncthreads();\n";
    const std::string copies = "    { const int nt = kt + " + S(D_) + "; if (nt < kt_total_) { load_a(nt % " + S(S_) + ", kt0_ + nt); load_b(nt % " +
                               S(S_) + ", kt0_ + nt); } tessel_cp_commit(); }\n";
    if (cfg.copies_first) os << copies;  // /cf: the copies before the MMA issue (slot of tile kt - 2, free as above)
    os << "    const " << ft << "* as_ = As_ + (kt % " << S_ << ") * " << a_stage << ";\n";
    os << "    const " << ft << "* bs_ = Bs_ + (kt % " << S_ << ") * " << b_stage << ";\n";
    // descriptors: K-major rows of 128 B (8-row groups 1024 B apart, a K step of 16 = 32 B);
    // M/N-major 64-wide atoms bk*128 B apart (LBO), 8 K rows 1024 B apart (SBO), a K step = 2048 B
    const int a_lbo = pa.k_inner ? 16 : 64 * cfg.bk * 2, b_lbo = pb.k_inner ? 16 : 64 * cfg.bk * 2;
    const std::string a_base = pa.k_inner ? "as_ + (wg_ * " + S(cfg.wm) + " + i * 64) * 64" : "as_ + (wg_ * " + S(cfg.wm / 64) + " + i) * " + S(64 * cfg.bk);
    const int a_kstep = pa.k_inner ? 32 : 2048, b_kstep = pb.k_inner ? 32 : 2048;  // bytes per 16-deep K step
    os << "    tessel_wg_fence();\n";
    os << "    #pragma unroll\n    for (int kq = 0; kq < " << cfg.bk / 16 << "; ++kq) {\n";
    os << "      const unsigned long long db_ = tessel_wg_desc(bs_, " << b_lbo << ") + (unsigned long long)(kq * " << b_kstep / 16 << ");\n";
    os << "      #pragma unroll\n      for (int i = 0; i < " << fmx << "; ++i)\n        " << fnname << "(&acc_[i][0][0], tessel_wg_desc(" << a_base
       << ", " << a_lbo << ") + (unsigned long long)(kq * " << a_kstep / 16 << "), db_);\n";
    os << "    }\n";
    os << "    tessel_wg_commit();\n";
    if (cfg.wg_deep) os << "    tessel_wg_wait<1>();\n    __syncthreads();  /* tile kt - 1's slot is free in every warpgroup */\n";
    if (!cfg.copies_first) os << copies;
    if (!cfg.wg_deep) os << "    tessel_wg_wait<1>();\n";
    os << "  }\n";
    os << "  tessel_wg_wait<0>();\n";
    os << "  #pragma unroll\n  for (int i = 0; i < " << fmx << "; ++i)\n    #pragma unroll\n    for (int j = 0; j < " << fn8
       << "; ++j)\n      #pragma unroll\n      for (int q = 0; q < 4; ++q) asm volatile(\"\" : \"+f\"(acc_[i][j][q]) :: \"memory\");  /* MMAs done */\n";
  } else {
  os << "  #pragma unroll\n  for (int s = 0; s < " << cfg.stages - 1 << "; ++s) {\n    if (s < kt_total_) { " << prologue_loads << "}\n    tessel_cp_commit();\n  }\n";
  os << "  for (int kt = 0; kt < kt_total_; ++kt) {\n";
  os << "    tessel_cp_wait<" << cfg.stages - 2 << ">();\n";
  if (cfg.bulk) os << "    tessel_mbar_wait(tessel_bar_ + kt % " << cfg.stages << ", (kt / " << cfg.stages << ") & 1);\n";
  os << "    __syncthreads();\n";
  os << "    { const int nt = kt + " << cfg.stages - 1 << "; if (nt < kt_total_) { load_a(nt % " << cfg.stages << ", kt0_ + nt); load_b(nt % "
     << cfg.stages << ", kt0_ + nt); } tessel_cp_commit(); }\n";
  os << "    const " << ft << "* as_ = As_ + (kt % " << cfg.stages << ") * " << a_stage << ";\n";
  os << "    const " << ft << "* bs_ = Bs_ + (kt % " << cfg.stages << ") * " << b_stage << ";\n";
  const int kslice = cfg.bk / cfg.k_split;
  if (mma) {
    // fragments double-buffered in registers: the ldmatrix of step kq+16 is issued before the
    // mma.sync of step kq (the asm statements keep their order, so the order is the schedule)
    auto frag_loads = [&](const std::string& buf, const std::string& kk) {
      const std::string a_addr = pa.k_inner ? "as_ + (wm_ + i * 16 + a_lrow_) * " + S(pa.ld()) + " + " + kk + " + a_lcol_"
                                            : "as_ + (" + kk + " + a_lrow_) * " + S(pa.ld()) + " + wm_ + i * 16 + a_lcol_";
      const std::string b_addr = pb.k_inner ? "bs_ + (wn_ + j * 16 + b_lrow_) * " + S(pb.ld()) + " + " + kk + " + b_lcol_"
                                            : "bs_ + (" + kk + " + b_lrow_) * " + S(pb.ld()) + " + wn_ + j * 16 + b_lcol_";
      os << "      #pragma unroll\n      for (int i = 0; i < " << fm << "; ++i) tessel_ldsm_x4" << (pa.k_inner ? "" : "_trans") << "(af_["
         << buf << "][i][0], af_[" << buf << "][i][1], af_[" << buf << "][i][2], af_[" << buf << "][i][3], " << a_addr << ");\n";
      os << "      #pragma unroll\n      for (int j = 0; j < " << fn << "; ++j) tessel_ldsm_x4" << (pb.k_inner ? "" : "_trans") << "(bf_["
         << buf << "][2 * j][0], bf_[" << buf << "][2 * j][1], bf_[" << buf << "][2 * j + 1][0], bf_[" << buf << "][2 * j + 1][1], " << b_addr
         << ");\n";
    };
    os << "    unsigned af_[2][" << fm << "][4], bf_[2][" << fn8 << "][2];\n";
    os << "    {\n";
    frag_loads("0", "0");
    os << "    }\n";
    os << "    #pragma unroll\n    for (int kq = 0; kq < " << kslice << "; kq += 16) {\n";
    os << "      const int cur_ = (kq / 16) & 1;\n";
    os << "      if (kq + 16 < " << kslice << ") {\n        const int kn_ = kq + 16;\n";
    frag_loads("cur_ ^ 1", "kn_");
    os << "      }\n";
    os << "      #pragma unroll\n      for (int i = 0; i < " << fm << "; ++i)\n        #pragma unroll\n        for (int j = 0; j < " << fn8
       << "; ++j) tessel_mma16816(acc_[i][j], af_[cur_][i], bf_[cur_][j][0], bf_[cur_][j][1]);\n";
  } else {
  os << "    #pragma unroll\n    for (int kq = 0; kq < " << kslice << "; kq += 16) {\n";
  os << "      const int kk = ks_ * " << kslice << " + kq;\n";
  os << "      wmma::fragment<wmma::matrix_a, 16, 16, 16, " << ft << ", " << la << "> af_[" << fm << "];\n";
  os << "      wmma::fragment<wmma::matrix_b, 16, 16, 16, " << ft << ", " << lb << "> bf_[" << fn << "];\n";
  const std::string a_ptr = pa.k_inner ? "as_ + (wm_ + i * 16) * " + S(pa.ld()) + " + kk" : "as_ + kk * " + S(pa.ld()) + " + wm_ + i * 16";
  const std::string b_ptr = pb.k_inner ? "bs_ + (wn_ + j * 16) * " + S(pb.ld()) + " + kk" : "bs_ + kk * " + S(pb.ld()) + " + wn_ + j * 16";
  os << "      #pragma unroll\n      for (int i = 0; i < " << fm << "; ++i) wmma::load_matrix_sync(af_[i], " << a_ptr << ", " << pa.ld() << ");\n";
  os << "      #pragma unroll\n      for (int j = 0; j < " << fn << "; ++j) wmma::load_matrix_sync(bf_[j], " << b_ptr << ", " << pb.ld() << ");\n";
  os << "      #pragma unroll\n      for (int i = 0; i < " << fm << "; ++i)\n        #pragma unroll\n        for (int j = 0; j < " << fn
     << "; ++j) wmma::mma_sync(acc_[i][j], af_[i], bf_[j], acc_[i][j]);\n";
  }
  os << "    }\n  }\n";
  }  // !wg
  if (direct && mma) {
    explain.push_back("  accumulators stored straight to global memory (64-bit stores, no epilogue)");
    os << "  " << acct << "* out_ = t_" << anchor.output << " + (long long)blockIdx.z * " << M * N << "LL;\n";
    os << "  #pragma unroll\n  for (int i = 0; i < " << fmx << "; ++i)\n    #pragma unroll\n    for (int j = 0; j < " << fn8 << "; ++j) {\n";
    os << "      const int row_ = m0_ + wm_ + i * " << rstep << " + lane_ / 4, col_ = n0_ + wn_ + j * 8 + (lane_ % 4) * 2;\n";
    os << "      if (col_ < " << N << ") {\n";
    // stream_out: evict-first stores (st.global.cs), so the output does not push the operands out of L2
    const std::string st0 = cfg.stream_out ? "__stcs((float2*)(out_ + (long long)row_ * " + S(N) + " + col_), " : "*(float2*)(out_ + (long long)row_ * " + S(N) + " + col_) = (";
    const std::string st1 = cfg.stream_out ? "__stcs((float2*)(out_ + (long long)(row_ + 8) * " + S(N) + " + col_), " : "*(float2*)(out_ + (long long)(row_ + 8) * " + S(N) + " + col_) = (";
    os << "        if (row_ < " << M << ") " << st0 << "make_float2(acc_[i][j][0], acc_[i][j][1]));\n";
    os << "        if (row_ + 8 < " << M << ") " << st1 << "make_float2(acc_[i][j][2], acc_[i][j][3]));\n";
    os << "      }\n    }\n}\n";
  } else if (direct) {
    // no epilogue, dense [batch.., M, N] output: fragments go straight to global memory
    explain.push_back("  accumulators stored straight to global memory (store_matrix_sync, no epilogue)");
    os << "  " << acct << "* out_ = t_" << anchor.output << " + (long long)blockIdx.z * " << M * N << "LL;\n";
    os << "  #pragma unroll\n  for (int i = 0; i < " << fm << "; ++i)\n    #pragma unroll\n    for (int j = 0; j < " << fn << "; ++j) {\n";
    os << "      const int row_ = m0_ + wm_ + i * 16, col_ = n0_ + wn_ + j * 16;\n";
    os << "      if (row_ < " << M << " && col_ < " << N << ") wmma::store_matrix_sync(out_ + (long long)row_ * " << N
       << " + col_, acc_[i][j], " << N << ", wmma::mem_row_major);\n    }\n}\n";
  } else {
  // epilogue: accumulators -> shared (one tile per K slice) -> element-wise statements -> global
  os << "  tessel_cp_wait<0>();\n  __syncthreads();\n";
  os << "  " << acct << "* cs_ = (" << acct << "*)smem_ + ks_ * " << cfg.bm * ldc << ";\n";
  if (mma) {
    os << "  #pragma unroll\n  for (int i = 0; i < " << fmx << "; ++i)\n    #pragma unroll\n    for (int j = 0; j < " << fn8 << "; ++j) {\n";
    os << "      float* p_ = cs_ + (wm_ + i * " << rstep << " + lane_ / 4) * " << ldc << " + wn_ + j * 8 + (lane_ % 4) * 2;\n";
    os << "      *(float2*)p_ = make_float2(acc_[i][j][0], acc_[i][j][1]);\n";
    os << "      *(float2*)(p_ + 8 * " << ldc << ") = make_float2(acc_[i][j][2], acc_[i][j][3]);\n    }\n";
  } else {
  os << "  #pragma unroll\n  for (int i = 0; i < " << fm << "; ++i)\n    #pragma unroll\n    for (int j = 0; j < " << fn
     << "; ++j) wmma::store_matrix_sync(cs_ + (wm_ + i * 16) * " << ldc << " + wn_ + j * 16, acc_[i][j], " << ldc
     << ", wmma::mem_row_major);\n";
  }
  os << "  __syncthreads();\n";
  const std::string part_type = i8 ? "int" : "float";
  if (cfg.k_blocks > 1) {
    // split-K across blocks: this block's partial tile (its warps' K slices summed) -> scratch;
    // the last block of the tile to arrive sums the partials in split order below
    const int64_t tiles = output_tiles(c, cfg);
    const int64_t counters = (tiles * 4 + kCounterBytes - 1) / kCounterBytes * kCounterBytes;
    const std::string v4 = i8 ? "int4" : "float4";
    // cluster: the warps' K slices stay apart; the epilogue sums k_blocks x k_split partials
    if (cfg.cluster) os << "  tessel_cluster_sync();  /* every block's partial tile is in its shared memory */\n";
    if (cfg.cluster) {
    } else if (cfg.atomic_out) {
      os << "  " << acct << "* out_ = t_" << anchor.output << " + (long long)blockIdx.z * " << M * N << "LL;\n";
      os << "  for (int e_ = threadIdx.x; e_ < " << cfg.bm * cfg.bn / 4 << "; e_ += " << e.threads << ") {\n";
      os << "    const int row_ = e_ / " << cfg.bn / 4 << ", col_ = (e_ % " << cfg.bn / 4 << ") * 4;\n";
      os << "    if (m0_ + row_ >= " << M << ") continue;\n";
      os << "    #pragma unroll\n    for (int q_ = 0; q_ < 4; ++q_) {\n";
      os << "      if (n0_ + col_ + q_ >= " << N << ") break;\n";
      os << "      " << acct << " v_ = 0;\n";
      os << "      #pragma unroll\n      for (int s_ = 0; s_ < " << cfg.k_split << "; ++s_) v_ += ((" << acct << "*)smem_)[s_ * " << cfg.bm * ldc
         << " + row_ * " << ldc << " + col_ + q_];\n";
      os << "      atomicAdd(out_ + (long long)(m0_ + row_) * " << N << " + n0_ + col_ + q_, v_);\n";
      os << "    }\n  }\n}\n";
      const std::string zname = name + "_zero";
      os << "\nextern \"C\" __global__ void __launch_bounds__(256) " << zname << "(" << kernel_parameters(k) << ") {\n";
      os << "  (void)scratch;\n";
      const int64_t total = M * N * c.size_batch();
      os << "  for (long long i_ = blockIdx.x * 256LL + threadIdx.x; i_ < " << total << "LL; i_ += gridDim.x * 256LL) t_" << anchor.output
         << "[i_] = 0;\n}\n";
      explain.push_back("  split-K reduction: atomicAdd into the output, zeroed by " + zname + " launched first");
      Launch z;
      z.kernel = zname;
      z.grid[0] = unsigned(std::min<int64_t>((total + 255) / 256, 1024));
      z.block = 256;
      if (before) before->push_back(z);
      return main_launch();
    } else {
    os << "  const int tile_ = blockIdx.z * gridDim.x + blockIdx.x;\n";
    os << "  unsigned* cnt_ = (unsigned*)scratch;\n";
    os << "  " << part_type << "* part_ = (" << part_type << "*)(scratch + " << counters << ") + (long long)tile_ * "
       << int64_t(cfg.k_blocks) * cfg.bm * cfg.bn << "LL;\n";
    os << "  for (int e_ = threadIdx.x; e_ < " << cfg.bm * cfg.bn / 4 << "; e_ += " << e.threads << ") {\n";
    os << "    const int row_ = e_ / " << cfg.bn / 4 << ", col_ = (e_ % " << cfg.bn / 4 << ") * 4;\n";
    os << "    " << v4 << " w_;\n";
    for (const char* q : {"x", "y", "z", "w"}) {
      const int qi = q[0] == 'w' ? 3 : q[0] - 'x';
      os << "    w_." << q << " = 0;\n";
      os << "    #pragma unroll\n    for (int s_ = 0; s_ < " << cfg.k_split << "; ++s_) w_." << q << " += ((" << acct << "*)smem_)[s_ * "
         << cfg.bm * ldc << " + row_ * " << ldc << " + col_ + " << qi << "];\n";
    }
    os << "    __stcg((" << v4 << "*)(part_ + blockIdx.y * " << cfg.bm * cfg.bn << " + row_ * " << cfg.bn << " + col_), w_);\n";
    os << "  }\n";
    os << "  __threadfence();\n  __syncthreads();\n";
    os << "  __shared__ int last_;\n";
    os << "  if (threadIdx.x == 0) {\n";
    os << "    last_ = atomicAdd(cnt_ + tile_, 1u) == " << cfg.k_blocks - 1 << "u;\n";
    os << "    if (last_) atomicExch(cnt_ + tile_, 0u);  /* ready for the next launch */\n";
    os << "  }\n  __syncthreads();\n  if (!last_) return;\n  __threadfence();\n";
    }
  }
  // the stores
  const ir::Function& f = *k.function;
  std::vector<std::string> out_vars;
  for (const auto& ix : anchor.out_indices) out_vars.push_back(ix.index_coeffs.begin()->first);
  auto tensor_address = [&](const std::string& tname, const std::vector<ir::AffineExpr>& idx,
                            const std::function<std::string(const std::string&)>& var) {
    const auto* t = k.find_tensor(tname);
    TESSEL_CHECK(t, "emit_cuda: epilogue tensor " + tname + " is not global");
    std::string s = "0LL";
    for (size_t d = 0; d < idx.size(); ++d) s = "(" + s + " * " + S(t->shape[d]) + "LL + " + e.affine(idx[d], var) + ")";
    return s;
  };
  struct Store {
    std::string tensor;
    DType dtype;
    std::string value;  // local holding the value (storage type)
  };
  if (cfg.cluster)  // each block of the cluster: a 1/k_blocks slice of the tile
    os << "  for (int e_ = threadIdx.x * " << cfg.k_blocks << " + blockIdx.y; e_ < " << cfg.bm * cfg.bn / 4 << "; e_ += " << e.threads * cfg.k_blocks
       << ") {\n";
  else
    os << "  for (int e_ = threadIdx.x; e_ < " << cfg.bm * cfg.bn / 4 << "; e_ += " << e.threads << ") {\n";
  os << "    const int row_ = e_ / " << cfg.bn / 4 << ", col_ = (e_ % " << cfg.bn / 4 << ") * 4;\n";
  os << "    const int m_ = m0_ + row_;\n    if (m_ >= " << M << ") continue;\n";
  for (const auto& d : c.m) os << "    int ov_" << d.var << ";\n";
  e.decompose("    ", "m_", c.m, "ov_");
  if (cfg.cluster) {
    // 16-byte loads of every block's and every warp slice's 4 partials, all issued before the sums
    const int parts = cfg.k_blocks * cfg.k_split;
    const std::string v4 = i8 ? "int4" : "float4";
    os << "    " << v4 << " cv_[" << parts << "];\n";
    os << "    #pragma unroll\n    for (int s_ = 0; s_ < " << cfg.k_blocks << "; ++s_)\n      #pragma unroll\n      for (int t_ = 0; t_ < "
       << cfg.k_split << "; ++t_) cv_[s_ * " << cfg.k_split << " + t_] = tessel_cluster_ld4((const " << acct << "*)smem_ + t_ * "
       << cfg.bm * ldc << " + row_ * " << ldc << " + col_, s_);\n";
    os << "    " << acct << " cw_[4] = {0, 0, 0, 0};\n";
    os << "    #pragma unroll\n    for (int s_ = 0; s_ < " << parts
       << "; ++s_) { cw_[0] += cv_[s_].x; cw_[1] += cv_[s_].y; cw_[2] += cv_[s_].z; cw_[3] += cv_[s_].w; }\n";
  }
  os << "    #pragma unroll\n    for (int q_ = 0; q_ < 4; ++q_) {\n";
  os << "      const int n_ = n0_ + col_ + q_;\n      if (n_ >= " << N << ") break;\n";
  for (const auto& d : c.n) os << "      int ov_" << d.var << ";\n";
  e.decompose("      ", "n_", c.n, "ov_");
  os << "      " << acct << " v_ = 0;\n";
  if (cfg.cluster)
    os << "      v_ = cw_[q_];\n";
  else if (cfg.k_blocks > 1)
    os << "      #pragma unroll\n      for (int s_ = 0; s_ < " << cfg.k_blocks << "; ++s_) v_ += __ldcg(part_ + s_ * " << cfg.bm * cfg.bn
       << " + row_ * " << cfg.bn << " + col_ + q_);\n";
  else
    os << "      #pragma unroll\n      for (int s_ = 0; s_ < " << cfg.k_split << "; ++s_) v_ += ((" << acct << "*)smem_)[s_ * " << cfg.bm * ldc
       << " + row_ * " << ldc << " + col_ + q_];\n";
  std::map<std::string, std::string> locals;  // tensor -> local (storage type)
  std::vector<Store> stores;
  const DType ct = anchor.acc_type;
  os << "      const " << storage_type(ct) << " ev_" << anchor.output << " = " << store_value(ct, "v_") << ";\n";
  locals[anchor.output] = "ev_" + anchor.output;
  if (f.find_tensor(anchor.output)->kind == ir::TensorKind::Output) stores.push_back({anchor.output, ct, locals[anchor.output]});
  auto anchor_var = [&](const std::string& v) -> std::string {
    for (const auto& d : c.batch)
      if (d.var == v) return "bv_" + v;
    return "ov_" + v;
  };
  for (int si : c.epilogue) {
    const ir::Statement& s = f.statements.at(si);
    std::map<std::string, std::string> to_anchor;  // epilogue index -> anchor index
    for (size_t d = 0; d < s.out_indices.size(); ++d) to_anchor[s.out_indices[d].index_coeffs.begin()->first] = out_vars[d];
    auto var = [&](const std::string& v) { return anchor_var(to_anchor.count(v) ? to_anchor.at(v) : v); };
    ValueContext ctx;
    ctx.sizes = &k.sizes;
    ctx.affine = [&](const ir::AffineExpr& a) { return e.affine(a, var); };
    ctx.access = [&](const ir::Expr& a) -> std::string {
      auto it = locals.find(a.name);
      if (it != locals.end()) return it->second;
      return "t_" + a.name + "[" + tensor_address(a.name, a.indices, var) + "]";
    };
    const DType T = s.acc_type;
    os << "      const " << storage_type(T) << " ev_" << s.output << " = "
       << store_value(T, "(" + value_type(T) + ")" + value_expr(*s.rhs, ctx)) << ";\n";
    locals[s.output] = "ev_" + s.output;
    if (f.find_tensor(s.output)->kind == ir::TensorKind::Output) stores.push_back({s.output, T, locals[s.output]});
  }
  std::vector<ir::AffineExpr> out_idx;
  for (const auto& v : out_vars) out_idx.push_back(ir::AffineExpr::index(v));
  for (const auto& st : stores)
    os << "      t_" << st.tensor << "[" << tensor_address(st.tensor, out_idx, anchor_var) << "] = " << st.value << ";\n";
  os << "    }\n  }\n";
  if (cfg.cluster) os << "  tessel_cluster_sync();  /* no block leaves while the others read its shared memory */\n";
  os << "}\n";

  }
  return main_launch();
}

}  // namespace tessel::emit_cuda
