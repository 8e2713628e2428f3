#include "compiler/emit_npu/conv.h"
#include "compiler/emit_npu/operands.h"

#include "compiler/emit_npu/pointwise.h"
#include "compiler/tile/tile_spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>

#include "isa/base/error.h"

namespace tessel::emit_npu {
namespace {

using npu::Buffer;
using npu::Opcode;
using npu::Operand;

Operand f16() { return Operand::type(DType::F16); }

enum Reg : uint8_t {
  kKTile = 1, kImage, kImage0, kPair, kTmp, kXBase, kYBase, kWCol, kSlice, kInit, kKpos, kWSlice, kCol2, kCol4, kGroup, kInner
};

const ir::Expr* strip_cast(const ir::Expr* e) {
  return e->kind == ir::ExprKind::Apply && e->op == ir::Op::Cast ? e->args[0].get() : e;
}

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// The constant c when a - b - d == c (only a constant left, zero coefficients ignored).
std::optional<int64_t> constant_difference(const ir::AffineExpr& a, const ir::AffineExpr& b, const ir::AffineExpr& d) {
  ir::AffineExpr e = a - b - d;
  std::erase_if(e.index_coeffs, [](const auto& kv) { return kv.second == 0; });
  std::erase_if(e.param_coeffs, [](const auto& kv) { return kv.second == 0; });
  if (!e.is_constant()) return std::nullopt;
  return e.constant;
}

// The index variable when e is exactly one (coefficient 1, nothing else).
std::optional<std::string> var_of(const ir::AffineExpr& e) {
  if (e.index_coeffs.size() != 1 || !e.param_coeffs.empty() || e.constant != 0) return std::nullopt;
  const auto& [name, coeff] = *e.index_coeffs.begin();
  if (coeff != 1) return std::nullopt;
  return name;
}

// Tensor layouts of a convolution; positions of the dimensions in X, Wt and Y.
enum class Layout { Nhwc, Nchw, Blocked };

struct Conv {
  Layout layout = Layout::Nhwc;
  std::string x, w, y;
  int64_t N = 0, H = 0, W = 0, C = 0, R = 0, S = 0, K = 0, OH = 0, OW = 0, pt = 0, pl = 0;
  int64_t sh = 1, sw = 1, dh = 1, dw = 1;  // strides and dilations
  int statement = 0;       // the convolution statement
  std::string acc;         // its accumulator (== y without an epilogue)
  DType out = DType::F32;  // y's type
  bool epilogue = false;   // statements after the convolution, element-wise on its output
  // The statement's index names (the tile spec's axes): images, output rows / columns, output and
  // input channels, kernel rows / columns; k counts blocks of 16 in the blocked layout.
  std::string an, ap, aq, ak, ac, ar, as;
  int64_t unit = 1;  // channels per step of ak: 16 in the blocked layout
};

// Spatial index h = sh * p + dh * r + constant (p an output index, r a reduction index).
struct Spatial {
  int64_t stride = 0, dilation = 0, constant = 0;
};
std::optional<Spatial> spatial(const ir::AffineExpr& e, const std::string& p, const std::string& r) {
  if (!e.param_coeffs.empty() || e.index_coeffs.size() != 2 || !e.index_coeffs.count(p) || !e.index_coeffs.count(r))
    return std::nullopt;
  Spatial s{e.index_coeffs.at(p), e.index_coeffs.at(r), e.constant};
  if (s.stride <= 0 || s.dilation <= 0) return std::nullopt;
  return s;
}

// Y(n, p, q, k) +=! X(n, sh p + dh r - pt, sw q + dw s - pl, c) * Wt(r, s, c, k) in NHWC, the same
// in NCHW (X[n, c, h, w], Wt[k, c, r, s], Y[n, k, p, q]) and in the blocked layout (X[nb, h, w, cb,
// ni, ci], Wt[r, s, cb, kb, ci, ki], Y[nb, p, q, kb, ni, ki] with 16-blocks), with X read as zero
// outside the image (the polyhedral core inlines the padding statement) or through a padding
// statement Xp = select(in the image, X(.., h - pt, w - pl, ..), 0).
std::optional<Conv> match(const kernel::Kernel& k) {
  const ir::Function* f = k.function;
  if (!f || f->statements.empty()) return std::nullopt;
  int ci = 0;
  while (ci < static_cast<int>(f->statements.size()) && f->statements[ci].reduction == ir::Reduction::None) ++ci;
  if (ci >= static_cast<int>(f->statements.size()) || ci > 1) return std::nullopt;
  const ir::Statement& st = f->statements[ci];
  if (st.reduction != ir::Reduction::Sum || !st.init) return std::nullopt;
  const ir::Expr& rhs = *st.rhs;
  if (rhs.kind != ir::ExprKind::Apply || rhs.op != ir::Op::Mul) return std::nullopt;
  const ir::Expr* a = strip_cast(rhs.args[0].get());
  const ir::Expr* b = strip_cast(rhs.args[1].get());
  if (a->kind != ir::ExprKind::Access || b->kind != ir::ExprKind::Access) return std::nullopt;
  std::vector<std::string> o, wv;
  for (const auto& e : st.out_indices) {
    auto v = var_of(e);
    if (!v) return std::nullopt;
    o.push_back(*v);
  }
  for (const auto& e : b->indices) {
    auto v = var_of(e);
    if (!v) return std::nullopt;
    wv.push_back(*v);
  }
  auto xv = [&](size_t i) { return var_of(a->indices[i]); };
  Conv c;
  int hpos = 0;  // X's h position (w follows)
  std::string p, q, r, s;
  if (o.size() == 4 && wv.size() == 4 && a->indices.size() == 4) {
    if (xv(0) == o[0] && xv(3) && *xv(3) == wv[2] && wv[3] == o[3]) {  // NHWC
      c.layout = Layout::Nhwc, hpos = 1, p = o[1], q = o[2], r = wv[0], s = wv[1];
      c.ak = o[3], c.ac = wv[2];
    } else if (xv(0) == o[0] && xv(1) && *xv(1) == wv[1] && wv[0] == o[1]) {  // NCHW
      c.layout = Layout::Nchw, hpos = 2, p = o[2], q = o[3], r = wv[2], s = wv[3];
      c.ak = o[1], c.ac = wv[1];
    } else {
      return std::nullopt;
    }
  } else if (o.size() == 6 && wv.size() == 6 && a->indices.size() == 6) {  // blocked
    if (!(xv(0) == o[0] && xv(3) && *xv(3) == wv[2] && xv(4) == o[4] && xv(5) && *xv(5) == wv[4] && wv[3] == o[3] && wv[5] == o[5]))
      return std::nullopt;
    c.layout = Layout::Blocked, hpos = 1, p = o[1], q = o[2], r = wv[0], s = wv[1];
    c.ak = o[3], c.ac = wv[2], c.unit = 16;
  } else {
    return std::nullopt;
  }
  const auto hs = spatial(a->indices[hpos], p, r), ws = spatial(a->indices[hpos + 1], q, s);
  if (!hs || !ws) return std::nullopt;
  c.sh = hs->stride, c.dh = hs->dilation, c.sw = ws->stride, c.dw = ws->dilation;
  c.an = o[0], c.ap = p, c.aq = q, c.ar = r, c.as = s;
  c.w = b->name, c.y = c.acc = st.output;
  c.statement = ci;
  if (ci + 1 < static_cast<int>(f->statements.size())) {  // an epilogue: y is the last statement's output
    c.epilogue = true;
    c.y = f->statements.back().output;
  }
  if (ci == 1) {
    const ir::Statement& pad = f->statements[0];
    const ir::Expr& sel = *pad.rhs;
    if (a->name != pad.output || sel.kind != ir::ExprKind::Apply || sel.op != ir::Op::Select) return std::nullopt;
    const ir::Expr* xa = strip_cast(sel.args[1].get());
    if (xa->kind != ir::ExprKind::Access || xa->indices.size() != a->indices.size()) return std::nullopt;
    c.x = xa->name;
    c.pt = -xa->indices[hpos].constant - hs->constant, c.pl = -xa->indices[hpos + 1].constant - ws->constant;
  } else {
    c.x = a->name;
    c.pt = -hs->constant, c.pl = -ws->constant;
  }
  const kernel::GlobalTensor* X = k.find_tensor(c.x);
  const kernel::GlobalTensor* Wt = k.find_tensor(c.w);
  const kernel::GlobalTensor* Y = k.find_tensor(c.y);
  const size_t rank = o.size();
  if (!X || !Wt || !Y || X->shape.size() != rank || Wt->shape.size() != rank || Y->shape.size() != rank) return std::nullopt;
  if (X->dtype != DType::F16 || Wt->dtype != DType::F16 || (!c.epilogue && Y->dtype != DType::F32)) return std::nullopt;
  if (c.epilogue && c.layout != Layout::Nhwc) return std::nullopt;
  c.out = Y->dtype;
  switch (c.layout) {
    case Layout::Nhwc:
      c.N = X->shape[0], c.H = X->shape[1], c.W = X->shape[2], c.C = X->shape[3];
      c.R = Wt->shape[0], c.S = Wt->shape[1], c.K = Wt->shape[3], c.OH = Y->shape[1], c.OW = Y->shape[2];
      break;
    case Layout::Nchw:
      c.N = X->shape[0], c.C = X->shape[1], c.H = X->shape[2], c.W = X->shape[3];
      c.K = Wt->shape[0], c.R = Wt->shape[2], c.S = Wt->shape[3], c.OH = Y->shape[2], c.OW = Y->shape[3];
      break;
    case Layout::Blocked:
      if (X->shape[4] != 16 || X->shape[5] != 16 || Wt->shape[4] != 16 || Wt->shape[5] != 16 || Y->shape[4] != 16 || Y->shape[5] != 16)
        return std::nullopt;
      c.N = X->shape[0] * 16, c.H = X->shape[1], c.W = X->shape[2], c.C = X->shape[3] * 16;
      c.R = Wt->shape[0], c.S = Wt->shape[1], c.K = Wt->shape[3] * 16, c.OH = Y->shape[1], c.OW = Y->shape[2];
      break;
  }
  return c;
}

// Byte addressing of one image of an activation tensor in GM: image n starts at
// base + (n / group) * group_bytes + (n % group) * inner_bytes; pixel i at + i * pixel_bytes;
// 16-channel block j at + j * block_bytes.
struct ActivationLayout {
  int64_t base = 0, group = 1, group_bytes = 0, inner_bytes = 0, pixel_bytes = 0, block_bytes = 0;
};

// Weights in GM: `fractal` (blocked: the 16 x 16 fractal (q, c1, kb) at ((q * C1 + c1) * KB + kb) * 512)
// or rows (row (q, c) of K elements at element (q * row_q + c * row_c), columns k contiguous).
struct WeightLayout {
  int64_t base = 0;
  bool fractal = false;
  int64_t row_q = 0, row_c = 0;  // elements
  int64_t KB = 0;                // fractal: output-channel blocks
};

class ConvCode {
 public:
  ConvCode(const kernel::Kernel& k, const isa::Hierarchy& h, npu::Program& p) : k_(k), h_(h), p_(p) {}
  void op(Opcode o, std::vector<Operand> v) { p_.add(o, std::move(v)); }

  // Scratch tensors in GM.
  int64_t place(const std::string& name, DType t, std::vector<int64_t> shape, int64_t& gm) {
    npu::TensorBinding b{name, t, std::move(shape), gm, npu::TensorRole::Scratch, {}};
    gm = round_up(gm + b.byte_size(), 32);
    p_.tensors.push_back(b);
    return b.gm_offset;
  }
  void zero_ub(int64_t at_bytes, int64_t bytes, DType t = DType::F16) {
    const int64_t reps = (bytes + 255) / 256;
    for (int64_t done = 0; done < reps; done += 255)
      op(Opcode::Vdup, {type(t), at(Buffer::UB, at_bytes + done * 256), Operand::float_(0), imm(std::min<int64_t>(255, reps - done)), imm(1), imm(8)});
  }
  void mask_lane(int64_t lane) {
    const uint64_t bit = uint64_t(1) << (lane % 64);
    op(Opcode::SetVectorMask, {imm(lane >= 64 ? int64_t(bit) : 0), imm(lane < 64 ? int64_t(bit) : 0)});
  }
  void full_mask() { op(Opcode::SetVectorMask, {imm(-1), imm(-1)}); }

  // Rows (planes) of `plane` elements -> columns: src [rows][plane] (NCHW planes, f16 or f32) in GM,
  // dst [group][plane][cols] with column `row % rows_per_group` of row; used for NCHW -> NHWC (X,
  // rows = channels, cols = padded channels) and for the weights [K][C R S] -> [C R S][Kp] (one
  // group). Chunks of groups keep every GM start aligned; the columns past the rows stay 0.
  // src rows hold `src_row` elements in GM (the first `plane` taken), dst rows `cols` in UB of which
  // `cols_valid` go to GM; `plane_out` >= plane dst rows per group (the rest 0).
  void rows_to_columns(int64_t src_gm, int64_t dst_gm, int64_t groups, int64_t rows, int64_t plane, int64_t src_row,
                       int64_t plane_out, int64_t cols_valid, int64_t cols, DType t);

  const kernel::Kernel& k_;
  const isa::Hierarchy& h_;
  npu::Program& p_;
};

void ConvCode::rows_to_columns(int64_t src_gm, int64_t dst_gm, int64_t groups, int64_t rows, int64_t plane, int64_t src_row,
                               int64_t plane_out, int64_t cols_valid, int64_t cols, DType t) {
  const int64_t eb = dtype_bytes(t), lanes = 256 / eb, per_block = 32 / eb;
  const int64_t plane_a = round_up(plane, per_block), cap = h_.level(isa::Role::Vector).capacity_bytes;
  // Chunks of `step` groups keep the GM starts of source and destination aligned.
  int64_t step = 1;
  while ((step * rows * src_row * eb) % 32 || (step * plane_out * cols_valid * eb) % 32) ++step;
  const int64_t raw_bytes = rows * plane_a * eb, out_bytes = plane_out * cols * eb;
  int64_t chunk = (cap - 512) / (raw_bytes + out_bytes) / step * step;
  if (chunk < std::min(groups, step))
    throw UserError(fmt::format("kernel {}: the NPU backend does not map this convolution yet: a layout transform of {} x {} "
                                "elements does not fit the vector buffer", k_.name, rows, plane));
  chunk = std::min(chunk, groups);
  const int64_t rep_chunk = 240 / per_block * per_block;  // repeats per vbrcb, aligned source starts
  const DType dup = t == DType::F32 ? DType::F32 : DType::F16;
  for (int64_t g0 = 0; g0 < groups; g0 += chunk) {
    const int64_t g = std::min(chunk, groups - g0), out = round_up(g * raw_bytes, 32);
    full_mask();
    zero_ub(out, g * out_bytes, dup);
    op(Opcode::DmaIn, {at(Buffer::UB, 0), at(Buffer::GM, src_gm + g0 * rows * src_row * eb), imm(g * rows), imm(plane * eb),
                       imm((src_row - plane) * eb), imm((plane_a - plane) * eb)});
    for (int64_t r = 0; r < rows; ++r) {
      mask_lane(r % lanes);
      for (int64_t gi = 0; gi < g; ++gi)
        for (int64_t e0 = 0; e0 < plane; e0 += rep_chunk)
          op(Opcode::Vbrcb, {type(t), at(Buffer::UB, out + (gi * plane_out + e0) * cols * eb + (r / lanes) * 256),
                             at(Buffer::UB, ((gi * rows + r) * plane_a + e0) * eb), imm(std::min(rep_chunk, plane - e0)), imm(1),
                             imm(cols * eb / 32)});
    }
    if (cols_valid == cols)
      op(Opcode::DmaOut, {at(Buffer::GM, dst_gm + g0 * plane_out * cols * eb), at(Buffer::UB, out), imm(1), imm(g * out_bytes), imm(0), imm(0)});
    else
      op(Opcode::DmaOut, {at(Buffer::GM, dst_gm + g0 * plane_out * cols_valid * eb), at(Buffer::UB, out), imm(g * plane_out),
                          imm(cols_valid * eb), imm((cols - cols_valid) * eb), imm(0)});
  }
  full_mask();
}

}  // namespace

bool is_nhwc_convolution(const kernel::Kernel& k) { return match(k).has_value(); }

NpuKernel emit_conv(const kernel::Kernel& k, const isa::Hierarchy& h) {
  const Conv orig = *match(k);
  auto unsupported = [&](const std::string& why) {
    return UserError("kernel " + k.name + ": the NPU backend does not map this convolution yet: " + why);
  };
  int64_t m0 = 16, k0 = 16;
  for (const isa::Unit* u : h.units_of_kind(isa::UnitKind::Matrix))
    for (const isa::MatrixShape& s : u->shapes)
      if (s.a == DType::F16 && s.acc == DType::F32) m0 = s.m, k0 = s.k;
  Conv cv = orig;
  cv.C = round_up(orig.C, k0), cv.K = round_up(orig.K, k0);
  const bool padded = cv.C != orig.C || cv.K != orig.K;
  // NCHW and channel counts that are not multiples of 16: scratch copies in NHWC with the channels
  // padded (through UB), one core (cores cannot synchronise with each other).
  const bool scratch = padded || cv.layout == Layout::Nchw;
  if (padded && cv.layout == Layout::Blocked) throw unsupported("blocked layout with channel counts not multiples of 16");
  const int64_t P = cv.OH * cv.OW, Pp = round_up(P, m0), RS = cv.R * cv.S, C1 = cv.C / k0;
  const int64_t pb = (cv.OH - 1) * cv.sh + cv.dh * (cv.R - 1) + 1 - cv.H - cv.pt;
  const int64_t pr = (cv.OW - 1) * cv.sw + cv.dw * (cv.S - 1) + 1 - cv.W - cv.pl;
  const int64_t cap_l1 = h.level(isa::Role::Stage).capacity_bytes, cap_l0a = h.level(isa::Role::OperandA).capacity_bytes;
  const int64_t cap_l0b = h.level(isa::Role::OperandB).capacity_bytes, cap_l0c = h.level(isa::Role::Accumulator).capacity_bytes;
  const int64_t cap_ub = h.level(isa::Role::Vector).capacity_bytes, l0_align = h.level(isa::Role::OperandA).alignment_bytes;
  const int64_t fm_bytes = round_up(cv.C * cv.H * cv.W * 2, 32);
  const int cores_avail = scratch ? 1 : h.cores;

  // The user's tile spec (Kernel::user_tile), when there is one (README "Convolutions: tile spec"):
  // outer size of the output-channel axis -> tn; inner sizes of the output row / column axes ->
  // pixel block (their product, rounded up to the fractal), of the kernel row / column axes ->
  // kernel positions per L0 step (their product). tn is rounded up to the fractal and shrunk to
  // divide K, as the GEMM path does. Unnamed axes: the planner's choice below. Images per core
  // follow from tn (promotion keeps the image axis's tile small: it is not read). A tile that does
  // not fit a buffer is a UserError naming it.
  tile::TileSpec spec;
  if (!k.user_tile.empty()) spec = tile::parse_tile_spec(k.user_tile);
  const tile::AxisTile *t_k = spec.find(cv.ak), *t_p = spec.find(cv.ap), *t_q = spec.find(cv.aq),
                       *t_r = spec.find(cv.ar), *t_s = spec.find(cv.as);
  auto dividing = [](int64_t n, int64_t limit, int64_t unit) {  // largest multiple of unit <= limit dividing n
    for (int64_t t = std::max(unit, limit / unit * unit); t >= unit; t -= unit)
      if (n % t == 0) return t;
    return unit;
  };
  const int64_t user_tn = t_k ? dividing(cv.K, round_up(std::min(cv.K, t_k->outer * cv.unit), k0), k0) : 0;
  const int64_t user_kc = t_r || t_s ? std::min(t_r ? t_r->inner : cv.R, cv.R) * std::min(t_s ? t_s->inner : cv.S, cv.S) : 0;
  const int64_t user_rows =
      t_p || t_q ? std::min(Pp, round_up(std::min(t_p ? t_p->inner : cv.OH, cv.OH) * std::min(t_q ? t_q->inner : cv.OW, cv.OW), m0)) : 0;
  auto no_fit = [&](isa::Role role, int64_t need, const std::string& parts, bool db) {
    const isa::Level& l = h.level(role);
    return UserError(fmt::format("kernel {}: tile {} does not fit: level {} ({}) of {} needs {} bytes ({}{}) but its capacity is {} "
                                 "bytes; use smaller sizes in --tile",
                                 k.name, k.user_tile, l.name, isa::role_name(role), h.name, need, parts,
                                 db ? "; double buffering reserves half the level" : "", l.capacity_bytes));
  };
  const int64_t l0a_half = cap_l0a / 2 / l0_align * l0_align, l0b_half = cap_l0b / 2 / l0_align * l0_align;

  // Output-channel tile tn: the weights of one tile stay in L1 (loaded once per tile and core) next
  // to two feature maps; the cost estimate (per core: cube cycles vs MTE1's img2col + weight
  // loads) picks among the tiles that fit, preferring more cores, then larger tiles.
  auto bw = [&](isa::Role to) {
    const isa::TransferPath* path = h.find_path(h.level(isa::Role::Stage).name, h.level(to).name);
    return path ? std::max<int64_t>(1, path->bandwidth_bytes_per_cycle) : 1;
  };
  const int64_t bw_a = bw(isa::Role::OperandA), bw_b = bw(isa::Role::OperandB);
  struct Plan {
    int64_t tn = 0, k_tiles = 0, group = 1, cores = 1, fm_halves = 1, c_halves = 1;
    double cost = 0;
  };
  std::optional<Plan> plan;
  for (int64_t t = user_tn ? user_tn : std::min<int64_t>(cv.K, 128); t >= 16; t -= 16) {
    if (cv.K % t) continue;
    Plan c;
    c.tn = t, c.k_tiles = cv.K / t;
    const int64_t w_bytes = cv.C * RS * t * 2;
    if (user_tn && w_bytes + fm_bytes > cap_l1)
      throw no_fit(isa::Role::Stage, w_bytes + fm_bytes,
                   fmt::format("weights of {} output channels {} + one image's feature map {}", t, w_bytes, fm_bytes), false);
    if (user_tn && Pp * t * 4 > cap_l0c)
      throw no_fit(isa::Role::Accumulator, Pp * t * 4, fmt::format("one image's accumulator: {} pixel rows x {} channels x 4", Pp, t),
                   false);
    if (user_tn && !user_kc && k0 * t * 2 > l0b_half)
      throw no_fit(isa::Role::OperandB, 2 * k0 * t * 2, fmt::format("2 x 1 kernel position x {} input channels x {} output channels x 2", k0, t),
                   true);
    if (!user_tn && (w_bytes + fm_bytes > cap_l1 || Pp * t * 4 > cap_l0c || 2 * k0 * t * 2 > cap_l0b)) continue;
    if (c.k_tiles <= cores_avail) {
      const int64_t per = cores_avail / c.k_tiles;
      for (int64_t g = std::min(per, cv.N); g >= 1; --g)
        if (cv.N % g == 0) { c.group = g; break; }
      c.cores = c.k_tiles * c.group;
    } else {
      c.cores = cores_avail;
    }
    const int64_t jobs_per_core = c.k_tiles <= cores_avail ? cv.N / c.group : (c.k_tiles + c.cores - 1) / c.cores * cv.N;
    const double cube = double(Pp / m0) * (t / 16) * C1 * RS, mte1 = double(Pp) * cv.C * RS * 2 / bw_a + double(cv.C) * RS * t * 2 / bw_b;
    c.cost = double(jobs_per_core) * std::max(cube, mte1);
    c.fm_halves = w_bytes + 2 * fm_bytes <= cap_l1 ? 2 : 1;
    c.c_halves = 2 * Pp * t * 4 <= cap_l0c ? 2 : 1;
    if (!plan || c.cost < plan->cost * 0.999) plan = c;
    if (user_tn) break;
  }
  if (!plan) throw unsupported("the weights of 16 output channels and the feature map of one image exceed L1, or its accumulator L0C");
  const int64_t tn = plan->tn, k_tiles = plan->k_tiles, NB16 = tn / 16;
  // Kernel positions per step: as many as two L0B halves hold, in balanced groups (a user's count:
  // groups of that many, the last one smaller).
  int64_t kc = user_kc;
  if (user_kc && kc * k0 * tn * 2 > l0b_half)
    throw no_fit(isa::Role::OperandB, 2 * kc * k0 * tn * 2,
                 fmt::format("2 x {} kernel positions x {} input channels x {} output channels x 2", kc, k0, tn), true);
  if (!user_kc) {
    kc = std::min<int64_t>(RS, (cap_l0b / 2) / (k0 * tn * 2));
    const int64_t groups = (RS + kc - 1) / kc;
    kc = (RS + groups - 1) / groups;
  }
  std::vector<std::pair<int64_t, int64_t>> kgroups;  // (first kernel position, count)
  for (int64_t q0 = 0; q0 < RS; q0 += kc) kgroups.push_back({q0, std::min(kc, RS - q0)});
  int64_t tm0 = user_rows ? user_rows : std::min<int64_t>(Pp, l0a_half / (kc * k0 * 2) / m0 * m0);
  if (user_rows && tm0 * kc * k0 * 2 > l0a_half)
    throw no_fit(isa::Role::OperandA, 2 * tm0 * kc * k0 * 2,
                 fmt::format("2 x {} pixel rows x {} kernel positions x {} input channels x 2", tm0, kc, k0), true);
  if (tm0 < m0) throw unsupported("one pixel block of one kernel-position group does not fit L0A twice");
  std::unique_ptr<GemmEpilogue> epi;
  if (cv.epilogue) epi = std::make_unique<GemmEpilogue>(k, h, cv.statement, cv.acc, /*skip_before=*/true);
  // Pixel blocks (begin, size), balanced in fractals; smaller where two accumulator blocks and the
  // epilogue's regions would not fit UB. A user's size: blocks of that many rows, the last smaller.
  std::vector<std::pair<int64_t, int64_t>> blocks;
  if (user_rows) {
    for (int64_t b0 = 0; b0 < Pp; b0 += tm0) blocks.push_back({b0, std::min(tm0, Pp - b0)});
    const int64_t need = 2 * tm0 * tn * 4 + (epi ? epi->ub_bytes(tm0) : 0);
    if (need > cap_ub)
      throw no_fit(isa::Role::Vector, need,
                   fmt::format("2 x {} pixel rows x {} channels x 4{}", tm0, tn,
                               epi ? fmt::format(" + the epilogue's regions {}", epi->ub_bytes(tm0)) : std::string()),
                   false);
  }
  for (int64_t limit = tm0; !user_rows; limit -= m0) {
    const int64_t fr = Pp / m0, nblk = (Pp + limit - 1) / limit;
    blocks.clear();
    int64_t b0 = 0;
    for (int64_t i = 0; i < nblk; ++i) {
      const int64_t n = fr / nblk + (i < fr % nblk ? 1 : 0);
      blocks.push_back({b0 * m0, n * m0});
      b0 += n;
    }
    tm0 = 0;
    for (const auto& b : blocks) tm0 = std::max(tm0, b.second);
    if ((2 * tm0 * tn * 4 + (epi ? epi->ub_bytes(tm0) : 0) <= cap_ub) || limit <= m0) break;
  }
  if (2 * tm0 * tn * 4 > cap_ub) throw unsupported("two accumulator blocks exceed UB");
  const int64_t eo = dtype_bytes(cv.out), epi_base = 2 * tm0 * tn * 4;
  if (epi && (epi->output() != cv.y || epi->output_type() != cv.out)) throw unsupported("the epilogue's output is not the last statement's");
  if (epi && epi_base + epi->ub_bytes(tm0) > cap_ub) throw unsupported("the epilogue of a pixel block does not fit UB");

  NpuKernel out;
  npu::Program& p = out.program;
  p.source_name = k.name + ".npu";
  out.macs = uint64_t(cv.N) * P * orig.K * orig.C * RS;
  int64_t gm = 0;
  for (const auto& t : k.tensors) {
    npu::TensorBinding b{t.name, t.dtype, t.shape, gm, t.kind == ir::TensorKind::Input ? npu::TensorRole::In : npu::TensorRole::Out, {}};
    gm = round_up(gm + b.byte_size(), 32);
    p.tensors.push_back(b);
  }
  auto offset = [&](const std::string& n) { return p.find_tensor(n)->gm_offset; };
  if (epi) {  // column blocks past K read up to 16 elements beyond a broadcast tensor's end: keep them in GM
    npu::TensorBinding g{"guard", DType::F32, {16}, gm, npu::TensorRole::Scratch, {}};
    gm = round_up(gm + g.byte_size(), 32);
    p.tensors.push_back(g);
  }
  ConvCode code(k, h, p);
  auto op = [&](Opcode o, std::vector<Operand> v) { p.add(o, std::move(v)); };
  const int64_t user_x = offset(cv.x), user_w = offset(cv.w), user_y = offset(cv.y);
  ActivationLayout X, Y;
  WeightLayout Wl;
  X.base = user_x, Y.base = user_y, Wl.base = user_w;
  switch (cv.layout) {
    case Layout::Nhwc:
    case Layout::Nchw:  // (NCHW: through the NHWC scratch copies below)
      X.group_bytes = cv.H * cv.W * cv.C * 2, X.pixel_bytes = cv.C * 2, X.block_bytes = 32;
      Y.group_bytes = P * cv.K * eo, Y.pixel_bytes = cv.K * eo, Y.block_bytes = 16 * eo;
      Wl.row_q = cv.C * cv.K, Wl.row_c = cv.K;
      break;
    case Layout::Blocked:
      X.group = 16, X.group_bytes = cv.H * cv.W * cv.C * 32, X.inner_bytes = 32, X.pixel_bytes = cv.C * 32, X.block_bytes = 512;
      Y.group = 16, Y.group_bytes = P * cv.K * 16 * eo, Y.inner_bytes = 16 * eo, Y.pixel_bytes = cv.K * 16 * eo,
      Y.block_bytes = 256 * eo;
      Wl.fractal = true, Wl.KB = cv.K / 16;
      break;
  }
  if (cv.layout == Layout::Nchw) {
    X.base = code.place(cv.x + "_nhwc", DType::F16, {cv.N, cv.H, cv.W, cv.C}, gm);
    Wl.base = code.place(cv.w + "_ckk", DType::F16, {cv.C, RS, cv.K}, gm);  // rows (c, q) of K
    Wl.row_q = cv.K, Wl.row_c = RS * cv.K;
    Y.base = code.place(cv.y + "_nhwc", cv.out, {cv.N, cv.OH, cv.OW, cv.K}, gm);
    code.rows_to_columns(user_x, X.base, orig.N, orig.C, cv.H * cv.W, cv.H * cv.W, cv.H * cv.W, cv.C, cv.C, DType::F16);
    code.rows_to_columns(user_w, Wl.base, 1, orig.K, orig.C * RS, orig.C * RS, cv.C * RS, cv.K, cv.K, DType::F16);
    out.notes.push_back(fmt::format("NCHW: X and the weights transposed to NHWC / [C, R*S, K] scratch copies (channels padded "
                                    "to {} and {}) on the vector unit (vbrcb per channel), the result back to NCHW; one core",
                                    cv.C, cv.K));
  } else if (padded) {
    X.base = code.place(cv.x + "_padded", DType::F16, {cv.N, cv.H, cv.W, cv.C}, gm);
    Wl.base = code.place(cv.w + "_padded", DType::F16, {cv.R, cv.S, cv.C, cv.K}, gm);
    Y.base = code.place(cv.y + "_padded", cv.out, {cv.N, cv.OH, cv.OW, cv.K}, gm);
    // X: rows of C -> rows of Cp, chunks of a multiple of 16 rows (aligned sources).
    const int64_t rows = cv.N * cv.H * cv.W;
    int64_t cr = std::min(rows, (cap_ub / 2) / (cv.C * 2));
    if (cr < rows) cr = cr / 16 * 16;
    for (int64_t r0 = 0; r0 < rows; r0 += cr) {
      const int64_t n = std::min(cr, rows - r0);
      if (cv.C > orig.C) code.zero_ub(0, n * cv.C * 2);
      op(Opcode::DmaIn, {at(Buffer::UB, 0), at(Buffer::GM, user_x + r0 * orig.C * 2), imm(n), imm(orig.C * 2), imm(0),
                         imm((cv.C - orig.C) * 2)});
      op(Opcode::DmaOut, {at(Buffer::GM, X.base + r0 * cv.C * 2), at(Buffer::UB, 0), imm(1), imm(n * cv.C * 2), imm(0), imm(0)});
    }
    // Weights: all R*S*C rows of K in UB at once, then C rows per kernel position.
    if (RS * orig.C * cv.K * 2 > cap_ub / 2) throw unsupported("the weights do not fit the vector buffer for channel padding");
    if (cv.K > orig.K) code.zero_ub(0, RS * orig.C * cv.K * 2);
    op(Opcode::DmaIn, {at(Buffer::UB, 0), at(Buffer::GM, user_w), imm(RS * orig.C), imm(orig.K * 2), imm(0), imm((cv.K - orig.K) * 2)});
    for (int64_t q = 0; q < RS; ++q)
      op(Opcode::DmaOut, {at(Buffer::GM, Wl.base + q * cv.C * cv.K * 2), at(Buffer::UB, q * orig.C * cv.K * 2), imm(1),
                          imm(orig.C * cv.K * 2), imm(0), imm(0)});
  }

  p.cores = static_cast<int>(plan->cores);
  const int64_t fm_halves = plan->fm_halves, c_halves = plan->c_halves;
  const int64_t per_core_images = k_tiles <= cores_avail ? cv.N / plan->group : cv.N;
  const int64_t halves = (fm_halves == 2 && per_core_images % 2 == 0) ? 2 : 1;  // images per loop iteration
  const int64_t w_l1 = halves * fm_bytes;  // the k-tile's weights after the feature maps: [c1][q][kb] fractals
  op(Opcode::SetFmatrix, {imm(cv.H), imm(cv.W), imm(cv.pt), imm(pb), imm(cv.pl), imm(pr), imm(cv.sh), imm(cv.sw), imm(cv.R),
                          imm(cv.S), imm(cv.dh), imm(cv.dw)});
  const bool kt_loop = k_tiles > cores_avail;
  if (kt_loop) {
    op(Opcode::Loop, {reg(kKTile), reg(npu::kRegCoreId), imm(k_tiles), reg(npu::kRegCoreCount)});
    op(Opcode::Mov, {reg(kImage0), imm(0)});
  } else {
    op(Opcode::Div, {reg(kImage0), reg(npu::kRegCoreId), imm(k_tiles)});
    op(Opcode::Mul, {reg(kTmp), reg(kImage0), imm(k_tiles)});
    op(Opcode::Sub, {reg(kKTile), reg(npu::kRegCoreId), reg(kTmp)});
  }
  // The k-tile's weights into L1, 16 input channels x all kernel positions at a time.
  if (Wl.fractal) {
    op(Opcode::Mul, {reg(kWCol), reg(kKTile), imm(tn * 32)});
    for (int64_t c1 = 0; c1 < C1; ++c1)
      op(Opcode::DmaIn, {at(Buffer::L1, w_l1 + c1 * RS * tn * 32), at(Buffer::GM, Wl.base + c1 * Wl.KB * 512, kWCol), imm(RS),
                         imm(tn * 32), imm((C1 * Wl.KB * 16 - tn) * 32), imm(0)});
  } else {
    op(Opcode::Mul, {reg(kWCol), reg(kKTile), imm(tn * 2)});
    for (int64_t c1 = 0; c1 < C1; ++c1)
      for (int64_t q = 0; q < RS; ++q)
        op(Opcode::DmaInNz, {f16(), at(Buffer::L1, w_l1 + (c1 * RS + q) * tn * 32),
                             at(Buffer::GM, Wl.base + (q * Wl.row_q + c1 * 16 * Wl.row_c) * 2, kWCol), imm(k0), imm(tn), imm(Wl.row_c)});
  }
  if (epi) {
    op(Opcode::Mul, {reg(kCol2), reg(kKTile), imm(tn * 2)});
    op(Opcode::Mul, {reg(kCol4), reg(kKTile), imm(tn * 4)});
  }
  const int64_t step_images = kt_loop ? 1 : plan->group;
  const int64_t iterations = per_core_images / halves;
  if (iterations > 1) op(Opcode::Loop, {reg(kPair), imm(0), imm(iterations), imm(1)});
  else op(Opcode::Mov, {reg(kPair), imm(0)});
  int64_t l0a_step = 0, l0b_step = 0, ub_step = 0;
  auto image_base = [&](const ActivationLayout& l, Reg dst) {  // dst = base offset of image kImage (without l.base)
    if (l.group == 1) {
      op(Opcode::Mul, {reg(dst), reg(kImage), imm(l.group_bytes)});
      return;
    }
    op(Opcode::Div, {reg(kGroup), reg(kImage), imm(l.group)});
    op(Opcode::Mul, {reg(kInner), reg(kGroup), imm(l.group)});
    op(Opcode::Sub, {reg(kInner), reg(kImage), reg(kInner)});
    op(Opcode::Mul, {reg(dst), reg(kGroup), imm(l.group_bytes)});
    op(Opcode::Mul, {reg(kInner), reg(kInner), imm(l.inner_bytes)});
    op(Opcode::Add, {reg(dst), reg(dst), reg(kInner)});
  };
  for (int64_t half = 0; half < halves; ++half) {
    const int64_t fm_base = half * fm_bytes, c_base = (c_halves == 2 ? half % 2 : 0) * Pp * tn * 4;
    // image = image0 + (pair * halves + half) * step_images
    op(Opcode::Mul, {reg(kImage), reg(kPair), imm(halves * step_images)});
    op(Opcode::Add, {reg(kImage), reg(kImage), reg(kImage0)});
    if (half) op(Opcode::Add, {reg(kImage), reg(kImage), imm(half * step_images)});
    image_base(X, kXBase);
    image_base(Y, kYBase);
    op(Opcode::Mul, {reg(kTmp), reg(kKTile), imm(NB16 * Y.block_bytes)});
    op(Opcode::Add, {reg(kYBase), reg(kYBase), reg(kTmp)});
    // The image's feature map as C1HWC0: one strided copy per 16 channels.
    for (int64_t c1 = 0; c1 < C1; ++c1)
      op(Opcode::DmaIn, {at(Buffer::L1, fm_base + c1 * cv.H * cv.W * 32), at(Buffer::GM, X.base + c1 * X.block_bytes, kXBase),
                         imm(cv.H * cv.W), imm(32), imm(X.pixel_bytes - 32), imm(0)});
    // One 16-channel slice (c1 = 2 * kSlice + sub, or the constant last one): per kernel-position
    // group the weights L1 -> L0B and per pixel block load3d -> L0A, mmad.
    auto slice = [&](int64_t sub, Operand init_first) {
      op(Opcode::Add, {reg(kTmp), reg(kKpos), imm(sub * RS)});
      for (size_t gi = 0; gi < kgroups.size(); ++gi) {
        const auto [q0, qn] = kgroups[gi];
        const int64_t lb = (l0b_step++ % 2) * l0b_half;
        op(Opcode::Load2d, {f16(), at(Buffer::L0B, lb), at(Buffer::L1, w_l1 + (sub * RS + q0) * tn * 32, kWSlice), imm(qn), imm(NB16),
                            imm(NB16), imm(1), imm(1)});
        if (q0) op(Opcode::Add, {reg(kTmp), reg(kTmp), imm(q0 - kgroups[gi - 1].first)});
        for (const auto& [p0, size] : blocks) {
          const int64_t la = (l0a_step++ % 2) * l0a_half;
          op(Opcode::Load3d, {f16(), at(Buffer::L0A, la), at(Buffer::L1, fm_base), imm(cv.C), imm(p0), imm(size), reg(kTmp), imm(qn)});
          op(Opcode::Mmad, {f16(), at(Buffer::L0C, c_base + p0 * tn * 4), at(Buffer::L0A, la), at(Buffer::L0B, lb), imm(size),
                            imm(qn * k0), imm(tn), gi == 0 ? init_first : imm(0)});
        }
      }
    };
    const int64_t pairs = C1 / 2;
    if (pairs > 0) {
      op(Opcode::Loop, {reg(kSlice), imm(0), imm(pairs), imm(1)});
      op(Opcode::Seq, {reg(kInit), reg(kSlice), imm(0)});
      op(Opcode::Mul, {reg(kWSlice), reg(kSlice), imm(2 * RS * tn * 32)});
      op(Opcode::Mul, {reg(kKpos), reg(kSlice), imm(2 * RS)});
      slice(0, reg(kInit));
      slice(1, imm(0));
      op(Opcode::EndLoop, {});
    }
    if (C1 % 2) {
      op(Opcode::Mov, {reg(kWSlice), imm((C1 - 1) * RS * tn * 32)});
      op(Opcode::Mov, {reg(kKpos), imm((C1 - 1) * RS)});
      slice(0, imm(C1 == 1 ? 1 : 0));
    }
    for (const auto& [p0, size] : blocks) {
      const int64_t ub = (ub_step++ % 2) * tm0 * tn * 4, valid = std::min(size, P - p0);
      op(Opcode::MovL0c, {Operand::type(DType::F32), at(Buffer::UB, ub), at(Buffer::L0C, c_base + p0 * tn * 4), imm(size * tn / 256), imm(0)});
      if (valid <= 0) continue;
      for (int64_t jj = 0; jj < NB16; ++jj) {
        int64_t src = ub + jj * size * 64;
        if (epi) {
          std::map<std::string, Operand> columns;
          for (const std::string& name : epi->broadcasts()) {
            const int eb = dtype_bytes(k.find_tensor(name)->dtype);
            columns[name] = at(Buffer::GM, offset(name) + jj * 16 * eb, eb == 2 ? kCol2 : kCol4);
          }
          src = epi->emit_block(p, src, size, epi_base, columns);
        }
        op(Opcode::DmaOut, {at(Buffer::GM, Y.base + p0 * Y.pixel_bytes + jj * Y.block_bytes, kYBase), at(Buffer::UB, src), imm(valid),
                            imm(16 * eo), imm(0), imm(Y.pixel_bytes - 16 * eo)});
      }
    }
  }
  if (iterations > 1) op(Opcode::EndLoop, {});
  if (kt_loop) op(Opcode::EndLoop, {});
  if (cv.layout == Layout::Nchw) {
    // Y: [N][P][Kp] -> [N][K][P]: per pixel its K values down one column.
    code.rows_to_columns(Y.base, user_y, cv.N, P, orig.K, cv.K, orig.K, P, round_up(P, 32 / eo), cv.out);
  } else if (padded) {  // Y: rows of Kp -> rows of K, chunks of a multiple of 8 rows (aligned destinations)
    const int64_t rows = cv.N * P;
    int64_t cr = std::min(rows, (cap_ub / 2) / (cv.K * eo));
    if (cr < rows) cr = cr / 8 * 8;
    for (int64_t r0 = 0; r0 < rows; r0 += cr) {
      const int64_t n = std::min(cr, rows - r0);
      op(Opcode::DmaIn, {at(Buffer::UB, 0), at(Buffer::GM, Y.base + r0 * cv.K * eo), imm(1), imm(n * cv.K * eo), imm(0), imm(0)});
      op(Opcode::DmaOut, {at(Buffer::GM, user_y + r0 * orig.K * eo), at(Buffer::UB, 0), imm(n), imm(orig.K * eo),
                          imm((cv.K - orig.K) * eo), imm(0)});
    }
    out.notes.push_back(fmt::format("channels {} -> {} padded to {} -> {} through UB on one core", orig.C, orig.K, cv.C, cv.K));
  }
  p.add(Opcode::PipeBarrier, {Operand::pipe_(npu::Pipe::All)});
  out.notes.push_back(fmt::format("img2col convolution: output channels in tiles of {} whose weights stay in L1, {} image(s) x "
                                  "{} tile(s) per core over {} core(s){}, pixel blocks of {} (of {}), {} channel slices x {} "
                                  "kernel-position group(s) of {}{}{}",
                                  tn, per_core_images, kt_loop ? (k_tiles + cores_avail - 1) / cores_avail : 1, p.cores,
                                  halves == 2 ? " two images at a time (ping-pong)" : "", tm0, Pp, C1, kgroups.size(), kc,
                                  cv.sh > 1 || cv.sw > 1 ? fmt::format(", stride {}x{}", cv.sh, cv.sw) : "",
                                  k.user_tile.empty() ? "" : ", from tile " + k.user_tile));
  npu::validate_program(p);
  return out;
}

}  // namespace tessel::emit_npu

namespace tessel::emit_npu {
namespace {

// Depthwise: Acc(n, p, q, c) +=! f32(Xp(n, p + r - pt, q + s - pl, c)) * f32(Wt(r, s, c)) after a
// padding statement, then element-wise statements on Acc (e.g. relu6).
struct Depthwise {
  std::string x, w, acc;
  int statement = 0;
  int64_t N = 0, H = 0, W = 0, C = 0, R = 0, S = 0, OH = 0, OW = 0, pt = 0, pl = 0;
};

std::optional<Depthwise> match_depthwise(const kernel::Kernel& k) {
  const ir::Function* f = k.function;
  if (!f || f->statements.empty()) return std::nullopt;
  int ci = 0;
  while (ci < static_cast<int>(f->statements.size()) && f->statements[ci].reduction == ir::Reduction::None) ++ci;
  if (ci > 1 || ci >= static_cast<int>(f->statements.size())) return std::nullopt;
  const ir::Statement& s = f->statements[ci];
  if (s.reduction != ir::Reduction::Sum || !s.init || s.out_indices.size() != 4) return std::nullopt;
  const ir::Expr& rhs = *s.rhs;
  if (rhs.kind != ir::ExprKind::Apply || rhs.op != ir::Op::Mul) return std::nullopt;
  const ir::Expr* a = strip_cast(rhs.args[0].get());
  const ir::Expr* b = strip_cast(rhs.args[1].get());
  if (a->kind != ir::ExprKind::Access || b->kind != ir::ExprKind::Access || a->indices.size() != 4 || b->indices.size() != 3)
    return std::nullopt;
  const auto& o = s.out_indices;
  const auto dh = constant_difference(a->indices[1], o[1], b->indices[0]);
  const auto dw = constant_difference(a->indices[2], o[2], b->indices[1]);
  if (!(a->indices[0] == o[0] && a->indices[3] == o[3] && b->indices[2] == o[3] && dh && dw)) return std::nullopt;
  Depthwise d;
  d.w = b->name, d.acc = s.output, d.statement = ci;
  if (ci == 1) {
    const ir::Statement& pad = f->statements[0];
    const ir::Expr& sel = *pad.rhs;
    if (a->name != pad.output || sel.kind != ir::ExprKind::Apply || sel.op != ir::Op::Select) return std::nullopt;
    const ir::Expr* xa = strip_cast(sel.args[1].get());
    if (xa->kind != ir::ExprKind::Access || xa->indices.size() != 4) return std::nullopt;
    d.x = xa->name;
    d.pt = -xa->indices[1].constant - *dh, d.pl = -xa->indices[2].constant - *dw;
  } else {  // the padding inlined: X read as zero outside the image
    d.x = a->name;
    d.pt = -*dh, d.pl = -*dw;
  }
  const kernel::GlobalTensor* X = k.find_tensor(d.x);
  const kernel::GlobalTensor* Wt = k.find_tensor(d.w);
  if (!X || !Wt || X->dtype != DType::F16 || Wt->dtype != DType::F16 || X->shape.size() != 4 || Wt->shape.size() != 3) return std::nullopt;
  d.N = X->shape[0], d.H = X->shape[1], d.W = X->shape[2], d.C = X->shape[3], d.R = Wt->shape[0], d.S = Wt->shape[1];
  d.OH = d.H + 2 * d.pt - d.R + 1, d.OW = d.W + 2 * d.pl - d.S + 1;  // symmetric padding (checked against Y below)
  return d;
}

class DepthwiseCode : public VectorCode {
 public:
  DepthwiseCode(const kernel::Kernel& k, const isa::Hierarchy& h, const Depthwise& d) : VectorCode(k, h), d_(d) {}

  NpuKernel emit() {
    auto unsupported = [&](const std::string& why) {
      return UserError("kernel " + k_.name + ": the NPU backend does not map this depthwise convolution yet: " + why);
    };
    const ir::Function* f = k_.function;
    const int64_t lanes = bytes_per_repeat_ / 4;  // one f32 repeat per pixel
    if (d_.C > lanes) throw unsupported(fmt::format("{} channels (at most {})", d_.C, lanes));
    // The output: the last statement's tensor, [N, OH, OW, C].
    const ir::Statement& last = f->statements.back();
    const kernel::GlobalTensor* Y = k_.find_tensor(last.output);
    if (!Y || Y->kind != ir::TensorKind::Output || Y->shape != std::vector<int64_t>{d_.N, d_.OH, d_.OW, d_.C})
      throw unsupported("the output is not [N, OH, OW, C]");
    const int64_t pixels_in = d_.N * d_.H * d_.W, pixels_out = d_.N * d_.OH * d_.OW, RS = d_.R * d_.S;
    for (const auto& t : k_.tensors)
      if (t.name != d_.x && t.name != d_.w && t.name != Y->name && !t.temporary) throw unsupported("extra tensor " + t.name);
    int regions = 1;
    for (size_t i = d_.statement + 1; i < f->statements.size(); ++i) regions += 1 + count_nodes(*f->statements[i].rhs);
    const int64_t row = bytes_per_repeat_;  // one pixel (f32)
    const int64_t x16 = 0, x32 = x16 + pixels_in * row / 2, w16 = x32 + pixels_in * row, w32 = w16 + RS * row / 2,
                  acc = w32 + RS * row, tmp = acc + pixels_out * row, rest = tmp + std::max(d_.OW, int64_t(1)) * row;
    if (uint64_t(rest + int64_t(regions) * pixels_out * row) > h_.level(isa::Role::Vector).capacity_bytes)
      throw unsupported("the tensors do not fit the vector buffer in one piece");
    if (pixels_in > max_repeat_ || pixels_out > max_repeat_ || RS > max_repeat_)
      throw unsupported("more pixels than one vector instruction's repeats");

    NpuKernel out;
    npu::Program& p = out.program;
    p_ = &p;
    p.source_name = k_.name + ".npu";
    p.cores = 1;
    int64_t gm = 0;
    for (const auto& t : k_.tensors) {
      if (t.temporary) continue;
      npu::TensorBinding b{t.name, t.dtype, t.shape, gm, t.kind == ir::TensorKind::Input ? npu::TensorRole::In : npu::TensorRole::Out, {}};
      gm = (gm + b.byte_size() + 31) / 32 * 32;
      p.tensors.push_back(b);
    }
    auto off = [&](const std::string& n) { return p.find_tensor(n)->gm_offset; };
    const Operand f32 = type(DType::F32);
    // Pixels as rows of one repeat: X and the weights (f16 staged, converted to f32).
    op(Opcode::DmaIn, {at(Buffer::UB, x16), at(Buffer::GM, off(d_.x)), imm(pixels_in), imm(d_.C * 2), imm(0), imm(row / 2 - d_.C * 2)});
    op(Opcode::DmaIn, {at(Buffer::UB, w16), at(Buffer::GM, off(d_.w)), imm(RS), imm(d_.C * 2), imm(0), imm(row / 2 - d_.C * 2)});
    op(Opcode::Vconv, {f32, type(DType::F16), at(Buffer::UB, x32), at(Buffer::UB, x16), imm(pixels_in), imm(1), imm(1), imm(8), imm(4)});
    op(Opcode::Vconv, {f32, type(DType::F16), at(Buffer::UB, w32), at(Buffer::UB, w16), imm(RS), imm(1), imm(1), imm(8), imm(4)});
    op(Opcode::Vdup, {f32, at(Buffer::UB, acc), Operand::float_(0), imm(pixels_out), imm(1), imm(8)});
    // Per output row and kernel position, the valid output columns at once (terms reading the
    // zero padding are skipped: they add 0), r then s ascending: the interpreter's order.
    for (int64_t n = 0; n < d_.N; ++n)
      for (int64_t p0 = 0; p0 < d_.OH; ++p0)
        for (int64_t r = 0; r < d_.R; ++r) {
          const int64_t h = p0 + r - d_.pt;
          if (h < 0 || h >= d_.H) continue;
          for (int64_t s = 0; s < d_.S; ++s) {
            const int64_t q0 = std::max<int64_t>(0, d_.pl - s), q1 = std::min<int64_t>(d_.OW, d_.W + d_.pl - s);
            if (q1 <= q0) continue;
            const int64_t src = x32 + ((n * d_.H + h) * d_.W + q0 + s - d_.pl) * row, dst = acc + ((n * d_.OH + p0) * d_.OW + q0) * row;
            op(Opcode::Vmul, {f32, at(Buffer::UB, tmp), at(Buffer::UB, src), at(Buffer::UB, w32 + (r * d_.S + s) * row), imm(q1 - q0),
                              imm(1), imm(1), imm(1), imm(8), imm(8), imm(0)});
            op(Opcode::Vadd, {f32, at(Buffer::UB, dst), at(Buffer::UB, dst), at(Buffer::UB, tmp), imm(q1 - q0), imm(1), imm(1), imm(1),
                              imm(8), imm(8), imm(8)});
          }
        }
    // The epilogue, element-wise over all output pixels (lanes past C computed and never stored).
    chunk_ = pixels_out * lanes;
    region_base_ = rest;
    next_region_ = 0;
    tensors_[d_.acc] = {false, 0, acc, DType::F32};
    for (size_t i = d_.statement + 1; i < f->statements.size(); ++i) {
      const ir::Statement& s = f->statements[i];
      if (s.reduction != ir::Reduction::None || s.out_indices != f->statements[d_.statement].out_indices)
        throw unsupported("epilogue statement " + s.name + " is not element-wise");
      Value v = compile(*s.rhs, chunk_);
      if (v.scalar) v = vector_of(v, chunk_);
      tensors_[s.output] = v;
    }
    const Value& y = tensors_.at(Y->name);
    if (y.type != Y->dtype) throw unsupported("the result type differs from " + Y->name);
    const int eb = dtype_bytes(Y->dtype);
    op(Opcode::DmaOut, {at(Buffer::GM, off(Y->name)), at(Buffer::UB, y.region), imm(pixels_out), imm(d_.C * eb), imm(lanes * eb - d_.C * eb),
                        imm(0)});
    p.add(Opcode::PipeBarrier, {Operand::pipe_(npu::Pipe::All)});
    out.notes.push_back(fmt::format("depthwise convolution on the vector unit: pixels as rows of one repeat ({} channels), "
                                    "one vmul + vadd per output row and kernel position, one core", d_.C));
    npu::validate_program(p);
    return out;
  }

 private:
      Operand at(Buffer b, int64_t o) { return Operand::addr(b, o); }
  const Depthwise& d_;
};

}  // namespace

bool is_depthwise_convolution(const kernel::Kernel& k) { return match_depthwise(k).has_value(); }

NpuKernel emit_depthwise(const kernel::Kernel& k, const isa::Hierarchy& h) {
  const Depthwise d = *match_depthwise(k);
  return DepthwiseCode(k, h, d).emit();
}

}  // namespace tessel::emit_npu
