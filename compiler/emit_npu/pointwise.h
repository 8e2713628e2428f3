// NPU mapping of element-wise kernels (relu, add, casts, fused element-wise chains): every
// statement reads its inputs at exactly its output's indices and all tensors have one shape, so the
// tensors are processed as flat arrays in UB chunks (GM -(MTE2)-> UB -(V: vector instructions with
// repeat <= max_repeat)-> UB -(MTE3)-> GM), chunks spread over the cores, the tail chunk on core 0.
// Part of the NPU emitter (compiler/emit_npu/emit_npu.h), which calls it for kernels without a
// matched matmul. why_not_pointwise says, without throwing, whether it maps a kernel.
#pragma once

#include "compiler/emit_npu/emit_npu.h"
#include "isa/base/error.h"
#include "isa/npu_machine.h"

#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace tessel::emit_npu {

// Vector code for tensor-IR expressions evaluated element by element on UB regions of n elements:
// each expression node gets its own region (from `region_base_`, `region_bytes_` apart); constants
// fold or become scalar operands. Shared by the element-wise mapping and the GEMM epilogue.
class Composer;
struct Composition;

class VectorCode {
  friend class Composer;  // compositions.h: the built-ins composed of vector instructions

 public:
  struct Value {
    bool scalar = false;
    double constant = 0;
    int64_t region = 0;  // UB byte offset
    DType type = DType::F32;
    // A value per row of a tile, held as one repeat per row (the row pipeline of nest_pipeline.cc; only its
    // own code reads such a value, expanding it before anything else sees it).
    bool per_row = false;
    bool pattern = false;  // one repeat of values, repeated over the whole region (source repeat stride 0)
  };
  VectorCode(const kernel::Kernel& k, const isa::NpuMachine& m);
  virtual ~VectorCode() = default;

 protected:
  UserError not_pointwise(const std::string& why) const;
  // "" for "", else the mapping's UserError text: "kernel K: <mapping>: <why>".
  std::string message(const std::string& why, const std::string& mapping) const;
  // Binds every global tensor but the temporaries to GM, one after the other at the GM alignment
  // (inputs In, outputs Out).
  void bind_tensors(npu::Program& p) const;
  // Starts `out`'s program (emitted into from now on): its name, one core, the tensors bound.
  npu::Program& begin_program(NpuKernel& out);
  // Rows per UB chunk of a row kernel: all `total` rows when `fit` rows fit UB and one instruction's
  // repeats, else the most that fit and are a multiple of the smallest count `aligned` accepts
  // (every chunk's GM offset aligned); 0 when none fit.
  int64_t rows_per_chunk(int64_t total, int64_t fit, const std::function<bool(int64_t)>& aligned) const;
  // The `total` rows of a row kernel in chunks of `rows`: the full chunks in a loop counted by
  // register `counter`, each (register, bytes) of `offsets` set to counter x bytes, when there are
  // several, straight code for one, then the tail. `chunk(n, registers, first_row)` emits n rows,
  // GM addresses `first_row` rows in plus the offset registers when `registers`.
  void row_chunks(int64_t total, int64_t rows, uint8_t counter, const std::vector<std::pair<uint8_t, int64_t>>& offsets,
                  const std::function<void(int64_t, bool, int64_t)>& chunk);
  // A tensor's sizes (the kernel's global tensor, else its shape evaluated at the kernel's sizes).
  std::vector<int64_t> sizes_of(const ir::Tensor& t) const;
  // Does `e` read a tensor? (Integer arithmetic on sizes and constants folds; on tensor values it
  // is not mapped.)
  static bool reads_tensor(const ir::Expr& e);
  static int count_nodes(const ir::Expr& e);
  void op(npu::Opcode o, std::vector<npu::Operand> operands);
  int64_t fresh_region();
  int64_t repeats(int64_t n, DType t) const;
  Value vector_of(const Value& v, int64_t n);
  void binary(npu::Opcode o, const Value& dst, const Value& a, const Value& b, int64_t n);
  void with_scalar(npu::Opcode o, const Value& dst, const Value& a, double s, int64_t n);
  void unary(npu::Opcode o, const Value& dst, const Value& a, int64_t n);
  int64_t source_stride(const Value& v) const { return v.pattern ? 0 : repeat_blocks_; }
  // A mapping may take over node kinds (accesses at other indices, conditions) by overriding.
  virtual Value compile(const ir::Expr& e, int64_t n);
  // The region of node e's result, its operands' values `a`: a fresh one; a mapping that knows an
  // operand dies here may return the operand's region (element-wise operations run in place).
  virtual int64_t result_region(const ir::Expr& e, const std::vector<Value>& a) { (void)e, (void)a; return fresh_region(); }
  Value apply(const ir::Expr& e, int64_t n);
  // A built-in of compositions.h: operands widened to f32 (i32 kept for sign), the composition,
  // the result rounded once to e's dtype.
  Value compose(const Composition& c, const ir::Expr& e, const std::vector<Value>& a, int64_t n);
  // Does apply() map operator `op` (an instruction, a composition or a cast)?
  static bool maps_operator(ir::Op op);
  // vconv of n values. u8 has no vector arithmetic and is computed in i32 (nest_plan.h,
  // compute_type): from u8, the bytes are converted as i8 and moved to [0, 255] by (x + 256) mod 256,
  // the constant 256 in `scratch` (n i32 values; -1: a fresh region); to u8, `src` must hold the
  // value's i8 bit pattern (wrap() to [-128, 127]) and is narrowed as i8.
  void convert(const Value& dst, const Value& src, int64_t n, int64_t scratch = -1);
  // dst = src wrapped modulo 256 to [lo, lo + 255] (the language's i8 and u8 arithmetic;
  // lo = -128 or 0): ((src mod 256) + 256 - lo) mod 256 + lo, vmod's remainder truncated toward
  // zero. `k256` holds the constant 256 in n i32 values; dst may be src.
  void wrap(const Value& dst, const Value& src, int64_t lo, const Value& k256, int64_t n);
  // The constant 256 in n i32 values (in `region`, or a fresh one when -1).
  Value constant_256(int64_t n, int64_t region = -1);
  // r = x / y or x % y (o) in an integer type, defined as 0 for a divisor of 0.
  Value integer_divide(ir::Op o, const Value& r, const Value& x, const Value& y, int64_t n);
  Value truncate_to_i32(const Value& x, int64_t n);
  Value to_i8(const Value& x, int64_t n);
  static constexpr int kTruncRegions = 12;  // regions truncate_to_i32 takes beyond its own node

  const kernel::Kernel& k_;
  const isa::NpuMachine m_;
  npu::Program* p_ = nullptr;
  int64_t chunk_ = 0, next_region_ = 0, region_base_ = 0;
  int64_t bytes_per_repeat_ = 0, max_repeat_ = 0;  // m_'s vector geometry
  int64_t repeat_blocks_ = 0;  // blocks of one repeat: the repeat stride of contiguous operands
  std::map<std::string, Value> tensors_;
};

// The fused epilogue of a GEMM (DESIGN.md: epilogues on UB between L0C and GM): the statements after
// the matmul statement, element-wise over the accumulator's indices, reading the accumulator,
// earlier epilogue results and lower-rank input tensors at some of the output's indices (broadcast
// along the others: a bias [N], a per-row scale [M], a per-batch bias [B, N], ...). Evaluated per
// column block (the cube fractal's n0 columns) of an accumulator tile in UB (NZ: rows x n0,
// row-major).
class GemmEpilogue : public VectorCode {
 public:
  // Throws UserError (naming the kernel) when the statements do not have that form.
  // skip_before: statements before the matmul one are not part of it (a convolution's padding).
  GemmEpilogue(const kernel::Kernel& k, const isa::Hierarchy& h, int matmul_statement, const std::string& accumulator,
               bool skip_before = false);
  // The same, but a form it does not take sets `refusal` to that UserError's text (else "") and
  // leaves the object unusable: the cube paths decide with it before they emit.
  GemmEpilogue(const kernel::Kernel& k, const isa::Hierarchy& h, int matmul_statement, const std::string& accumulator,
               bool skip_before, std::string& refusal);
  const std::string& output() const { return output_; }
  DType output_type() const { return output_type_; }
  const std::vector<std::string>& broadcasts() const { return broadcasts_; }
  // Dimension d of broadcast tensor `name` is read at the output's dimension broadcast_dims(name)[d].
  const std::vector<int>& broadcast_dims(const std::string& name) const { return broadcast_dims_.at(name); }
  // Where a broadcast tensor's values for one block come from: GM address of the block's first
  // value and the block axes the tensor varies along — the columns (a bias [N]: n0 values repeated
  // down the rows), the rows (a scale [M]: one value per row, repeated across the columns by
  // vbrcb) or both (rows `row_stride_bytes` apart in GM).
  struct BroadcastSource {
    npu::Operand gm;
    bool along_rows = false, along_columns = true;
    int64_t row_stride_bytes = 0;
  };
  // UB bytes the evaluation of one block of `rows` rows needs.
  int64_t ub_bytes(int64_t rows) const;
  // Of those, the regions the broadcast tensors' loads write (their patterns and expanded values,
  // one region beyond for a masked vbrcb's footprint): with `loads_base` below they may lie apart
  // from the rest, so a block's loads can land while another block's evaluation uses the rest.
  int64_t load_ub_bytes(int64_t rows) const;
  // Emits the evaluation of one block into `p`: the accumulator block at `c_region` (f32), the
  // broadcast tensors' n0 values at GM addresses `broadcast_gm[name]`, UB from `region_base` on.
  // Returns the UB region of the output block (output_type, rows x n0, row-major).
  int64_t emit_block(npu::Program& p, int64_t c_region, int64_t rows, int64_t region_base,
                     const std::map<std::string, npu::Operand>& broadcast_gm);
  // part: the whole evaluation, only the broadcast tensors' DMAs (Loads: issued ahead, e.g. during
  // the main loop) or everything but them (Compute: the same rows, region_base and sources later).
  // loads_base >= 0: the loaded regions (load_ub_bytes) from there, the rest (ub_bytes -
  // load_ub_bytes + one region) from region_base; else all from region_base.
  enum class Part { All, Loads, Compute };
  int64_t emit_block(npu::Program& p, int64_t c_region, int64_t rows, int64_t region_base,
                     const std::map<std::string, BroadcastSource>& sources, Part part = Part::All, int64_t loads_base = -1);
  // Part::Loads of several blocks of `rows` rows at once: a tensor whose values are one row per
  // block (a per-column scale or bias) comes by one DMA of one burst per block where the blocks'
  // values follow each other in GM and their regions lie equally far apart (each DMA holds the
  // shared GM a turn on every core: davinci-910's 49 x 256 -> 1024 + residual queued 12 DMAs of
  // 64 B to 1 KiB for its 4 column blocks, 32 cycles each). Each block as emit_block's
  // (region_base, loads_base) and sources.
  struct BlockLoads {
    int64_t region_base = 0, loads_base = -1;
    std::map<std::string, BroadcastSource> sources;
  };
  void emit_loads(npu::Program& p, int64_t rows, const std::vector<BlockLoads>& blocks);

 private:
  // "" or why the statements after the matmul one are not such an epilogue; fills the members.
  std::string analyse(int matmul_statement, bool skip_before);
  // A tensor varying along the columns only, loaded as one row and read as a pattern (emit_block).
  bool one_row_pattern(const BroadcastSource& source, int64_t element_bytes, int64_t rows) const;
  std::set<std::string> loaded_apart_;  // emit_loads: tensors emit_block's Part::Loads leaves out

  std::vector<const ir::Statement*> statements_;
  std::vector<std::string> broadcasts_;
  std::map<std::string, std::vector<int>> broadcast_dims_;
  std::string accumulator_, output_;
  DType output_type_ = DType::F32;
  int regions_ = 0;
};

// "" when emit_pointwise maps the kernel, else the UserError message saying why it is not element-wise.
std::string why_not_pointwise(const kernel::Kernel& kernel, const isa::NpuMachine& machine);
NpuKernel emit_pointwise(const kernel::Kernel& kernel, const isa::Hierarchy& target);

}  // namespace tessel::emit_npu
