// Which tile specs fit a target, by promotion's own capacity check (compiler/poly/promotion.h),
// and their footprints: the features cost models read. The passes before tiling (scop,
// dependences, schedule, fusion, intrinsics) run once, through tessel::compile; the full check
// then runs only `tile` and `promote` on that compilation's results, as the pipeline does.
//
// The full check costs tens of milliseconds of isl work per configuration (a 512^3 GEMM's default
// space has ~2,600), so check() answers from an arithmetic model of promotion instead (issue 17
// item 9): the buffers promotion makes (tensor, level, role, double buffering, copies) do not
// depend on the tile sizes once the groups' matmul matches are known, so one full check per
// distinct set of matches gives them; each buffer's box is then the interval arithmetic of its
// accesses' affine indices over one tile (a tiled index spans min(tile, extent) values from an
// origin at 0, an untiled one its whole range), which is what isl's fixed box hull gives for
// these accesses. The model is used only where it is exact by construction: affine accesses
// without floor division, index ranges of tiled axes starting at 0 with the same range in every
// statement of the group, the same coefficients of the tiled indices in every access a buffer
// unites, and a fused schedule that tile_program accepted; each full check made for a match set
// is compared with the model's answer, and any difference turns the model off (every check then
// runs the full check). tests/tune/test_fast_fit.cc compares the two on GEMM, conv and fused
// epilogue spaces.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "compiler/emit_cuda/row_kernel.h"
#include "compiler/pipeline.h"
#include "compiler/tile/npu_conv_plan.h"

namespace tessel::tune {

// One on-chip buffer of a configuration, as promotion placed it.
struct Footprint {
  isa::Role role = isa::Role::Vector;
  std::string level;            // level name
  std::string tensor;
  int64_t bytes = 0;
  bool double_buffered = false;
  poly::TileLevel tile_level = poly::TileLevel::P;  // P: per stage tile, R: per reduction tile, I: operand tile
  bool copy_in = false, copy_out = false;
  int group = 0;
};

// The tiling of one fused group as the tile pass resolved it (clamped sizes per axis).
struct GroupTiling {
  std::map<std::string, int64_t> outer, inner, extent;
  std::map<std::string, bool> reduction;  // per axis of the group
  bool matched = false;                   // matrix-unit intrinsic
  std::string m, n, k;                    // axes of the match
  int unit_m = 0, unit_n = 0, unit_k = 0;
  uint32_t unit_cycles = 1;
  DType in_type = DType::F16, acc_type = DType::F32;
  bool img2col = false;
};

struct ConfigInfo {
  tile::TileSpec spec;
  std::vector<Footprint> buffers;
  std::vector<GroupTiling> groups;
  std::map<std::string, uint64_t> level_bytes;  // with double buffering counted twice
};

// Which tensor-core instructions a GPU kernel issues (the CUDA emitter's path, chosen by the GPU
// tile policy from the GPU tiles, compiler/emit_cuda/tile_policy.h). The analytic model prices
// each at its own rate: warp-level WMMA and mma.sync at gpu.warp_mma_f16_macs_per_cycle where the
// description gives it, wgmma at the matrix unit's peak. Unknown: the matrix unit's shape rate,
// operands loaded by instructions.
enum class MmaPath : uint8_t { Unknown, Wmma, MmaSync, Wgmma };
// "wmma", "mma.sync", "wgmma" (the names `tessel run` reports); "simt" and "" give Unknown;
// UserError naming the known paths otherwise.
MmaPath parse_mma_path(const std::string& name);

struct Problem {
  const ir::Function* function = nullptr;
  std::map<std::string, int64_t> sizes;
  std::map<std::string, int64_t> extents;  // per index name
  std::map<std::string, int64_t> units;    // matrix-unit dimension per tiled axis (m/n/k of the match)
  isa::Hierarchy hierarchy;
  tile::TileSpec default_spec;
  // Non-empty when the target's tile policy maps this kernel with sizes of its own whatever the
  // tile spec (the NPU convolution, compiler/tile/npu_conv_plan.h, where every sampled spec gives
  // the same plan: FitChecker::detect_fixed_mapping): why. The space then keeps one
  // configuration, and the analytic model follows that plan.
  std::string fixed_mapping;
  // The NPU convolution mapping (compiler/emit_npu/conv.cc) emits this kernel: the tile policy's
  // view of it; the fit check and the analytic model read its plan.
  std::optional<tile::ConvGeometry> npu_conv;
  // GPU: the tensor-core path the kernel takes (set by `tessel tune --mma-path`).
  MmaPath mma_path = MmaPath::Unknown;
  // GPU: the plan of the register row kernel (compiler/emit_cuda/row_kernel.h) the CUDA emitter
  // maps this kernel to when it is given no tile spec (softmax, layer norm: each input read once,
  // each output written once, whatever the default tile says); nullopt when it is not a row program.
  std::optional<emit_cuda::RowKernelPlan> gpu_row_kernel;
};

class FitChecker {
 public:
  // Compiles `f` once at `options` (tile spec default) to get the passes before tiling.
  FitChecker(const ir::Function& f, const CompileOptions& options);
  ~FitChecker();
  // The footprints when the spec fits every level, nullopt when promotion rejects it (`why`: its
  // message); for NPU convolutions also when the convolution tile policy's plan does not fit.
  std::optional<ConfigInfo> check(const tile::TileSpec& spec, std::string* why = nullptr);
  // The same answer through `tile` + `promote` (isl) every time, not cached: what check() must
  // agree with (the tests compare them).
  std::optional<ConfigInfo> check_full(const tile::TileSpec& spec, std::string* why = nullptr);
  // Whether check() answers from the arithmetic model (false: the problem is outside what the
  // model handles exactly, or `set_fast(false)`); why not.
  bool fast() const;
  std::string why_not_fast() const;
  void set_fast(bool on);
  const Problem& problem() const { return problem_; }
  // The tile spec the pipeline chose without one (what `tessel compile` / `run` without --tile use).
  const tile::TileSpec& compiled_tile_spec() const { return base_->tile_spec; }
  // NPU convolutions: plans the samples (fitting tile specs) and the default; when every plan is
  // the same, sets Problem::fixed_mapping. Returns whether it is set.
  bool detect_fixed_mapping(const std::vector<tile::TileSpec>& samples);
  size_t checks() const { return checks_; }            // configurations checked (not cached)
  size_t full_checks() const { return full_checks_; }  // of which by tile + promote

 private:
  std::unique_ptr<Compilation> base_;
  const ir::Function* source_ = nullptr;
  CompileOptions options_;
  bool detected_ = false;
  std::optional<tile::ConvPlanResult> conv_plan(const tile::TileSpec* spec) const;
  struct FullResult;
  FullResult run_full(const tile::TileSpec& spec);
  std::optional<ConfigInfo> finish(const tile::TileSpec& spec, std::optional<ConfigInfo> info, std::string reason,
                                   std::string* why, bool store = true);
  struct FastModel;
  std::unique_ptr<FastModel> fast_;
  Problem problem_;
  size_t checks_ = 0, full_checks_ = 0;
  std::map<std::string, std::optional<ConfigInfo>> cache_;
  std::map<std::string, std::string> why_;
};

}  // namespace tessel::tune
