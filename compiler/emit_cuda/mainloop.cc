#include "compiler/emit_cuda/mainloop.h"

#include <algorithm>

#include "compiler/emit_cuda/tile_policy.h"
#include "compiler/emit_cuda/tile_scheduler.h"

namespace tessel::emit_cuda {


namespace {

// programmatic dependent launch: prefetched operands' prologue copies, then the wait and the
// trigger; gives the prologue copies still to issue after the wait
std::string pdl_entry(const TcKernel& t) {
  auto& os = t.os;
  const auto& cfg = t.cfg;
  // PDL prefetch: the prologue copies of an operand no earlier kernel writes (CudaOptions::
  // pdl_prefetch) go before the wait, in a cp.async group of their own that precedes the
  // pipeline's groups (so every wait_group below still covers them)
  const bool pre_a = t.launch.pdl && t.launch.prefetch_a && !t.ba.ok, pre_b = t.launch.pdl && t.launch.prefetch_b && !t.bb.ok;
  const int prologue = t.wg ? (cfg.issue == CopyIssue::deep ? cfg.stages - 1 : cfg.stages - 2) : cfg.stages - 1;
  const std::string prologue_loads = std::string(pre_a ? "" : "load_a(s, kt0_ + s); ") + (pre_b ? "" : "load_b(s, kt0_ + s); ");
  if (pre_a || pre_b) {
    os << "  /* PDL: " << (pre_a ? t.c.a.tensor : "") << (pre_a && pre_b ? " and " : "") << (pre_b ? t.c.b.tensor : "")
       << " (not written by earlier kernels) copied before the wait */\n";
    os << "  #pragma unroll\n  for (int s = 0; s < " << prologue << "; ++s)\n    if (s < kt_total_) { " << (pre_a ? "load_a(s, kt0_ + s); " : "")
       << (pre_b ? "load_b(s, kt0_ + s); " : "") << "}\n  tessel_cp_commit();\n";
    t.explain.push_back("  programmatic dependent launch: the first " + S(std::min<int64_t>(prologue, k_tiles_per_block(t.c, cfg))) + " K tiles of " + (pre_a ? t.c.a.tensor : "") +
                      (pre_a && pre_b ? " and " : "") + (pre_b ? t.c.b.tensor : "") + " are copied before griddepcontrol.wait (declared not written by earlier kernels)");
  }
  if (t.launch.pdl) {  // the trigger after the wait: at most one kernel waits behind this one
    os << "  asm volatile(\"griddepcontrol.wait;\\n\" ::: \"memory\");  /* PDL: the previous kernel has finished and flushed */\n";
    os << "  asm volatile(\"griddepcontrol.launch_dependents;\\n\" ::: \"memory\");  /* PDL: the next kernel may launch */\n";
  }
  return prologue_loads;
}

// the multistage cp.async pipeline of the WMMA and mma.sync main loops: stages - 1 K tiles in
// flight, one barrier per K tile, then the fragment loop over the tile
void cp_async_pipeline(const TcKernel& t, const std::string& prologue_loads) {
  auto& os = t.os;
  const auto& cfg = t.cfg;
  os << "  #pragma unroll\n  for (int s = 0; s < " << cfg.stages - 1 << "; ++s) {\n    if (s < kt_total_) { " << prologue_loads << "}\n    tessel_cp_commit();\n  }\n";
  os << "  for (int kt = 0; kt < kt_total_; ++kt) {\n";
  os << "    tessel_cp_wait<" << cfg.stages - 2 << ">();\n";
  if (cfg.loader == OperandLoader::bulk) os << "    tessel_mbar_wait(tessel_bar_ + kt % " << cfg.stages << ", (kt / " << cfg.stages << ") & 1);\n";
  os << "    __syncthreads();\n";
  os << "    { const int nt = kt + " << cfg.stages - 1 << "; if (nt < kt_total_) { load_a(nt % " << cfg.stages << ", kt0_ + nt); load_b(nt % "
     << cfg.stages << ", kt0_ + nt); } tessel_cp_commit(); }\n";
  os << "    const " << t.ft << "* as_ = As_ + (kt % " << cfg.stages << ") * " << t.a_stage << ";\n";
  os << "    const " << t.ft << "* bs_ = Bs_ + (kt % " << cfg.stages << ") * " << t.b_stage << ";\n";
  const int kslice = cfg.bk / cfg.k_split;
  if (t.mma) mma_sync_k_tile(t, kslice);
  else wmma_k_tile(t, kslice);
  os << "    }\n  }\n";
}

}  // namespace

void zero_accumulators(const TcKernel& t, int rows, const std::string& pad) {
  t.os << pad << "#pragma unroll\n" << pad << "for (int i = 0; i < " << rows << "; ++i)\n" << pad << "  #pragma unroll\n" << pad << "  for (int j = 0; j < "
       << t.fn8 << "; ++j) acc_[i][j][0] = acc_[i][j][1] = acc_[i][j][2] = acc_[i][j][3] = 0.0f;\n";
}

void fence_accumulators(const TcKernel& t, const std::string& pad) {
  t.os << pad << "#pragma unroll\n" << pad << "for (int i = 0; i < " << t.fmx << "; ++i)\n" << pad << "  #pragma unroll\n" << pad << "  for (int j = 0; j < "
       << t.fn8 << "; ++j)\n" << pad << "    #pragma unroll\n" << pad
       << "    for (int q = 0; q < 4; ++q) asm volatile(\"\" : \"+f\"(acc_[i][j][q]) :: \"memory\");  /* MMAs done */\n";
}

void emit_mainloop(const TcKernel& t) {
  if (t.wg) wgmma_accumulators(t);
  else if (t.mma) mma_sync_accumulators(t);
  else wmma_accumulators(t);
  emit_split_k_range(t);  // the block's K range (tile_scheduler.h)
  const std::string prologue_loads = pdl_entry(t);
  if (t.wg) wgmma_mainloop(t, prologue_loads);
  else cp_async_pipeline(t, prologue_loads);
}

}  // namespace tessel::emit_cuda
