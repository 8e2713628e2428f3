// The NPU convolution emitter (conv_emitter.h): run() and the entry point; the tensors' GM placement,
// the layouts of X, Y and the weights, the per-core scratch slots, the summary note. The other passes:
// conv_emitter_class.h.
#include "compiler/emit_npu/conv_emitter.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "compiler/emit_npu/conv_emitter_class.h"
#include "isa/base/error.h"

namespace tessel::emit_npu::conv_detail {

void ConvEmitter::run() {
  p_.source_name = k_.name + ".npu";
  TESSEL_CHECK(windows_stop_short(k_, cv_).empty(), "conv: windows that stop short of the image (why_not_conv refuses them)");
  make_bands();
  out_.macs = uint64_t(cv_.N) * P() * RS() * cv_.G * orig_.C * (cv_.depthwise ? 1 : orig_.K);
  place_tensors();
  set_layouts();
  if (cv_.folded()) place_fold();
  if (per_core()) place_copies();
  else if (cv_.layout == Layout::Nchw) nchw_in();
  else if (padded()) padded_in();
  if (code_.refused()) return;  // (a dry run only: refusals throw otherwise)
  main_loops();
  if (per_core()) {
  } else if (cv_.layout == Layout::Nchw) {
    nchw_out();
  } else if (padded()) {
    padded_out();
  }
  if (code_.refused()) return;
  p_.add(Opcode::PipeBarrier, {Operand::pipe_(npu::Pipe::All)});
  out_.notes.push_back(summary());
  npu::validate_program(p_);
}

void ConvEmitter::place_tensors() {
  for (const auto& t : k_.tensors) {
    // folded: the windows' reads past X's rows and the last weight slice's rows land in guards
    auto guard = [&](const std::string& name, int64_t bytes) {
      if (cv_.folded() && bytes) code_.place(name, DType::F16, {bytes / in_}, gm_);
    };
    if (t.name == cv_.x) guard("x_front_guard", fold_.front_guard_bytes());
    code_.place(t.name, t.dtype, t.shape, t.kind == ir::TensorKind::Input ? npu::TensorRole::In : npu::TensorRole::Out, gm_);
    if (t.name == cv_.x) guard("x_back_guard", fold_.back_guard_bytes());
    if (t.name == cv_.w) guard("w_guard", fold_.weight_guard_bytes());
  }
  // column blocks past K read up to one block of elements beyond a broadcast tensor's end: keep them in GM
  if (epi_) code_.place("guard", DType::F32, {n0_}, gm_);
  X_.base = offset(cv_.x), Y_.base = offset(cv_.y), W_.base = offset(cv_.w);
}

void ConvEmitter::set_layouts() {
  const int64_t u = cv_.unit;
  switch (cv_.layout) {
    case Layout::Nhwc:
    case Layout::Nchw:  // (NCHW: through the NHWC scratch copies)
      X_.group_bytes = cv_.H * cv_.W * cv_.G * cv_.C * in_, X_.pixel_bytes = cv_.G * cv_.C * in_, X_.block_bytes = frow_;
      Y_.group_bytes = P() * cv_.G * cv_.K * eo_, Y_.pixel_bytes = cv_.G * cv_.K * eo_, Y_.block_bytes = n0_ * eo_;
      W_.row_q = cv_.C * cv_.K, W_.row_c = cv_.K;
      if (cv_.T > 1) {  // X[N][D][H][W][C], image (n, o) at n D H W C + o H W C; Wt[T][R][S][C][K]
        const int64_t c = cv_.depth_channels(), hwc = cv_.H * cv_.W * c * in_;
        X_.group = cv_.O, X_.group_bytes = cv_.D * hwc, X_.inner_bytes = hwc, X_.pixel_bytes = c * in_, X_.tap_bytes = hwc;
        W_.row_q = c * cv_.K, W_.per_tap = RS() * c * cv_.K;
      }
      if (cv_.clipped()) X_.group_bytes = cv_.src_h * cv_.src_w * cv_.C * in_, X_.pixel_bytes *= cv_.x_step;
      if (cv_.folded())  // the user's X; the folded weight row (r, j) is the user's row r S C + j
        X_.group_bytes = cv_.H * cv_.fold.W * cv_.fold.C * in_, X_.pixel_bytes = cv_.fold.C * in_, W_.row_q = orig_.C * cv_.K;
      break;
    case Layout::Blocked:
      X_.group = u, X_.group_bytes = cv_.H * cv_.W * cv_.C * u * in_, X_.inner_bytes = u * in_, X_.pixel_bytes = cv_.C * u * in_,
      X_.block_bytes = u * u * in_;
      Y_.group = u, Y_.group_bytes = P() * cv_.K * u * eo_, Y_.inner_bytes = u * eo_, Y_.pixel_bytes = cv_.K * u * eo_,
      Y_.block_bytes = u * u * eo_;
      W_.fractal = true, W_.KB = cv_.K / u;
      break;
  }
}

// Per-core copies: X's images in two slots per core, each core's own copy of the weights, Y
// (NCHW or padded output channels) through an NHWC copy of which each core writes and reads back
// only its (image, channel tile) blocks. Nothing one core writes is read by another.
void ConvEmitter::place_copies() {
  user_x_ = X_.base, user_w_ = W_.base, user_y_ = Y_.base;
  const int64_t cores = m_.cores;
  if (x_copied()) X_.base = code_.place(cv_.x + "_copies", DType::F16, {cores * 2, x_slot_bytes() / in_}, gm_);
  if (cv_.layout == Layout::Nchw) X_.pixel_bytes = frow_, X_.block_bytes = cv_.H * cv_.W * frow_;  // slots hold C1HWC0
  if (cv_.layout == Layout::Nchw && cv_.T > 1) X_.tap_bytes = C1() / cv_.T * X_.block_bytes, X_.group = 1;  // the T depths in turn
  if (!cv_.depthwise) W_.base = code_.place(cv_.w + "_copies", DType::F16, {cores, w_slot_bytes() / in_}, gm_);
  if (cv_.layout == Layout::Nchw) W_.row_q = plan_.tn, W_.row_c = cv_.T * RS() * plan_.tn, W_.per_tap = RS() * plan_.tn;  // rows (c, t, q) of tn
  if (y_copied() && !y_from_ub()) Y_.base = code_.place(cv_.y + "_nhwc", cv_.out, {cv_.N, cv_.OH, cv_.OW, cv_.G * cv_.K}, gm_);
  out_.notes.push_back(fmt::format("{} (channels padded to {} and {}), per core: each core copies the images it reads, its "
                                   "channel tile's weights and its results; every core",
                                   cv_.layout == Layout::Nchw ? "NCHW: X and the weights transposed (16 x 16 vtranspose) to C1HWC0 "
                                                                "(straight into L1 for one band) / [C, R*S, tn] copies, the result "
                                                                "transposed in UB back to NCHW"
                                                              : "channels not multiples of the fractal: zero-padded copies through UB",
                                   cv_.C, cv_.K));
}

// Folded: the map's UB staging past the accumulator blocks and the epilogue's regions.
void ConvEmitter::place_fold() {
  int64_t rows = 0;
  for (const Band& b : bands_) rows = std::max(rows, b.in_rows);
  if (!fold_.place_ub(epi_ ? ub_columns(2) : ub_resident(), m_.capacity(Buffer::UB), rows))
    return code_.refuse(unsupported("the folded feature map's rows do not fit the vector buffer").what());
  out_.notes.push_back(fmt::format("{} input channels < the fractal: the window's {} columns folded into the channels ({} -> {}, "
                                   "K {} instead of {}): the map built per band in UB from X ({} rows per chunk), edges masked",
                                   cv_.fold.C, cv_.fold.S, cv_.fold.C, cv_.C, cv_.R * cv_.C, cv_.R * cv_.fold.S * k0_, fold_.chunk_rows()));
}

std::string ConvEmitter::summary() const {
  const int64_t ct = cores_avail();
  const std::string grouped = cv_.depthwise ? fmt::format("depthwise as {} groups of {} channels with diagonal weights (built in UB): ", cv_.G, cv_.C)
                              : cv_.G > 1   ? fmt::format("{} groups of {} -> {} channels: ", cv_.G, cv_.C, cv_.K)
                              : cv_.T > 1   ? fmt::format("3-D: images (n, o) of {} output depths, {} depth taps as channel slices "
                                                          "accumulating in L0C (the feature map holds the taps' input depths): ",
                                                          cv_.O, cv_.T)
                                            : std::string();
  return grouped + fmt::format("img2col convolution: output channels in tiles of {} whose weights stay in L1, {} image(s) x "
                     "{} tile(s) per core over {} core(s){}, pixel blocks of {} (of {}), {} channel slices x {} "
                     "kernel-position group(s) of {}{}{}{}",
                     plan_.tn, per_core_images(), kt_loop() ? (plan_.k_tiles + ct - 1) / ct : 1, p_.cores,
                     halves() == 2 ? " two images at a time (ping-pong)" : "", plan_.tm0, plan_.padded_pixels, C1(),
                     plan_.kgroups.size(), plan_.kc,
                     cv_.sh > 1 || cv_.sw > 1 || cv_.x_step > 1 ? fmt::format(", stride {}x{}", cv_.sh, cv_.sw * cv_.x_step) : "",
                     cv_.x_step > 1 ? fmt::format(" (1x1: rows 0..{} of {} in L1, the columns read as pixels {} apart)", cv_.H - 1, cv_.src_h, cv_.x_step)
                     : cv_.gathered() ? fmt::format(", stride {}x{} (1x1: the {} x {} pixels read gathered pixel-major into L1 by one copy per "
                                                    "output row, the weights after them)", cv_.gather.sh, cv_.gather.sw, cv_.gather.rows, cv_.gather.cols)
                                      : "",
                     k_.user_tile ? ", from tile " + k_.user_tile->to_string() : "") +
         (bands_.size() > 1 ? fmt::format(", {} bands of {} output rows (input windows of up to {} rows with their halos)", bands_.size(),
                                          bands_[0].out_rows, plan_.fm_bytes / (cv_.C * cv_.W * in_))
                            : "") +
         (wchunks_.empty() ? "" : fmt::format(", weights in chunks of {} slices ahead of their planes", fmt::join(plan_.weight_chunks, "+")));
}

void emit_planned(const kernel::Kernel& k, const isa::NpuMachine& m, const Conv& orig, const Conv& cv, const tile::ConvPlan& plan,
                  ConvEpilogue* epi, NpuKernel& out, std::string* refusal) {
  ConvEmitter(k, m, orig, cv, plan, epi, out, refusal).run();
}

}  // namespace tessel::emit_npu::conv_detail
