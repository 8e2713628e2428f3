// What the window emitters over channel-last maps share (window_max.h, window_sum.h): the read of a
// window and the tile schedule of its program on the vector unit.
//   The read: a statement Y(n, p, q, c) = reduce X(n, sh * p + r + oh, sw * q + t + ow, c) (n may be
// absent: a 3-d kernel), its output indices plain, every index from 0, r and t windows of dilation 1
// (reductions, each at most once, either may be absent), X an input of Y's rank with C channels.
// match_read() takes the statement's indices (unit: only sh = sw = 1 and oh = ow = 0, the message
// naming stride-1 windows), bind_input() X's shape; each returns "" or why not, never throws.
//   The schedule: a kernel of `tiles` tiles in equal runs over the cores (the last run shorter),
// each core's run as a pipeline of two value sets (tile i + 1 loads while tile i computes: a loop
// over pairs, then the last one or two in straight code). The emitter gives load() and compute();
// registers kCoreLoop .. kTile are the schedule's, its own start at kFirstFree.
// Part of compiler/emit_npu; it emits nothing by itself.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "compiler/emit_npu/pointwise.h"

namespace tessel::emit_npu {

class WindowPlan : public VectorCode {
 public:
  WindowPlan(const kernel::Kernel& k, const isa::NpuMachine& m) : VectorCode(k, m) {}

 protected:
  enum WindowReg : uint8_t { kCoreLoop = 1, kBase, kPair, kTile, kFirstFree };

  // The read x of statement s: X_, lead_, outs_, N_, P_, Q_, C_ (the output's extents), KH_, KW_
  // and (strided) sh_, sw_, oh_, ow_.
  std::string match_read(const ir::Statement& s, const ir::Expr& x, bool strided);
  // X's shape against the read: Hin_, Win_ and out_shape_ (Y's shape).
  std::string bind_input();
  // x's divisors, ascending.
  static std::vector<int64_t> divisors(int64_t x);

  // The program: `tiles` tiles over the cores from kBase, `setup` (code every core runs first)
  // before them, a barrier after; `note(cores, tiles per core)` its mapping note. `tmp`: a
  // scratch register of the emitter's.
  NpuKernel emit_window(int64_t tiles, uint8_t tmp, const std::function<void()>& setup,
                        const std::function<std::string(int, int64_t)>& note);
  // Tile d of the pipeline into value set `set` (d from kBase, or from kBase + 2 * kPair in the loop).
  virtual void load(bool in_loop, int64_t d, int64_t set) = 0;
  virtual void compute(bool in_loop, int64_t d, int64_t set) = 0;
  // kTile = kBase + 2 * kPair + d (in the pair loop) or kBase + d.
  void tile_index(bool in_loop, int64_t d);

  std::string X_;
  int lead_ = 0;  // 1 for a 3-d kernel: dimension d of X and Y has role d + lead_ in (n, p, q, c)
  std::vector<std::string> outs_;
  int64_t N_ = 0, P_ = 0, Q_ = 0, C_ = 0, KH_ = 1, KW_ = 1, sh_ = 1, sw_ = 1, oh_ = 0, ow_ = 0, Hin_ = 0, Win_ = 0;
  std::vector<int64_t> out_shape_;
  std::map<std::string, int64_t> gm_;  // each bound tensor's GM offset

 private:
  // `count` tiles from kBase through two value sets.
  void emit_tiles(int64_t count);
};

}  // namespace tessel::emit_npu
