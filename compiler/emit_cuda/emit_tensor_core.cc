#include "compiler/emit_cuda/emit_tensor_core.h"

#include "compiler/emit_cuda/epilogue.h"
#include "compiler/emit_cuda/kernel_wgmma_ws.h"
#include "compiler/emit_cuda/launch_builder.h"
#include "compiler/emit_cuda/mainloop.h"
#include "compiler/emit_cuda/repack_kernel.h"
#include "compiler/emit_cuda/repack_plan.h"
#include "compiler/emit_cuda/tile_policy.h"
#include "isa/base/error.h"

namespace tessel::emit_cuda {

namespace {

// the `--explain` lines of the mapping: the matrix multiply, operands, tiles, split-K, staging
void explain_mapping(const TcKernel& t) {
  const auto& cfg = t.cfg;
  const int64_t sms = t.m.sm_count;
  auto dims_text = [](const std::vector<ContractionDim>& ds) {
    std::string s;
    for (const auto& d : ds) s += (s.empty() ? "" : ",") + d.var + "=" + S(d.extent);
    return s.empty() ? std::string("-") : s;
  };
  t.explain.push_back("TensorCores: " + t.anchor.name + " is a matrix multiply: M(" + dims_text(t.c.m) + ")=" + S(t.M) + " N(" +
                    dims_text(t.c.n) + ")=" + S(t.N) + " K(" + dims_text(t.c.k) + ")=" + S(t.K) + " batch(" + dims_text(t.c.batch) + ")");
  t.explain.push_back("  matrix_a = " + t.c.a.tensor + " (" + t.la.substr(6) + "), matrix_b = " + t.c.b.tensor + " (" + t.lb.substr(6) +
                    "), wmma m16n16k16 " + (t.i8 ? "s8 -> s32" : std::string(dtype_name(t.c.in_type)) + " -> f32") + (t.c.swapped ? "; operands swapped so stores run along N" : ""));
  if (!t.pa.bounded.empty() || !t.pb.bounded.empty())
    t.explain.push_back("  implicit GEMM: " + std::string(!t.pa.bounded.empty() ? t.c.a.tensor : t.c.b.tensor) +
                      " is read through an im2col view; out-of-bounds elements (padding) are zero-filled by the shared-memory load");
  if (t.c.a.producer || t.c.b.producer)
    t.explain.push_back("  implicit GEMM: " + std::string(t.c.a.producer ? t.c.a.producer->output : t.c.b.producer->output) +
                      " is not materialised; its padding guard and im2col addressing are in the shared-memory load");
  t.explain.push_back("  tiles " + cfg.to_string() + ": block " + S(cfg.bm) + "x" + S(cfg.bn) + " (stage level), " + S(cfg.warps()) +
                    " warps" + (cfg.tma_ws() ? " (one producer warpgroup)" : "") + ", each " + S(cfg.wm) + "x" + S(cfg.wn) + " = " + S(t.fm * t.fn) + " fragments" +
                    (cfg.k_split > 1 ? ", K of each tile split over " + S(cfg.k_split) + " warps and reduced in shared memory" : "") +
                    (cfg.tma_ws() ? std::string("; work units below")
                                 : "; grid " + S(t.tiles_m * t.tiles_n) + (cfg.k_blocks > 1 ? " x " + S(cfg.k_blocks) : "") + " x " + S(t.c.size_batch())));
  if (cfg.k_blocks == 1 && sms > 0 && t.tiles_m * t.tiles_n * t.c.size_batch() * 2 <= sms && cfg.bm < 128)
    t.explain.push_back("  split-K across blocks: not used: " + S(t.tiles_m * t.tiles_n * t.c.size_batch()) + " output tiles for " + S(sms) +
                      " SMs, but split-K candidates (cluster / last-block / atomic reduction) measured slower than K split over the warps "
                      "of one block on an H200 (emit_cuda/README.md); they are ranked after the unsplit tiles");
  if (cfg.k_blocks > 1)
    t.explain.push_back("  split-K across blocks: " + S(t.tiles_m * t.tiles_n * t.c.size_batch()) + " output tiles for " +
                      (sms > 0 ? S(sms) + " SMs" : std::string("the SMs")) + ", so K (" + S(k_tiles(t.c, cfg)) +
                      " tiles of " + S(cfg.bk) + ") is split over " + S(cfg.k_blocks) + " blocks of " + S(k_tiles_per_block(t.c, cfg)) +
                      " K tiles (" + S(t.tiles_m * t.tiles_n * t.c.size_batch() * cfg.k_blocks) +
                      " blocks); " +
                      (cfg.reduce == SplitKReduce::cluster ? std::string("the blocks of a tile are one thread-block cluster (sm_90): partial tiles stay in shared memory, "
                                                 "each block sums a 1/" + S(cfg.k_blocks) + " slice of the tile over the cluster's shared memory "
                                                 "(distributed shared memory, rank order) and runs its part of the epilogue")
                       : cfg.reduce == SplitKReduce::atomic ? std::string("partial tiles are atomically added into the zeroed output")
                                        : std::string("partial tiles in global scratch, the last block of a tile (atomic counter) sums them in "
                                                      "split order and runs the epilogue")));
  if (cfg.tma_ws())
    t.explain.push_back("  shared memory: " + S(cfg.stages) + " stages filled by the TMA unit (sm_90), 128-byte swizzle, " + S(t.smem) + " B");
  else
  t.explain.push_back("  shared memory: " + S(cfg.stages) + " stages (" + (t.async ? "cp.async, sm_80+" : "synchronous 128-bit loads, pre-sm_80") +
                    "), rows padded by 16 B against bank conflicts, " + S(t.smem) + " B; A " +
                    (t.pa.vec > 1 ? "128-bit" : "scalar") + " loads, B " + (t.pb.vec > 1 ? "128-bit" : "scalar") + " loads");
  if (!t.c.epilogue.empty()) {
    std::string s;
    for (int i : t.c.epilogue) s += (s.empty() ? "" : ", ") + t.k.function->statements.at(i).name;
    t.explain.push_back("  fused epilogue on the accumulators before the global store: " + s);
  }
}

}  // namespace

namespace {

// The copy kernels of /rp (launched first) and the `--explain` line of each copy
RepackPlan emit_copies(const kernel::Kernel& k, const Contraction& c, const TcConfig& cfg, const isa::GpuMachine& m,
                       std::ostringstream& os, std::vector<std::string>& explain, std::vector<Launch>* before) {
  RepackPlan r = plan_repack(c, cfg, m, repack_scratch_offset(c, cfg, m));
  if (!r.ok) throw InternalError("CUDA emitter: operand copies of a legal configuration: " + r.why);
  if (!before) throw InternalError("CUDA emitter: operand copies need the program's launch list");
  auto dims = [](const std::vector<int64_t>& v) {
    std::string s;
    for (int64_t x : v) s += (s.empty() ? "" : ",") + S(x);
    return "[" + s + "]";
  };
  for (size_t i = 0; i < r.copies.size(); ++i) {
    const OperandCopy& cp = r.copies[i];
    before->push_back(emit_repack_kernel(k, cp, "tessel_copy" + S(int64_t(i)) + "_" + cp.source, m, os));
    std::string perm;
    for (int d : cp.perm) perm += (perm.empty() ? "" : ",") + S(d);
    explain.push_back("  operand copy (/rp): " + cp.source + " " + dims(cp.source_shape) + " is copied once per call into scratch as " +
                      dims(cp.shape) + " (its dims " + perm + ", " + S(int64_t(cp.bytes)) + " B, " +
                      (cp.perm.back() == int(cp.perm.size()) - 1 ? S(cp.move_bytes) + "-byte moves" : std::string("a tiled transpose")) +
                      ") by a kernel launched first, so that the TMA unit reads it in 128-byte rows");
  }
  return r;
}

}  // namespace

Launch emit_tensor_core(const kernel::Kernel& k, const Contraction& c0, const TcConfig& cfg, const isa::GpuMachine& m,
                        const TcLaunchOptions& launch, std::ostringstream& os, std::vector<std::string>& explain,
                        std::vector<Launch>* before) {
  const std::string obstacle = config_obstacle(c0, cfg, m);
  if (!obstacle.empty()) throw UserError("CUDA emitter: tile configuration " + cfg.to_string() + ": " + obstacle);
  // with /rp the kernel reads the operands' copies: the repacked contraction (repack_plan.h)
  const RepackPlan copies = cfg.repack ? emit_copies(k, c0, cfg, m, os, explain, before) : RepackPlan{};
  const Contraction& c = cfg.repack ? copies.contraction : c0;
  const TcKernel t(k, c, cfg, m, launch, os, explain);
  explain_mapping(t);
  os << "\n/* TensorCore kernel for " << t.anchor.name << " (" << cfg.to_string() << ") */\n";
  emit_device_helpers(t);
  if (cfg.tma_ws()) {  // persistent warp-specialised kernel: its own body (kernel_wgmma_ws.h)
    emit_wgmma_ws_helpers(t);
    emit_kernel_signature(t);
    emit_wgmma_ws_body(t);
    Launch l = main_launch(t);
    for (auto& map : l.tensor_maps)  // a copied operand's map covers its copy in scratch
      for (const OperandCopy& cp : copies.copies)
        if (map.tensor == kScratchCopyPrefix + cp.source) map.in_scratch = true, map.scratch_offset = cp.offset;
    return l;
  }
  emit_kernel_signature(t);
  emit_preamble(t);
  emit_operand_loaders(t);
  emit_mainloop(t);
  emit_epilogue(t, before);
  return main_launch(t);
}

}  // namespace tessel::emit_cuda
