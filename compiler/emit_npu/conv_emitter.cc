// The NPU convolution emitter (conv_emitter.h).
#include "compiler/emit_npu/conv_emitter.h"

#include "compiler/emit_npu/conv_epilogue.h"
#include "compiler/emit_npu/conv_fold.h"
#include "compiler/emit_npu/conv_layout.h"
#include "compiler/emit_npu/conv_emitter_parts.h"
#include "compiler/emit_npu/operands.h"
#include "compiler/emit_npu/pointwise.h"
#include "compiler/poly/contraction.h"
#include "compiler/tile/npu_conv_plan.h"
#include "compiler/tile/tile_spec.h"
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <algorithm>
#include <functional>
#include <utility>
#include <map>
#include <memory>
#include <numeric>
#include "isa/base/error.h"
#include "isa/npu_machine.h"

namespace tessel::emit_npu::conv_detail {
namespace {

using npu::Buffer;
using npu::Opcode;
using npu::Operand;

Operand f16() { return Operand::type(DType::F16); }

enum Reg : uint8_t {
  kKTile = 1, kImage, kImage0, kPair, kTmp, kXBase, kYBase, kWCol, kSlice, kInit, kKpos, kWSlice, kCol2, kCol4, kGroup, kInner,
  kYBaseOdd,  // the odd image's Y base while its write-back trails the next image's mmads
  kXSrc, kYDst, kPrivW,  // per-core scratch copies: the image in X and Y as the user lays them out, the core's weights
  kGroupX,  // grouped: the byte offset of the tile's group's first input channel within a pixel
  kBand, kCond,  // bands spread over cores: the core's band
  kCase, kMid,    // padded bands over cores: the first / middle / last band's code runs on its cores only
  kWSrc           // NCHW weights transposed to L1: the tile's rows in the user's weights
};

// not hardware: code-size caps; pairs of channel slices emitted straight-line (each slice's load3d
// then waits for its own plane only), map planes copied ahead of the pair being emitted (load_band)
constexpr int64_t kStraightPairs = tile::kConvStraightPairs, kPlanesAhead = 8;

// Carries out a ConvPlan (compiler/tile/npu_conv_plan.h) for one matched convolution: GM tensors,
// scratch layout copies, the per-core weights, the image loop with its channel slices, the write-back.
class ConvEmitter {
 public:
  ConvEmitter(const kernel::Kernel& k, const isa::NpuMachine& m, const Conv& orig, const Conv& cv,
              const tile::ConvPlan& plan, ConvEpilogue* epi, NpuKernel& out, std::string* refusal = nullptr)
      : k_(k), m_(m), orig_(orig), cv_(cv), plan_(plan), epi_(epi), out_(out), p_(out.program), code_(k, m, out.program, refusal),
        fold_(m, cv, out.program, code_) {}

  void run() {
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

 private:
  int64_t P() const { return cv_.OH * cv_.OW; }
  int64_t RS() const { return cv_.R * cv_.S; }
  int64_t C1() const { return cv_.C / k0_; }
  bool padded() const { return (cv_.C != orig_.C && !cv_.folded()) || cv_.K != orig_.K; }
  int64_t x_width() const { return cv_.folded() ? cv_.fold.W : cv_.W; }  // X's pixels per row
  int64_t cores_avail() const { return plan_.one_core ? 1 : m_.cores; }
  // NCHW or padded channels with the copies made per core, of what the core reads and writes.
  bool per_core() const { return (padded() || cv_.layout == Layout::Nchw) && !plan_.one_core; }
  bool x_copied() const { return cv_.layout == Layout::Nchw || (cv_.C != orig_.C && !cv_.folded()); }
  bool y_copied() const { return cv_.layout == Layout::Nchw || cv_.K != orig_.K; }
  // NCHW per core: the image's planes transposed straight into L1 (one band), the accumulator's
  // blocks transposed in UB straight to the user's Y (no NHWC scratch).
  bool x_to_l1() const { return per_core() && cv_.layout == Layout::Nchw && (bands_.size() == 1 || spread()); }
  // Bands spread over cores: each core computes one band of its images.
  bool spread() const { return plan_.core_bands > 1; }
  bool y_from_ub() const { return per_core() && cv_.layout == Layout::Nchw && !epi_; }
  int64_t x_slot_bytes() const { return round_up(cv_.H * cv_.W * cv_.C * in_, code_.gm_align()); }
  int64_t w_slot_bytes() const { return round_up(RS() * cv_.C * cv_.K * in_, code_.gm_align()); }
  bool kt_loop() const { return plan_.k_tiles > cores_avail(); }
  int64_t per_core_images() const { return plan_.k_tiles <= cores_avail() ? cv_.N / plan_.group : cv_.N; }
  // images per loop iteration: two ping-pong when L1 holds two feature maps and the count is even
  int64_t halves() const { return plan_.fm_halves == 2 && per_core_images() % 2 == 0 ? 2 : 1; }
  int64_t w_l1() const {  // the tile's weights after the feature maps
    return (bands_.size() > 1 ? std::max(plan_.fm_halves, band_kind_slots()) : halves()) * plan_.fm_bytes;
  }
  // Padded bands over cores: each kind of band its own L1 map and L0C slot where they fit (a kind's
  // copies then do not wait for the kinds before it, loops of no iteration on this core).
  int64_t band_kind_slots() const {
    if (!spread() || bands_alike() || per_core() || x_to_l1()) return 1;
    const int64_t kinds = std::min<int64_t>(3, int64_t(bands_.size()));
    const int64_t w_bytes = cv_.C * RS() * plan_.tn * in_, acc = plan_.padded_pixels * plan_.tn * acc_;
    if (kinds * plan_.fm_bytes + w_bytes > m_.capacity(Buffer::L1) || kinds * acc > m_.capacity(Buffer::L0C)) return 1;
    return kinds;
  }
  int64_t offset(const std::string& n) const { return p_.find_tensor(n)->gm_offset; }
  void op(Opcode o, std::vector<Operand> v) { p_.add(o, std::move(v)); }

  void place_tensors() {
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

  void set_layouts() {
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
  void place_copies() {
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

  // Folded, one band of one image per core: the weights and then the epilogue's channel values are
  // loaded after the band's map (each kind of band's code runs once per core), whose chain to the
  // cube is longer; the channel values are needed only by the write-back.
  bool loads_after_fold() const { return cv_.folded() && spread() && per_core_images() == 1 && !kt_loop(); }
  // Padded bands over cores (not folded): each kind of band's code loads the weights before its
  // map (loaded before the kinds' loops, a later kind's map waited a GM latency for MTE1's wait).
  bool weights_per_band_kind() const {
    return !cv_.folded() && spread() && !bands_alike() && !per_core() && per_core_images() == 1 && !kt_loop() && !cv_.depthwise;
  }

  // Folded: the map's UB staging past the accumulator blocks and the epilogue's regions.
  void place_fold() {
    int64_t rows = 0;
    for (const Band& b : bands_) rows = std::max(rows, b.in_rows);
    if (!fold_.place_ub(epi_ ? ub_columns(2) : ub_resident(), m_.capacity(Buffer::UB), rows))
      return code_.refuse(unsupported("the folded feature map's rows do not fit the vector buffer").what());
    out_.notes.push_back(fmt::format("{} input channels < the fractal: the window's {} columns folded into the channels ({} -> {}, "
                                     "K {} instead of {}): the map built per band in UB from X ({} rows per chunk), edges masked",
                                     cv_.fold.C, cv_.fold.S, cv_.fold.C, cv_.C, cv_.R * cv_.C, cv_.R * cv_.fold.S * k0_, fold_.chunk_rows()));
  }

  // UB for the per-core copies: past the epilogue's resident channel values and column regions
  // (they stay for the whole channel tile), else the lower half.
  int64_t copy_ub() const { return epi_ ? ub_columns(2) : 0; }
  int64_t copy_ub_bytes() const { return epi_ ? m_.capacity(Buffer::UB) - copy_ub() : m_.capacity(Buffer::UB) / 2; }

  // The core's own copy of the weights: NCHW [K][C R S] -> [C][R S][Kp]; NHWC rows of K -> Kp.
  void copy_weights() {
    if (cv_.G > 1 && x_copied()) {  // the tile's group's first input plane within an image (copy_image_in)
      op(Opcode::Div, {reg(kGroupX), reg(kKTile), imm(cv_.K / plan_.tn)});
      op(Opcode::Mul, {reg(kGroupX), reg(kGroupX), imm(cv_.C * cv_.H * cv_.W * in_)});
    }
    if (cv_.depthwise) return;  // ConvCode::diagonal_weights builds them in L1
    if (weights_to_l1()) return transpose_weights_to_l1();
    op(Opcode::Mul, {reg(kPrivW), reg(npu::kRegCoreId), imm(w_slot_bytes())});
    if (cv_.layout == Layout::Nchw) {  // the channel tile's rows [K][C R S] -> [C][R S][tn]
      const int64_t tn = plan_.tn, crs = orig_.C * RS();
      op(Opcode::Mul, {reg(kXSrc), reg(kKTile), imm(tn * crs * in_)});
      code_.transpose_rows(user_w_, kXSrc, crs, std::min(tn, orig_.K), crs, cv_.C * RS(), W_.base, kPrivW, k0_, tn, copy_ub(),
                           copy_ub_bytes());
      return;
    }
    for (int64_t q = 0; q < RS(); ++q)
      code_.resize_rows(user_w_ + q * orig_.C * orig_.K * in_, npu::kNoRegister, W_.base + q * cv_.C * cv_.K * in_, kPrivW, orig_.C,
                        orig_.K, cv_.K, DType::F16, copy_ub(), copy_ub_bytes());
  }

  // NCHW per core, channels a multiple of 16: the tile's weights transposed in UB straight into
  // their L1 fractals (no GM copy): per 16 output channels the rows [16][C T R S] by one DMA, one
  // vtranspose per square (rows (c, t, q) of 16 output channels), per (c, t) its R S rows moved to
  // their fractal rows in L1.
  int64_t weight_row_pitch() const { return round_up(orig_.C * RS(), k0_); }
  bool weights_to_l1() const {
    return per_core() && cv_.layout == Layout::Nchw && cv_.C == orig_.C && 2 * weight_row_pitch() * k0_ * in_ <= copy_ub_bytes();
  }
  // The groups in as many UB slots as fit next to two of the map's (ConvCode::weights_to_l1); their
  // transposes held back (pending_weights_) behind the map's first loads (transpose_rows'
  // after_loads; slices() flushes the rest) where the map is copied once per core.
  int64_t weight_slot_bytes() const { return 2 * weight_row_pitch() * k0_ * in_; }
  int64_t weight_groups() const { return (std::min(plan_.tn, orig_.K) + k0_ - 1) / k0_; }
  int64_t weight_slots() const {
    if (!weights_to_l1()) return 0;
    const int64_t map_slots = 2 * code_.transpose_slot_bytes(map_plane(), copy_ub_bytes());
    const int64_t fit = (copy_ub_bytes() - map_slots) / weight_slot_bytes();
    return std::clamp<int64_t>(fit, 1, weight_groups());
  }
  // The map's transposes (straight into L1) past the weights' slots, up to the end of UB without an
  // epilogue (the write-back's blocks and transposes come after the map is in L1; the sync pass
  // orders them behind the transposes).
  int64_t map_ub() const { return copy_ub() + weight_slots() * weight_slot_bytes(); }
  int64_t map_ub_bytes() const { return (epi_ ? copy_ub_bytes() : m_.capacity(Buffer::UB) - copy_ub()) - weight_slots() * weight_slot_bytes(); }
  // Elements per plane the map's transposes move (a band's rows, or the image's).
  int64_t map_plane() const { return (spread() ? bands_[0].in_rows : cv_.H) * cv_.W; }

  void transpose_weights_to_l1() {
    pending_weights_ = code_.weights_to_l1(user_w_, kKTile, kWSrc, orig_.C * RS(), orig_.K, plan_.tn, cv_.depth_channels(), cv_.T, RS(),
                                           weight_row_pitch(), copy_ub(), weight_slots(), w_l1());
    // held back only where the map's copy runs once (no image or tile loop: the ring's later loads
    // would be redone per iteration, over slots the first ones filled)
    if (per_core_images() != 1 || kt_loop()) flush_pending_weights();
  }
  // The map's copies into L1 (x_to_l1) leave each chunk's transposes to slices(), which emits a
  // slice pair's chunks right before the pair, so the scalar pipe dispatches the pair's mmads
  // without waiting for every later chunk's transposes to enter the vector queue. map_chunks(t):
  // where transpose_rows appends tap t's chunks (an earlier tap's emitted first: same UB slots).
  ConvCode::DeferredChunks* map_chunks(int64_t t) {
    flush_map_chunks(-1);
    chunk_slice0_ = t * (cv_.depth_channels() / k0_);
    return &map_chunks_;
  }
  void flush_map_chunks(int64_t last_slice) {  // -1: all
    size_t n = 0;
    while (n < map_chunks_.size() && (last_slice < 0 || chunk_slice0_ + map_chunks_[n].first <= last_slice)) map_chunks_[n++].second();
    map_chunks_.erase(map_chunks_.begin(), map_chunks_.begin() + int64_t(n));
  }

  // The weights' transposes held back by transpose_weights_to_l1 (empty: none).
  std::function<void()> take_pending_weights() { return std::exchange(pending_weights_, {}); }
  void flush_pending_weights() { if (auto f = take_pending_weights()) f(); }

  // Image kImage of X into the core's slot `slot` (kXBase: the slot's offset from X_.base).
  // kXSrc = the user's X offset of image kImage (3-D: (n, o)), of the tile's group's planes.
  void user_x_base() {
    const int64_t HW = cv_.H * cv_.W;
    if (cv_.T > 1) return image_of_depth(kXSrc, cv_.depth_channels() * cv_.D * HW * in_, HW * in_);
    op(Opcode::Mul, {reg(kXSrc), reg(kImage), imm(cv_.G * orig_.C * HW * in_)});
    if (cv_.G > 1) op(Opcode::Add, {reg(kXSrc), reg(kXSrc), reg(kGroupX)});
  }

  // Bands spread over cores, NCHW: the band's input rows of every plane (of every depth tap)
  // transposed straight into the band's C1HWC0 feature map in L1.
  void copy_band_in(const Band& b, int64_t fm_base) {
    const int64_t HW = cv_.H * cv_.W, first = b.in_first * cv_.W, plane = b.in_rows * cv_.W;
    const int64_t c = cv_.depth_channels(), rows = cv_.T > 1 ? c : orig_.C, src_row = cv_.T > 1 ? cv_.D * HW : HW;
    for (int64_t t = 0; t < cv_.T; ++t)
      code_.transpose_rows(user_x_ + (t * HW + first) * in_, kXSrc, src_row, rows, plane, plane, fm_base + t * (c / k0_) * plane * frow_,
                           npu::kNoRegister, plane * k0_, k0_, map_ub(), map_ub_bytes(), Buffer::L1, take_pending_weights(), map_chunks(t));
  }

  void copy_image_in(int64_t slot, int64_t fm_base) {
    if (cv_.T > 1) return copy_depths_in(slot, fm_base);
    user_x_base();
    op(Opcode::Mul, {reg(kXBase), reg(npu::kRegCoreId), imm(2 * x_slot_bytes())});
    if (slot) op(Opcode::Add, {reg(kXBase), reg(kXBase), imm(slot * x_slot_bytes())});
    const int64_t HW = cv_.H * cv_.W;
    if (!x_to_l1()) flush_pending_weights();
    if (x_to_l1())  // planes -> the feature map's C1HWC0 place in L1
      code_.transpose_rows(user_x_, kXSrc, HW, orig_.C, HW, HW, fm_base, npu::kNoRegister, HW * k0_, k0_, map_ub(), map_ub_bytes(),
                           Buffer::L1, take_pending_weights(), map_chunks(0));
    else if (cv_.layout == Layout::Nchw)  // planes -> the C1HWC0 slot load_band reads
      code_.transpose_rows(user_x_, kXSrc, HW, orig_.C, HW, HW, X_.base, kXBase, HW * k0_, k0_, copy_ub(), copy_ub_bytes());
    else
      code_.resize_rows(user_x_, kXSrc, X_.base, kXBase, HW, orig_.C, cv_.C, DType::F16, copy_ub(), copy_ub_bytes());
  }

  // A channel's output plane in the user's NCHW Y (3-D: its O depths).
  int64_t y_plane() const { return cv_.O * P(); }
  // kYDst = the user's Y offset of image kImage (NCHW: and of the channel tile kKTile).
  void user_y_base() {
    if (cv_.T > 1) image_of_depth(kYDst, orig_.K * y_plane() * eo_, P() * eo_);
    else op(Opcode::Mul, {reg(kYDst), reg(kImage), imm(cv_.G * orig_.K * P() * eo_)});
    if (cv_.layout != Layout::Nchw) return;
    op(Opcode::Mul, {reg(kTmp), reg(kKTile), imm(plan_.tn * y_plane() * eo_)});
    op(Opcode::Add, {reg(kYDst), reg(kYDst), reg(kTmp)});
  }

  // 3-D NCDHW: image kImage = (n, o); its T input depths o .. o + T - 1, each a C1HWC0 piece of the slot.
  void copy_depths_in(int64_t slot, int64_t fm_base) {
    const int64_t HW = cv_.H * cv_.W, c = cv_.depth_channels();
    user_x_base();
    op(Opcode::Mul, {reg(kXBase), reg(npu::kRegCoreId), imm(2 * x_slot_bytes())});
    if (slot) op(Opcode::Add, {reg(kXBase), reg(kXBase), imm(slot * x_slot_bytes())});
    if (!x_to_l1()) flush_pending_weights();
    for (int64_t t = 0; t < cv_.T; ++t)
      if (x_to_l1())
        code_.transpose_rows(user_x_ + t * HW * in_, kXSrc, cv_.D * HW, c, HW, HW, fm_base + t * X_.tap_bytes, npu::kNoRegister, HW * k0_, k0_,
                             map_ub(), map_ub_bytes(), Buffer::L1, take_pending_weights(), map_chunks(t));
      else
        code_.transpose_rows(user_x_ + t * HW * in_, kXSrc, cv_.D * HW, c, HW, HW, X_.base + t * X_.tap_bytes, kXBase, HW * k0_, k0_, copy_ub(),
                             copy_ub_bytes());
  }

  // dst = (kImage / O) * per_n + (kImage % O) * per_o: image (n, o) of a 3-D convolution.
  void image_of_depth(Reg dst, int64_t per_n, int64_t per_o) {
    op(Opcode::Div, {reg(kTmp), reg(kImage), imm(cv_.O)});
    op(Opcode::Mul, {reg(dst), reg(kTmp), imm(per_n)});
    op(Opcode::Mul, {reg(kTmp), reg(kTmp), imm(cv_.O)});
    op(Opcode::Sub, {reg(kTmp), reg(kImage), reg(kTmp)});
    op(Opcode::Mul, {reg(kTmp), reg(kTmp), imm(per_o)});
    op(Opcode::Add, {reg(dst), reg(dst), reg(kTmp)});
  }

  // The (image kImage, channel tile) block of the NHWC copy of Y (at Y_.base + y) to the user's Y.
  void copy_image_out(Reg y) {
    if (!y_copied() || y_from_ub()) return;
    const int64_t tn = plan_.tn, valid = std::min(tn, orig_.K), plane = y_plane();
    user_y_base();
    if (cv_.layout == Layout::Nchw) {
      for (int64_t j = 0; j * n0_ < valid; ++j)  // per 16 channels: [P][16] f32 -> 16 rows of P
        code_.columns_to_rows_f32(Y_.base + j * n0_ * eo_, y, cv_.G * cv_.K, P(), std::min(n0_, valid - j * n0_),
                                  user_y_ + j * n0_ * plane * eo_, kYDst, plane, copy_ub(), copy_ub_bytes());
    } else {
      code_.resize_rows(Y_.base, y, user_y_, kYDst, P(), cv_.K, orig_.K, cv_.out, copy_ub(), copy_ub_bytes());
    }
  }

  // NCHW: X and the weights transposed to NHWC / [C, R*S, K] scratch copies on the vector unit.
  void nchw_in() {
    const int64_t user_x = X_.base, user_w = W_.base;
    X_.base = code_.place(cv_.x + "_nhwc", DType::F16, {cv_.N, cv_.H, cv_.W, cv_.C}, gm_);
    W_.base = code_.place(cv_.w + "_ckk", DType::F16, {cv_.C, RS(), cv_.K}, gm_);  // rows (c, q) of K
    W_.row_q = cv_.K, W_.row_c = RS() * cv_.K;
    user_y_ = Y_.base;
    Y_.base = code_.place(cv_.y + "_nhwc", cv_.out, {cv_.N, cv_.OH, cv_.OW, cv_.K}, gm_);
    const int64_t HW = cv_.H * cv_.W, crs = orig_.C * RS();
    X_.pixel_bytes = frow_, X_.block_bytes = HW * frow_;  // C1HWC0 images
    const int64_t need = std::max(code_.transpose_bytes(orig_.C, HW), code_.transpose_bytes(orig_.K, crs));
    for (int64_t n = 0; n <= orig_.N; ++n) {  // the images, then the weights (in UB regions of their own when all fit)
      const auto [ub, bytes] = code_.copy_region(n, orig_.N + 1, need);
      if (n < orig_.N) code_.transpose_rows(user_x + n * orig_.C * HW * in_, npu::kNoRegister, HW, orig_.C, HW, HW, X_.base + n * cv_.C * HW * in_, npu::kNoRegister, HW * k0_, k0_, ub, bytes);
      else code_.transpose_rows(user_w, npu::kNoRegister, crs, orig_.K, crs, cv_.C * RS(), W_.base, npu::kNoRegister, k0_, cv_.K, ub, bytes);
    }
    out_.notes.push_back(fmt::format("NCHW: X and the weights transposed to C1HWC0 / [C, R*S, K] scratch copies (channels padded "
                                     "to {} and {}) on the vector unit (16 x 16 vtranspose), the result back to NCHW; one core",
                                     cv_.C, cv_.K));
  }

  // Channel counts not multiples of the fractal: X and the weights copied with their channels padded.
  void padded_in() {
    const int64_t user_x = X_.base, user_w = W_.base, cap_ub = m_.capacity(Buffer::UB);
    X_.base = code_.place(cv_.x + "_padded", DType::F16, {cv_.N, cv_.H, cv_.W, cv_.C}, gm_);
    W_.base = code_.place(cv_.w + "_padded", DType::F16, {cv_.R, cv_.S, cv_.C, cv_.K}, gm_);
    user_y_ = Y_.base;
    Y_.base = code_.place(cv_.y + "_padded", cv_.out, {cv_.N, cv_.OH, cv_.OW, cv_.K}, gm_);
    // X: rows of C -> rows of Cp, chunks of whole GM alignment units of rows (aligned sources).
    const int64_t rows = cv_.N * cv_.H * cv_.W, rows_aligned = code_.gm_align() / in_;
    int64_t cr = std::min(rows, (cap_ub / 2) / (cv_.C * in_));
    if (cr < rows) cr = cr / rows_aligned * rows_aligned;
    for (int64_t r0 = 0; r0 < rows; r0 += cr) {
      const int64_t n = std::min(cr, rows - r0);
      if (cv_.C > orig_.C) code_.zero_ub(0, n * cv_.C * in_);
      op(Opcode::DmaIn, {at(Buffer::UB, 0), at(Buffer::GM, user_x + r0 * orig_.C * in_), imm(n), imm(orig_.C * in_), imm(0),
                         imm((cv_.C - orig_.C) * in_)});
      op(Opcode::DmaOut, {at(Buffer::GM, X_.base + r0 * cv_.C * in_), at(Buffer::UB, 0), imm(1), imm(n * cv_.C * in_), imm(0), imm(0)});
    }
    // Weights: all R*S*C rows of K in UB's second half at once (beside X's chunks: no hand-off between
    // the copies), then C rows per kernel position.
    if (RS() * orig_.C * cv_.K * in_ > cap_ub / 2)
      return code_.refuse(unsupported("the weights do not fit the vector buffer for channel padding").what());
    if (cv_.K > orig_.K) code_.zero_ub(cap_ub / 2, RS() * orig_.C * cv_.K * in_);
    op(Opcode::DmaIn, {at(Buffer::UB, cap_ub / 2), at(Buffer::GM, user_w), imm(RS() * orig_.C), imm(orig_.K * in_), imm(0),
                       imm((cv_.K - orig_.K) * in_)});
    for (int64_t q = 0; q < RS(); ++q)
      op(Opcode::DmaOut, {at(Buffer::GM, W_.base + q * cv_.C * cv_.K * in_), at(Buffer::UB, cap_ub / 2 + q * orig_.C * cv_.K * in_), imm(1),
                          imm(orig_.C * cv_.K * in_), imm(0), imm(0)});
  }

  // Y: [N][P][Kp] -> [N][K][P]: per pixel its K values down one column.
  void nchw_out() { code_.images_columns_to_rows_f32(Y_.base, user_y_, orig_.N, P(), orig_.K, cv_.K); }

  // Y: rows of Kp -> rows of K, chunks of whole GM alignment units of f32 rows (aligned destinations).
  void padded_out() {
    const int64_t rows = cv_.N * P(), rows_aligned = code_.gm_align() / acc_;
    int64_t cr = std::min(rows, (m_.capacity(Buffer::UB) / 2) / (cv_.K * eo_));
    if (cr < rows) cr = cr / rows_aligned * rows_aligned;
    for (int64_t r0 = 0; r0 < rows; r0 += cr) {
      const int64_t n = std::min(cr, rows - r0);
      op(Opcode::DmaIn, {at(Buffer::UB, 0), at(Buffer::GM, Y_.base + r0 * cv_.K * eo_), imm(1), imm(n * cv_.K * eo_), imm(0), imm(0)});
      op(Opcode::DmaOut, {at(Buffer::GM, user_y_ + r0 * orig_.K * eo_), at(Buffer::UB, 0), imm(n), imm(orig_.K * eo_),
                          imm((cv_.K - orig_.K) * eo_), imm(0)});
    }
    out_.notes.push_back(fmt::format("channels {} -> {} padded to {} -> {} through UB on one core", orig_.C, orig_.K, cv_.C, cv_.K));
  }

  // The plan's bands: the whole image (its pad rows as the statement has them), or bands of
  // band_rows output rows, each reading its rows x stride + halo input rows clipped to the image.
  void make_bands() {
    const int64_t th = plan_.band_rows ? plan_.band_rows : cv_.OH;
    for (int64_t o0 = 0; o0 < cv_.OH; o0 += th) {
      Band b;
      b.out_first = o0, b.out_rows = std::min(th, cv_.OH - o0), b.pixels = b.out_rows * cv_.OW;
      const int64_t lo = o0 * cv_.sh - cv_.pt, hi = (o0 + b.out_rows - 1) * cv_.sh + cv_.dh * (cv_.R - 1) - cv_.pt;
      if (th == cv_.OH) {
        b.in_first = 0, b.in_rows = cv_.H, b.pad_top = cv_.pt, b.pad_bottom = hi - (cv_.H - 1);
      } else {
        b.in_first = std::max<int64_t>(0, lo);
        const int64_t last = std::min(cv_.H - 1, hi);
        b.in_rows = last - b.in_first + 1, b.pad_top = b.in_first - lo, b.pad_bottom = hi - last;
      }
      const int64_t padded = round_up(b.pixels, m_.cube_f16.m0);
      for (const auto& [p0, size] : plan_.blocks)
        if (p0 < padded) b.blocks.push_back({p0, std::min(size, padded - p0)});
      bands_.push_back(std::move(b));
    }
  }

  void set_fmatrix(const Band& b) {
    const int64_t pr = (cv_.OW - 1) * cv_.sw + cv_.dw * (cv_.S - 1) + 1 - cv_.W - cv_.pl;
    op(Opcode::SetFmatrix, {imm(b.in_rows), imm(cv_.W), imm(b.pad_top), imm(b.pad_bottom), imm(cv_.pl), imm(pr), imm(cv_.sh), imm(cv_.sw),
                            imm(cv_.R), imm(cv_.S), imm(cv_.dh), imm(cv_.dw)});
  }

  void main_loops() {
    p_.cores = static_cast<int>(plan_.cores);
    if (bands_.size() == 1) set_fmatrix(bands_[0]);
    if (kt_loop()) {
      op(Opcode::Loop, {reg(kKTile), reg(npu::kRegCoreId), imm(plan_.k_tiles), reg(npu::kRegCoreCount)});
      op(Opcode::Mov, {reg(kImage0), imm(0)});
    } else {
      op(Opcode::Div, {reg(kImage0), reg(npu::kRegCoreId), imm(plan_.k_tiles)});
      op(Opcode::Mul, {reg(kTmp), reg(kImage0), imm(plan_.k_tiles)});
      op(Opcode::Sub, {reg(kKTile), reg(npu::kRegCoreId), reg(kTmp)});
      if (spread()) {  // core = (image * bands + band) * tiles + tile
        op(Opcode::Div, {reg(kTmp), reg(kImage0), imm(plan_.core_bands)});
        op(Opcode::Mul, {reg(kCond), reg(kTmp), imm(plan_.core_bands)});
        op(Opcode::Sub, {reg(kBand), reg(kImage0), reg(kCond)});
        op(Opcode::Mov, {reg(kImage0), reg(kTmp)});
      }
    }
    plan_weight_chunks();
    if (!loads_after_fold()) {
      if (epi_) load_channels();
      if (per_core()) copy_weights();
      if (!weights_per_band_kind()) load_weights();
    }
    const int64_t iterations = per_core_images() / halves();
    if (bands_.size() > 1) {
      banded_images();
    } else if (pipelined()) {
      // Image 2j + 1's mmads are issued before image 2j's write-back, and image 2j + 2's before
      // image 2j + 1's: the vector unit's epilogue of one image overlaps the cube's next image (the
      // scalar pipe issues in order, so a write-back issued right after its own mmads would hold
      // the next image's mmads behind the vector queue). The first pair is peeled (no write-back
      // trails it).
      op(Opcode::Mov, {reg(kPair), imm(0)});
      image(0);
      image(1, trailing(0));
      if (iterations > 1) {
        op(Opcode::Loop, {reg(kPair), imm(1), imm(iterations), imm(1)});
        image(0, trailing(1));
        image(1, trailing(0));
        op(Opcode::EndLoop, {});
      }
      write_back(1);
    } else {
      if (iterations > 1) op(Opcode::Loop, {reg(kPair), imm(0), imm(iterations), imm(1)});
      else op(Opcode::Mov, {reg(kPair), imm(0)});
      for (int64_t half = 0; half < halves(); ++half) {
        image(half);
        write_back(half);
        if (per_core()) copy_image_out(y_base(half));
      }
      if (iterations > 1) op(Opcode::EndLoop, {});
    }
    if (kt_loop()) op(Opcode::EndLoop, {});
  }

  // Feature maps larger than L1 (or accumulators larger than L0C): per image its bands in turn,
  // each with its own geometry and input window (overlapping its neighbours' by the halo); bands
  // ping-pong in L1 and L0C where both hold two, band b's write-back then trailing band b + 1's mmads.
  void banded_images() {
    const int64_t images = per_core_images(), step_images = kt_loop() ? 1 : plan_.group;
    const bool two = plan_.fm_halves == 2 && plan_.c_halves == 2 && !spread();
    if (images > 1) op(Opcode::Loop, {reg(kPair), imm(0), imm(images), imm(1)});
    else op(Opcode::Mov, {reg(kPair), imm(0)});
    op(Opcode::Mul, {reg(kImage), reg(kPair), imm(step_images)});
    op(Opcode::Add, {reg(kImage), reg(kImage), reg(kImage0)});
    image_bases(kYBase, 0);
    if (spread()) return core_band(images);
    for (size_t i = 0; i < bands_.size(); ++i) {
      const int64_t half = two ? int64_t(i % 2) : 0;
      set_fmatrix(bands_[i]);
      load_band(bands_[i], half * plan_.fm_bytes);
      Trailing previous;
      if (two && i > 0)
        previous = {int64_t(bands_[i - 1].blocks.size()),
                    [this, i, half](int64_t bi) { write_back_block(bands_[i - 1], c_base(1 - half), kYBase, bi); }};
      slices(bands_[i], half * plan_.fm_bytes, c_base(half), previous);
      if (!two) write_back(bands_[i], c_base(half), kYBase);
    }
    if (two) write_back(bands_.back(), c_base((bands_.size() - 1) % 2), kYBase);
    if (per_core()) copy_image_out(kYBase);
    if (images > 1) op(Opcode::EndLoop, {});
  }

  // Bands over cores: every band alike (the planner's equal bands, no padding rows), so the core's
  // band kBand is band 0's code at its offsets: kBand x rows x stride input rows into X, kBand x
  // rows output rows into Y.
  void core_band(int64_t images) {
    const Band& b = bands_[0];
    const int64_t rows = plan_.band_rows, in_step = rows * cv_.sh * x_width(), out_step = rows * cv_.OW;
    op(Opcode::Mul, {reg(kTmp), reg(kBand), imm(in_step * (x_to_l1() ? in_ : X_.pixel_bytes))});
    op(Opcode::Add, {reg(x_to_l1() ? kXSrc : kXBase), reg(x_to_l1() ? kXSrc : kXBase), reg(kTmp)});
    op(Opcode::Mul, {reg(kTmp), reg(kBand), imm(out_step * (y_from_ub() ? eo_ : Y_.pixel_bytes))});
    op(Opcode::Add, {reg(y_from_ub() ? kYDst : kYBase), reg(y_from_ub() ? kYDst : kYBase), reg(kTmp)});
    if (!bands_alike()) {
      padded_core_bands();
    } else {
      set_fmatrix(b);
      if (x_to_l1()) copy_band_in(b, 0);
      else load_band(b, 0);
      slices(b, 0, c_base(0));
      write_back(b, c_base(0), kYBase);
    }
    if (images > 1) op(Opcode::EndLoop, {});
  }

  bool bands_alike() const {
    for (const Band& o : bands_)
      if (o.in_rows != bands_[0].in_rows || o.out_rows != bands_[0].out_rows || o.pad_top != 0 || o.pad_bottom != 0) return false;
    return true;
  }

  // Bands over cores with padding rows (NHWC): the first band (zero rows on top), the middle ones
  // (alike: their halo rows on both sides) and the last (zero rows below) differ in their input
  // windows, so each kind has its own code, run as a loop of one iteration on its cores and of none
  // on the others. kXBase / kYBase hold the core's band's offsets (band x rows); a kind's code is its
  // first band's, its X rows addressed from the band's first input row.
  void padded_core_bands() {
    TESSEL_CHECK(!x_to_l1() && !per_core() && bands_.size() >= 2, "conv: padded bands over cores are NHWC without copies");
    const int64_t n = int64_t(bands_.size());
    for (int64_t i = 1; i + 1 < n; ++i)
      TESSEL_CHECK(bands_[i].in_rows == bands_[1].in_rows && bands_[i].pad_top == 0 && bands_[i].pad_bottom == 0,
                   "conv: the middle bands over cores must be alike (plan_conv's spread_over_cores)");
    op(Opcode::Loop, {reg(kCase), reg(kBand), imm(1), imm(1)});  // band 0
    band_code(0, 0);
    op(Opcode::EndLoop, {});
    if (n > 2) {  // 1 <= band <= n - 2: (band + n - 2) / (n - 1) - band / (n - 1) iterations
      op(Opcode::Add, {reg(kMid), reg(kBand), imm(n - 2)});
      op(Opcode::Div, {reg(kMid), reg(kMid), imm(n - 1)});
      op(Opcode::Div, {reg(kTmp), reg(kBand), imm(n - 1)});
      op(Opcode::Sub, {reg(kMid), reg(kMid), reg(kTmp)});
      op(Opcode::Loop, {reg(kCase), imm(0), reg(kMid), imm(1)});
      band_code(1, 1);
      op(Opcode::EndLoop, {});
    }
    op(Opcode::Add, {reg(kMid), reg(kBand), imm(1)});  // band n - 1: band + 1 - (n - 1) iterations
    op(Opcode::Loop, {reg(kCase), imm(n - 1), reg(kMid), imm(1)});
    band_code(n - 1, n > 2 ? 2 : 1);
    op(Opcode::EndLoop, {});
  }

  // Band t's code at the core's band offsets: X from the band's first input row (t x rows x stride
  // rows past the core's offset, less its halo), Y at the core's band's first row.
  // `kind`: the kind's slot (band_kind_slots).
  void band_code(int64_t t, int64_t kind) {
    Band b = bands_[size_t(t)];
    const int64_t back = (t * plan_.band_rows * cv_.sh - b.in_first) * x_width() * X_.pixel_bytes;
    const int64_t slot = kind % band_kind_slots(), fm = slot * plan_.fm_bytes, acc = slot * plan_.padded_pixels * plan_.tn * acc_;
    b.in_first = 0, b.out_first = 0;
    if (back) op(Opcode::Sub, {reg(kXBase), reg(kXBase), imm(back)});
    set_fmatrix(b);
    if (weights_per_band_kind()) load_weights();
    load_band(b, fm);
    slices(b, fm, acc);
    write_back(b, acc, kYBase);
    if (back) op(Opcode::Add, {reg(kXBase), reg(kXBase), imm(back)});
  }

  // Two images ping-pong in L1 and in L0C: the write-back may trail the next image.
  bool pipelined() const { return epi_ && !per_core() && halves() == 2 && plan_.c_halves == 2; }
  Reg y_base(int64_t half) const { return pipelined() && half == 1 ? kYBaseOdd : kYBase; }
  int64_t c_base(int64_t half) const { return (plan_.c_halves == 2 ? half % 2 : 0) * plan_.padded_pixels * plan_.tn * acc_; }

  // UB: two accumulator blocks, the epilogue's resident channel values, two column blocks' regions.
  int64_t ub_resident() const { return 2 * plan_.tm0 * plan_.tn * acc_; }
  int64_t ub_columns(int64_t set) const {
    return ub_resident() + epi_->resident_bytes(plan_.tn) + set * epi_->column_bytes(plan_.tm0);
  }

  // The k-tile's per-channel epilogue values, once per k-tile.
  void load_channels() {
    op(Opcode::Mul, {reg(kCol2), reg(kKTile), imm(plan_.tn * dtype_bytes(DType::F16))});
    op(Opcode::Mul, {reg(kCol4), reg(kKTile), imm(plan_.tn * dtype_bytes(DType::F32))});
    std::map<std::string, Operand> gm;
    for (const std::string& name : epi_->channel_tensors()) {
      const int eb = dtype_bytes(k_.find_tensor(name)->dtype);
      gm[name] = at(Buffer::GM, offset(name), eb == dtype_bytes(DType::F16) ? kCol2 : kCol4);
    }
    // one tile of padded channels: only the tensors' own K values (the rest of the pattern is unused)
    epi_->load_channels(p_, gm, plan_.tn, plan_.k_tiles == 1 ? std::min(plan_.tn, orig_.K) : plan_.tn, ub_resident());
  }

  // The k-tile's weights into L1, one fractal row of input channels x all kernel positions at a time.
  void load_weights() {
    const int64_t tn = plan_.tn;
    if (cv_.depthwise)  // diagonal fractals built in UB (ConvCode::diagonal_weights)
      return code_.diagonal_weights(cv_.layout == Layout::Nchw, RS(), cv_.G, W_.base, kKTile, kWCol, kGroupX, copy_ub(), w_l1(),
                                    unsupported("the depthwise weights' diagonal fractals do not fit the vector buffer").what());
    if (weights_to_l1()) return;  // copy_weights put them there
    if (cv_.G > 1 && !per_core()) return grouped_weights();
    if (W_.fractal) {
      op(Opcode::Mul, {reg(kWCol), reg(kKTile), imm(tn * frow_)});
      for (int64_t c1 = 0; c1 < C1(); ++c1)
        op(Opcode::DmaIn, {at(Buffer::L1, w_l1() + c1 * RS() * tn * frow_), at(Buffer::GM, W_.base + c1 * W_.KB * fractal_, kWCol),
                           imm(RS()), imm(tn * frow_), imm((C1() * W_.KB * cv_.unit - tn) * frow_), imm(0)});
      return;
    }
    if (per_core() && cv_.layout == Layout::Nchw) {
      op(Opcode::Mov, {reg(kWCol), reg(kPrivW)});  // the core's copy holds its channel tile only
    } else {
      op(Opcode::Mul, {reg(kWCol), reg(kKTile), imm(tn * in_)});
      if (per_core()) op(Opcode::Add, {reg(kWCol), reg(kWCol), reg(kPrivW)});
    }
    weight_fractals(kWCol);
    if (cv_.folded() && fold_.weight_guard_bytes()) fold_.zero_weight_rows(w_l1(), tn, offset("w_guard"));
  }

  // The tile's weights in L1: fractals (c1, q, j) (slice, kernel position, 16-column block). Rows
  // (t, q, c) evenly spaced in GM (conv_match.h's weights_in_one_copy): one dma_in_nz of all of
  // them, NZ order: fractal (t, q, c1d, j) at j R S C1 + (t R S + q) C1d + c1d (slice c1 = t C1d +
  // c1d at c1 + t (R S - 1) C1d, positions C1d apart, blocks R S C1); else one per (c1, q): slice
  // c1 at c1 R S nb, positions nb apart, blocks 1 apart (README "Per-core chain").
  bool one_weight_copy() const {
    if (!weights_in_one_copy(cv_, k0_) || weights_to_l1() || W_.fractal) return false;
    return W_.row_q == cv_.depth_channels() * W_.row_c && (cv_.T == 1 || W_.per_tap == RS() * W_.row_q);
  }
  int64_t w_slice_fractals(int64_t c1) const {
    const int64_t c1d = C1() / cv_.T;
    return one_weight_copy() ? c1 + c1 / c1d * (RS() - 1) * c1d : c1 * RS() * (plan_.tn / n0_);
  }
  int64_t w_position_stride() const { return one_weight_copy() ? C1() / cv_.T : plan_.tn / n0_; }
  int64_t w_block_stride() const { return one_weight_copy() ? RS() * C1() : 1; }

  // Per channel slice (a depth tap's slice in 3-D) and kernel position, 16 input channels x tn into
  // L1 (or all of them by one copy: one_weight_copy).
  void weight_fractals(Reg col) {
    const int64_t tn = plan_.tn, per_tap = C1() / cv_.T;
    if (!wchunks_.empty()) return weight_chunk(0);
    if (one_weight_copy()) {
      op(Opcode::DmaInNz, {f16(), at(Buffer::L1, w_l1()), at(Buffer::GM, W_.base, col), imm(RS() * cv_.C), imm(tn), imm(W_.row_c)});
      return;
    }
    for (int64_t c1 = 0; c1 < C1(); ++c1)
      for (int64_t q = 0; q < RS(); ++q)
        op(Opcode::DmaInNz, {f16(), at(Buffer::L1, w_l1() + (c1 * RS() + q) * tn * frow_),
                             at(Buffer::GM, W_.base + ((c1 / per_tap) * W_.per_tap + q * W_.row_q + (c1 % per_tap) * k0_ * W_.row_c) * in_, col),
                             imm(k0_), imm(tn), imm(W_.row_c)});
  }

  // The plan's weight chunks (conv_emitter_parts.h) where the tile's one copy is loaded once per
  // core, ahead of one band's map read once, its slices straight-line (else the one copy).
  void plan_weight_chunks() {
    const bool once = (bands_.size() == 1 || spread()) && per_core_images() == 1 && !kt_loop() && C1() / 2 <= kStraightPairs;
    if (!plan_.weight_chunks.empty() && once && one_weight_copy() && cv_.T == 1 && cv_.G == 1 && !per_core() && !loads_after_fold())
      wchunks_ = WeightChunks::of_sizes(plan_.weight_chunks, RS(), plan_.tn / n0_);
  }
  // Chunk g: per kernel position its slices' rows (evenly spaced) by one dma_in_nz (kWCol: the tile's columns).
  void weight_chunk(size_t g) {
    const WeightChunk& c = wchunks_.chunks[g];
    const int64_t nb = plan_.tn / n0_;
    for (int64_t q = 0; q < RS(); ++q)
      op(Opcode::DmaInNz, {f16(), at(Buffer::L1, w_l1() + (c.first * RS() + q * c.slices) * nb * fractal_),
                           at(Buffer::GM, W_.base + (q * W_.row_q + c.first * k0_ * W_.row_c) * in_, kWCol), imm(c.slices * k0_),
                           imm(plan_.tn), imm(W_.row_c)});
  }

  // Grouped: tile kKTile is local tile kKTile % (K / tn) of group g = kKTile / (K / tn), whose
  // weights start at g x R S C K elements and whose input channels at g x C within a pixel (kGroupX).
  void grouped_weights() {
    const int64_t tn = plan_.tn, per_group = cv_.K / tn;
    op(Opcode::Div, {reg(kGroupX), reg(kKTile), imm(per_group)});
    op(Opcode::Mul, {reg(kTmp), reg(kGroupX), imm(per_group)});
    op(Opcode::Sub, {reg(kTmp), reg(kKTile), reg(kTmp)});
    op(Opcode::Mul, {reg(kWCol), reg(kTmp), imm(tn * in_)});
    op(Opcode::Mul, {reg(kTmp), reg(kGroupX), imm(RS() * cv_.C * cv_.K * in_)});
    op(Opcode::Add, {reg(kWCol), reg(kWCol), reg(kTmp)});
    op(Opcode::Mul, {reg(kGroupX), reg(kGroupX), imm(cv_.C * in_)});
    weight_fractals(kWCol);
  }

  // dst = base offset of image kImage in layout l (without l.base)
  void image_base(const ActivationLayout& l, Reg dst) {
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
  }

  // One image of the pair: its feature map into L1, the channel slices, the write-back.
  // The write-back of the image in `half`, piece by piece.
  Trailing trailing(int64_t half) {
    return {int64_t(bands_[0].blocks.size()), [this, half](int64_t i) { write_back_block(bands_[0], c_base(half), y_base(half), i); }};
  }

  void image(int64_t half, const Trailing& trailing = {}) {
    const int64_t step_images = kt_loop() ? 1 : plan_.group;
    const int64_t fm_base = half * plan_.fm_bytes, c_base = this->c_base(half);
    const Reg y = y_base(half);
    // image = image0 + (pair * halves + half) * step_images
    op(Opcode::Mul, {reg(kImage), reg(kPair), imm(halves() * step_images)});
    op(Opcode::Add, {reg(kImage), reg(kImage), reg(kImage0)});
    if (half) op(Opcode::Add, {reg(kImage), reg(kImage), imm(half * step_images)});
    image_bases(y, half, fm_base);
    if (!x_to_l1()) load_band(bands_[0], fm_base);
    slices(bands_[0], fm_base, c_base, trailing);
  }

  void image_bases(Reg y, int64_t slot, int64_t fm_base = 0) {
    if (spread() && x_to_l1()) user_x_base();  // each band's rows copied by its core (copy_band_in)
    else if (per_core() && x_copied()) copy_image_in(slot, fm_base);
    else image_base(X_, kXBase);
    if (y_from_ub()) user_y_base();
    if (cv_.G > 1 && !(per_core() && x_copied())) op(Opcode::Add, {reg(kXBase), reg(kXBase), reg(kGroupX)});
    image_base(Y_, y);
    op(Opcode::Mul, {reg(kTmp), reg(kKTile), imm(plan_.tn / n0_ * Y_.block_bytes)});
    op(Opcode::Add, {reg(y), reg(y), reg(kTmp)});
  }

  // The band's input window as C1HWC0: one strided copy per fractal row of channels, with slice c1 - kPlanesAhead's pair where
  // the slices run straight-line (slices() flushes it): the first pairs then issue without waiting behind every plane's copy.
  void load_band(const Band& b, int64_t fm_base) {
    if (cv_.folded()) {
      fold_.band(X_.base, kXBase, b.in_first, b.in_rows, fm_base);
      if (loads_after_fold()) {  // behind the map's DMAs on MTE2 (the longer chain to the cube), the weights first
        load_weights();
        if (epi_) load_channels();
      }
      return;
    }
    const int64_t per_tap = C1() / cv_.T, first = X_.base + b.in_first * cv_.W * X_.pixel_bytes, pixels = b.in_rows * cv_.W;
    const bool defer = C1() / 2 <= kStraightPairs;
    if (defer) flush_map_chunks(-1), chunk_slice0_ = 0;
    auto ahead_of = [&](int64_t c1, const std::function<void()>& f) { defer && c1 >= kPlanesAhead ? map_chunks_.push_back({c1 - kPlanesAhead, f}) : f(); };
    for (int64_t c1 = 0; c1 < C1(); ++c1) {
      for (size_t g = 1; g < wchunks_.chunks.size(); ++g)  // chunk g's weights ahead of its first plane
        if (wchunks_.chunks[g].first == c1) ahead_of(c1, [=, this] { weight_chunk(g); });
      const int64_t dst = fm_base + c1 * pixels * frow_, src = first + (c1 / per_tap) * X_.tap_bytes + (c1 % per_tap) * X_.block_bytes;
      ahead_of(c1, [=, this] { op(Opcode::DmaIn, {at(Buffer::L1, dst), at(Buffer::GM, src, kXBase), imm(pixels), imm(frow_), imm(X_.pixel_bytes - frow_), imm(0)}); });
    }
  }

  // Every channel slice of one band: pairs of slices in a loop, the odd last one after it.
  // `trailing` pieces of an earlier write-back (one per pixel block) go between the first pairs
  // (those iterations peeled), so the vector unit's work spreads over this band's mmads instead
  // of holding the in-order scalar issue (and with it the cube) behind a full vector queue.
  void slices(const Band& b, int64_t fm_base, int64_t c_base, const Trailing& trailing = {}) {
    flush_pending_weights();
    const int64_t pairs = C1() / 2;
    // every pair straight-line where there are few: each slice's load3d then reads its own
    // constant plane, so the sync pass lets it start once that plane's copy has landed
    const int64_t peeled = pairs <= kStraightPairs ? pairs : trailing.pieces ? std::min(pairs, trailing.pieces) : 0;
    if (peeled < pairs) flush_map_chunks(-1);
    plane_ = b.in_rows * cv_.W * frow_;
    auto pair = [&] {
      op(Opcode::Seq, {reg(kInit), reg(kSlice), imm(0)});
      slice_weights();
      op(Opcode::Mul, {reg(kKpos), reg(kSlice), imm(2 * plane_)});
      slice(0, reg(kInit), fm_base, c_base, b.blocks, true);
      slice(1, imm(0), fm_base, c_base, b.blocks, false);
    };
    for (int64_t i = 0; i < peeled; ++i) {
      flush_map_chunks(2 * i + 1);
      op(Opcode::Mov, {reg(kSlice), imm(i)});
      cur_slice_ = 2 * i;
      pair();
      if (i < trailing.pieces) trailing.emit(i);
    }
    if (pairs - peeled > 1) {
      op(Opcode::Loop, {reg(kSlice), imm(peeled), imm(pairs), imm(1)});
      pair();
      op(Opcode::EndLoop, {});
    } else if (pairs - peeled == 1) {
      op(Opcode::Mov, {reg(kSlice), imm(peeled)});
      pair();
    }
    flush_map_chunks(-1);
    if (C1() % 2) {
      cur_slice_ = C1() - 1;
      op(Opcode::Mov, {reg(kWSlice), imm((wchunks_.empty() ? w_slice_fractals(C1() - 1) : wchunks_.slice_fractal(C1() - 1)) * fractal_)});
      op(Opcode::Mov, {reg(kKpos), imm((C1() - 1) * plane_)});
      slice(0, imm(C1() == 1 ? 1 : 0), fm_base, c_base, b.blocks, false);
    }
    for (int64_t i = std::min(peeled, trailing.pieces); i < trailing.pieces; ++i) trailing.emit(i);
  }

  // kWSlice = the L1 offset of slice 2 kSlice's weights from w_l1() (one_weight_copy with depth
  // taps: tap t = 2 kSlice / C1d, C1d even: slice 2 kSlice + 1 in the same tap).
  void slice_weights() {
    if (!wchunks_.empty()) return op(Opcode::Mov, {reg(kWSlice), imm(wchunks_.slice_fractal(cur_slice_) * fractal_)});
    const int64_t c1d = C1() / cv_.T;
    if (!one_weight_copy() || cv_.T == 1)
      return op(Opcode::Mul, {reg(kWSlice), reg(kSlice), imm((one_weight_copy() ? 2 : 2 * RS() * (plan_.tn / n0_)) * fractal_)});
    op(Opcode::Div, {reg(kTmp), reg(kSlice), imm(c1d / 2)});
    op(Opcode::Mul, {reg(kTmp), reg(kTmp), imm((RS() - 1) * c1d * fractal_)});
    op(Opcode::Mul, {reg(kWSlice), reg(kSlice), imm(2 * fractal_)});
    op(Opcode::Add, {reg(kWSlice), reg(kWSlice), reg(kTmp)});
  }

  // The weights of kernel-position group gi of slice `sub` L1 -> L0B (the next ping-pong half).
  int64_t load_group(int64_t sub, size_t gi) {
    const int64_t nb = plan_.tn / n0_, lb = (l0b_step_++ % 2) * plan_.l0b_half;
    const auto [q0, qn] = plan_.kgroups[gi];
    const bool chunked = !wchunks_.empty();
    const int64_t pos = chunked ? wchunks_.position_stride(cur_slice_) : w_position_stride();
    const int64_t first = (chunked ? sub : w_slice_fractals(sub)) + q0 * pos;
    op(Opcode::Load2d, {f16(), at(Buffer::L0B, lb), at(Buffer::L1, w_l1() + first * fractal_, kWSlice), imm(qn), imm(nb), imm(pos),
                        imm(chunked ? wchunks_.block_stride(cur_slice_) : w_block_stride()), imm(1)});
    return lb;
  }

  // One channel slice (c1 = 2 * kSlice + sub, or the constant last one): per kernel-position group
  // the weights L1 -> L0B and per pixel block load3d -> L0A, mmad. load3d reads the slice's own
  // 16-channel plane of the feature map (kKpos: its L1 offset; C1HWC0, so plane c1 is a feature map
  // of one fractal row of channels), kernel positions counted within the slice. The next group's weights are
  // loaded after the second block's load3d (into the other L0B half), and with `load_next` the
  // next slice's first group's, so MTE1 has them ready when the cube reaches them.
  void slice(int64_t sub, Operand init_first, int64_t fm_base, int64_t c_base, const std::vector<std::pair<int64_t, int64_t>>& blocks,
             bool load_next) {
    const int64_t tn = plan_.tn;
    const auto& kgroups = plan_.kgroups;
    int64_t lb = sub == 1 && next_lb_ >= 0 ? next_lb_ : load_group(sub, 0);
    next_lb_ = -1;
    for (size_t gi = 0; gi < kgroups.size(); ++gi) {
      const auto [q0, qn] = kgroups[gi];
      int64_t next = -1;
      for (size_t bi = 0; bi < blocks.size(); ++bi) {
        const auto [p0, size] = blocks[bi];
        const int64_t la = (l0a_step_++ % 2) * plan_.l0a_half;
        op(Opcode::Load3d, {f16(), at(Buffer::L0A, la), at(Buffer::L1, fm_base + sub * plane_, kKpos), imm(k0_), imm(p0), imm(size), imm(q0),
                            imm(qn)});
        if (bi == std::min<size_t>(1, blocks.size() - 1)) {
          if (gi + 1 < kgroups.size()) next = load_group(sub, gi + 1);
          else if (load_next) next_lb_ = load_group(sub + 1, 0);
        }
        op(Opcode::Mmad, {f16(), at(Buffer::L0C, c_base + p0 * tn * acc_), at(Buffer::L0A, la), at(Buffer::L0B, lb), imm(size),
                          imm(qn * k0_), imm(tn), gi == 0 ? init_first : imm(0)});
      }
      lb = next;
    }
  }

  // Per pixel block: the accumulator to UB, per column block the epilogue (its regions ping-pong
  // between column blocks) and the valid pixels to GM.
  void write_back(int64_t half) { write_back(bands_[0], c_base(half), y_base(half)); }
  void write_back(const Band& b, int64_t c_base, Reg y) {
    for (size_t i = 0; i < b.blocks.size(); ++i) write_back_block(b, c_base, y, i);
  }
  void write_back_block(const Band& b, int64_t c_base, Reg y, size_t block) {
    const int64_t tn = plan_.tn, tm0 = plan_.tm0, first = b.out_first * cv_.OW;
    {
      const auto [p0, size] = b.blocks[block];
      const int64_t ub = (ub_step_++ % 2) * tm0 * tn * acc_, valid = std::min(size, b.pixels - p0);
      op(Opcode::MovL0c, {Operand::type(m_.cube_f16.acc), at(Buffer::UB, ub), at(Buffer::L0C, c_base + p0 * tn * acc_),
                          imm(size * tn / m_.cube_f16.acc_fractal_elements()), imm(0)});
      if (valid <= 0) return;
      if (y_from_ub()) return rows_out(ub, size, valid, first + p0);
      for (int64_t jj = 0; jj < tn / n0_; ++jj) {
        int64_t src = ub + jj * size * n0_ * acc_;
        if (epi_) src = epi_->emit_column(p_, src, size, jj, ub_columns(column_step_++ % 2));
        op(Opcode::DmaOut, {at(Buffer::GM, Y_.base + (first + p0) * Y_.pixel_bytes + jj * Y_.block_bytes, y), at(Buffer::UB, src), imm(valid),
                            imm(n0_ * eo_), imm(0), imm(Y_.pixel_bytes - n0_ * eo_)});
      }
    }
  }

  // NCHW: the accumulator block at `ub` ([16-channel block][size pixels][16] f32) transposed in UB,
  // per 16 channels, to channel rows of its `valid` pixels, and those to the user's Y at pixel `pixel`.
  void rows_out(int64_t ub, int64_t size, int64_t valid, int64_t pixel) {
    const int64_t tn = plan_.tn, channels = std::min(tn, orig_.K), sq = n0_ * n0_ * acc_, pitch = size / n0_ * (n0_ * acc_ / frow_);
    const int64_t t1 = ub_resident(), t2 = t1 + sq, rows = t2 + sq, row_bytes = plan_.tm0 * n0_ * acc_;
    if (rows + 2 * row_bytes > m_.capacity(Buffer::UB))
      return code_.refuse(unsupported("the result's transposes do not fit the vector buffer").what());
    for (int64_t jj = 0; jj * n0_ < channels; ++jj) {
      const int64_t out = rows + (rows_step_++ % 2) * row_bytes, src = ub + jj * size * n0_ * acc_;
      for (int64_t b = 0; b * n0_ < size; ++b) code_.f32_block_to_rows(src + b * sq, out + b * (n0_ * acc_), pitch, t1, t2);
      op(Opcode::DmaOut, {at(Buffer::GM, user_y_ + (jj * n0_ * y_plane() + pixel) * eo_, kYDst), at(Buffer::UB, out),
                          imm(std::min(n0_, channels - jj * n0_)), imm(valid * eo_), imm(pitch * frow_ - valid * eo_),
                          imm((y_plane() - valid) * eo_)});
    }
  }

  std::string summary() const {
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
                       cv_.x_step > 1 ? fmt::format(" (1x1: rows 0..{} of {} in L1, the columns read as pixels {} apart)", cv_.H - 1, cv_.src_h, cv_.x_step) : "",
                       k_.user_tile ? ", from tile " + k_.user_tile->to_string() : "") +
           (bands_.size() > 1 ? fmt::format(", {} bands of {} output rows (input windows of up to {} rows with their halos)", bands_.size(),
                                            bands_[0].out_rows, plan_.fm_bytes / (cv_.C * cv_.W * in_))
                              : "") +
           (wchunks_.empty() ? "" : fmt::format(", weights in chunks of {} slices ahead of their planes", fmt::join(plan_.weight_chunks, "+")));
  }

  UserError unsupported(const std::string& why) const { return conv_unsupported(k_, why); }

  const kernel::Kernel& k_;
  const isa::NpuMachine& m_;
  const Conv &orig_, &cv_;
  const tile::ConvPlan& plan_;
  ConvEpilogue* epi_;
  NpuKernel& out_;
  npu::Program& p_;
  ConvCode code_;
  FoldedMap fold_;
  const int64_t n0_ = m_.cube_f16.n0, k0_ = m_.cube_f16.k0;
  const int64_t in_ = dtype_bytes(DType::F16), acc_ = dtype_bytes(m_.cube_f16.acc), eo_ = dtype_bytes(cv_.out);
  const int64_t frow_ = m_.fractal_row_bytes, fractal_ = m_.fractal_bytes();  // one fractal row / one fractal (f16)
  int64_t gm_ = 0, user_x_ = 0, user_w_ = 0, user_y_ = 0;
  ActivationLayout X_, Y_;
  std::vector<Band> bands_;
  WeightLayout W_;
  int64_t l0a_step_ = 0, l0b_step_ = 0, ub_step_ = 0, column_step_ = 0, rows_step_ = 0;
  WeightChunks wchunks_;  // the weights' chunks (empty: one copy or per-slice copies)
  int64_t cur_slice_ = 0;  // the first slice of the pair (or the odd last slice) being emitted
  int64_t next_lb_ = -1;  // L0B half of the next slice's first group when slice() loaded it early
  int64_t plane_ = 0;     // bytes of one 16-channel plane of the band's feature map in L1
  std::function<void()> pending_weights_;  // the weights' transposes after the map's first loads
  ConvCode::DeferredChunks map_chunks_;  // the map's chunks not emitted yet (group, emitter)
  int64_t chunk_slice0_ = 0;             // their groups' first slice
};

}  // namespace

void emit_planned(const kernel::Kernel& k, const isa::NpuMachine& m, const Conv& orig, const Conv& cv, const tile::ConvPlan& plan,
                  ConvEpilogue* epi, NpuKernel& out, std::string* refusal) {
  ConvEmitter(k, m, orig, cv, plan, epi, out, refusal).run();
}

}  // namespace tessel::emit_npu::conv_detail
