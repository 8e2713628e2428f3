// The fused epilogue of an NPU convolution (conv + bn + relu and the like): the statements after the
// convolution, element-wise over its output, reading per-output-channel tensors ([K]: a bias, the
// batch norm's mean / variance / scale / shift). Part of compiler/emit_npu (conv.cc calls it).
//
// Split in two so the vector unit's per-pixel work is as short as the expressions allow:
// - once per output-channel tile (per core), `load_channels`: the per-channel tensors' tile of tn
//   values from GM into UB, every maximal subexpression that reads only them (the batch norm's
//   gamma * rsqrt(var + eps)) evaluated once on those values, resident in UB as per-column-block
//   patterns (n0 channels repeated over one vector repeat);
// - per 16-channel column block of a pixel block, `emit_column`: only the operations that read the
//   accumulator, each one vector instruction over the block (rows x n0 elements) reading the
//   channel values as a pattern (source repeat stride 0), with no DMA and no expansion.
// Hoisting is exact: a subexpression of channel values gives the same f32 value per element as per
// channel. GemmEpilogue (pointwise.h) checks the statements' form; the per-channel tensors must be
// read at the output's last (channel) index.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compiler/emit_npu/pointwise.h"

namespace tessel::emit_npu {

class ConvEpilogue : public VectorCode {
 public:
  // Throws UserError (naming the kernel) when the statements are not such an epilogue.
  ConvEpilogue(const kernel::Kernel& k, const isa::Hierarchy& h, int conv_statement, const std::string& accumulator);
  // The same, but a form it does not take sets `refusal` to that UserError's text (else "") and
  // leaves the object unusable: emit_conv decides with it before it emits.
  ConvEpilogue(const kernel::Kernel& k, const isa::Hierarchy& h, int conv_statement, const std::string& accumulator,
               std::string& refusal);
  const std::string& output() const { return check_.output(); }
  DType output_type() const { return check_.output_type(); }
  const std::vector<std::string>& channel_tensors() const { return check_.broadcasts(); }

  // UB bytes resident per channel tile of `channels` channels: the patterns and hoisted values.
  int64_t resident_bytes(int64_t channels) const;
  // UB bytes of one column block's evaluation (rows x n0 elements).
  int64_t column_bytes(int64_t rows) const;
  // Once per channel tile: channel_gm[name] is the GM address of the tile's first value of each
  // per-channel tensor, of which the first `valid` <= channels are read (the tensor's end); everything
  // lands at `resident` (resident_bytes(channels) bytes).
  void load_channels(npu::Program& p, const std::map<std::string, npu::Operand>& channel_gm, int64_t channels, int64_t valid,
                     int64_t resident);
  // One column block `jj` (rows x n0 f32 at `acc_region`); UB from `region_base` on
  // (column_bytes(rows)). Returns the UB region of the result (output_type, rows x n0, row-major).
  int64_t emit_column(npu::Program& p, int64_t acc_region, int64_t rows, int64_t jj, int64_t region_base);

 protected:
  Value compile(const ir::Expr& e, int64_t n) override;

 private:
  // "" or why the per-channel tensors are not read at the channel index alone; then the leaves
  // and region counts.
  std::string analyse(int conv_statement);
  bool channel_only(const ir::Expr& e) const;
  void collect_leaves(const ir::Expr& e);
  int per_element_nodes(const ir::Expr& e) const;  // nodes evaluated per column block (leaves: none)

  GemmEpilogue check_;
  std::string accumulator_;
  std::vector<const ir::Statement*> statements_;
  std::vector<const ir::Expr*> leaves_;            // maximal channel-only subexpressions
  std::map<const ir::Expr*, Value> leaf_pattern_;  // their patterns [tn / n0][pattern rows][n0]
  int64_t jj_ = 0;
  bool hoisting_ = false;
  int regions_ = 0, hoist_regions_ = 0;
};

}  // namespace tessel::emit_npu
