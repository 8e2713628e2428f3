// The general NPU vector lowering's plan (nest.h states the lowering's contract): what the
// analysis of nest_plan.cc decides for each statement and the other parts carry out. A statement
// is loops over its index dimensions (Dim, after divided indices are split and walked-as-one
// dimensions coalesced); every access is an element offset plus a stride per dimension (Access);
// the Plan records the tile dimensions u (rows) and v (lanes), the tile rows x cols of rows x pitch,
// the loop order and the partition over cores. Pos is where a dimension's current tile starts
// while code is emitted. Also the registers the emitted code uses and the lowering's limits (none
// of them a hardware number: those come from the machine model).
// Internal to compiler/emit_npu/nest*.cc.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "compiler/emit_npu/pointwise.h"

namespace tessel::emit_npu::nest {

using npu::Buffer;
using npu::Opcode;
using npu::Operand;

// Registers: level i of a statement counts its blocks in r(kLevel0 + i); the core's first row of
// the partition dimension is kBase (of core axis j: kBase + j, j < kMaxCoreAxes); kAddr / kTmp build GM addresses; kOnce runs the last core's range.
constexpr uint8_t kLevel0 = 1, kBase = 16, kAddr = 20, kTmp = 21, kOnce = 22, kCoreLoop = 23;
// The row pipeline: core 0 alone stores what the once-per-core statements write (kFirst = core_id == 0).
constexpr uint8_t kFirst = 24, kFirstLoop = 25;
constexpr int kMaxLevels = 14;
constexpr int kMaxCoreAxes = 4;  // kBase .. kBase + 3, below kAddr
// not hardware: the longest program (instructions issued per core) the lowering produces, so a
// contraction refused by the cube cannot turn into an hours-long simulation.
constexpr double kMaxIssued = 1 << 23;
// not hardware: the fewest blocks of rows a core's share is cut into where it can be (the first
// block's load and the last one's store are not overlapped: 1/kMinBlocks of the time at most).
constexpr int64_t kMinBlocks = 8;
// Value sets a tile loop alternates: two (double buffering), three in the row pipeline where a
// block's vector work is shorter than a load's latency (its loads then run two blocks ahead).
constexpr int kMaxSets = 3;
// not hardware: the most value sets a statement's innermost tile loop cycles through (nest.cc
// ring_sets: enough tiles in flight to cover the GM latencies; the loop body holds that many tiles).
constexpr int kMaxRing = 8;
// not hardware: another lane dimension replaces the most contiguous one only where its tiles are
// estimated at most this share of the time (a clear win; the estimate is a roofline, not a schedule).
constexpr double kClearWin = 0.5;
// not hardware: a data move through UB blocks reloads a read that stays along some output
// dimensions (an upsampling) at most this many times.
constexpr int64_t kMaxMoveReloads = 4;
// not hardware: the weight of a DMA in the move's estimate beyond the bound it sets (a tie-break).
constexpr double kDmaTieBreak = 0.01;
constexpr int kFixedRegions = 1;  // the index sequence (accumulators, partials, row values: per value set)

struct Dim {
  std::string name;
  int64_t lo = 0, extent = 1;
  bool reduction = false;
};

// Element offset of an access at relative positions t_d (0 <= t_d < extent_d) of the dimensions:
// offset + sum(stride[d] * t_d).
struct Access {
  std::string tensor;
  DType type = DType::F32;
  int64_t offset = 0;
  std::vector<int64_t> stride;
  bool operator==(const Access& o) const { return tensor == o.tensor && offset == o.offset && stride == o.stride; }
};

// One statement's loops and tile (nest.h).
struct Plan {
  const ir::Statement* s = nullptr;
  std::vector<Dim> dims;
  Access out;
  std::vector<Access> reads;               // distinct accesses
  std::map<const ir::Expr*, int> read_of;  // access node -> index in reads
  std::map<const ir::Expr*, Access> values;  // index used as a value: offset + sum(stride_d * t_d)
  // An index divided by a constant d (floor((i + c) / d), (i + c) % d) is split into two
  // dimensions, i = lo + d * hi + low: the quotient moves with hi, the remainder is low.
  struct Split {
    int hi = -1, low = -1;
    int64_t divisor = 1, lo = 0;
  };
  std::map<std::string, Split> splits;
  int u = -1, v = -1;                      // tile dimensions (rows, lanes); -1: none
  int64_t rows = 1, cols = 1, pitch = 1;   // full tile: rows x cols used of rows x pitch
  std::vector<int> out_levels, red_levels; // dimensions in loop order (u and v innermost)
  int partition = -1;                      // the dimension split over cores (out_levels[0])
  std::vector<int> core_dims;              // a core grid's axes (partition first; nest_cores.cc), else empty
  // A data move through UB blocks (Nest::plan_move): the tile is a box over the dimensions (box[d]
  // elements of d), each element in a UB block of its own at its dense output-order position, so a
  // load runs along the read's unit-stride dimension and a store along the output's, both
  // contiguous in GM. Empty: the rows x pitch tile.
  std::vector<int64_t> box;
  // With a box: the tile in UB as GM lays it out (Nest::plan_mirror), one element per block: the
  // read's span and the output's span each moved by one DMA, the window's reduction (or the copy)
  // done by vector instructions whose block and repeat strides are the GM strides along v and u.
  bool mirror = false;
  int64_t mirror_unit = 1;  // elements per UB block: 1, or a block of a dimension both walk with unit stride (dense)
  int64_t unit = 64;                       // pitch granule: one repeat of the narrowest type
  int regions = 0, body_regions = 0;  // all values of a tile (both sets), one set's
  int row_values = 0;  // one set's values per row of the tile (one repeat per row each, not in body_regions)
  bool is_reduction() const { return s->reduction != ir::Reduction::None; }
  bool red(int d) const { return d >= 0 && dims[d].reduction; }
  bool out_dim(int d) const { return d >= 0 && !dims[d].reduction; }
};

// Where a dimension's current tile starts (an element index relative to its lo): c + sum(reg * mul).
struct Pos {
  int64_t c = 0;
  std::vector<std::pair<uint8_t, int64_t>> regs;
};

// The vector unit has no i8 or u8 arithmetic: such values are computed in i32 (wrapped to the
// type's range after each operation, the language's semantics) and narrowed by vconv when stored
// (u8 as its i8 bit pattern: the copies move bytes).
inline bool narrow_int(DType t) { return t == DType::I8 || t == DType::U8; }
// bf16 has no arithmetic either (the DaVinci descriptions list only its conversions to and from
// f32): computed in f32, a sum or product rounded back to bf16 after every step (Nest::body_compute).
inline DType compute_type(DType t) { return narrow_int(t) ? DType::I32 : t == DType::BF16 ? DType::F32 : t; }
// A reversed read is gathered an element per UB block and packed by vcmax, which has no 1-byte type
// and no bf16: such elements are gathered a byte per block and packed through i32 (exact on any
// bits). The gather's scratch (and widened copy) then take a region per byte of the element.
inline bool gathered_bytewise(DType t) { return dtype_bytes(t) == 1 || t == DType::BF16; }
inline int gather_span(DType t) { return gathered_bytewise(t) ? dtype_bytes(t) : 1; }

}  // namespace tessel::emit_npu::nest
