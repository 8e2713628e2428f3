// The general NPU vector lowering's driver (nest.h states the contract; nest_lowering.h lists the
// parts): emit runs the analysis (why_not), binds every tensor in GM, writes the zero-padded
// copies, splits the partition over the cores and emits each core's share, either as the row
// pipeline (nest_pipeline.cc) or statement by statement: the loops of a statement's plan (full
// blocks in a loop, the tail straight, the innermost loop of two or more tiles cycling through a
// ring of value sets: two or more, ring_sets),
// reductions into a UB accumulator (rows in order, lanes folded then vcadd / vcmax), and the
// stores. Also the entry points of nest.h.
#include "compiler/emit_npu/nest_lowering.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "compiler/emit_npu/nest.h"
#include "compiler/emit_npu/nest_split.h"
#include "compiler/emit_npu/operands.h"
#include "isa/base/error.h"

namespace tessel::emit_npu::nest {

NpuKernel Nest::emit() {
  if (std::string w = why_not(); !w.empty()) throw UserError(message(w, "general vector lowering"));
  NpuKernel out;
  npu::Program& p = out.program;
  p_ = &p;
  p.source_name = k_.name + ".npu";
  bind(p);
  p.cores = cores_;
  emit_pads();
  if (cores_ == 1) {
    run_core(range_);
  } else if (!core_parts_.empty()) {  // a grid: equal shares
    core_bases();
    run_core(range_);
  } else {
    op(Opcode::Mul, {reg(kBase), reg(npu::kRegCoreId), imm(range_)});
    const int64_t last = partition_extent_ - (cores_ - 1) * range_;
    if (last == range_) {
      run_core(range_);
    } else {
      op(Opcode::Loop, {reg(kCoreLoop), reg(npu::kRegCoreId), imm(cores_ - 1), reg(npu::kRegCoreCount)});
      run_core(range_);
      op(Opcode::EndLoop, {});
      op(Opcode::Seq, {reg(kOnce), reg(npu::kRegCoreId), imm(cores_ - 1)});
      op(Opcode::Loop, {reg(kCoreLoop), imm(0), reg(kOnce), imm(1)});
      run_core(last);
      op(Opcode::EndLoop, {});
    }
  }
  p.add(Opcode::PipeBarrier, {Operand::pipe_(npu::Pipe::All)});
  for (const Plan& pl : plans_) {
    if (!pl.box.empty()) {
      std::string box;
      for (size_t d = 0; d < pl.dims.size(); ++d)
        if (pl.box[d] > 1) box += fmt::format("{}{} {}", box.empty() ? "" : " x ", pl.dims[d].name, pl.box[d]);
      if (pl.mirror)
        out.notes.push_back(fmt::format("{}: {} loop(s), tile mirrored in UB blocks: box {}, {} along {}{}", pl.s->name,
                                        pl.dims.size(), box, pl.mirror_unit > 1 ? "blocks" : "8 lanes", pl.dims[pl.v].name,
                                        pl.u >= 0 ? ", repeats along " + pl.dims[pl.u].name : ""));
      else
        out.notes.push_back(fmt::format("{}: {} loop(s), moved through UB blocks: box {}, loads along {}, stores along {}", pl.s->name,
                                        pl.dims.size(), box, pl.dims[pl.u].name, pl.dims[pl.v].name));
      continue;
    }
    out.notes.push_back(fmt::format("{}: {} loop(s), tile {} x {} (pitch {}){}{}", pl.s->name, pl.dims.size(),
                                    pl.rows, pl.cols, pl.pitch, pl.u >= 0 ? ", rows " + pl.dims[pl.u].name : "",
                                    pl.v >= 0 ? ", lanes " + pl.dims[pl.v].name : ""));
  }
  if (fz_.on) out.notes.push_back(fused_note());
  out.notes.push_back(fmt::format("general vector lowering on {} core(s){}", cores_,
                                  cores_note()));
  npu::validate_program(p);
  return out;
}

// Zero-fills each padded copy and copies its tensor in, rows of the last two dimensions at a time.
// On several cores the chunks (each a GM write from UB) go round the cores, chunk j to core
// j % cores: all zero-fills, a sync_all, all copies, a sync_all, so every core reads the whole copy.
void Nest::emit_pads() {
  if (pads_.empty()) return;
  const int64_t ub = m_.capacity(Buffer::UB) / 2 / bytes_per_repeat_ * bytes_per_repeat_;
  int64_t chunk = 0;
  // runs `ops` on core `chunk % cores_` only (every core when there is one)
  auto on_one_core = [&](const std::function<void()>& ops) {
    if (cores_ > 1) {
      op(Opcode::Seq, {reg(kOnce), reg(npu::kRegCoreId), imm(chunk++ % cores_)});
      op(Opcode::Loop, {reg(kCoreLoop), imm(0), reg(kOnce), imm(1)});
    }
    ops();
    if (cores_ > 1) op(Opcode::EndLoop, {});
  };
  for (int phase = 0; phase < 2; ++phase) {
    for (const auto& [name, pad] : pads_) emit_pad(name, pad, ub, phase == 0, on_one_core);
    if (cores_ > 1) op(Opcode::SyncAll, {});
  }
}

// One padded copy's zero-fill (`zero_fill`) or its tensor's rows copied in, each GM write through
// `on_one_core`.
void Nest::emit_pad(const std::string& name, const Pad& pad, int64_t ub, bool zero_fill,
                    const std::function<void(const std::function<void()>&)>& on_one_core) {
  {
    const int eb = dtype_bytes(pad.type);
    int64_t total = eb;
    for (int64_t z : pad.shape) total *= z;
    // on several cores, chunks small enough that every core takes one
    const int64_t share = (total + cores_ - 1) / cores_;
    const int64_t zero = std::min(ub, (share + bytes_per_repeat_ - 1) / bytes_per_repeat_ * bytes_per_repeat_);
    if (zero_fill) {
      for (int64_t done = 0; done < zero; done += max_repeat_ * bytes_per_repeat_)
        op(Opcode::Vdup, {type(DType::I32), at(Buffer::UB, done), Operand::float_(0),
                          imm(std::min(max_repeat_, (zero - done) / bytes_per_repeat_)), imm(1), imm(repeat_blocks_)});
      for (int64_t off = 0; off < total; off += zero)
        on_one_core([&] {
          op(Opcode::DmaOut, {at(Buffer::GM, gm_.at(pad.name) + off), at(Buffer::UB, 0), imm(1), imm(std::min(zero, total - off)), imm(0), imm(0)});
        });
      return;
    }
    if (pad.written) return;  // its writer stores into the buffer
    const size_t r = pad.source.size();
    const int64_t w = pad.source[r - 1], h = r >= 2 ? pad.source[r - 2] : 1;
    // A row wider than UB is copied in pieces of `piece` elements, a row at a time.
    const int64_t piece = std::min(w, ub / eb);
    int64_t outer_count = 1;
    for (size_t j = 0; j + 2 < r; ++j) outer_count *= pad.source[j];
    const int64_t rows = std::max<int64_t>(1, std::min({h, ub / (w * eb), (h * outer_count + cores_ - 1) / cores_}));
    std::vector<int64_t> outer(pad.source.begin(), pad.source.end() - std::min<size_t>(r, 2));
    std::vector<int64_t> idx(outer.size(), 0);
    for (bool more = true; more;) {
      for (int64_t row = 0; row < h; row += rows) {
        const int64_t n = std::min(rows, h - row);
        int64_t src = 0, dst = 0, ss = 1, sd = 1;
        for (size_t j = r; j-- > 0;) {
          const int64_t i = j + 1 == r ? 0 : j + 2 == r ? row : idx[j];
          src += ss * i;
          dst += sd * (i + pad.before[j]);
          ss *= pad.source[j];
          sd *= pad.shape[j];
        }
        for (int64_t c = 0; c < w; c += piece) {
          const int64_t cw = std::min(piece, w - c);
          on_one_core([&] {
            op(Opcode::DmaIn, {at(Buffer::UB, 0), at(Buffer::GM, gm_.at(name) + (src + c) * eb), imm(n), imm(cw * eb),
                               imm((w - cw) * eb), imm(0)});
            op(Opcode::DmaOut, {at(Buffer::GM, gm_.at(pad.name) + (dst + c) * eb), at(Buffer::UB, 0), imm(n), imm(cw * eb),
                                imm(0), imm((pad.shape[r - 1] - cw) * eb)});
          });
        }
      }
      more = false;
      for (size_t j = outer.size(); j-- > 0 && !more;) {
        if (++idx[j] < outer[j]) more = true;
        else idx[j] = 0;
      }
    }
  }
}

// Every global and local tensor in GM, with room before and after for reads that reach past its
// ends (guarded reads such as padding: their lanes are discarded by a select).
void Nest::bind(npu::Program& p) {
  std::map<std::string, std::pair<int64_t, int64_t>> reach;  // elements before, after
  for (const Plan& pl : plans_)
    for (const Access& a : pl.reads) {
      int64_t lo = a.offset, hi = a.offset;
      for (size_t d = 0; d < pl.dims.size(); ++d) {
        const int64_t span = a.stride[d] * (pl.dims[d].extent - 1);
        (span < 0 ? lo : hi) += span;
      }
      const ir::Tensor* t = k_.function->find_tensor(a.tensor);
      if (!t) continue;  // a zero-padded copy: read inside
      int64_t n = 1;
      for (int64_t s : sizes_of(*t)) n *= s;
      auto& r = reach[a.tensor];
      r.first = std::max(r.first, -lo);
      r.second = std::max(r.second, hi - n);
    }
  const int64_t g = m_.granularity(Buffer::GM);
  auto round = [&](int64_t b) { return (b + g - 1) / g * g; };
  int64_t gm = 0;
  auto place = [&](const std::string& name, DType t, const std::vector<int64_t>& shape, npu::TensorRole role) {
    const auto r = reach.count(name) ? reach.at(name) : std::pair<int64_t, int64_t>{0, 0};
    gm += round(r.first * dtype_bytes(t));
    // A 0-d tensor is bound as one element (a program tensor has a shape).
    npu::TensorBinding b{name, t, shape.empty() ? std::vector<int64_t>{1} : shape, gm, role, {}};
    gm = round(gm + b.byte_size() + r.second * dtype_bytes(t));
    gm_[name] = b.gm_offset;
    p.tensors.push_back(b);
  };
  for (const auto& t : k_.tensors)
    place(t.name, t.dtype, t.shape,
          t.temporary ? npu::TensorRole::Scratch
                      : t.kind == ir::TensorKind::Input ? npu::TensorRole::In : npu::TensorRole::Out);
  for (const auto& t : k_.function->tensors)
    if (!gm_.count(t.name)) place(t.name, t.dtype, sizes_of(t), npu::TensorRole::Scratch);
  for (const auto& [name, pad] : pads_) place(pad.name, pad.type, pad.shape, npu::TensorRole::Scratch);
}

void Nest::run_core(int64_t range) {
  range_now_ = range;
  if (fz_.on) {
    fused_core(range);
    return;
  }
  memo_prefix_.clear();
  for (const Plan& p : plans_) statement(p);
}

void Nest::statement(const Plan& p) {
  plan_ = &p;
  pos_.assign(p.dims.size(), Pos{});
  size_.assign(p.dims.size(), 1);
  chunk_ = p.box.empty() ? p.rows * p.pitch : 1;  // a move's box: UB blocks after these regions (body_move)
  region_base_ = 0;
  next_region_ = 0;
  set_bytes_ = p.body_regions * chunk_ * 4 + (rows_tile(p) ? p.row_values * p.rows * bytes_per_repeat_ : 0);
  // Double buffering at the innermost loop of two or more tiles: its tiles cycle through ring_
  // sets of values (and of accumulators when it is an output loop), two or more (ring_sets).
  db_dim_ = -1;
  std::vector<int> order = p.out_levels;
  order.insert(order.end(), p.red_levels.begin(), p.red_levels.end());
  for (int d : order)
    if (extent_of(p, d) / block_of(p, d) >= 2) db_dim_ = d;
  db_out_ = db_dim_ >= 0 && !p.dims[db_dim_].reduction;
  ring_ = ring_sets(p);
  // Two sets: a region each for the index sequence and each set's accumulator, partial and row
  // values. More: those at the sizes they hold (ring_fixed), so that the sets fit.
  const bool compact = ring_ > 2;
  const std::array<int64_t, 3> fixed = ring_fixed(p);
  seq_ = compact && p.values.empty() ? next_region_ : fresh_region();
  if (!p.values.empty()) sequence(p);
  for (int k = 0; k < ring_; ++k) {
    int64_t* at[3] = {&accs_[k], &parts_[k], &rowvals_of_[k]};
    for (int j = 0; j < 3; ++j) *at[j] = compact ? fresh_bytes(fixed[j]) : fresh_region();
  }
  body_base_ = next_region_;
  set_ = acc_set_ = 0;
  levels(p, 0, true);
}

// UB bytes of a set's accumulator, partial and row values in a ring of more than two sets: the
// accumulator an output tile (a reduction's), the partial that or a value per row, whole repeats;
// row values a region where a read is gathered per row (constant along the lanes), else none.
std::array<int64_t, 3> Nest::ring_fixed(const Plan& p) const {
  if (!p.box.empty()) return {0, 0, 0};
  const int64_t rep = bytes_per_repeat_;
  const int64_t out = (p.out_dim(p.u) ? p.rows : 1) * (p.out_dim(p.v) ? p.pitch : 1);
  const int64_t acc = p.is_reduction() ? (out * 4 + rep - 1) / rep * rep : 0;
  const int64_t part = (std::max(out, p.rows) * 4 + rep - 1) / rep * rep;
  const bool gathers = p.row_values > 0 || std::any_of(p.reads.begin(), p.reads.end(), [&](const Access& a) { return stride_of(a, p.v) == 0; });
  return {acc, part, gathers ? chunk_ * 4 : 0};
}

// The value sets the innermost tile loop cycles through. A set is taken from its tile's load to its
// store's completion: the GM read latency (and the write's, where the tile is stored) plus the
// tile's transfers; a core moves a tile's bytes in (in + out) / bw (its share of the shared GM), so
// ceil(that span / transfer) sets keep its DMAs back to back. Two where the tiles' transfers
// already cover the latencies (large tiles, davinci-310's 2 cores); at most kMaxRing, the tiles of
// the loop, and what fits UB with each set's accumulator, partial and row values (ring_fixed).
int Nest::ring_sets(const Plan& p) {
  flat_.clear();
  flat_tiles_ = 1;
  if (db_dim_ < 0) return 2;
  const isa::NpuPathSpec &in = m_.path(Buffer::GM, Buffer::UB), &out = m_.path(Buffer::UB, Buffer::GM);
  const double bw = std::min(double(in.bandwidth_bytes_per_cycle), m_.gm_shared_bandwidth_bytes_per_cycle / std::max(1, cores_));
  const auto tile = [&](int d) { return d >= 0 ? block_of(p, d) : int64_t{1}; };
  const auto size = [&](int d) { return p.dims[d].reduction && p.mirror ? p.box[d] : block_of(p, d); };
  double bytes = 0;  // one tile's GM bytes, in and out
  const std::array<int64_t, 3> fixed = ring_fixed(p);
  int64_t set_bytes = set_bytes_ + fixed[0] + fixed[1] + fixed[2], base = p.values.empty() ? 0 : chunk_ * 4, slack = 0;
  const int64_t block = m_.vector_block_bytes, eb = dtype_bytes(p.out.type), ub = m_.capacity(Buffer::UB);
  if (p.mirror) {  // (as body_mirror lays out a set, and the vector instructions' reach past the last)
    const auto reach = [&](int d) { return d == p.v ? (p.box[d] + 8 * p.mirror_unit - 1) / (8 * p.mirror_unit) * 8 * p.mirror_unit : p.box[d]; };
    const int64_t sx = mirror_span(p, p.reads[0], size), sy = mirror_span(p, p.out, size);
    bytes = double((sx + sy) * eb);
    set_bytes = ((sx / p.mirror_unit * block + 1023) / 1024 + (sy / p.mirror_unit * block + 1023) / 1024) * 1024;
    slack = (mirror_span(p, p.reads[0], reach) - sx + mirror_span(p, p.out, reach) - sy) / p.mirror_unit * block;
    base = (base + 1023) / 1024 * 1024;
  } else if (!p.box.empty()) {  // a move: an element per block
    int64_t n = 1;
    for (int64_t e : p.box) n *= e;
    bytes = double(2 * n * eb);
    set_bytes = (n * block + 1023) / 1024 * 1024;
    base = (base + 1023) / 1024 * 1024;
  } else {
    for (const Access& a : p.reads)
      bytes += double((stride_of(a, p.u) ? tile(p.u) : 1) * (stride_of(a, p.v) ? tile(p.v) : 1) * dtype_bytes(a.type));
    if (!p.is_reduction()) bytes += double(tile(p.u) * tile(p.v) * eb);
  }
  const double span = double(in.latency_cycles + (p.is_reduction() && !p.mirror ? 0 : out.latency_cycles)) + bytes / bw;
  const int want = std::clamp(static_cast<int>(std::ceil(span / std::max(1.0, bytes / bw))), 2, kMaxRing);
  const auto fits = [&](int64_t sets) { return base + sets * set_bytes + slack <= ub; };
  const auto tiles = [&](int d) { return extent_of(p, d) / block_of(p, d); };
  // A ring loop of fewer tiles than the sets wanted (an upsampling's two columns inside its two
  // rows) takes in the next outer loop of two or more tiles: its own tiles, whole blocks, go
  // straight in that loop's body, each tile the next set (flat_). Outputs only (no accumulator).
  std::vector<int> flat;
  int64_t b = 1;
  int r = db_dim_;
  if (!p.is_reduction()) {
    const std::vector<int>& order = p.out_levels;
    size_t j = static_cast<size_t>(std::find(order.begin(), order.end(), r) - order.begin());
    while (j < order.size() && tiles(r) < (want + b - 1) / b && extent_of(p, r) % block_of(p, r) == 0 && b * tiles(r) <= kMaxRing &&
           fits(b * tiles(r))) {
      size_t k = j;
      int outer = -1;
      while (k-- > 0 && outer < 0) {
        if (tiles(order[k]) >= 2) outer = order[k];
        else if (extent_of(p, order[k]) != block_of(p, order[k])) break;
      }
      if (outer < 0) break;
      flat.push_back(r), b *= tiles(r), r = outer, j = k;
    }
  }
  int64_t g = std::min<int64_t>((want + b - 1) / b, std::max<int64_t>(b > 1 ? 1 : 2, tiles(r)));
  while (g > 1 && (b * g > kMaxRing || !fits(b * g))) --g;
  // A last group of fewer tiles waits out the latency once more: more sets where they make the
  // groups whole (8 tiles: 4 sets rather than 3).
  for (int64_t more = g + 1; b == 1 && g > 2 && tiles(r) % g && more <= std::min<int64_t>(kMaxRing, tiles(r)) && fits(more); ++more)
    if (tiles(r) % more == 0) g = more;
  if (b * g < 2) return 2;
  if (b > 1) db_dim_ = r, flat_ = flat, flat_tiles_ = b;
  return static_cast<int>(b * g);
}

// The loops of out_levels (output == true) then red_levels; each level: its full blocks in a
// loop (or straight when one), then its tail block.
void Nest::levels(const Plan& p, size_t i, bool output) {
  const std::vector<int>& lv = output ? p.out_levels : p.red_levels;
  if (i == lv.size()) {
    if (output && flat_tiles_ > 1) set_ = static_cast<int>(tile_++ % ring_);  // (outputs only: no accumulator)
    if (output) reduction(p);
    else body(p);
    return;
  }
  const int d = lv[i];
  const int level = static_cast<int>(output ? i : p.out_levels.size() + i);
  const uint8_t r = static_cast<uint8_t>(kLevel0 + level);
  const int64_t ext = extent_of(p, d), blk = block_of(p, d);
  const int64_t full = ext / blk, tail = ext % blk;
  Pos base;
  if (d == p.partition && cores_ > 1) base.regs.push_back({kBase, 1});
  for (size_t j = 1; j < p.core_dims.size() && cores_ > 1; ++j)
    if (p.core_dims[j] == d) base.regs.push_back({static_cast<uint8_t>(kBase + j), 1});
  size_[d] = blk;
  const bool innermost = d == db_dim_;
  if (innermost && full > 1) {  // groups of g tiles (flat_tiles_ each) cycle through the ring_ value sets
    const int64_t g = ring_ / flat_tiles_;
    // A pair (a group: ring_groups) of the body's own tiles (the levels inside one tile each) whose
    // reads are all plain moves loads both tiles before computing either: the second's GM latency runs during the
    // first's wait and compute (in program order after the first's vector work, a full vector queue
    // held its DMA back until the first tile had its data). A load with vector work would wait on
    // the vector pipe ahead of the first tile's compute, and its deferred DMA would queue behind
    // the next pair's loads, which wait for this pair's compute: such tiles keep their order.
    bool leaf = (!output || !p.is_reduction()) && !p.mirror && p.box.empty() && flat_tiles_ == 1 &&
                std::all_of(p.reads.begin(), p.reads.end(), [&](const Access& a) { return plain_move(p, a); });
    for (size_t j = i + 1; j < lv.size(); ++j) leaf = leaf && extent_of(p, lv[j]) == block_of(p, lv[j]);
    for (size_t j = 0; output && j < p.red_levels.size(); ++j) leaf = leaf && extent_of(p, p.red_levels[j]) == block_of(p, p.red_levels[j]);
    if (ring_ > 2 && leaf) {
      ring_groups(p, i, output, base, full);
    } else {
      const bool looped = full >= 2 * g;
      if (looped) op(Opcode::Loop, {reg(r), imm(0), imm(full / g), imm(1)});
      const int64_t pair = looped ? g : full;
      auto at_tile = [&](int64_t k) {
        pos_[d] = base;
        if (looped) pos_[d].regs.push_back({r, g * blk});
        pos_[d].c = k * blk;
        tile_ = k * flat_tiles_;
        set_ = static_cast<int>(tile_ % ring_);
        if (db_out_) acc_set_ = set_;
      };
      if (leaf && looped) {  // (in a loop of pairs: a lone pair before a tail measured 5 cycles slower, avg pool NHWC)
        for (const Phase ph : {Phase::Loads, Phase::Compute}) {
          phase_ = ph;
          for (int64_t k = 0; k < pair; ++k) at_tile(k), levels(p, i + 1, output);
        }
        phase_ = Phase::Both;
      } else {
        for (int64_t k = 0; k < pair; ++k) at_tile(k), levels(p, i + 1, output);
      }
      if (looped) op(Opcode::EndLoop, {});
      for (int64_t k = 0; looped && k < full % g; ++k) {  // the tiles after the last whole group
        pos_[d] = base;
        pos_[d].c = (full - full % g + k) * blk;
        tile_ = k * flat_tiles_;
        set_ = static_cast<int>(tile_ % ring_);
        if (db_out_) acc_set_ = set_;
        levels(p, i + 1, output);
      }
    }
    tile_ = full % g * flat_tiles_;  // the tail's set: the next (two sets kept set 1)
    set_ = ring_ == 2 && flat_tiles_ == 1 ? 1 : static_cast<int>(tile_ % ring_);
    if (db_out_) acc_set_ = set_;
  } else if (full > 1 && std::find(flat_.begin(), flat_.end(), d) != flat_.end()) {  // inside the ring loop: straight
    for (int64_t k = 0; k < full; ++k) {
      pos_[d] = base;
      pos_[d].c = k * blk;
      levels(p, i + 1, output);
    }
  } else if (full > 1) {
    op(Opcode::Loop, {reg(r), imm(0), imm(full), imm(1)});
    pos_[d] = base;
    pos_[d].regs.push_back({r, blk});
    levels(p, i + 1, output);
    op(Opcode::EndLoop, {});
  } else if (full == 1) {
    pos_[d] = base;
    levels(p, i + 1, output);
  }
  if (tail > 0) {
    pos_[d] = base;
    pos_[d].c = full * blk;
    size_[d] = tail;
    levels(p, i + 1, output);
  }
  if (innermost) set_ = acc_set_ = 0;
}

// The ring loop of a statement whose tiles' reads are all plain moves and whose inner levels are
// one tile each, with more than two sets: groups of ring_ tiles (tile t in set t % ring_), each
// group's loads before its computes (as a pair's, levels), in a loop where there are two groups or
// more, the rest straight. (Loads ring_ - 1 tiles ahead of each compute, as the row pipeline
// does, measured slower on the reductions: the pruned syncs made a tile's compute wait for the
// latest load, not its own.)
void Nest::ring_groups(const Plan& p, size_t i, bool output, const Pos& base, int64_t full) {
  const std::vector<int>& lv = output ? p.out_levels : p.red_levels;
  const int d = lv[i];
  const uint8_t r = static_cast<uint8_t>(kLevel0 + (output ? i : p.out_levels.size() + i));
  const int64_t blk = block_of(p, d), s = ring_;
  auto tile = [&](int64_t t, bool looped, Phase ph) {
    pos_[d] = base;
    if (looped) pos_[d].regs.push_back({r, s * blk});
    pos_[d].c = t * blk;
    set_ = static_cast<int>(t % s);
    if (db_out_) acc_set_ = set_;
    phase_ = ph;
    levels(p, i + 1, output);
  };
  const int64_t groups = full >= 2 * s ? full / s : 0;  // looped groups of s tiles, the rest straight
  if (groups > 0) {
    op(Opcode::Loop, {reg(r), imm(0), imm(groups), imm(1)});
    for (const Phase ph : {Phase::Loads, Phase::Compute})
      for (int64_t j = 0; j < s; ++j) tile(j, true, ph);
    op(Opcode::EndLoop, {});
  }
  for (int64_t g0 = groups * s; g0 < full; g0 += s)
    for (const Phase ph : {Phase::Loads, Phase::Compute})
      for (int64_t t = g0; t < std::min(full, g0 + s); ++t) tile(t, false, ph);
  phase_ = Phase::Both;
}

double Nest::identity(const Plan& p) const {
  const bool fl = dtype_is_float(p.out.type);
  switch (p.s->reduction) {
    case ir::Reduction::Max: return fl ? -INFINITY : double(std::numeric_limits<int32_t>::min());
    case ir::Reduction::Min: return fl ? INFINITY : double(std::numeric_limits<int32_t>::max());
    case ir::Reduction::Prod: return 1;
    default: return 0;
  }
}

Opcode Nest::combine_op(const Plan& p) const {
  switch (p.s->reduction) {
    case ir::Reduction::Max: return Opcode::Vmax;
    case ir::Reduction::Min: return Opcode::Vmin;
    case ir::Reduction::Prod: return Opcode::Vmul;
    default: return Opcode::Vadd;
  }
}

void Nest::store_acc(const Plan& p, bool to_ub) {
  const bool narrow = p.out.type != compute_type(p.out.type);  // through part() in the output type
  const int64_t n = acc_elements(p), ub = narrow ? part() : acc();
  const Value total{false, 0, acc(), compute_type(p.out.type)}, staged{false, 0, part(), p.out.type};
  const bool wraps = p.s->reduction == ir::Reduction::Sum || p.s->reduction == ir::Reduction::Prod;
  // An i8 sum or product accumulated in i32 wraps (modulo 256 commutes with both; vconv to i8 would
  // saturate: issue 31); a u8 result goes out as its i8 bit pattern. In place (the accumulator is
  // initialised or reloaded before its next use), part() holding the constant 256.
  if (narrow && !to_ub && !dtype_is_float(p.out.type) && (wraps || p.out.type == DType::U8)) wrap(total, total, -128, constant_256(n, part()), n);
  if (narrow && !to_ub) convert(staged, total, n);
  if (p.out_dim(p.v))
    move(to_ub, p, p.out, ub, acc_rows(p), cur(p.v), p.pitch, p.out_dim(p.u) ? stride_of(p.out, p.u) : 0, stride_of(p.out, p.v));
  else
    move(to_ub, p, p.out, ub, acc_rows(p), 1, 1, p.out_dim(p.u) ? stride_of(p.out, p.u) : 0, 0);
  if (narrow && to_ub) convert(total, staged, n, part());  // (the u8 bytes are read before part() is overwritten)
}

// After the output levels: a reduction initialises the accumulator, runs its loops, stores it.
void Nest::reduction(const Plan& p) {
  if (!p.is_reduction() || p.mirror) {  // a mirrored tile reduces its whole window itself
    levels(p, 0, false);
    return;
  }
  if (p.s->init) {
    const DType t = compute_type(p.out.type);
    op(Opcode::Vdup, {type(t), at(Buffer::UB, acc()), Operand::float_(identity(p)), imm(repeats(acc_elements(p), t)), imm(1),
                      imm(repeat_blocks_)});
  } else {
    store_acc(p, true);
  }
  levels(p, 0, false);
  store_acc(p, false);
}

// One tile of a data move (plan_move): every element in a UB block of its own, at its position in
// the box's dense output order; one dma_in per run of the read along its unit-stride dimension u
// (UB side strided by that dimension's blocks), one dma_out per run of the output contiguous in GM
// and in UB (the box's leading output-order dimensions, while whole).
void Nest::body_move(const Plan& p) {
  const int64_t block = m_.vector_block_bytes, eb = dtype_bytes(p.out.type);
  const std::vector<int64_t> local = move_local(p);
  int64_t n = 1;
  for (int64_t e : p.box) n *= e;
  const int64_t set_bytes = (n * block + 1023) / 1024 * 1024;
  const int64_t base = (body_base_ + 1023) / 1024 * 1024 + set_ * set_bytes;
  TESSEL_CHECK(base + set_bytes <= m_.capacity(Buffer::UB), "nest: a move's box exceeds UB");
  const auto size = [&](int d) { return cur(d); };
  // One DMA per combination of the dimensions outside its run (their current sizes): (UB block, GM element offset).
  auto each = [&](const std::vector<int>& run, const Access& a, const std::function<void(int64_t, int64_t)>& f) {
    std::vector<int> dims;
    for (int d = 0; d < static_cast<int>(p.dims.size()); ++d)
      if (std::find(run.begin(), run.end(), d) == run.end() && cur(d) > 1) dims.push_back(d);
    std::vector<int64_t> t(dims.size(), 0);
    for (;;) {
      int64_t ub = 0, gm = 0;
      for (size_t j = 0; j < dims.size(); ++j) ub += local[dims[j]] * t[j], gm += a.stride[dims[j]] * t[j];
      f(ub, gm);
      size_t j = 0;
      for (; j < dims.size() && ++t[j] == cur(dims[j]); ++j) t[j] = 0;
      if (j == dims.size()) return;
    }
  };
  auto length = [&](const std::vector<int>& run) {
    int64_t len = 1;
    for (int d : run) len *= cur(d);
    return len;
  };
  const Access& x = p.reads[0];
  const std::vector<int> in = move_run(p, x, p.u, size), out = move_run(p, p.out, p.v, size);
  const Operand gx = gm_operand(p, x, 0);
  each(in, x, [&](int64_t ub, int64_t gm) {
    Operand g = gx;
    g.imm += gm * eb;
    op(Opcode::DmaIn, {at(Buffer::UB, base + ub * block), g, imm(length(in)), imm(eb), imm(0), imm(local[p.u] * block - eb)});
  });
  const Operand gy = gm_operand(p, p.out, 0);
  each(out, p.out, [&](int64_t ub, int64_t gm) {
    Operand g = gy;
    g.imm += gm * eb;
    op(Opcode::DmaOut, {g, at(Buffer::UB, base + ub * block), imm(length(out)), imm(eb), imm(block - eb), imm(0)});
  });
}

// One mirrored tile (plan_mirror): the read's span to UB and the output's span back, one DMA each
// (every element in a block of its own at its GM offset from the tile's first); between them per
// element of the window (the reduction dimensions, ascending) and per combination of the box's
// other output dimensions, one instruction per 8 elements of v (lane mask on a last partial group)
// over the repeats of u, its block and repeat strides the two tensors' GM strides: max / min /
// add into the output's blocks (set to the identity first), or a copy (x 1) for a move.
void Nest::body_mirror(const Plan& p) {
  const int64_t block = m_.vector_block_bytes, eb = dtype_bytes(p.out.type), lpb = block / eb, unit = p.mirror_unit;
  const Access& x = p.reads[0];
  const Access& y = p.out;
  const DType t = y.type;
  const auto box = [&](int d) { return p.box[d]; };
  const auto size = [&](int d) { return p.dims[d].reduction ? p.box[d] : cur(d); };
  const int64_t round = 1024;
  const int64_t xbytes = (mirror_span(p, x, box) / unit * block + round - 1) / round * round;
  const int64_t ybytes = (mirror_span(p, y, box) / unit * block + round - 1) / round * round;
  const int64_t xb = (body_base_ + round - 1) / round * round + set_ * (xbytes + ybytes), yb = xb + xbytes;
  TESSEL_CHECK(yb + ybytes <= m_.capacity(Buffer::UB), "nest: a mirrored tile exceeds UB");
  const int64_t sx = mirror_span(p, x, size), sy = mirror_span(p, y, size);  // elements (dense: whole blocks)
  // sparse: an element per block, bursts of one element; dense: the span as one burst
  auto span_move = [&](bool in, const Operand& gm, int64_t ub, int64_t n) {
    const bool sparse = unit == 1;
    const Operand u = at(Buffer::UB, ub);
    const int64_t nb = sparse ? n : 1, burst = sparse ? eb : n * eb, gap = sparse ? block - eb : 0;
    if (in) op(Opcode::DmaIn, {u, gm, imm(nb), imm(burst), imm(0), imm(gap)});
    else op(Opcode::DmaOut, {gm, u, imm(nb), imm(burst), imm(gap), imm(0)});
  };
  span_move(true, gm_operand(p, x, 0), xb, sx);
  const int64_t yblocks = sy / unit;
  if (p.is_reduction())
    for (int64_t done = 0; done < (yblocks + 7) / 8; done += max_repeat_)
      op(Opcode::Vdup, {type(t), at(Buffer::UB, yb + done * 8 * block), Operand::float_(identity(p)),
                        imm(std::min(max_repeat_, (yblocks + 7) / 8 - done)), imm(1), imm(8)});
  std::vector<int> dims;  // every dimension but v and u: reductions outermost, ascending
  for (int d = 0; d < static_cast<int>(p.dims.size()); ++d)
    if (d != p.v && d != p.u && size(d) > 1 && p.dims[d].reduction) dims.push_back(d);
  for (int d = 0; d < static_cast<int>(p.dims.size()); ++d)
    if (d != p.v && d != p.u && size(d) > 1 && !p.dims[d].reduction) dims.push_back(d);
  const Opcode o = p.is_reduction() ? combine_op(p) : Opcode::Vmuls;
  // strides in blocks (dense: v's blocks one apart, the others' element strides whole blocks)
  const int64_t sxv = unit == 1 ? x.stride[p.v] : 1, syv = unit == 1 ? y.stride[p.v] : 1;
  const int64_t sxu = p.u >= 0 ? x.stride[p.u] / unit : 0, syu = p.u >= 0 ? y.stride[p.u] / unit : 0;
  const int64_t reps = p.u >= 0 ? cur(p.u) : 1, nv = cur(p.v) / unit;
  std::vector<int64_t> k(dims.size(), 0);
  for (;;) {
    int64_t xo = 0, yo = 0;
    for (size_t j = 0; j < dims.size(); ++j) xo += x.stride[dims[j]] / unit * k[j], yo += y.stride[dims[j]] / unit * k[j];
    for (int64_t g0 = 0; g0 < nv; g0 += 8) {
      const int64_t n = std::min<int64_t>(8, nv - g0);
      if (n < 8) {
        uint64_t lo = 0, hi = 0;
        for (int64_t l = 0; l < n * lpb; ++l) (l < 64 ? lo : hi) |= uint64_t{1} << (l % 64);
        op(Opcode::SetVectorMask, {imm(static_cast<int64_t>(hi)), imm(static_cast<int64_t>(lo))});
      }
      for (int64_t r0 = 0; r0 < reps; r0 += max_repeat_) {
        const int64_t xa = xb + (xo + g0 * sxv + r0 * sxu) * block, ya = yb + (yo + g0 * syv + r0 * syu) * block;
        const int64_t rep = std::min(max_repeat_, reps - r0);
        if (o == Opcode::Vmuls)
          op(o, {type(t), at(Buffer::UB, ya), at(Buffer::UB, xa), Operand::float_(1), imm(rep), imm(syv), imm(sxv), imm(syu), imm(sxu)});
        else
          op(o, {type(t), at(Buffer::UB, ya), at(Buffer::UB, ya), at(Buffer::UB, xa), imm(rep), imm(syv), imm(syv), imm(sxv),
                 imm(syu), imm(syu), imm(sxu)});
      }
      if (n < 8) op(Opcode::SetVectorMask, {imm(-1), imm(-1)});
    }
    size_t j = dims.size();
    while (j-- > 0) {
      if (++k[j] < size(dims[j])) break;
      k[j] = 0;
    }
    if (j == static_cast<size_t>(-1)) break;
  }
  span_move(false, gm_operand(p, y, 0), yb, sy);
}

// One tile: load every access, evaluate, reduce within the tile, combine or store.
void Nest::body(const Plan& p) {
  if (p.mirror) {
    body_mirror(p);
    return;
  }
  if (!p.box.empty()) {
    body_move(p);
    return;
  }
  if (phase_ != Phase::Compute) body_loads(p);
  if (phase_ != Phase::Loads) body_compute(p);
}

// A tile's loads into its value set (kept for body_compute of the same set).
void Nest::body_loads(const Plan& p) {
  next_region_ = body_base_ + set_ * set_bytes_;
  loaded_.clear();
  rowval_slot_ = 0;
  rowwise_ = rows_tile(p);
  for (const Access& a : p.reads) loaded_.push_back(load(p, a, cur(p.u), cur(p.v)));
  rowwise_ = false;
  set_loads_[set_] = {loaded_, next_region_};
}

// A tile's values stay within its value set (count_regions sized the sets), the last set within UB.
void Nest::check_set_bounds() const {
  TESSEL_CHECK(next_region_ <= body_base_ + (set_ + 1) * set_bytes_, "nest: a tile's values exceed its value set");
  TESSEL_CHECK(region_base_ + next_region_ <= m_.capacity(Buffer::UB), "nest: a tile's values exceed UB");
}

// The tile's value and its store or reduction, from the loads body_loads left in the set.
void Nest::body_compute(const Plan& p) {
  const int64_t rows = cur(p.u), cols = cur(p.v), n = rows * p.pitch;
  loaded_ = set_loads_[set_].first;
  next_region_ = set_loads_[set_].second;
  memo_.clear();
  rowwise_ = rows_tile(p);
  Value x = compile(*p.s->rhs, n);
  rowwise_ = false;
  x = vector_of(x, n);
  if (x.type != compute_type(p.out.type)) {
    Value y{false, 0, fresh_region(), compute_type(p.out.type)};
    convert(y, x, n);
    x = y;
  }
  if (!p.is_reduction()) {
    x = narrowed(x, p.out.type, n);
    check_set_bounds();
    move(false, p, p.out, x.region, rows, cols, p.pitch, stride_of(p.out, p.u), stride_of(p.out, p.v));
    return;
  }
  check_set_bounds();
  const DType t = x.type;
  const int eb = dtype_bytes(t);
  const Opcode o = combine_op(p);
  int64_t left = rows;
  // a bf16 sum or product, accumulated in f32: rounded to bf16 after every step (the interpreter's),
  // to bf16 in part() and back by the description's conversions
  const bool bf16_steps = p.out.type == DType::BF16 && (p.s->reduction == ir::Reduction::Sum || p.s->reduction == ir::Reduction::Prod);
  const auto rounded = [&](const Value& v, int64_t count) {
    if (!bf16_steps) return;
    convert(Value{false, 0, part(), DType::BF16}, v, count);
    convert(v, Value{false, 0, part(), DType::BF16}, count);
  };
  if (p.red(p.u) && !p.red(p.v) && (p.s->reduction == ir::Reduction::Prod || (p.s->reduction == ir::Reduction::Sum && (eb == 2 || bf16_steps)))) {
    // a product or an f16 / bf16 sum rounds after every step: each row straight into the accumulator,
    // in the interpreter's order (rows folded into the first row first would reassociate it)
    for (int64_t r = 0; r < rows; ++r) {
      binary(o, Value{false, 0, acc(), t}, Value{false, 0, acc(), t}, Value{false, 0, x.region + r * p.pitch * eb, t}, p.pitch);
      rounded(Value{false, 0, acc(), t}, p.pitch);
    }
    return;
  }
  TESSEL_CHECK(!bf16_steps || !p.red(p.v), "nest: a bf16 sum reduced along the lanes (lane_dim keeps it off them)");
  if (p.red(p.u)) {  // rows in ascending order into row 0
    for (int64_t r = 1; r < rows; ++r)
      binary(o, x, x, Value{false, 0, x.region + r * p.pitch * eb, t}, p.pitch);
    left = 1;
  }
  const Value total{false, 0, acc(), t};
  if (!p.red(p.v)) {
    binary(o, total, total, x, left * p.pitch);
    rounded(total, left * p.pitch);
    return;
  }
  lanes(p, x, left, cols);
  binary(o, total, total, Value{false, 0, part(), t}, left);
}

// Reduces each of `rows` rows of x (cols valid lanes) to one element at part()[r]; folds into
// `scratch` when given (x is then only read, but for its lanes past cols, set to the identity).
void Nest::lanes(const Plan& p, const Value& x, int64_t rows, int64_t cols, int64_t scratch) {
  const DType t = x.type;
  const int64_t w = m_.vector_lanes(t), k = p.pitch / w, rep = k * repeat_blocks_;
  const double id = identity(p);
  const int64_t j0 = cols / w, lane0 = cols % w;
  if (lane0 > 0) {
    uint64_t lo = 0, hi = 0;
    for (int64_t l = lane0; l < w; ++l) {
      const int64_t bit = l % m_.vector_mask_bits;
      (bit < 64 ? lo : hi) |= uint64_t{1} << (bit % 64);
    }
    op(Opcode::SetVectorMask, {imm(static_cast<int64_t>(hi)), imm(static_cast<int64_t>(lo))});
    op(Opcode::Vdup, {type(t), at(Buffer::UB, x.region + j0 * bytes_per_repeat_), Operand::float_(id), imm(rows), imm(1), imm(rep)});
    op(Opcode::SetVectorMask, {imm(-1), imm(-1)});
  }
  for (int64_t j = j0 + (lane0 > 0 ? 1 : 0); j < k; ++j)
    op(Opcode::Vdup, {type(t), at(Buffer::UB, x.region + j * bytes_per_repeat_), Operand::float_(id), imm(rows), imm(1), imm(rep)});
  const Opcode o = combine_op(p);
  const int64_t dst = scratch >= 0 ? scratch : x.region;
  int64_t src = x.region;  // where the rows' remaining repeats are
  auto copy = [&](int64_t j) {  // repeat j of every row from src to dst
    op(Opcode::Vmuls, {type(t), at(Buffer::UB, dst + j * bytes_per_repeat_), at(Buffer::UB, src + j * bytes_per_repeat_),
                       Operand::float_(1), imm(rows), imm(1), imm(1), imm(rep), imm(rep)});
  };
  for (int64_t c = k; c > 1;) {  // fold a row's repeats pairwise into its first
    const int64_t h = c / 2;
    if (rows == 1) {
      vop(o, t, dst, src, src + (c - h) * bytes_per_repeat_, h, repeat_blocks_);
    } else {
      for (int64_t j = 0; j < h; ++j)
        vop(o, t, dst + j * bytes_per_repeat_, src + j * bytes_per_repeat_, src + (c - h + j) * bytes_per_repeat_, rows, rep);
    }
    if (dst != src)
      for (int64_t j = h; j < c - h; ++j) copy(j);  // the odd repeat stays
    src = dst;
    c -= h;
  }
  if (p.s->reduction == ir::Reduction::Prod) return lanes_product(t, src, rows, rep);
  const bool min = p.s->reduction == ir::Reduction::Min;
  if (min) {
    op(Opcode::Vmuls, {type(t), at(Buffer::UB, dst), at(Buffer::UB, src), Operand::float_(-1), imm(rows), imm(1), imm(1), imm(rep), imm(rep)});
    src = dst;
  }
  const Opcode r = p.s->reduction == ir::Reduction::Sum ? Opcode::Vcadd : Opcode::Vcmax;
  op(r, {type(t), at(Buffer::UB, part()), at(Buffer::UB, src), imm(rows), imm(1), imm(rep)});
  if (min) with_scalar(Opcode::Vmuls, Value{false, 0, part(), t}, Value{false, 0, part(), t}, -1, rows);
}

// A product along the lanes: the unit has no cross-lane product (vcadd / vcmax serve sums and
// maxima), so each row's one folded repeat at src (rows rep blocks apart) is halved block-wise
// (masked vmul, out of place into a scratch region s) into one block, the rows' blocks side by side
// at s; vbrcb gives each of those elements a block of its own (in place: chunks from the last, each
// reading its elements before writing), so a row is lanes-per-block blocks, multiplied into one
// block whose lanes all hold the row's product; vcmax over lane 0 alone moves it to part()[r]. The
// order is a tree, as a sum's vcadd is; f16 products keep their reductions off the lanes
// (lane_dim), so only f32 and integer products (exact: wrapping) take this.
void Nest::lanes_product(DType t, int64_t src, int64_t rows, int64_t rep) {
  const int64_t block = m_.vector_block_bytes, eb = dtype_bytes(t), lpb = block / eb;
  TESSEL_CHECK(rows <= max_repeat_ && repeat_blocks_ >= 2 && (repeat_blocks_ & (repeat_blocks_ - 1)) == 0,
               "nest: a product along the lanes needs at most max_repeat rows and a power-of-two count of blocks per repeat");
  // rows x lpb blocks (<= a region: pitch >= the lanes of a repeat); counted by count_regions, and
  // by the row pipeline's sizing, which emits a block to measure it
  const int64_t s = fresh_region();
  // halvings in the rows' layout, the last one packing the rows (row r's write, block r, is at or
  // before its own reads and after every later row's: no later repeat reads what an earlier wrote)
  for (int64_t h = repeat_blocks_ / 2, from = src; h >= 1; h /= 2, from = s) {
    mask_lanes(h * lpb);
    op(Opcode::Vmul, {type(t), at(Buffer::UB, s), at(Buffer::UB, from), at(Buffer::UB, from + h * block), imm(rows), imm(1), imm(1),
                      imm(1), imm(h > 1 ? rep : 1), imm(rep), imm(rep)});
  }
  const int64_t n = rows * lpb, most = max_repeat_ / lpb * lpb;  // a chunk's elements start on a block
  mask_lanes(lpb);
  for (int64_t c0 = (n - 1) / most * most; c0 >= 0; c0 -= most)
    op(Opcode::Vbrcb, {type(t), at(Buffer::UB, s + c0 * block), at(Buffer::UB, s + c0 * eb), imm(std::min(most, n - c0)), imm(1), imm(1)});
  mask_lanes(m_.vector_lanes(t));
  const int64_t bpr = bytes_per_repeat_, per_row = lpb * block / bpr;  // repeats per row
  for (int64_t c = per_row; c > 1;) {
    const int64_t h = c / 2;
    for (int64_t j = 0; j < h; ++j) vop(Opcode::Vmul, t, s + j * bpr, s + j * bpr, s + (c - h + j) * bpr, rows, lpb);
    c -= h;
  }
  for (int64_t h = repeat_blocks_ / 2; h >= 1; h /= 2) {
    mask_lanes(h * lpb);
    vop(Opcode::Vmul, t, s, s, s + h * block, rows, lpb);
  }
  mask_lanes(1);
  op(Opcode::Vcmax, {type(t), at(Buffer::UB, part()), at(Buffer::UB, s), imm(rows), imm(1), imm(lpb)});
  op(Opcode::SetVectorMask, {imm(-1), imm(-1)});
}

// The first n lanes of a repeat (n <= the mask's bits).
void Nest::mask_lanes(int64_t n) {
  uint64_t lo = 0, hi = 0;
  for (int64_t l = 0; l < n; ++l) (l < 64 ? lo : hi) |= uint64_t{1} << (l % 64);
  op(Opcode::SetVectorMask, {imm(static_cast<int64_t>(hi)), imm(static_cast<int64_t>(lo))});
}

void Nest::vop(Opcode o, DType t, int64_t dst, int64_t a, int64_t b, int64_t repeat, int64_t rep) {
  op(o, {type(t), at(Buffer::UB, dst), at(Buffer::UB, a), at(Buffer::UB, b), imm(repeat), imm(1), imm(1), imm(1), imm(rep),
         imm(rep), imm(rep)});
}

}  // namespace tessel::emit_npu::nest

namespace tessel::emit_npu {

std::string why_not_nest(const kernel::Kernel& kernel, const isa::NpuMachine& machine) {
  return nest::Nest(kernel, machine).why_not_message();
}

std::string why_not_nest(const kernel::Kernel& kernel, const isa::NpuMachine& machine, double max_issued) {
  return nest::Nest(kernel, machine, max_issued).why_not_message();
}

int row_pipeline_cores(const kernel::Kernel& kernel, const isa::NpuMachine& machine) {
  return nest::Nest(kernel, machine).row_pipeline_cores();
}

NpuKernel emit_nest(const kernel::Kernel& kernel, const isa::Hierarchy& target) {
  if (auto split = emit_split_reductions(kernel, target)) return std::move(*split);
  return emit_nest_phase(kernel, target);
}

NpuKernel emit_nest_phase(const kernel::Kernel& kernel, const isa::Hierarchy& target) {
  return nest::Nest(kernel, isa::npu_machine(target)).emit();
}

}  // namespace tessel::emit_npu
