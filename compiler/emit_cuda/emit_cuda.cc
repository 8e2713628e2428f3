#include "compiler/emit_cuda/emit_cuda.h"

#include <algorithm>

#include <sstream>

#include "compiler/emit_cuda/attention_kernel.h"
#include "compiler/emit_cuda/contraction.h"
#include "compiler/emit_cuda/cuda_expr.h"
#include "compiler/emit_cuda/emit_simt.h"
#include "compiler/emit_cuda/row_kernel.h"
#include "compiler/emit_cuda/simt_gemm.h"
#include "compiler/emit_cuda/simt_gemm_policy.h"
#include "compiler/emit_cuda/emit_tensor_core.h"
#include "isa/base/error.h"

namespace tessel::emit_cuda {

namespace {

// cp.async on sm_80+ (16-byte copies with zero fill when the guard fails); plain loads before.
// ldmatrix moves 16-bit elements of either float type; tessel_mma16816 is the mma.sync of the
// operand dtype `mma_operand` (f16 or bf16: ptx_operand_type).
std::string async_copy_helpers(const isa::GpuMachine& m, DType mma_operand = DType::F16) {
  const std::string ab = ptx_operand_type(mma_operand);
  if (m.has(isa::GpuFeature::CpAsync))
    return R"(static __device__ __forceinline__ void tessel_cp_async16(void* smem, const void* gmem, bool pred) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(pred ? 16 : 0));
}
static __device__ __forceinline__ void tessel_cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> static __device__ __forceinline__ void tessel_cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
static __device__ __forceinline__ void tessel_ldsm_x4(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3, const void* p) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n" : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(s));
}
static __device__ __forceinline__ void tessel_ldsm_x4_trans(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3, const void* p) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n" : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(s));
}
static __device__ __forceinline__ void tessel_mma16816(float* c, const unsigned* a, unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.)" + ab + "." + ab + R"(.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
)";
  return R"(static __device__ __forceinline__ void tessel_cp_commit() {}
template <int N> static __device__ __forceinline__ void tessel_cp_wait() {}
)";
}

// The kernel IR's own tiles: stage-level boxes of the matched operands and the fragment tile.
std::optional<TcConfig> tiles_from_kernel(const kernel::Kernel& k, const Contraction& c) {
  const kernel::MatmulOp* mm = nullptr;
  kernel::for_each_node(k.body, [&](const kernel::Node& n, int) {
    if (n.kind == kernel::NodeKind::Matmul && !mm) mm = &n.matmul;
  });
  if (!mm || c.m.size() != 1 || c.n.size() != 1 || c.k.size() != 1) return std::nullopt;
  TcConfig g;
  g.wm = int(mm->tile_m);
  g.wn = int(mm->tile_n);
  for (const auto& b : k.buffers) {
    if (b.role != isa::Role::Stage || b.extents.size() != 2) continue;
    if (b.tensor == c.a.tensor) {
      g.bm = int(b.extents[mm->a_layout == kernel::Layout::RowMajor ? 0 : 1]);
      g.bk = int(b.extents[mm->a_layout == kernel::Layout::RowMajor ? 1 : 0]);
    }
    if (b.tensor == c.b.tensor) g.bn = int(b.extents[mm->b_layout == kernel::Layout::RowMajor ? 1 : 0]);
  }
  g.k_split = 1;
  g.stages = 2;
  return g;
}

// The tile configuration: the caller's, else the kernel IR's (--tile as a tile spec: the policy's
// best-ranked candidate with those block and warp tiles, else those tiles with the defaults), else
// the tile policy's first candidate (whose ranked list goes to `explain`). A configuration the user
// asked for that cannot run is a UserError naming the reason.
std::optional<TcConfig> choose_config(const kernel::Kernel& k, const Contraction& c, const CudaOptions& options, const isa::GpuMachine& m,
                                      std::vector<std::string>& explain) {
  const auto cands = tc_candidates(c, m);
  std::optional<TcConfig> cfg = options.config;
  std::string asked = cfg ? "plan " + cfg->to_string() : "";
  if (!cfg && options.tiles_from_kernel) {
    cfg = tiles_from_kernel(k, c);
    if (!cfg) throw UserError("--tile " + (k.user_tile ? k.user_tile->to_string() : std::string()) + ": " + k.name +
                              " has several M, N or K indices; give a GPU plan (tessel compile --explain lists them)");
    asked = "tile spec " + k.user_tile->to_string() + " (block " + std::to_string(cfg->bm) + "x" + std::to_string(cfg->bn) + "x" +
            std::to_string(cfg->bk) + ", warp " + std::to_string(cfg->wm) + "x" + std::to_string(cfg->wn) + ")";
    for (const auto& g : cands)
      if (g.bm == cfg->bm && g.bn == cfg->bn && g.bk == cfg->bk && g.wm == cfg->wm && g.wn == cfg->wn) {
        cfg = g;
        break;
      }
  }
  if (cfg) {
    const std::string why = config_obstacle(c, *cfg, m);
    if (!why.empty()) {
      std::string legal;
      for (size_t i = 0; i < cands.size() && i < 3; ++i) legal += (i ? ", " : "") + cands[i].to_string();
      throw UserError(k.name + ": " + asked + " cannot run on " + m.arch + ": " + why +
                      (legal.empty() ? "" : "; plans that can: " + legal + " (--explain lists all)"));
    }
    explain.push_back("  plan " + cfg->to_string() + " (given)");
    return cfg;
  }
  if (!cands.empty()) cfg = cands.front();
  std::string list;
  for (const auto& g : cands) list += (list.empty() ? "" : ", ") + g.to_string();
  if (!cands.empty()) explain.push_back("  tile candidates (ranked): " + list);
  return cfg;
}

// The TensorCore program of `c`; false when no configuration fits.
bool emit_tensor_core_program(const kernel::Kernel& k, const Contraction& c, const CudaOptions& options, const isa::GpuMachine& m,
                              std::ostringstream& os, CudaProgram& p) {
  const std::optional<TcConfig> cfg = choose_config(k, c, options, m, p.explain);
  if (!cfg) return false;
  // i8 runs WMMA only: its prelude keeps the f16 mma.sync helper (unused)
  os << "#include <mma.h>\n" << async_copy_helpers(m, warp_mma_operand(c.in_type) ? c.in_type : DType::F16);
  auto named = [&](const std::string& t) {
    return std::find(options.pdl_prefetch.begin(), options.pdl_prefetch.end(), t) != options.pdl_prefetch.end();
  };
  TcLaunchOptions launch;
  // one kernel (atomic split-K zeroes the output and operand copies fill scratch in kernels of their own)
  launch.pdl = options.pdl && m.has(isa::GpuFeature::ProgrammaticDependentLaunch) && cfg->reduce != SplitKReduce::atomic && !cfg->repack;
  launch.prefetch_a = named(c.a.tensor);
  launch.prefetch_b = named(c.b.tensor);
  Launch main = emit_tensor_core(k, c, *cfg, m, launch, os, p.explain, &p.launches);
  main.pdl = launch.pdl;
  p.arch = cfg->wgmma() ? m.arch + "a" : options.arch;  // wgmma: the architecture-specific target
  p.launches.push_back(main);
  p.scratch_bytes = tc_scratch_bytes(c, *cfg, m);
  p.tensor_cores = true;
  p.config = cfg;
  p.flops = 2.0 * double(c.size_m()) * double(c.size_n()) * double(c.size_k()) * double(c.size_batch());
  p.source = os.str();
  return true;
}

// The register-blocked SIMT (or, asked for, TF32) contraction program of `c`: the caller's plan,
// else the policy's first candidate (the ranked list goes to `explain`).
void emit_simt_gemm_program(const kernel::Kernel& k, const Contraction& c, const CudaOptions& options, const isa::GpuMachine& m,
                            std::ostringstream& os, CudaProgram& p) {
  std::optional<SimtGemmPlan> plan = options.simt_plan;
  if (plan) {
    if (plan->tf32 != options.tf32)
      throw UserError(k.name + ": plan " + plan->to_string() + (plan->tf32 ? " runs on the TensorCores as TF32, which needs --tf32"
                                                                               : " is a SIMT plan, but --tf32 asks for TF32 (a .../tf32 plan)"));
    const std::string why = simt_plan_obstacle(c, *plan, m);
    if (!why.empty()) {
      std::string legal;
      const auto cands = simt_gemm_candidates(c, m, options.tf32);
      for (size_t i = 0; i < cands.size() && i < 3; ++i) legal += (i ? ", " : "") + cands[i].to_string();
      throw UserError(k.name + ": plan " + plan->to_string() + " cannot run on " + m.arch + ": " + why +
                      (legal.empty() ? "" : "; plans that can: " + legal + " (--explain lists all)"));
    }
  } else {
    const auto cands = simt_gemm_candidates(c, m, options.tf32);
    if (cands.empty()) throw InternalError("CUDA emitter: no SIMT contraction plan for " + k.name + " although the contraction qualifies");
    plan = cands.front();
  }
  os << "#include <mma.h>\n" << async_copy_helpers(m);
  p.launches.push_back(emit_simt_gemm(k, c, *plan, m, os, p.explain));
  std::string list;
  for (const auto& g : simt_gemm_candidates(c, m, options.tf32)) list += (list.empty() ? "" : ", ") + g.to_string();
  p.explain.push_back(options.simt_plan ? "  plan " + plan->to_string() + " (given)" : "  plan candidates (ranked): " + list);
  if (options.tiles_from_kernel && !options.simt_plan)
    p.explain.push_back("  the tile spec's loop tiles do not shape this kernel; a plan in the form above does (--tile " + plan->to_string() + ")");
  p.arch = options.arch;
  p.simt_gemm = plan;
  p.flops = 2.0 * double(c.size_m()) * double(c.size_n()) * double(c.size_k()) * double(c.size_batch());
  p.source = os.str();
}

}  // namespace

isa::GpuMachine machine_for(const CudaOptions& options) {
  if (options.machine && options.machine->arch == options.arch) return *options.machine;
  return isa::stock_gpu_machine(options.arch);
}

CudaProgram emit_cuda(const kernel::Kernel& k, const CudaOptions& options) {
  const isa::GpuMachine m = machine_for(options);
  CudaProgram p;
  std::ostringstream os;
  os << "/* tessel: kernel " << k.name << " for " << k.target << " (" << options.arch << ") */\n" << cuda_prelude();
  // a softmax fused into its context contraction (compiler/kernel/attention.h)
  if (k.attention) {
    emit_attention_program(k, *k.attention, options, m, os, p);
    return p;
  }
  std::string why;
  std::optional<Contraction> c;
  const std::string division = ir::division_use(*k.function);
  if (!division.empty()) {
    // the TensorCore pieces print indices from their affine coefficients; the SIMT walk prints
    // floor division and modulo exactly (tessel_floordiv / tessel_mod)
    why = "floor division or modulo in indices (" + division + ")";
  } else if (options.allow_tensor_cores) {
    c = k.contraction;
    why = c ? tensor_core_obstacle(*c, m) : k.no_contraction;
  } else {
    why = "TensorCores disabled by the caller";
  }
  // the kernel IR's matched fragment, for the explanation
  kernel::for_each_node(k.body, [&](const kernel::Node& n, int) {
    if (n.kind == kernel::NodeKind::Matmul && p.explain.empty())
      p.explain.push_back(std::string("kernel IR: matched ") + std::to_string(n.matmul.unit_m) + "x" + std::to_string(n.matmul.unit_n) +
                          "x" + std::to_string(n.matmul.unit_k) + " fragments, A=" + n.matmul.a_tensor + " (" +
                          kernel::layout_name(n.matmul.a_layout) + "), B=" + n.matmul.b_tensor + " (" +
                          kernel::layout_name(n.matmul.b_layout) + "), operand tile " + std::to_string(n.matmul.tile_m) + "x" +
                          std::to_string(n.matmul.tile_n) + "x" + std::to_string(n.matmul.tile_k));
  });
  // f32 on the TensorCores as TF32 only when asked for (--tf32); dtypes with no TensorCore shape
  // take the register-blocked SIMT contraction kernel (simt_gemm.h)
  const std::optional<Contraction>& matched = k.contraction;
  if (options.tf32) {
    if (!matched || !division.empty())
      throw UserError(k.name + ": --tf32 runs f32 contractions on the TensorCores, but this kernel is no contraction (" +
                      (!division.empty() ? why : k.no_contraction) + ")");
    const std::string no = simt_gemm_obstacle(*matched, m, true);
    if (!no.empty()) throw UserError(k.name + ": --tf32 cannot be used: " + no);
  }
  // --tf32 on sm_90a: the wgmma main loop of the f16 GEMMs reading the f32 operands as TF32
  // (tile_policy.cc's tf32 tiles: the persistent TMA kernel, operands K-major), unless a plan of the
  // register-blocked kernel (.../tf32) or a tile spec was given or no wgmma plan fits; then that
  // kernel (mma.sync m16n8k8, operands rounded by cvt.rna.tf32.f32)
  std::string tf32_why;
  if (options.tf32) {
    if (options.simt_plan) tf32_why = "a plan of the register-blocked kernel was given";
    else if (options.tiles_from_kernel) tf32_why = "a tile spec shapes the register-blocked kernel";
    else if (!m.wgmma || !m.has(isa::GpuFeature::TensorMaps)) tf32_why = m.arch + " has no wgmma with tensor maps (sm_90a)";
    else if (tc_candidates(*matched, m).empty())
      tf32_why = "no wgmma plan fits M=" + std::to_string(matched->size_m()) + " N=" + std::to_string(matched->size_n()) + " K=" +
                 std::to_string(matched->size_k()) + " (the persistent TMA kernel needs M, N >= 64, K >= 32 and rows of whole 16 bytes)";
    if (tf32_why.empty() || options.config) {
      p.explain.push_back("TF32 TensorCores (--tf32): f32 contraction, TF32 asked for; the wgmma main loop (sm_90a): operands fetched as f32 by "
                          "the TMA unit, read by wgmma.mma_async .tf32 (low 13 mantissa bits ignored), f32 accumulation");
      if (emit_tensor_core_program(k, *matched, options, m, os, p)) return p;
      throw InternalError("CUDA emitter: no TF32 wgmma plan for " + k.name + " although the policy lists one");
    }
  }
  const bool simt_gemm = matched && division.empty() &&
                         (options.tf32 || (!dtype_has_tensor_core_shape(*matched, m) && simt_gemm_obstacle(*matched, m, false).empty()));
  if (options.simt_plan && options.plan_required && !simt_gemm)
    throw UserError(k.name + ": plan " + options.simt_plan->to_string() + " is a SIMT contraction plan, but " +
                    (matched && division.empty() ? "the kernel's dtypes have a TensorCore shape (give a TensorCore plan, --explain lists them)"
                                                 : "the kernel is no contraction it can run: " + why));
  if (simt_gemm) {
    if (options.config && options.plan_required)
      throw UserError(k.name + ": plan " + options.config->to_string() + " is a TensorCore plan, but the kernel runs as the " +
                      (options.tf32 ? std::string("TF32") : std::string("SIMT")) + " contraction kernel: " +
                      (options.tf32 ? std::string("--tf32 given") : why) + " (a plan of the form 128x128x16/8x8/st3/simt or, with --tf32, 128x128x32/64x32/st3/tf32)");
    p.explain.push_back((options.tf32 ? "TF32 TensorCores (--tf32): " : "SIMT: TensorCores not used: ") +
                        (options.tf32 ? std::string("f32 contraction, TF32 asked for") : why) + "; the register-blocked contraction kernel" +
                        (options.tf32 ? " (mma.sync m16n8k8, operands rounded by cvt.rna.tf32.f32), not the wgmma main loop: " + tf32_why : std::string()));
    emit_simt_gemm_program(k, *matched, options, m, os, p);
    return p;
  }
  if (options.config && options.plan_required && !(c && why.empty()))
    throw UserError(k.name + ": plan " + options.config->to_string() + " is a TensorCore plan, but the kernel runs as SIMT code: " +
                    why + " (without --tile the SIMT mapping is chosen)");
  if (c && why.empty()) {
    if (emit_tensor_core_program(k, *c, options, m, os, p)) return p;
    why = "no tile configuration fits the shared memory of " + options.arch;
  }
  p.arch = options.arch;
  p.explain.push_back("SIMT: TensorCores not used: " + why);
  std::optional<RowKernelPlan> rows;
  if (options.row_kernels && !c) rows = plan_row_kernel(k, m, nullptr);
  if (rows) {
    p.explain.push_back(rows->explain);
    emit_row_kernel(k, *rows, os, p.launches);
  } else {
    emit_simt(k, m, os, p.launches, p.scratch_bytes, options.finalise_split_reductions);
  }
  if (c) p.flops = 2.0 * double(c->size_m()) * double(c->size_n()) * double(c->size_k()) * double(c->size_batch());
  p.source = os.str();
  return p;
}

}  // namespace tessel::emit_cuda
