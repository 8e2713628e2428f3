#include "compiler/emit_cuda/emit_cuda.h"

#include <algorithm>

#include <sstream>

#include "compiler/emit_cuda/contraction.h"
#include "compiler/emit_cuda/cuda_expr.h"
#include "compiler/emit_cuda/emit_simt.h"
#include "compiler/emit_cuda/emit_tensor_core.h"
#include "isa/base/error.h"

namespace tessel::emit_cuda {

namespace {

int sm_number(const std::string& arch) {
  if (arch.rfind("sm_", 0) != 0) throw UserError("CUDA emitter: architecture '" + arch + "' is not of the form sm_XY");
  return std::stoi(arch.substr(3));
}

// cp.async on sm_80+ (16-byte copies with zero fill when the guard fails); plain loads before.
std::string async_copy_helpers(const std::string& arch) {
  if (sm_number(arch) >= 80)
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
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
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

}  // namespace

uint32_t shared_budget_bytes(const std::string& arch) {
  const int sm = sm_number(arch);
  if (sm >= 90) return 227 * 1024;
  if (sm == 80 || sm == 87) return 163 * 1024;
  if (sm >= 80) return 99 * 1024;
  return 64 * 1024;
}

CudaProgram emit_cuda(const kernel::Kernel& k, const CudaOptions& options) {
  CudaProgram p;
  std::ostringstream os;
  os << "/* tessel: kernel " << k.name << " for " << k.target << " (" << options.arch << ") */\n" << cuda_prelude();
  std::string why;
  std::optional<Contraction> c;
  if (options.allow_tensor_cores) {
    c = k.contraction;
    why = c ? tensor_core_obstacle(*c, options.arch) : k.no_contraction;
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
  if (c && why.empty()) {
    std::optional<TcConfig> cfg = options.config;
    if (!cfg && options.tiles_from_kernel) {
      cfg = tiles_from_kernel(k, *c);
      if (cfg && !config_obstacle(*c, *cfg, options.arch).empty()) {
        p.explain.push_back("kernel IR tiles " + cfg->to_string() + " not usable (" + config_obstacle(*c, *cfg, options.arch) +
                            "); using the emitter's choice");
        cfg.reset();
      }
    }
    if (!cfg) {
      auto cands = tc_candidates(*c, options.arch, options.sm_count);
      if (!cands.empty()) cfg = cands.front();
    }
    if (cfg) {
      os << "#include <mma.h>\n" << async_copy_helpers(options.arch);
      const bool pdl = options.pdl && sm_number(options.arch) >= 90 && !cfg->atomic_out;  // one kernel
      auto named = [&](const std::string& t) {
        return std::find(options.pdl_prefetch.begin(), options.pdl_prefetch.end(), t) != options.pdl_prefetch.end();
      };
      const int prefetch = (named(c->a.tensor) ? 1 : 0) | (named(c->b.tensor) ? 2 : 0);
      Launch main = emit_tensor_core(k, *c, *cfg, options.arch, os, p.explain, options.sm_count, &p.launches, pdl, prefetch);
      main.pdl = pdl;
      p.arch = cfg->wgmma ? "sm_90a" : options.arch;
      p.launches.push_back(main);
      p.scratch_bytes = tc_scratch_bytes(*c, *cfg);
      p.tensor_cores = true;
      p.config = cfg;
      p.flops = 2.0 * double(c->size_m()) * double(c->size_n()) * double(c->size_k()) * double(c->size_batch());
      p.source = os.str();
      return p;
    }
    why = "no tile configuration fits the shared memory of " + options.arch;
  }
  p.arch = options.arch;
  p.explain.push_back("SIMT: TensorCores not used: " + why);
  emit_simt(k, options.arch, os, p.launches, p.scratch_bytes);
  if (c) p.flops = 2.0 * double(c->size_m()) * double(c->size_n()) * double(c->size_k()) * double(c->size_batch());
  p.source = os.str();
  return p;
}

}  // namespace tessel::emit_cuda
