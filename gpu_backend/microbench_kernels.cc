#include "gpu_backend/microbench_kernels.h"

#include <fmt/format.h>

#include "gpu_backend/nvrtc_compile.h"

namespace tessel::gpu {
namespace {

// Global, L2 and shared memory, and the load + store / cp.async copies into shared memory.
const char* kMemorySource = R"(
extern "C" __global__ void mb_read(const int4* __restrict__ p, unsigned long long n, int reps, int* sink) {
  int acc = 0;
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (int r = 0; r < reps; ++r) {
    #pragma unroll 8
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
      const int4 v = __ldcg(p + i);
      acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
  }
  if (acc == 0x7fffffff) sink[0] = acc;
}

extern "C" __global__ void mb_write(int4* __restrict__ p, unsigned long long n, int v) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  #pragma unroll 8
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    __stcg(p + i, make_int4(v, v, v, (int)i));
}

extern "C" __global__ void mb_copy(const int4* __restrict__ src, int4* __restrict__ dst, unsigned long long n) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  #pragma unroll 8
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    __stcg(dst + i, __ldcg(src + i));
}

// One thread: `warm` steps (fill the cache), then `steps` timed dependent loads.
extern "C" __global__ void mb_chase(const unsigned* __restrict__ next, unsigned start, int warm, int steps,
                                    long long* cycles, unsigned* sink) {
  unsigned j = start;
  for (int i = 0; i < warm; ++i) j = __ldcg(next + j);
  const long long t0 = clock64();
  for (int i = 0; i < steps; ++i) j = __ldcg(next + j);
  const long long t1 = clock64();
  cycles[0] = t1 - t0;
  sink[0] = j;
}

// 16-byte loads, each warp's 32 contiguous (conflict-free); one block alone on its SM.
extern "C" __global__ void mb_shared_bw(int iters, long long* cycles, int* sink) {
  extern __shared__ int4 s[];
  const int n = 4096;  // 64 KiB
  for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = make_int4(i, i + 1, i + 2, i + 3);
  __syncthreads();
  int acc = 0;
  const long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
    #pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int4 v = s[(threadIdx.x + (it * 8 + u) * 32) & (n - 1)];
      acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
  }
  __syncthreads();
  const long long t1 = clock64();
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
  if (acc == 0x7fffffff) sink[0] = acc;
}

extern "C" __global__ void mb_shared_chase(int steps, long long* cycles, unsigned* sink) {
  __shared__ unsigned s[1024];
  for (int i = threadIdx.x; i < 1024; i += blockDim.x) s[i] = (unsigned)(i * 33 + 1) & 1023u;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned j = 0;
    for (int i = 0; i < 64; ++i) j = s[j];
    const long long t0 = clock64();
    for (int i = 0; i < steps; ++i) j = s[j];
    const long long t1 = clock64();
    cycles[0] = t1 - t0;
    sink[0] = j;
  }
}

// Tiles of 4 x blockDim 16-byte chunks into two shared stages, `tiles` tiles over the grid.
extern "C" __global__ void mb_load_store(const int4* __restrict__ src, unsigned long long tiles, int* sink) {
  extern __shared__ int4 buf[];
  const unsigned tile = blockDim.x * 4;
  int stage = 0;
  for (unsigned long long t = blockIdx.x; t < tiles; t += gridDim.x) {
    #pragma unroll
    for (int u = 0; u < 4; ++u) {
      const unsigned e = u * blockDim.x + threadIdx.x;
      buf[stage * tile + e] = __ldcg(src + t * tile + e);
    }
    stage ^= 1;
  }
  __syncthreads();
  if (buf[threadIdx.x].x == 0x7fffffff) sink[0] = 1;
}

#if __CUDA_ARCH__ >= 800
extern "C" __global__ void mb_cp_async(const int4* __restrict__ src, unsigned long long tiles, int* sink) {
  extern __shared__ int4 buf[];
  const unsigned tile = blockDim.x * 4;
  int stage = 0;
  for (unsigned long long t = blockIdx.x; t < tiles; t += gridDim.x) {
    #pragma unroll
    for (int u = 0; u < 4; ++u) {
      const unsigned e = u * blockDim.x + threadIdx.x;
      const unsigned dst = (unsigned)__cvta_generic_to_shared(buf + stage * tile + e);
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src + t * tile + e) : "memory");
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
    asm volatile("cp.async.wait_group 1;\n" ::: "memory");
    stage ^= 1;
  }
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
  __syncthreads();
  if (buf[threadIdx.x].x == 0x7fffffff) sink[0] = 1;
}
#endif
)";

// TMA: thread 0 of each block streams 2-D boxes through four shared stages, each completed by
// its mbarrier's transaction count.
const char* kTmaSource = R"(
struct __align__(64) TmaMap { unsigned long long v[16]; };

static __device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

static __device__ __forceinline__ void bar_wait(unsigned bar, unsigned parity) {
  unsigned done = 0;
  while (!done)
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
}

extern "C" __global__ void mb_tma(const __grid_constant__ TmaMap map, int tiles, int box_rows, int box_bytes, int* sink) {
  extern __shared__ __align__(1024) unsigned char raw[];
  unsigned char* smem = (unsigned char*)(((unsigned long long)raw + 1023) & ~1023ull);
  __shared__ __align__(8) unsigned long long bar[4];
  const int stages = 4;
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_addr(&bar[s])) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned phase[4] = {0, 0, 0, 0};
    int k = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x, ++k) {
      const int s = k % stages;
      if (k >= stages) { bar_wait(smem_addr(&bar[s]), phase[s]); phase[s] ^= 1; }
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(&bar[s])), "r"(box_bytes) : "memory");
      asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                   ::"r"(smem_addr(smem + s * box_bytes)), "l"((unsigned long long)&map), "r"(0), "r"(t * box_rows),
                   "r"(smem_addr(&bar[s])) : "memory");
    }
    for (int r = k > stages ? k - stages : 0; r < k; ++r) {
      const int s = r % stages;
      bar_wait(smem_addr(&bar[s]), phase[s]);
      phase[s] ^= 1;
    }
  }
  __syncthreads();
  if (smem[threadIdx.x] == 0x7f && threadIdx.x == 4096) sink[0] = 1;
}
)";

// The tensor-core kernels share one frame: clock64 around `iters` iterations of BODY after SETUP,
// one count per block, the accumulators folded into a never-true store.
std::string tensor_frame(const std::string& name, const std::string& prelude, const std::string& setup,
                         const std::string& body, const std::string& fold, const std::string& drain = "") {
  return prelude + "\nextern \"C\" __global__ void " + name + "(int iters, long long* cycles, int* sink) {\n" + setup +
         "  __syncthreads();\n  const long long t0 = clock64();\n  for (int it = 0; it < iters; ++it) {\n" + body +
         "  }\n" + drain + "  __syncthreads();\n  const long long t1 = clock64();\n  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;\n" + fold +
         "}\n";
}

struct TypeNames {
  const char* wmma_in;   // WMMA element type
  const char* wmma_acc;
  const char* one;       // an input value
  const char* ptx_in;    // mma.sync / wgmma type
  const char* ptx_acc;
  const char* acc_c;     // C type of an accumulator register
  const char* acc_constraint;
  int k_mult;            // k of the PTX shapes / 16 (2 for 8-bit inputs)
};

TypeNames type_names(DType a) {
  switch (a) {
    case DType::BF16: return {"__nv_bfloat16", "float", "__float2bfloat16(1.0f)", "bf16", "f32", "float", "f", 1};
    case DType::I8: return {"signed char", "int", "(signed char)1", "s8", "s32", "int", "r", 2};
    default: return {"half", "float", "__float2half(1.0f)", "f16", "f32", "float", "f", 1};
  }
}

constexpr int kTensorWarps = 16;

MicrobenchModule wmma_module(const std::string& arch, DType a, DType acc) {
  const TypeNames t = type_names(a);
  const std::string prelude = std::string("#include <mma.h>\n#include <cuda_fp16.h>\n") +
                              (a == DType::BF16 ? "#include <cuda_bf16.h>\n" : "") + "using namespace nvcuda;\n";
  const std::string setup = fmt::format(
      "  wmma::fragment<wmma::matrix_a, 16, 16, 16, {0}, wmma::row_major> a;\n"
      "  wmma::fragment<wmma::matrix_b, 16, 16, 16, {0}, wmma::col_major> b;\n"
      "  wmma::fragment<wmma::accumulator, 16, 16, 16, {1}> c[4];\n"
      "  wmma::fill_fragment(a, {2});\n  wmma::fill_fragment(b, {2});\n"
      "  for (int u = 0; u < 4; ++u) wmma::fill_fragment(c[u], ({1})0);\n",
      t.wmma_in, t.wmma_acc, t.one);
  const std::string body = "    #pragma unroll\n    for (int u = 0; u < 4; ++u) wmma::mma_sync(c[u], a, b, c[u]);\n";
  // every element of every accumulator feeds the sink: with only x[0] used, the compiler drops the
  // HMMA that computes the other 8 columns of each 16x16 tile (measured: 2593 "MAC/cycle/SM" on an
  // H200 against a 2048 peak)
  const std::string fold = std::string("  ") + t.wmma_acc +
                           " f = 0;\n  for (int u = 0; u < 4; ++u)\n    for (int i = 0; i < c[u].num_elements; ++i) f += c[u].x[i];\n  if (f == (" +
                           t.wmma_acc + ")-12345) sink[0] = 1;\n";
  const std::string name = std::string("mb_wmma_") + t.ptx_in;
  return {std::string("wmma_") + t.ptx_in, arch, tensor_frame(name, prelude, setup, body, fold), name, "wmma m16n16k16", a, acc,
          32 * kTensorWarps, double(kTensorWarps) * 4 * 16 * 16 * 16};
}

MicrobenchModule mma_module(const std::string& arch, DType a, DType acc) {
  const TypeNames t = type_names(a);
  const int k = 16 * t.k_mult;
  std::string mma = fmt::format("mma.sync.aligned.m16n8k{}.row.col.{}.{}.{}.{} {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};\\n",
                                k, t.ptx_acc, t.ptx_in, t.ptx_in, t.ptx_acc);
  const std::string setup = fmt::format("  {} d[8][4];\n  for (int u = 0; u < 8; ++u) d[u][0] = d[u][1] = d[u][2] = d[u][3] = 0;\n"
                                        "  const unsigned x = 0x3c003c00u ^ (threadIdx.x & 1);\n", t.acc_c);
  const std::string c = t.acc_constraint;
  const std::string body = "    #pragma unroll\n    for (int u = 0; u < 8; ++u)\n      asm volatile(\"" + mma + "\"\n        : \"+" + c +
                           "\"(d[u][0]), \"+" + c + "\"(d[u][1]), \"+" + c + "\"(d[u][2]), \"+" + c +
                           "\"(d[u][3])\n        : \"r\"(x), \"r\"(x), \"r\"(x), \"r\"(x), \"r\"(x), \"r\"(x));\n";
  const std::string fold = std::string("  ") + t.acc_c + " f = 0;\n  for (int u = 0; u < 8; ++u) f += d[u][0];\n  if (f == (" + t.acc_c +
                           ")-12345) sink[0] = 1;\n";
  const std::string name = std::string("mb_mma_") + t.ptx_in;
  return {std::string("mma_") + t.ptx_in, arch, tensor_frame(name, "", setup, body, fold), name, fmt::format("mma.sync m16n8k{}", k),
          a, acc, 32 * kTensorWarps, double(kTensorWarps) * 8 * 16 * 8 * k};
}

// Two warpgroups, each issuing four wgmma m64n256 (same accumulators) per commit group, one group
// in flight; A and B from 128-byte-swizzled shared descriptors (their contents do not matter for
// the rate).
MicrobenchModule wgmma_module(DType a, DType acc) {
  const TypeNames t = type_names(a);
  const int k = 16 * t.k_mult, nreg = 128;
  std::string inst = fmt::format("wgmma.mma_async.sync.aligned.m64n256k{}.{}.{}.{} {{", k, t.ptx_acc, t.ptx_in, t.ptx_in);
  for (int r = 0; r < nreg; ++r) inst += (r ? ", " : "") + fmt::format("%{}", r);
  inst += fmt::format("}}, %{}, %{}, 1", nreg, nreg + 1);
  if (a != DType::I8) inst += ", 1, 1, 0, 0";
  inst += ";\\n";
  std::string outs;
  for (int r = 0; r < nreg; ++r) outs += (r ? ", " : "") + fmt::format("\"+{}\"(d[{}])", t.acc_constraint, r);
  const std::string prelude =
      "#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)\n#error \"wgmma needs sm_90a\"\n#endif\n"
      "static __device__ __forceinline__ unsigned long long mb_desc(const void* p) {\n"
      "  const unsigned a = (unsigned)__cvta_generic_to_shared(p);\n"
      "  return (unsigned long long)((a & 0x3FFFFu) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);\n}\n" +
      fmt::format("static __device__ __forceinline__ void mb_wgmma({}* d, unsigned long long da, unsigned long long db) {{\n", t.acc_c) +
      "  asm volatile(\"" + inst + "\"\n    : " + outs + "\n    : \"l\"(da), \"l\"(db));\n}\n";
  const std::string setup = fmt::format(
      "  __shared__ __align__(1024) unsigned char tiles[2 * 2048 + 8192];\n"
      "  for (int i = threadIdx.x; i < 2 * 2048 + 8192; i += blockDim.x) tiles[i] = (unsigned char)(i & 7);\n"
      "  {} d[{}];\n  for (int r = 0; r < {}; ++r) d[r] = 0;\n"
      "  const unsigned long long da = mb_desc(tiles + (threadIdx.x / 128) * 2048), db = mb_desc(tiles + 4096);\n"
      "  asm volatile(\"fence.proxy.async.shared::cta;\\n\" ::: \"memory\");\n",
      t.acc_c, nreg, nreg);
  const std::string body =
      "    asm volatile(\"wgmma.fence.sync.aligned;\\n\" ::: \"memory\");\n"
      "    mb_wgmma(d, da, db);\n    mb_wgmma(d, da, db);\n    mb_wgmma(d, da, db);\n    mb_wgmma(d, da, db);\n"
      "    asm volatile(\"wgmma.commit_group.sync.aligned;\\n\" ::: \"memory\");\n"
      "    asm volatile(\"wgmma.wait_group.sync.aligned 1;\\n\" ::: \"memory\");\n";
  const std::string fold = std::string("  ") + t.acc_c + " f = 0;\n  for (int r = 0; r < " + std::to_string(nreg) +
                           "; ++r) f += d[r];\n  if (f == (" + t.acc_c + ")-12345) sink[0] = 1;\n";
  const std::string drain = "  asm volatile(\"wgmma.wait_group.sync.aligned 0;\\n\" ::: \"memory\");\n";
  const std::string name = std::string("mb_wgmma_") + t.ptx_in;
  const std::string source = tensor_frame(name, prelude, setup, body, fold, drain);
  return {std::string("wgmma_") + t.ptx_in, "sm_90a", source, name, fmt::format("wgmma m64n256k{}", k), a, acc, 256,
          2.0 * 4 * 64 * 256 * k};
}

}  // namespace

std::vector<MicrobenchModule> microbench_modules(const std::string& device_arch) {
  const int sm = parse_sm_arch(device_arch);
  std::vector<MicrobenchModule> out;
  out.push_back({"memory", device_arch, kMemorySource});
  if (sm >= 90) out.push_back({"tma", device_arch, kTmaSource});
  out.push_back(wmma_module(device_arch, DType::F16, DType::F32));
  if (sm >= 80) out.push_back(wmma_module(device_arch, DType::BF16, DType::F32));
  out.push_back(wmma_module(device_arch, DType::I8, DType::I32));
  if (sm >= 80)
    for (DType a : {DType::F16, DType::BF16, DType::I8}) out.push_back(mma_module(device_arch, a, a == DType::I8 ? DType::I32 : DType::F32));
  if (sm == 90)
    for (DType a : {DType::F16, DType::BF16, DType::I8}) out.push_back(wgmma_module(a, a == DType::I8 ? DType::I32 : DType::F32));
  return out;
}

}  // namespace tessel::gpu
