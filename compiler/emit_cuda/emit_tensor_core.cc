#include "compiler/emit_cuda/emit_tensor_core.h"

#include "compiler/emit_cuda/epilogue.h"
#include "compiler/emit_cuda/launch_builder.h"
#include "compiler/emit_cuda/mainloop.h"
#include "isa/base/error.h"

namespace tessel::emit_cuda {

namespace {

// the `--explain` lines of the mapping: the matrix multiply, operands, tiles, split-K, staging
void explain_mapping(const TcKernel& t) {
  auto& explain = t.explain;
  const auto& cfg = t.cfg;
  const auto& c = t.c;
  const auto& k = t.k;
  const auto& anchor = t.anchor;
  const auto& M = t.M;
  const auto& N = t.N;
  const auto& K = t.K;
  const auto& i8 = t.i8;
  const auto& pa = t.pa;
  const auto& pb = t.pb;
  const auto& la = t.la;
  const auto& lb = t.lb;
  const auto& fm = t.fm;
  const auto& fn = t.fn;
  const auto& smem = t.smem;
  const auto& tiles_m = t.tiles_m;
  const auto& tiles_n = t.tiles_n;
  const int64_t sms = t.m.sm_count;
  auto dims_text = [](const std::vector<ContractionDim>& ds) {
    std::string s;
    for (const auto& d : ds) s += (s.empty() ? "" : ",") + d.var + "=" + S(d.extent);
    return s.empty() ? std::string("-") : s;
  };
  explain.push_back("TensorCores: " + anchor.name + " is a matrix multiply: M(" + dims_text(c.m) + ")=" + S(M) + " N(" +
                    dims_text(c.n) + ")=" + S(N) + " K(" + dims_text(c.k) + ")=" + S(K) + " batch(" + dims_text(c.batch) + ")");
  explain.push_back("  matrix_a = " + c.a.tensor + " (" + la.substr(6) + "), matrix_b = " + c.b.tensor + " (" + lb.substr(6) +
                    "), wmma m16n16k16 " + (i8 ? "s8 -> s32" : "f16 -> f32") + (c.swapped ? "; operands swapped so stores run along N" : ""));
  if (!pa.bounded.empty() || !pb.bounded.empty())
    explain.push_back("  implicit GEMM: " + std::string(!pa.bounded.empty() ? c.a.tensor : c.b.tensor) +
                      " is read through an im2col view; out-of-bounds elements (padding) are zero-filled by the shared-memory load");
  if (c.a.producer || c.b.producer)
    explain.push_back("  implicit GEMM: " + std::string(c.a.producer ? c.a.producer->output : c.b.producer->output) +
                      " is not materialised; its padding guard and im2col addressing are in the shared-memory load");
  explain.push_back("  tiles " + cfg.to_string() + ": block " + S(cfg.bm) + "x" + S(cfg.bn) + " (stage level), " + S(cfg.warps()) +
                    " warps, each " + S(cfg.wm) + "x" + S(cfg.wn) + " = " + S(fm * fn) + " fragments" +
                    (cfg.k_split > 1 ? ", K of each tile split over " + S(cfg.k_split) + " warps and reduced in shared memory" : "") +
                    "; grid " + S(tiles_m * tiles_n) + (cfg.k_blocks > 1 ? " x " + S(cfg.k_blocks) : "") + " x " + S(c.size_batch()));
  if (cfg.k_blocks == 1 && sms > 0 && tiles_m * tiles_n * c.size_batch() * 2 <= sms && cfg.bm < 128)
    explain.push_back("  split-K across blocks: not used: " + S(tiles_m * tiles_n * c.size_batch()) + " output tiles for " + S(sms) +
                      " SMs, but split-K candidates (cluster / last-block / atomic reduction) measured slower than K split over the warps "
                      "of one block on an H200 (emit_cuda/README.md); they are ranked after the unsplit tiles");
  if (cfg.k_blocks > 1)
    explain.push_back("  split-K across blocks: " + S(tiles_m * tiles_n * c.size_batch()) + " output tiles for " +
                      (sms > 0 ? S(sms) + " SMs" : std::string("the SMs")) + ", so K (" + S(k_tiles(c, cfg)) +
                      " tiles of " + S(cfg.bk) + ") is split over " + S(cfg.k_blocks) + " blocks of " + S(k_tiles_per_block(c, cfg)) +
                      " K tiles (" + S(tiles_m * tiles_n * c.size_batch() * cfg.k_blocks) +
                      " blocks); " +
                      (cfg.cluster ? std::string("the blocks of a tile are one thread-block cluster (sm_90): partial tiles stay in shared memory, "
                                                 "each block sums a 1/" + S(cfg.k_blocks) + " slice of the tile over the cluster's shared memory "
                                                 "(distributed shared memory, rank order) and runs its part of the epilogue")
                       : cfg.atomic_out ? std::string("partial tiles are atomically added into the zeroed output")
                                        : std::string("partial tiles in global scratch, the last block of a tile (atomic counter) sums them in "
                                                      "split order and runs the epilogue")));
  explain.push_back("  shared memory: " + S(cfg.stages) + " stages (" + (t.async ? "cp.async, sm_80+" : "synchronous 128-bit loads, pre-sm_80") +
                    "), rows padded by 16 B against bank conflicts, " + S(smem) + " B; A " +
                    (pa.vec > 1 ? "128-bit" : "scalar") + " loads, B " + (pb.vec > 1 ? "128-bit" : "scalar") + " loads");
  if (!c.epilogue.empty()) {
    std::string s;
    for (int i : c.epilogue) s += (s.empty() ? "" : ", ") + k.function->statements.at(i).name;
    explain.push_back("  fused epilogue on the accumulators before the global store: " + s);
  }
}

}  // namespace

Launch emit_tensor_core(const kernel::Kernel& k, const Contraction& c, const TcConfig& cfg, const isa::GpuMachine& m,
                        const TcLaunchOptions& launch, std::ostringstream& os, std::vector<std::string>& explain,
                        std::vector<Launch>* before) {
  const std::string obstacle = config_obstacle(c, cfg, m);
  if (!obstacle.empty()) throw UserError("CUDA emitter: tile configuration " + cfg.to_string() + ": " + obstacle);
  const TcKernel t(k, c, cfg, m, launch, os, explain);
  explain_mapping(t);
  os << "\n/* TensorCore kernel for " << t.anchor.name << " (" << cfg.to_string() << ") */\n";
  emit_device_helpers(t);
  emit_kernel_signature(t);
  emit_preamble(t);
  emit_operand_loaders(t);
  emit_mainloop(t);
  emit_epilogue(t, before);
  return main_launch(t);
}

}  // namespace tessel::emit_cuda
