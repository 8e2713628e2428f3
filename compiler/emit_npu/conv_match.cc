// The NPU convolution matcher (conv_match.h).
#include "compiler/emit_npu/conv_match.h"

#include <fmt/format.h>

#include <algorithm>

#include "compiler/emit_npu/operands.h"
#include "compiler/poly/contraction.h"

namespace tessel::emit_npu::conv_detail {
namespace {

using npu::Buffer;

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

// The operand of a convolution read through a window: one of its dimensions combines an output
// index and a reduction index (the im2col view of X, `p + r - 1` with the padding folded in).
bool reads_window(const kernel::ContractionOperand& op) {
  return std::any_of(op.indices.begin(), op.indices.end(), [](const ir::AffineExpr& e) { return e.index_coeffs.size() >= 2; });
}

// The extent of the contraction's dimension named `var` (an output row / column index).
int64_t extent_of(const kernel::Contraction& c, const std::string& var) {
  for (const auto* dims : {&c.m, &c.n, &c.batch, &c.k})
    for (const auto& d : *dims)
      if (d.var == var) return d.extent;
  return 0;
}

// Where a matched convolution's dimensions sit: its layout, X's row position (the column
// follows), the output row / column and kernel row / column index names, whether it is 3-D.
struct ConvForm {
  int hpos = 0;
  std::string p, q, r, s;
  bool depth = false;
};

// The layout of Y(o) += X(xo) * Wt(wv) (plain index names o, wv) as one of the convolution forms
// (NHWC, NCHW, grouped, 3-D, blocked); sets c's layout and channel index names.
std::optional<ConvForm> conv_form(const std::vector<std::string>& o, const std::vector<std::string>& wv,
                                  const kernel::ContractionOperand& xo, int64_t frac, Conv& c) {
  auto xv = [&](size_t i) { return poly::plain_index(xo.indices[i]); };
  ConvForm f;
  auto depth_ok = [&](int pos, const std::string& p, const std::string& t) {
    const auto ds = spatial(xo.indices[pos], p, t);
    return ds && ds->stride == 1 && ds->dilation == 1 && ds->constant == 0;
  };
  if (o.size() == 4 && wv.size() == 4 && xo.indices.size() == 4) {
    if (xv(0) == o[0] && xv(3) && *xv(3) == wv[2] && wv[3] == o[3]) {  // NHWC
      c.layout = Layout::Nhwc, f = {1, o[1], o[2], wv[0], wv[1]}, c.ak = o[3], c.ac = wv[2];
    } else if (xv(0) == o[0] && xv(1) && *xv(1) == wv[1] && wv[0] == o[1]) {  // NCHW
      c.layout = Layout::Nchw, f = {2, o[2], o[3], wv[2], wv[3]}, c.ak = o[1], c.ac = wv[1];
    } else {
      return std::nullopt;
    }
  } else if (o.size() == 5 && wv.size() == 5 && xo.indices.size() == 5) {
    if (xv(0) == o[0] && xv(3) == o[3] && wv[0] == o[3] && xv(4) && *xv(4) == wv[3] && wv[4] == o[4]) {  // grouped NHWC
      c.layout = Layout::Nhwc, f = {1, o[1], o[2], wv[1], wv[2]}, c.ak = o[4], c.ac = wv[3];
    } else if (xv(0) == o[0] && xv(1) == o[1] && wv[0] == o[1] && xv(2) && *xv(2) == wv[2] && wv[1] == o[2]) {  // grouped NCHW
      c.layout = Layout::Nchw, f = {3, o[3], o[4], wv[3], wv[4]}, c.ak = o[2], c.ac = wv[2];
    } else if (xv(0) == o[0] && xv(4) && *xv(4) == wv[3] && wv[4] == o[4]) {  // 3-D NDHWC
      if (!depth_ok(1, o[1], wv[0])) return std::nullopt;
      c.layout = Layout::Nhwc, f = {2, o[2], o[3], wv[1], wv[2], true}, c.ak = o[4], c.ac = wv[3];
    } else if (xv(0) == o[0] && xv(1) && *xv(1) == wv[1] && wv[0] == o[1]) {  // 3-D NCDHW
      if (!depth_ok(2, o[2], wv[2])) return std::nullopt;
      c.layout = Layout::Nchw, f = {3, o[3], o[4], wv[3], wv[4], true}, c.ak = o[1], c.ac = wv[1];
    } else {
      return std::nullopt;
    }
  } else if (o.size() == 6 && wv.size() == 6 && xo.indices.size() == 6) {  // blocked
    if (!(xv(0) == o[0] && xv(3) && *xv(3) == wv[2] && xv(4) == o[4] && xv(5) && *xv(5) == wv[4] && wv[3] == o[3] && wv[5] == o[5]))
      return std::nullopt;
    c.layout = Layout::Blocked, f = {1, o[1], o[2], wv[0], wv[1]}, c.ak = o[3], c.ac = wv[2], c.unit = frac;
  } else {
    return std::nullopt;
  }
  return f;
}

// A strided 1x1 convolution written with a matrix of weights (ResNet's projection shortcuts):
//   Y(n, p, q, k) +=! X(n, sh p, sw q, c) * Wt(c, k) in NHWC, sh or sw > 1 (at stride 1 the
// core collapses n, p, q into one GEMM row index). Read as R = S = 1 with no kernel-position axes.
std::optional<ConvForm> pointwise_form(const std::vector<std::string>& o, const std::vector<std::string>& wv,
                                       const kernel::ContractionOperand& xo, Conv& c) {
  if (o.size() != 4 || wv.size() != 2 || xo.indices.size() != 4) return std::nullopt;
  auto xv = [&](size_t i) { return poly::plain_index(xo.indices[i]); };
  if (!(xv(0) == o[0] && xv(3) && *xv(3) == wv[0] && wv[1] == o[3])) return std::nullopt;
  auto stride = [&](size_t pos, const std::string& v) -> int64_t {
    const ir::AffineExpr& e = xo.indices[pos];
    if (!e.param_coeffs.empty() || e.constant != 0 || e.index_coeffs.size() != 1 || !e.index_coeffs.count(v)) return 0;
    return e.index_coeffs.at(v);
  };
  c.sh = stride(1, o[1]), c.sw = stride(2, o[2]);
  if (c.sh <= 0 || c.sw <= 0 || (c.sh == 1 && c.sw == 1)) return std::nullopt;
  c.layout = Layout::Nhwc, c.ak = o[3], c.ac = wv[0];
  return ConvForm{1, o[1], o[2], "", "", false};
}

// c's sizes from the shapes of X and Wt (rank: of the output).
void conv_sizes(const std::vector<int64_t>& X, const std::vector<int64_t>& Wt, size_t rank, bool depth, Conv& c) {
  switch (c.layout) {
    case Layout::Nhwc:
      if (depth) {
        c.D = X[1], c.H = X[2], c.W = X[3], c.T = Wt[0], c.R = Wt[1], c.S = Wt[2], c.C = c.T * X[4], c.K = Wt[4];
      } else if (rank == 5) {
        c.N = X[0], c.H = X[1], c.W = X[2], c.G = X[3], c.C = X[4], c.R = Wt[1], c.S = Wt[2], c.K = Wt[4];
      } else if (Wt.size() == 2) {  // pointwise_form
        c.N = X[0], c.H = X[1], c.W = X[2], c.C = X[3], c.R = c.S = 1, c.K = Wt[1];
      } else {
        c.N = X[0], c.H = X[1], c.W = X[2], c.C = X[3], c.R = Wt[0], c.S = Wt[1], c.K = Wt[3];
      }
      break;
    case Layout::Nchw:
      if (depth) c.D = X[2], c.H = X[3], c.W = X[4], c.T = Wt[2], c.R = Wt[3], c.S = Wt[4], c.C = c.T * X[1], c.K = Wt[0];
      else if (rank == 5) c.N = X[0], c.G = X[1], c.C = X[2], c.H = X[3], c.W = X[4], c.K = Wt[1], c.R = Wt[3], c.S = Wt[4];
      else c.N = X[0], c.C = X[1], c.H = X[2], c.W = X[3], c.K = Wt[0], c.R = Wt[2], c.S = Wt[3];
      break;
    case Layout::Blocked:
      c.N = X[0] * c.unit, c.H = X[1], c.W = X[2], c.C = X[3] * c.unit, c.R = Wt[0], c.S = Wt[1], c.K = Wt[3] * c.unit;
      break;
  }
}

}  // namespace

// The matched contraction (Kernel::contraction) read as a convolution
//   Y(n, p, q, k) +=! X(n, sh p + dh r - pt, sw q + dw s - pl, c) * Wt(r, s, c, k)
// in NHWC, the same in NCHW (X[n, c, h, w], Wt[k, c, r, s], Y[n, k, p, q]) and in the blocked
// layout (X[nb, h, w, cb, ni, ci], Wt[r, s, cb, kb, ci, ki], Y[nb, p, q, kb, ni, ki] with 16-blocks),
// X read as zero outside the image (the core inlines a padding statement into X's indices); or a
// strided 1x1 convolution with a weight matrix (pointwise_form).
std::optional<Conv> match(const kernel::Kernel& k, int64_t frac) {
  if (!k.contraction || !k.function || k.contraction->anchor > 1) return std::nullopt;
  const kernel::Contraction& ct = *k.contraction;
  const bool pointwise = !reads_window(ct.a) && !reads_window(ct.b);
  const bool x_is_a = pointwise ? ct.a.indices.size() > ct.b.indices.size() : reads_window(ct.a);
  const kernel::ContractionOperand& xo = x_is_a ? ct.a : ct.b;
  const kernel::ContractionOperand& wo = x_is_a ? ct.b : ct.a;
  if ((!pointwise && !reads_window(xo)) || wo.producer || (xo.producer && !xo.guard)) return std::nullopt;
  const ir::Function& f = *k.function;
  const ir::Statement& st = f.statements[ct.anchor];
  std::vector<std::string> o, wv;
  for (const auto& e : st.out_indices) o.push_back(*poly::plain_index(e));  // plain: the matcher's rule
  for (const auto& e : wo.indices) {
    auto v = poly::plain_index(e);
    if (!v) return std::nullopt;
    wv.push_back(*v);
  }
  Conv c;
  const std::optional<ConvForm> form = pointwise ? pointwise_form(o, wv, xo, c) : conv_form(o, wv, xo, frac, c);
  if (!form) return std::nullopt;
  if (!pointwise) {
    const auto hs = spatial(xo.indices[form->hpos], form->p, form->r), ws = spatial(xo.indices[form->hpos + 1], form->q, form->s);
    if (!hs || !ws) return std::nullopt;
    c.sh = hs->stride, c.dh = hs->dilation, c.sw = ws->stride, c.dw = ws->dilation;
    c.pt = -hs->constant, c.pl = -ws->constant;
  }
  c.an = o[0], c.ap = form->p, c.aq = form->q, c.ar = form->r, c.as = form->s;
  c.x = xo.tensor, c.w = wo.tensor, c.y = c.acc = st.output;
  c.statement = ct.anchor;
  c.epilogue = !ct.epilogue.empty();
  if (c.epilogue) c.y = f.statements[ct.epilogue.back()].output;
  const kernel::GlobalTensor* Y = k.find_tensor(c.y);
  const size_t rank = o.size();
  if (!Y || xo.shape.size() != rank || wo.shape.size() != wv.size() || Y->shape.size() != rank) return std::nullopt;
  if (xo.dtype != DType::F16 || wo.dtype != DType::F16 || (!c.epilogue && Y->dtype != DType::F32)) return std::nullopt;
  if (c.epilogue && c.layout != Layout::Nhwc) return std::nullopt;
  if (c.layout == Layout::Blocked && (xo.shape[4] != frac || xo.shape[5] != frac || wo.shape[4] != frac || wo.shape[5] != frac ||
                                      Y->shape[4] != frac || Y->shape[5] != frac))
    return std::nullopt;
  c.out = Y->dtype;
  c.OH = extent_of(ct, form->p), c.OW = extent_of(ct, form->q);
  conv_sizes(xo.shape, wo.shape, rank, form->depth, c);
  if (rank == 5 && !form->depth && c.layout == Layout::Nhwc && c.epilogue) return std::nullopt;  // grouped NHWC
  if (form->depth) {  // images (n, o); the O output depths of a valid (unpadded) window
    if (c.epilogue) return std::nullopt;
    c.O = c.D - c.T + 1;
    c.N = xo.shape[0] * c.O;
  }
  return c;
}

// A strided 1x1 convolution without padding (Conv::x_step): the image's rows clipped to the last
// one read (so an even H's windows reach its end), and where the column stride divides W, the
// columns read as the pixels of a row OW wide. NHWC, ungrouped, 2-D, channels multiples of the
// fractal (the scratch copies of padded channels hold whole images); any other convolution as it is.
namespace {

bool strided_pointwise_form(const Conv& c, const isa::NpuMachine& m) {
  return c.R == 1 && c.S == 1 && c.pt == 0 && c.pl == 0 && (c.sh > 1 || c.sw > 1) && c.layout == Layout::Nhwc && c.G == 1 &&
         c.T == 1 && !c.depthwise && c.C % m.cube_f16.k0 == 0 && c.K % m.cube_f16.k0 == 0 && !c.folded() && !c.clipped();
}

}  // namespace

Conv strided_pointwise(Conv c, const isa::NpuMachine& m) {
  if (!strided_pointwise_form(c, m)) return c;
  c.src_h = c.H, c.src_w = c.W;
  c.H = (c.OH - 1) * c.sh + 1;
  if (c.W % c.sw == 0) c.x_step = c.sw, c.W = c.OW, c.sw = 1;
  return c;
}

std::optional<Conv> gathered_pointwise(const Conv& c, const isa::NpuMachine& m) {
  if (!strided_pointwise_form(c, m)) return std::nullopt;
  Conv d = c;
  d.src_h = c.H, d.src_w = c.W;
  d.gather = {c.OH, c.OW, c.sh, c.sw};
  d.H = 1, d.W = c.OH * c.OW, d.OH = 1, d.OW = c.OH * c.OW, d.sh = 1, d.sw = 1;
  return d;
}

UserError conv_unsupported(const kernel::Kernel& k, const std::string& why) {
  return UserError("kernel " + k.name + ": the NPU backend does not map this convolution yet: " + why);
}

// A strided window that stops short of the image's last rows or columns (a 1x1 stride-2
// convolution of an even H) has a negative bottom or right pad, which is no img2col geometry
// (the simulator refused set_fmatrix, issue 31): refused (the UserError text), the general lowering
// maps it. "" when the windows reach the image's end.
std::string windows_stop_short(const kernel::Kernel& k, const Conv& cv) {
  const int64_t reach_h = (cv.OH - 1) * cv.sh + cv.dh * (cv.R - 1) + 1 - cv.pt;
  const int64_t reach_w = (cv.OW - 1) * cv.sw + cv.dw * (cv.S - 1) + 1 - cv.pl;
  if (reach_h >= cv.H && reach_w >= cv.W) return "";
  return fmt::format("kernel {}: the windows stop short of the image ({} of {} rows, {} of {} columns "
                     "reached): img2col has no negative padding", k.name, reach_h, cv.H, reach_w, cv.W);
}

bool weights_in_one_copy(const Conv& c, int64_t frac) {
  if (c.layout != Layout::Nhwc || c.depthwise || c.folded()) return false;
  return c.T == 1 || (round_up(c.C, frac) / c.T / frac) % 2 == 0;
}

// The planner's view of a matched convolution: channel counts padded to the cube's fractal.
tile::ConvGeometry padded_geometry(const Conv& c, const isa::NpuMachine& m) {
  tile::ConvGeometry g;
  g.N = c.N, g.H = c.H, g.W = c.W, g.R = c.R, g.S = c.S, g.OH = c.OH, g.OW = c.OW, g.unit = c.unit;
  g.sh = c.sh, g.sw = c.sw, g.dh = c.dh, g.dw = c.dw;
  g.C = round_up(c.C, m.cube_f16.k0), g.K = round_up(c.K, m.cube_f16.k0);
  g.copies = (g.C != c.C && !c.folded()) || g.K != c.K || c.layout == Layout::Nchw;
  g.whole_k = g.K != c.K;
  // the one-core copies of the weights in one piece through UB (nchw_in, padded_in)
  const int64_t in = dtype_bytes(DType::F16), RS = c.R * c.S, cap = m.capacity(Buffer::UB);
  if (c.layout == Layout::Nchw)
    g.copies_fit_one_core = c.K * round_up(c.C * RS, m.block_elements(DType::F16)) * in + g.C * RS * g.K * in + m.fractal_bytes() <= cap;
  else
    g.copies_fit_one_core = RS * c.C * g.K * in <= cap / 2;
  g.an = c.an, g.ap = c.ap, g.aq = c.aq, g.ak = c.ak, g.ac = c.ac, g.ar = c.ar, g.as = c.as;
  g.groups = c.G;
  if (c.G > 1 || c.T > 1) g.copies_fit_one_core = false;  // grouped and 3-D copies are made per core only
  g.weigh_gm_reads = c.T == 1;
  g.map_copies = c.gathered() ? c.gather.rows : 0;
  g.weight_copies = weights_in_one_copy(c, m.cube_f16.k0) ? 1 : 0;
  g.chunk_weights = g.weight_copies == 1 && c.T == 1 && c.G == 1 && !g.copies;
  // bands over cores run one code at per-core offsets: no padding rows (every band's window alike)
  // (NHWC without copies: bands with padding rows too, each kind of band its own code; several
  // images: core = (image, band, tile), where channel tiles x images leave cores idle)
  const bool nhwc_bands = c.layout == Layout::Nhwc && !g.copies && c.G == 1 && c.T == 1 && !c.depthwise;
  g.spread_bands = nhwc_bands || ((c.layout == Layout::Nchw || !g.copies) && c.pt == 0 &&
                                  (c.OH - 1) * c.sh + c.dh * (c.R - 1) <= c.H - 1);
  if (c.layout == Layout::Nchw) {  // X into L1, Y from UB: the weights' copy round trips; one core: each copy in, out, in
    g.copy_round_trips = 3;
    g.copy_bytes = 3.0 * double(c.N * c.G * c.C * c.H * c.W * in + c.N * c.G * c.K * c.OH * c.OW * dtype_bytes(c.out) + c.G * c.K * c.C * RS * in);
    g.x_job_bytes = double(c.C * c.H * c.W * in), g.y_channel_bytes = double(c.OH * c.OW * dtype_bytes(c.out));
    g.w_channel_bytes = double(c.C * RS * in);
  }
  return g;
}

std::optional<Conv> fold_window(const Conv& c, const isa::NpuMachine& m) {
  const int64_t f = m.cube_f16.k0;
  if (c.layout != Layout::Nhwc || c.G > 1 || c.T > 1 || c.depthwise || c.clipped() || c.unit != 1 || c.C >= f || c.K % f != 0 ||
      c.dw != 1 || c.S < 2)
    return std::nullopt;
  if (c.R * ((c.S * c.C + f - 1) / f) >= c.R * c.S) return std::nullopt;  // no fewer K fractals
  Conv d = c;
  d.fold = {c.C, c.S, c.sw, c.pl, c.W};
  d.C = c.S * c.C, d.S = 1, d.W = c.OW, d.sw = 1, d.pl = 0;
  return d;
}

}  // namespace tessel::emit_npu::conv_detail
