// Internal to the NPU convolution emitter: the ConvEmitter class, which carries out a ConvPlan
// (compiler/tile/npu_conv_plan.h) for one matched convolution (conv_match.h). Its state and small
// queries live here; its passes are defined in the files named by what they emit, each called in
// this order by run():
//   conv_emitter.cc         run(): GM tensors placed, the layouts of X / Y / the weights, the
//                           per-core scratch slots, the kernel's summary note
//   conv_emitter_copies.cc  scratch layout copies (NCHW transposes, padded channels, per-core
//                           copies of the image and the weights) and their way back to the user's Y
//   conv_emitter_loops.cc   the bands and the loops over channel tiles, images and bands (which
//                           core runs what; ping-pong of images and bands in L1 / L0C)
//   conv_emitter_weights.cc a channel tile's weights and per-channel epilogue values into L1 / UB
//                           (one copy, per-slice copies, or chunks ahead of their slices), and
//                           each slice's weights L1 -> L0B
//   conv_emitter_slices.cc  a band's map planes into L1, the channel slices on the cube (load3d,
//                           mmad), the write-back of the accumulator through UB to GM
// Layout structs (bands, GM layouts, weight chunks): conv_emitter_parts.h.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "compiler/emit_npu/conv_emitter_parts.h"
#include "compiler/emit_npu/conv_epilogue.h"
#include "compiler/emit_npu/conv_fold.h"
#include "compiler/emit_npu/conv_layout.h"
#include "compiler/emit_npu/conv_match.h"
#include "compiler/emit_npu/emit_npu.h"
#include "compiler/emit_npu/operands.h"
#include "compiler/emit_npu/pointwise.h"
#include "compiler/poly/contraction.h"
#include "compiler/tile/npu_conv_plan.h"
#include "compiler/tile/tile_spec.h"
#include "isa/npu_machine.h"

namespace tessel::emit_npu::conv_detail {

// Carries out a ConvPlan (compiler/tile/npu_conv_plan.h) for one matched convolution: GM tensors,
// scratch layout copies, the per-core weights, the image loop with its channel slices, the write-back.
class ConvEmitter {
  using Buffer = npu::Buffer;
  using Opcode = npu::Opcode;
  using Operand = npu::Operand;
  static Operand f16() { return Operand::type(DType::F16); }

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
  static constexpr int64_t kStraightPairs = tile::kConvStraightPairs, kPlanesAhead = 8;

 public:
  ConvEmitter(const kernel::Kernel& k, const isa::NpuMachine& m, const Conv& orig, const Conv& cv,
              const tile::ConvPlan& plan, ConvEpilogue* epi, NpuKernel& out, std::string* refusal = nullptr)
      : k_(k), m_(m), orig_(orig), cv_(cv), plan_(plan), epi_(epi), out_(out), p_(out.program), code_(k, m, out.program, refusal),
        fold_(m, cv, out.program, code_) {}

  void run();

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

  void place_tensors();

  void set_layouts();

  // Per-core copies: X's images in two slots per core, each core's own copy of the weights, Y
  // (NCHW or padded output channels) through an NHWC copy of which each core writes and reads back
  // only its (image, channel tile) blocks. Nothing one core writes is read by another.
  void place_copies();

  // Folded, one band of one image per core: the weights and then the epilogue's channel values are
  // loaded after the band's map (each kind of band's code runs once per core), whose chain to the
  // cube is longer; the channel values are needed only by the write-back.
  bool loads_after_fold() const { return cv_.folded() && spread() && per_core_images() == 1 && !kt_loop(); }
  // Gathered, one image per core: the map (every slice reads all of it) first on MTE2, then the
  // weights (their first chunk; the others ahead of their slices).
  bool weights_after_map() const { return cv_.gathered() && per_core_images() == 1 && !kt_loop() && bands_.size() == 1; }
  // Padded bands over cores (not folded): each kind of band's code loads the weights before its
  // map (loaded before the kinds' loops, a later kind's map waited a GM latency for MTE1's wait).
  bool weights_per_band_kind() const {
    return !cv_.folded() && spread() && !bands_alike() && !per_core() && per_core_images() == 1 && !kt_loop() && !cv_.depthwise;
  }

  // Folded: the map's UB staging past the accumulator blocks and the epilogue's regions.
  void place_fold();

  // UB for the per-core copies: past the epilogue's resident channel values and column regions
  // (they stay for the whole channel tile), else the lower half.
  int64_t copy_ub() const { return epi_ ? ub_columns(2) : 0; }
  int64_t copy_ub_bytes() const { return epi_ ? m_.capacity(Buffer::UB) - copy_ub() : m_.capacity(Buffer::UB) / 2; }

  // The core's own copy of the weights: NCHW [K][C R S] -> [C][R S][Kp]; NHWC rows of K -> Kp.
  void copy_weights();

  // NCHW per core, channels a multiple of 16: the tile's weights transposed in UB straight into
  // their L1 fractals (no GM copy): per 16 output channels the rows [16][C T R S] by one DMA, one
  // vtranspose per square (rows (c, t, q) of 16 output channels), per (c, t) its R S rows moved to
  // their fractal rows in L1.
  int64_t weight_row_pitch() const { return round_up(orig_.C * RS(), k0_); }
  bool weights_to_l1() const;
  // The groups in as many UB slots as fit next to two of the map's (ConvCode::weights_to_l1); their
  // transposes held back (pending_weights_) behind the map's first loads (transpose_rows'
  // after_loads; slices() flushes the rest) where the map is copied once per core.
  int64_t weight_slot_bytes() const { return 2 * weight_row_pitch() * k0_ * in_; }
  int64_t weight_groups() const { return (std::min(plan_.tn, orig_.K) + k0_ - 1) / k0_; }
  int64_t weight_slots() const;
  // The map's transposes (straight into L1) past the weights' slots, up to the end of UB without an
  // epilogue (the write-back's blocks and transposes come after the map is in L1; the sync pass
  // orders them behind the transposes).
  int64_t map_ub() const { return copy_ub() + weight_slots() * weight_slot_bytes(); }
  int64_t map_ub_bytes() const { return (epi_ ? copy_ub_bytes() : m_.capacity(Buffer::UB) - copy_ub()) - weight_slots() * weight_slot_bytes(); }
  // Elements per plane the map's transposes move (a band's rows, or the image's).
  int64_t map_plane() const { return (spread() ? bands_[0].in_rows : cv_.H) * cv_.W; }

  void transpose_weights_to_l1();
  // The map's copies into L1 (x_to_l1) leave each chunk's transposes to slices(), which emits a
  // slice pair's chunks right before the pair, so the scalar pipe dispatches the pair's mmads
  // without waiting for every later chunk's transposes to enter the vector queue. map_chunks(t):
  // where transpose_rows appends tap t's chunks (an earlier tap's emitted first: same UB slots).
  ConvCode::DeferredChunks* map_chunks(int64_t t);
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
  void user_x_base();

  // Bands spread over cores, NCHW: the band's input rows of every plane (of every depth tap)
  // transposed straight into the band's C1HWC0 feature map in L1.
  void copy_band_in(const Band& b, int64_t fm_base);

  void copy_image_in(int64_t slot, int64_t fm_base);

  // A channel's output plane in the user's NCHW Y (3-D: its O depths).
  int64_t y_plane() const { return cv_.O * P(); }
  // kYDst = the user's Y offset of image kImage (NCHW: and of the channel tile kKTile).
  void user_y_base();

  // 3-D NCDHW: image kImage = (n, o); its T input depths o .. o + T - 1, each a C1HWC0 piece of the slot.
  void copy_depths_in(int64_t slot, int64_t fm_base);

  // dst = (kImage / O) * per_n + (kImage % O) * per_o: image (n, o) of a 3-D convolution.
  void image_of_depth(Reg dst, int64_t per_n, int64_t per_o);

  // The (image kImage, channel tile) block of the NHWC copy of Y (at Y_.base + y) to the user's Y.
  void copy_image_out(Reg y);

  // NCHW: X and the weights transposed to NHWC / [C, R*S, K] scratch copies on the vector unit.
  void nchw_in();

  // Channel counts not multiples of the fractal: X and the weights copied with their channels padded.
  void padded_in();

  // Y: [N][P][Kp] -> [N][K][P]: per pixel its K values down one column.
  void nchw_out() { code_.images_columns_to_rows_f32(Y_.base, user_y_, orig_.N, P(), orig_.K, cv_.K); }

  // Y: rows of Kp -> rows of K, chunks of whole GM alignment units of f32 rows (aligned destinations).
  void padded_out();

  // The plan's bands: the whole image (its pad rows as the statement has them), or bands of
  // band_rows output rows, each reading its rows x stride + halo input rows clipped to the image.
  void make_bands();

  void set_fmatrix(const Band& b);

  void main_loops();

  // Feature maps larger than L1 (or accumulators larger than L0C): per image its bands in turn,
  // each with its own geometry and input window (overlapping its neighbours' by the halo); bands
  // ping-pong in L1 and L0C where both hold two, band b's write-back then trailing band b + 1's mmads.
  void banded_images();

  // Bands over cores: every band alike (the planner's equal bands, no padding rows), so the core's
  // band kBand is band 0's code at its offsets: kBand x rows x stride input rows into X, kBand x
  // rows output rows into Y.
  void core_band(int64_t images);

  bool bands_alike() const;

  // Bands over cores with padding rows (NHWC): the first band (zero rows on top), the middle ones
  // (alike: their halo rows on both sides) and the last (zero rows below) differ in their input
  // windows, so each kind has its own code, run as a loop of one iteration on its cores and of none
  // on the others. kXBase / kYBase hold the core's band's offsets (band x rows); a kind's code is its
  // first band's, its X rows addressed from the band's first input row.
  void padded_core_bands();

  // Band t's code at the core's band offsets: X from the band's first input row (t x rows x stride
  // rows past the core's offset, less its halo), Y at the core's band's first row.
  // `kind`: the kind's slot (band_kind_slots).
  void band_code(int64_t t, int64_t kind);

  // Two images ping-pong in L1 and in L0C: the write-back may trail the next image.
  bool pipelined() const { return epi_ && !per_core() && halves() == 2 && plan_.c_halves == 2; }
  Reg y_base(int64_t half) const { return pipelined() && half == 1 ? kYBaseOdd : kYBase; }
  int64_t c_base(int64_t half) const { return (plan_.c_halves == 2 ? half % 2 : 0) * plan_.padded_pixels * plan_.tn * acc_; }

  // UB: two accumulator blocks, the epilogue's resident channel values, two column blocks' regions.
  int64_t ub_resident() const { return 2 * plan_.tm0 * plan_.tn * acc_; }
  int64_t ub_columns(int64_t set) const {
    return ub_resident() + epi_->resident_bytes(plan_.tn) + set * epi_->column_bytes(plan_.tm0);
  }
  // The column blocks' regions the write-back cycles through: two, up to four where UB holds them
  // and nothing else lives past the first two (no layout copies, folded map staging or depthwise
  // diagonal weights: they start there). A region is reused once the block written into it has
  // left by its DMA (the GM write latency): with two, a tile of four column blocks waits for it.
  int64_t column_sets() const {
    const bool free = !padded() && cv_.layout != Layout::Nchw && !cv_.folded() && !cv_.depthwise;
    int64_t sets = 2;
    while (free && sets < 4 && ub_columns(sets + 1) <= m_.capacity(Buffer::UB)) ++sets;
    return sets;
  }

  // The k-tile's per-channel epilogue values, once per k-tile.
  void load_channels();

  // The k-tile's weights into L1, one fractal row of input channels x all kernel positions at a time.
  void load_weights();

  // The tile's weights in L1: fractals (c1, q, j) (slice, kernel position, 16-column block). Rows
  // (t, q, c) evenly spaced in GM (conv_match.h's weights_in_one_copy): one dma_in_nz of all of
  // them, NZ order: fractal (t, q, c1d, j) at j R S C1 + (t R S + q) C1d + c1d (slice c1 = t C1d +
  // c1d at c1 + t (R S - 1) C1d, positions C1d apart, blocks R S C1); else one per (c1, q): slice
  // c1 at c1 R S nb, positions nb apart, blocks 1 apart (README "Per-core chain").
  bool one_weight_copy() const;
  int64_t w_slice_fractals(int64_t c1) const;
  int64_t w_position_stride() const { return one_weight_copy() ? C1() / cv_.T : plan_.tn / n0_; }
  int64_t w_block_stride() const { return one_weight_copy() ? RS() * C1() : 1; }

  // Per channel slice (a depth tap's slice in 3-D) and kernel position, 16 input channels x tn into
  // L1 (or all of them by one copy: one_weight_copy).
  void weight_fractals(Reg col);

  // The plan's weight chunks (conv_emitter_parts.h) where the tile's one copy is loaded once per
  // core, ahead of one band's map read once, its slices straight-line (else the one copy).
  void plan_weight_chunks();
  // Chunk g: per kernel position its slices' rows (evenly spaced) by one dma_in_nz (kWCol: the tile's columns).
  void weight_chunk(size_t g);

  // Grouped: tile kKTile is local tile kKTile % (K / tn) of group g = kKTile / (K / tn), whose
  // weights start at g x R S C K elements and whose input channels at g x C within a pixel (kGroupX).
  void grouped_weights();

  // dst = base offset of image kImage in layout l (without l.base)
  void image_base(const ActivationLayout& l, Reg dst);

  // One image of the pair: its feature map into L1, the channel slices, the write-back.
  // The write-back of the image in `half`, piece by piece.
  Trailing trailing(int64_t half);

  void image(int64_t half, const Trailing& trailing = {});

  void image_bases(Reg y, int64_t slot, int64_t fm_base = 0);

  // The band's input window as C1HWC0: one strided copy per fractal row of channels, with slice c1 - kPlanesAhead's pair where
  // the slices run straight-line (slices() flushes it): the first pairs then issue without waiting behind every plane's copy.
  void load_band(const Band& b, int64_t fm_base);
  // Gathered (Conv::Gather): the read pixels pixel-major into L1, one copy per output row.
  void gathered_map(int64_t fm_base);

  // Every channel slice of one band: pairs of slices in a loop, the odd last one after it.
  // `trailing` pieces of an earlier write-back (one per pixel block) go between the first pairs
  // (those iterations peeled), so the vector unit's work spreads over this band's mmads instead
  // of holding the in-order scalar issue (and with it the cube) behind a full vector queue.
  void slices(const Band& b, int64_t fm_base, int64_t c_base, const Trailing& trailing = {});

  // kWSlice = the L1 offset of slice 2 kSlice's weights from w_l1() (one_weight_copy with depth
  // taps: tap t = 2 kSlice / C1d, C1d even: slice 2 kSlice + 1 in the same tap).
  void slice_weights();

  // The weights of kernel-position group gi of slice `sub` L1 -> L0B (the next ping-pong half).
  int64_t load_group(int64_t sub, size_t gi);

  // One channel slice (c1 = 2 * kSlice + sub, or the constant last one): per kernel-position group
  // the weights L1 -> L0B and per pixel block load3d -> L0A, mmad. load3d reads the slice's own
  // 16-channel plane of the feature map (kKpos: its L1 offset; C1HWC0, so plane c1 is a feature map
  // of one fractal row of channels), kernel positions counted within the slice. The next group's weights are
  // loaded after the second block's load3d (into the other L0B half), and with `load_next` the
  // next slice's first group's, so MTE1 has them ready when the cube reaches them.
  void slice(int64_t sub, Operand init_first, int64_t fm_base, int64_t c_base, const std::vector<std::pair<int64_t, int64_t>>& blocks,
             bool load_next);

  // Per pixel block: the accumulator to UB, per column block the epilogue (its regions ping-pong
  // between column blocks) and the valid pixels to GM.
  void write_back(int64_t half) { write_back(bands_[0], c_base(half), y_base(half)); }
  void write_back(const Band& b, int64_t c_base, Reg y);
  void write_back_block(const Band& b, int64_t c_base, Reg y, size_t block);

  // NCHW: the accumulator block at `ub` ([16-channel block][size pixels][16] f32) transposed in UB,
  // per 16 channels, to channel rows of its `valid` pixels, and those to the user's Y at pixel `pixel`.
  void rows_out(int64_t ub, int64_t size, int64_t valid, int64_t pixel);

  std::string summary() const;

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

}  // namespace tessel::emit_npu::conv_detail
