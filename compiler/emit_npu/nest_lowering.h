// The general NPU vector lowering as one object (nest.h states its contract): class Nest holds
// the kernel's statement plans (nest_plan.h) and the state of the code being emitted, and its
// methods are defined by concern in five files:
//   nest_plan.cc      the analysis: each statement modelled as loops and accesses, zero-padded
//                     copies, the tile (u, v, rows x pitch) and the
//                     bounds that refuse a kernel (why_not: "" or why, never throwing);
//   nest_cores.cc     which parallel loops go to cores: the rows of one output index, or a grid
//                     of several leading ones (share per core, each core's first indices);
//   nest_values.cc    GM <-> UB moves, the loads of a tile and the expression compiler (values in
//                     UB regions, equal subexpressions once, values per row in the pipeline);
//   nest_pipeline.cc  the row pipeline: chosen (try_fused), sized by emitting a block into a
//                     throwaway program, and emitted per core (prologue, hoisted reads, blocks in
//                     S value sets with their loads ahead);
//   nest.cc           the driver: the program, GM binding, padded copies, the split over cores and
//                     the statement-by-statement loop nests (levels, reductions, double buffering),
//                     and the entry points of nest.h.
// why_not decides everything emit carries out: emit calls it first and throws its reason.
// Internal to compiler/emit_npu/nest*.cc.
#pragma once

#include <array>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "compiler/emit_npu/nest_plan.h"

namespace tessel::emit_npu::nest {

class Nest : public VectorCode {
 public:
  Nest(const kernel::Kernel& k, const isa::NpuMachine& m, double max_issued = kMaxIssued)
      : VectorCode(k, m), max_issued_(max_issued) {}
  std::string why_not();
  std::string why_not_message() { return message(why_not(), "general vector lowering"); }
  int row_pipeline_cores() { return why_not().empty() && fz_.on ? cores_ : 0; }
  NpuKernel emit();

 private:
  // The linear form of an index expression over the plan's dimensions: k + sum(c[d] * t_d).
  struct Lin {
    std::vector<int64_t> c;
    int64_t k = 0;
  };
  // What a plan is in the pipeline: once per core over the lanes, over blocks of rows and the lanes,
  // over blocks of rows only.
  enum class Role { Prologue, Row, PerRow };
  // Where a result stays in UB: R x pitch (a row tile), R values (one per row), pitch values (one
  // per lane, the same for every row).
  enum class Layout { Row, PerRow, PerLane };
  struct Resident {
    Value v;
    Layout layout = Layout::Row;
    int64_t offset = 0, su = 0, sv = 0;  // the producer's output access (element offset, strides)
  };
  struct Fused {
    bool on = false;
    int prologue = 0;                   // statements [0, prologue) run once per core
    int64_t lanes = 1, pitch = 1, rows = 1;
    int64_t persist = 0, block_bytes = 0;  // UB bytes of the per-core values, of one block's set
    int64_t prefetch_bytes = 0;            // the part of a set its block's loads take
    int sets = 2;                          // value sets the blocks cycle through (loads sets - 1 ahead)
    int64_t vector_cycles = 0, load_cycles = 0;  // one block's vector work and loads (the model)
  };
  struct Pad {
    std::string name;
    DType type = DType::F32;
    std::vector<int64_t> source, shape, before;  // the tensor's sizes, the copy's, the leading margins
    bool written = false;  // a local the kernel writes: kept in the padded buffer itself, nothing copied in
  };

  // nest_plan.cc: the analysis (statements modelled, pads, partition, tiles; "" or why not)
  std::string lin_of(const ir::AffineExpr& e, const Plan& p, Lin& out) const;
  std::string split_divisions(const ir::Statement& s, Plan& p);
  std::string access_of(const std::string& tensor, const std::vector<ir::AffineExpr>& idx, const Plan& p, Access& a);
  std::string model(const ir::Statement& s, Plan& p);
  void coalesce(Plan& p, const std::set<std::string>& keep) const;
  static bool walk_as_one(const Plan& p, size_t d);
  static void merge(Plan& p, size_t d);
  bool plan_pads();
  int lane_dim(const Plan& p) const;
  std::string tile(Plan& p);
  std::string tile_with(Plan& p, int v);
  double tile_cycles(const Plan& p) const;
  bool plan_move(Plan& p) const;
  std::vector<int> move_order(const Plan& p) const;
  std::vector<int64_t> move_local(const Plan& p) const;
  std::vector<int> move_run(const Plan& p, const Access& a, int first, const std::function<int64_t(int)>& size) const;
  double move_cycles(const Plan& p) const;
  double shared_dma_cycles() const;
  bool plan_mirror(Plan& p, bool dense) const;
  double latency_cycles(const Plan& p) const;
  int64_t mirror_span(const Plan& p, const Access& a, const std::function<int64_t(int)>& size) const;
  double mirror_cycles(const Plan& p) const;
  int count_regions(const Plan& p);
  std::string unmovable_read(const Plan& p) const;
  static bool transposable(const Plan& p, const Access& a);

  // nest_cores.cc: the split over cores
  struct CoreAxis {
    int64_t extent = 1;
    std::vector<std::string> names;  // each plan's dimension at this axis
  };
  std::vector<std::string> partition_indices(int pos, int64_t& extent, size_t first = 0) const;
  std::vector<CoreAxis> grid_axes() const;
  std::vector<std::string> tracked_indices(int pos, int64_t& extent) const;
  int64_t rows_cores(int64_t extent, bool lanes) const;
  void choose_partition();
  bool choose_grid(int64_t rows);
  double lane_efficiency(const std::vector<CoreAxis>& axes, const std::vector<int64_t>& parts) const;
  int64_t share(const Plan& p, int d) const;      // extent of d in a core's share (analysis)
  int64_t extent_of(const Plan& p, int d) const;  // ... in this core's (emission: the last core's range)
  void core_bases();
  std::string cores_note() const;

  // nest_values.cc: GM <-> UB moves, loads and the expression compiler
  Operand gm_operand(const Plan& p, const Access& a, int64_t extra);
  struct Gather {  // a reversed read's UB regions: a block per element (per byte: widened, packed)
    int64_t scratch, wide, packed;
    int64_t blocks;  // the UB blocks scratch (and wide) hold
  };
  void gather_reversed(const Plan& p, const Access& a, int64_t region, const Gather& g, int64_t n,
                        const std::function<int64_t(int64_t)>& at_c);
  bool gather_columns(const Plan& p, const Access& a, int64_t region, const Gather& g, int64_t rows, int64_t cols, int64_t pitch,
                      int64_t su, int64_t sv);
  void move(bool to_ub, const Plan& p, const Access& a, int64_t region, int64_t rows, int64_t cols, int64_t pitch,
      int64_t su, int64_t sv);
  Value load(const Plan& p, const Access& a, int64_t rows, int64_t cols);
  Value load_transposed(const Plan& p, const Access& a, const Value& v, int64_t rows, int64_t cols);
  int64_t gather_rows(const Plan& p, const Access& a, int64_t rows);
  void broadcast_rows(const Plan& p, const Access& a, const Value& v, int64_t rows);
  Value row_values(const Plan& p, const Access& a, int64_t rows);
  int64_t row_value_region();
  // A statement's rows x pitch tile with rows and lanes (values per row kept one repeat per row).
  static bool rows_tile(const Plan& p) { return p.box.empty() && !p.mirror && p.u >= 0 && p.v >= 0; }
  int64_t tile_pitch() const { return fz_.on || sizing_ ? fz_.pitch : plan_->pitch; }
  Value narrow_rows(const ir::Expr& e, const std::vector<Value>& a);
  void mixed_rows(Opcode o, DType t, int64_t dst, const Value& a, const Value& b, int64_t rows);
  void sequence(const Plan& p);
  Value index_value(const Plan& p, const Access& a, int64_t n);
  Value compile(const ir::Expr& e, int64_t n) override;
  Value compile_rows(const ir::Expr& e, int64_t n);
  Value row_op(const ir::Expr& e, int64_t n);
  int64_t result_region(const ir::Expr& e, const std::vector<Value>& a) override;
  bool dies(const ir::Expr& x, int64_t region);
  bool kept(int64_t region) const;
  bool dies_in_tile(const ir::Expr& x, int64_t region) const;
  Value expand(const Value& v);
  Value compile_node(const ir::Expr& e, int64_t n);
  Value narrow_op(const ir::Expr& e, int64_t n);
  Value narrowed(Value x, DType t, int64_t n);
  Value condition(const Value& c, int64_t n);
  Value compare(const ir::Expr& e, int64_t n);
  Value select(const ir::Expr& e, int64_t n);

  // nest_pipeline.cc: the row pipeline (chosen, sized, emitted)
  Role role_of(size_t i) const;
  Layout layout_of(size_t i) const;
  Resident resident_of(size_t i, const Value& v) const;
  int reads_resident(size_t i, const Access& a, const Resident& r) const;
  bool stored(const std::string& tensor) const;
  bool try_fused();
  bool fuse(int prologue);
  bool fits_pipeline();
  bool size_pipeline();
  bool fits_rows(int64_t r);
  void set_plan_rows(int64_t r);
  std::string fused_note() const;
  void fused_core(int64_t range);
  void enter(const Plan& p, const Pos& origin, int64_t rows);
  void fused_prologue();
  void fused_hoist();
  std::string key_of(const Plan& p, const Access& a) const;
  bool prefetched(size_t i, const Access& a) const;
  void prefetch(const Pos& origin, int64_t rows, int set);
  int64_t fresh_bytes(int64_t bytes);
  bool used_after(size_t i, const std::string& key);
  void fused_block(const Pos& origin, int64_t rows, int set);
  Value result(const Plan& p, int64_t n);
  void store(const Plan& p, Value x, int64_t rows);
  Value fused_read(size_t i, const Access& a, int64_t rows);

  // nest.cc: the program (GM, padded copies, cores) and the statement-by-statement loop nests
  void emit_pads();
  void emit_pad(const std::string& name, const Pad& pad, int64_t ub, bool zero_fill,
                const std::function<void(const std::function<void()>&)>& on_one_core);
  void bind(npu::Program& p);
  void run_core(int64_t range);
  void statement(const Plan& p);
  int ring_sets(const Plan& p);
  std::array<int64_t, 3> ring_fixed(const Plan& p) const;
  void levels(const Plan& p, size_t i, bool output);
  void ring_groups(const Plan& p, size_t i, bool output, const Pos& base, int64_t full);
  double identity(const Plan& p) const;
  Opcode combine_op(const Plan& p) const;
  void store_acc(const Plan& p, bool to_ub);
  void reduction(const Plan& p);
  void body(const Plan& p);
  void body_loads(const Plan& p);
  // A read load() moves by DMA alone (no broadcast, widening, transpose or gather on the vector pipe).
  bool plain_move(const Plan& p, const Access& a) const {
    return stride_of(a, p.u) > 0 && stride_of(a, p.v) > 0 && a.type == compute_type(a.type) && !transposable(p, a);
  }
  void body_compute(const Plan& p);
  void check_set_bounds() const;
  void body_move(const Plan& p);
  void body_mirror(const Plan& p);
  void lanes(const Plan& p, const Value& x, int64_t rows, int64_t cols, int64_t scratch = -1);
  void lanes_product(DType t, int64_t src, int64_t rows, int64_t rep);
  void pack_bytes(DType t, int64_t region, int64_t scratch, int64_t wide, int64_t packed, int64_t k);
  void mask_lanes(int64_t n);
  void vop(Opcode o, DType t, int64_t dst, int64_t a, int64_t b, int64_t repeat, int64_t rep);

  int64_t stride_of(const Access& a, int d) const { return d >= 0 ? a.stride[d] : 0; }
  int64_t block_of(const Plan& p, int d) const {
    if (!p.box.empty()) return d >= 0 ? p.box[d] : 1;
    return d == p.u ? p.rows : d == p.v ? p.cols : 1;
  }
  int64_t cur(int d) const { return d >= 0 ? size_[d] : 1; }
  // Accumulator shape: [rows of u if u is an output dim][pitch if v is one, else 1 packed].
  int64_t acc_rows(const Plan& p) const { return p.out_dim(p.u) ? cur(p.u) : 1; }
  int64_t acc_elements(const Plan& p) const { return acc_rows(p) * (p.out_dim(p.v) ? p.pitch : 1); }
  size_t index_of(const Plan& p) const { return static_cast<size_t>(&p - plans_.data()); }
  void use_chunk(int64_t elements) { chunk_ = elements; }
  // Bytes of one value per row (R of them).
  int64_t per_row_bytes() const { return fz_.rows * 4; }

  std::string pad_refusal_;  // an output read outside its shape (plan_pads)
  std::map<std::string, Pad> pads_;                                         // by the tensor read
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> reach_;  // index range per dimension
  double max_issued_ = kMaxIssued;
  std::vector<Plan> plans_;
  int cores_ = 1;
  int64_t range_ = 1, range_now_ = 1, partition_extent_ = 1;
  std::vector<int64_t> core_parts_, core_block_;  // a core grid: parts and share per axis (empty: rows)
  std::map<std::string, int64_t> gm_;
  const Plan* plan_ = nullptr;
  std::vector<Pos> pos_;
  std::vector<int64_t> size_;
  std::vector<Value> loaded_;
  std::map<std::string, Value> memo_;  // this tile's values by expression text
  int64_t seq_ = 0, body_base_ = 0, set_bytes_ = 0;
  int64_t accs_[kMaxRing] = {}, parts_[kMaxRing] = {}, rowvals_of_[kMaxRing] = {};
  enum class Phase { Both, Loads, Compute };  // what body() emits of a tile (levels: a pair's loads first)
  Phase phase_ = Phase::Both;
  std::pair<std::vector<Value>, int64_t> set_loads_[kMaxRing];  // each set's loads and the next free region after them
  int64_t rowval_slot_ = 0;    // the next slot of the row-values region a tile's gather takes
  int set_ = 0, acc_set_ = 0;  // the tile's value set and the accumulator's (double buffering)
  int ring_ = 2;               // the value sets the innermost tile loop cycles through (ring_sets)
  std::vector<int> flat_;      // loops inside the ring loop emitted straight, their tiles each the next set
  int64_t flat_tiles_ = 1, tile_ = 0;  // ... their tiles per ring-loop iteration, the next tile's number
  int db_dim_ = -1;            // the double-buffered loop's dimension
  bool db_out_ = false;        // ... an output one (the accumulators alternate too)
  Fused fz_;
  bool sizing_ = false;                        // measuring the pipeline's regions (GM not bound yet)
  // Values per row outside the pipeline (a statement's tile: per-channel operands of an NCHW tile):
  // a read that does not move along the lanes is one repeat per row, the operations on such values
  // alone run on those repeats (narrow_), counted apart from the tile's regions (counting_).
  bool rowwise_ = false, narrow_ = false, counting_ = false;
  int counted_rows_ = 0;
  std::map<std::string, Resident> resident_;   // results in UB by tensor: the prologue's, this block's
  std::map<std::string, Value> hoisted_;       // the row statements' row-invariant reads, by access key
  std::map<std::string, Value> block_loads_;   // this block's loads, by access key
  std::map<std::string, Value> prefetched_[kMaxRing];  // each set's loads ahead of its compute, by access key
  std::string memo_prefix_;                    // the statement's dimensions (memo_ spans a block's statements)
  int64_t acc() const { return accs_[acc_set_]; }
  int64_t part() const { return parts_[set_]; }
  int64_t rowvals() const { return rowvals_of_[set_]; }
};

}  // namespace tessel::emit_npu::nest
