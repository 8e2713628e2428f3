// Skinny-GEMM data-movement microbenchmark (emit_cuda/README.md, "Where a skinny call's time goes"):
// per-call time in a CUDA graph of 100 programmatic-dependent launches of empty kernels (with and
// without clusters), DSMEM reads like the cluster split-K epilogue, and load-only kernels that move
// a skinny GEMM's operand tiles into shared memory with cp.async, with the bulk copy engine
// (cp.async.bulk + mbarrier) and with B multicast over a cluster. Not part of the CMake build:
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o skinny_loads scripts/skinny_loads.cu && ./skinny_loads
// (sm_90 only; prints one line per variant, median of 15 graph launches, us per call).
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdio>
#include <vector>
#include <algorithm>
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)

__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_launch() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void cp16(void* s, const void* g) {
  unsigned a = (unsigned)__cvta_generic_to_shared(s);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(a), "l"(g));
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ unsigned cluster_rank() { unsigned r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r; }

__global__ void k_empty(float* c) { pdl_wait(); pdl_launch(); if (threadIdx.x == 0 && blockIdx.x == 0) c[0] = 1.f; }
__global__ void k_empty_csync(float* c) { pdl_wait(); pdl_launch(); cluster_sync(); if (threadIdx.x == 0 && blockIdx.x == 0) c[0] = 1.f; }

// grid: (M/TM) * (N/TN) blocks, tile_n fastest... here tile index = blockIdx.x, n tiles = N/TN
template <int TM, int TN>
__global__ void k_load_plain(const __half* A, const __half* B, float* C, int M, int N, int K) {
  extern __shared__ __align__(128) unsigned char sm[];
  __half* As = (__half*)sm;
  __half* Bs = As + TM * K;
  const int nt = N / TN, tm = blockIdx.x / nt, tn = blockIdx.x % nt;
  pdl_wait();
  for (int c = threadIdx.x; c < TM * K / 8; c += blockDim.x) {
    int r = c / (K / 8), k = (c % (K / 8)) * 8;
    cp16(As + r * K + k, A + (size_t)(tm * TM + r) * K + k);
  }
  for (int c = threadIdx.x; c < K * TN / 8; c += blockDim.x) {
    int k = c / (TN / 8), n = (c % (TN / 8)) * 8;
    cp16(Bs + k * TN + n, B + (size_t)k * N + tn * TN + n);
  }
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
  __syncthreads();
  pdl_launch();
  float s = __half2float(As[threadIdx.x]) + __half2float(Bs[threadIdx.x]);
  C[(size_t)(tm * TM + threadIdx.x % TM) * N + tn * TN + threadIdx.x / TM % TN] = s;
}

// B (K x N, N == TN: the B tile is contiguous) multicast over a cluster of CL blocks along M:
// rank r copies K/CL rows with one bulk copy to every block of the cluster. A per block via cp.async.
template <int TM, int TN, int CL, bool END_SYNC>
__global__ void k_load_mcast(const __half* A, const __half* B, float* C, int M, int N, int K) {
  extern __shared__ __align__(128) unsigned char sm[];
  __shared__ __align__(8) unsigned long long bar;
  __half* As = (__half*)sm;
  __half* Bs = As + TM * K;
  const int tm = blockIdx.x, tn = 0;
  const unsigned rank = cluster_rank();
  const unsigned bar_a = (unsigned)__cvta_generic_to_shared(&bar);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar_a));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  pdl_wait();
  for (int c = threadIdx.x; c < TM * K / 8; c += blockDim.x) {
    int r = c / (K / 8), k = (c % (K / 8)) * 8;
    cp16(As + r * K + k, A + (size_t)(tm * TM + r) * K + k);
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
  cluster_sync();   // every block's barrier is initialised before anyone multicasts into it
  if (threadIdx.x == 0) {
    const unsigned bytes_all = K * TN * 2, part = bytes_all / CL;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar_a), "r"(bytes_all) : "memory");
    const unsigned dst = (unsigned)__cvta_generic_to_shared(Bs) + rank * part;
    const __half* src = B + (size_t)rank * (K / CL) * N;
    const unsigned short mask = (unsigned short)((1u << CL) - 1);
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], %4;"
                 ::"r"(dst), "l"(src), "r"(part), "r"(bar_a), "h"(mask) : "memory");
  }
  asm volatile("{\n.reg .pred p;\nWAIT_%=:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n@!p bra WAIT_%=;\n}" ::"r"(bar_a) : "memory");
  asm volatile("cp.async.wait_group 0;" ::: "memory");
  __syncthreads();
  pdl_launch();
  float s = __half2float(As[threadIdx.x]) + __half2float(Bs[threadIdx.x * 7 % (K * TN)]);
  C[(size_t)(tm * TM + threadIdx.x % TM) * N + tn * TN + threadIdx.x / TM % TN] = s;
  if (END_SYNC) cluster_sync();
}

// everything through the bulk copy engine (cp.async.bulk, no multicast) completing on one mbarrier:
// A: one copy per row (K*2 bytes) into rows padded by 16 B; B: one copy per K row (TN*2 bytes, padded rows) or one copy of the whole contiguous tile
template <int TM, int TN, bool B_ROWS>
__global__ void k_load_bulk(const __half* A, const __half* B, float* C, int M, int N, int K) {
  extern __shared__ __align__(128) unsigned char sm[];
  __shared__ __align__(8) unsigned long long bar;
  const int lda = K + 8, ldb = B_ROWS ? TN + 8 : TN;
  __half* As = (__half*)sm;
  __half* Bs = As + TM * lda;
  const int nt = N / TN, tm = blockIdx.x / nt, tn = blockIdx.x % nt;
  const unsigned bar_a = (unsigned)__cvta_generic_to_shared(&bar);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar_a));
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();
  pdl_wait();
  if (threadIdx.x == 0) {
    const unsigned bytes = TM * K * 2 + K * TN * 2;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar_a), "r"(bytes) : "memory");
  }
  __syncthreads();
  for (int r = threadIdx.x; r < TM; r += blockDim.x) {
    const unsigned dst = (unsigned)__cvta_generic_to_shared(As + r * lda);
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(dst), "l"(A + (size_t)(tm * TM + r) * K), "r"(K * 2), "r"(bar_a) : "memory");
  }
  if (B_ROWS) {
    for (int k = threadIdx.x; k < K; k += blockDim.x) {
      const unsigned dst = (unsigned)__cvta_generic_to_shared(Bs + k * ldb);
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                   ::"r"(dst), "l"(B + (size_t)k * N + tn * TN), "r"(TN * 2), "r"(bar_a) : "memory");
    }
  } else if (threadIdx.x == 0) {
    const unsigned dst = (unsigned)__cvta_generic_to_shared(Bs);
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(dst), "l"(B), "r"(K * TN * 2), "r"(bar_a) : "memory");
  }
  asm volatile("{\n.reg .pred p;\nWAIT_%=:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n@!p bra WAIT_%=;\n}" ::"r"(bar_a) : "memory");
  pdl_launch();
  float s = __half2float(As[threadIdx.x]) + __half2float(Bs[threadIdx.x]);
  C[(size_t)(tm * TM + threadIdx.x % TM) * N + tn * TN + threadIdx.x / TM % TN] = s;
}

// DSMEM reads like the split-K cluster epilogue: 128 threads each load NL float4 from the 4 ranks' shared memory
template <int NL>
__global__ void k_dsmem(float* C) {
  extern __shared__ __align__(128) unsigned char sm[];
  float* f = (float*)sm;
  for (int i = threadIdx.x; i < 9216; i += blockDim.x) f[i] = i;
  pdl_wait();
  cluster_sync();
  if (threadIdx.x < 128) {
    float4 v[NL];
    #pragma unroll
    for (int i = 0; i < NL; ++i) {
      unsigned a = (unsigned)__cvta_generic_to_shared(f + (i % 4) * 2304 + threadIdx.x * 4), r;
      asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(i / 4 % 4));
      asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v[i].x), "=f"(v[i].y), "=f"(v[i].z), "=f"(v[i].w) : "r"(r));
    }
    float s = 0;
    #pragma unroll
    for (int i = 0; i < NL; ++i) s += v[i].x + v[i].y + v[i].z + v[i].w;
    C[blockIdx.x * 128 + threadIdx.x] = s;
  }
  pdl_launch();
  cluster_sync();
}

struct Cfg { const char* name; void* fn; int grid, threads, smem, cluster; };

static float time_graph(const Cfg& c, void** args, cudaStream_t st) {
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3(c.grid); lc.blockDim = dim3(c.threads); lc.dynamicSmemBytes = c.smem; lc.stream = st;
  cudaLaunchAttribute at[2]; int na = 0;
  at[na].id = cudaLaunchAttributeProgrammaticStreamSerialization; at[na].val.programmaticStreamSerializationAllowed = 1; ++na;
  if (c.cluster > 1) { at[na].id = cudaLaunchAttributeClusterDimension; at[na].val.clusterDim.x = c.cluster; at[na].val.clusterDim.y = 1; at[na].val.clusterDim.z = 1; ++na; }
  lc.attrs = at; lc.numAttrs = na;
  CK(cudaFuncSetAttribute(c.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, c.smem));
  if (c.cluster > 1) CK(cudaFuncSetAttribute(c.fn, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  CK(cudaLaunchKernelExC(&lc, c.fn, args));
  CK(cudaStreamSynchronize(st));
  cudaGraph_t g; cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < 100; ++i) CK(cudaLaunchKernelExC(&lc, c.fn, args));
  CK(cudaStreamEndCapture(st, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  for (int w = 0; w < 3; ++w) CK(cudaGraphLaunch(ge, st));
  std::vector<float> v;
  for (int r = 0; r < 15; ++r) {
    CK(cudaEventRecord(e0, st)); CK(cudaGraphLaunch(ge, st)); CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1)); float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); v.push_back(ms * 1000.f / 100.f);
  }
  std::sort(v.begin(), v.end());
  CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(g));
  return v[v.size() / 2];
}

int main() {
  const int M = 2048, N = 32, K = 512;
  __half *A, *B; float* C;
  CK(cudaMalloc(&A, (size_t)4096 * 4096 * 2)); CK(cudaMalloc(&B, (size_t)4096 * 4096 * 2)); CK(cudaMalloc(&C, (size_t)4096 * 4096 * 4));
  CK(cudaMemset(A, 0, (size_t)4096 * 4096 * 2)); CK(cudaMemset(B, 0, (size_t)4096 * 4096 * 2));
  cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  int m = M, n = N, k = K;
  void* args[] = {&A, &B, &C, &m, &n, &k};
  void* eargs[] = {&C};
  std::vector<Cfg> cs = {
    {"empty g128", (void*)k_empty, 128, 128, 0, 1},
    {"empty g128 smem64K", (void*)k_empty, 128, 128, 65536, 1},
    {"empty g128 cl4", (void*)k_empty, 128, 128, 0, 4},
    {"empty g128 cl4 +clsync", (void*)k_empty_csync, 128, 128, 0, 4},
    {"empty g128 cl2 +clsync", (void*)k_empty_csync, 128, 128, 0, 2},
  };
  cs.push_back({"dsmem 4 loads cl4 g128 smem36K", (void*)k_dsmem<4>, 128, 256, 36864, 4});
  cs.push_back({"dsmem 16 loads cl4 g128 smem36K", (void*)k_dsmem<16>, 128, 256, 36864, 4});
  cs.push_back({"dsmem 16 loads cl4 g128 smem55K", (void*)k_dsmem<16>, 128, 256, 55296, 4});
  for (auto& c : cs) printf("%-40s %6.3f us\n", c.name, time_graph(c, eargs, st));
  struct L { const char* name; void* fn; int grid, smem, cluster; };
  const int bsz = K * N * 2;
  std::vector<L> ls = {
    {"2048x32 plain TM32 (64 blk)", (void*)k_load_plain<32, 32>, 64, 32 * K * 2 + bsz, 1},
    {"2048x32 plain TM16 (128 blk)", (void*)k_load_plain<16, 32>, 128, 16 * K * 2 + bsz, 1},
    {"2048x32 bulk TM32 Bwhole", (void*)k_load_bulk<32, 32, false>, 64, 32 * (K + 8) * 2 + bsz, 1},
    {"2048x32 bulk TM32 Brows", (void*)k_load_bulk<32, 32, true>, 64, 32 * (K + 8) * 2 + K * 40 * 2, 1},
    {"2048x32 bulk TM16 Bwhole", (void*)k_load_bulk<16, 32, false>, 128, 16 * (K + 8) * 2 + bsz, 1},
    {"2048x32 bulk TM16 Brows", (void*)k_load_bulk<16, 32, true>, 128, 16 * (K + 8) * 2 + K * 40 * 2, 1},
    {"2048x32 bulk TM64 Brows", (void*)k_load_bulk<64, 32, true>, 32, 64 * (K + 8) * 2 + K * 40 * 2, 1},
    {"2048x32 mcast TM32 cl2", (void*)k_load_mcast<32, 32, 2, false>, 64, 32 * K * 2 + bsz, 2},
    {"2048x32 mcast TM32 cl4", (void*)k_load_mcast<32, 32, 4, false>, 64, 32 * K * 2 + bsz, 4},
    {"2048x32 mcast TM16 cl2", (void*)k_load_mcast<16, 32, 2, false>, 128, 16 * K * 2 + bsz, 2},
    {"2048x32 mcast TM16 cl4", (void*)k_load_mcast<16, 32, 4, false>, 128, 16 * K * 2 + bsz, 4},
    {"2048x32 mcast TM16 cl8", (void*)k_load_mcast<16, 32, 8, false>, 128, 16 * K * 2 + bsz, 8},
    {"2048x32 mcast TM16 cl4 endsync", (void*)k_load_mcast<16, 32, 4, true>, 128, 16 * K * 2 + bsz, 4},
    {"2048x32 mcast TM32 cl4 endsync", (void*)k_load_mcast<32, 32, 4, true>, 64, 32 * K * 2 + bsz, 4},
  };
  for (int th : {128}) for (auto& l : ls) {
    Cfg c{l.name, l.fn, l.grid, th, l.smem, l.cluster};
    printf("%-40s thr%3d %6.3f us\n", l.name, th, time_graph(c, args, st));
  }
  // 512x16 / 1024x32 shapes
  struct S { int M, N; };
  for (S s : {S{512, 16}, S{1024, 32}}) {
    m = s.M; n = s.N;
    const int bs = K * s.N * 2;
    if (s.N == 16) {
      std::vector<L> l2 = {
        {"512x16 plain TM16 (32 blk)", (void*)k_load_plain<16, 16>, 32, 16 * K * 2 + bs, 1},
        {"512x16 mcast TM16 cl4", (void*)k_load_mcast<16, 16, 4, false>, 32, 16 * K * 2 + bs, 4},
        {"512x16 plain TM16 sameidx", (void*)k_load_plain<16, 16>, 32, 16 * K * 2 + bs, 1}};
      for (auto& l : l2) { Cfg c{l.name, l.fn, l.grid, 128, l.smem, l.cluster}; printf("%-40s thr128 %6.3f us\n", l.name, time_graph(c, args, st)); }
    } else {
      std::vector<L> l2 = {
        {"1024x32 plain TM16 (64 blk)", (void*)k_load_plain<16, 32>, 64, 16 * K * 2 + bs, 1},
        {"1024x32 plain TM32 (32 blk)", (void*)k_load_plain<32, 32>, 32, 32 * K * 2 + bs, 1},
        {"1024x32 mcast TM16 cl4", (void*)k_load_mcast<16, 32, 4, false>, 64, 16 * K * 2 + bs, 4},
        {"1024x32 mcast TM16 cl8", (void*)k_load_mcast<16, 32, 8, false>, 64, 16 * K * 2 + bs, 8}};
      for (auto& l : l2) { Cfg c{l.name, l.fn, l.grid, 128, l.smem, l.cluster}; printf("%-40s thr128 %6.3f us\n", l.name, time_graph(c, args, st)); }
    }
  }
  printf("done\n");
  return 0;
}
