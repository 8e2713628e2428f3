#include "compiler/cli/run_gpu.h"

#include <set>

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <memory>

#include "compiler/emit_cuda/contraction.h"
#include "compiler/program/kernel_graph.h"
#include "compiler/emit_cuda/simt_gemm_policy.h"
#include "compiler/emit_cuda/tile_policy.h"
#include "isa/base/error.h"

#ifdef TESSEL_HAVE_CUDA
#include "compiler/cli/run_gpu_internal.h"
#include "gpu_backend/driver_api.h"
#include "gpu_backend/error.h"
#endif

namespace tessel::cli {

bool is_gpu_target(const Compilation& c) { return c.hierarchy.kind == isa::TargetKind::Gpu; }

void add_gpu_flags(CLI::App* cmd, GpuFlags& flags) {
  cmd->add_option("--gpu-tiles", flags.tiles,
                  "GPU targets: the same as --tile with a GPU plan, e.g. 64x32x128/64x32/ks4/st2/kb4/cl (kept for scripts)");
  cmd->add_flag("--pdl", flags.pdl, "GPU targets (sm_90+): programmatic dependent launch");
  cmd->add_option("--pdl-prefetch", flags.pdl_prefetch,
                  "with --pdl: inputs no earlier kernel writes (weights); their first tiles are copied before the wait")
      ->delimiter(',');
  cmd->add_flag("--tf32", flags.tf32,
                "GPU targets, sm_80+: run f32 contractions on the TensorCores with TF32 inputs (each operand rounded to a 10-bit "
                "mantissa, about 1e-3 relative error per product) and f32 accumulation (mma.sync m16n8k8); off by default. `tessel run` "
                "then verifies f32 outputs with a wider tolerance and says so");
  cmd->add_option("--autotune", flags.autotune,
                  "GPU targets, programs of several kernels: time each kernel's N best-ranked plans (the tile policy's "
                  "shortlist) in a CUDA graph on the program's own buffers and run the fastest (0: the policy's first plan)");
  cmd->add_flag("--no-row-kernels", flags.no_row_kernels,
                "GPU targets: map row programs (softmax, layer norm, ...) through the SIMT loop-tree walk instead of register row "
                "kernels (for comparison)");
}

emit_cuda::CudaOptions gpu_options(const Compilation& c, bool tile_given, const GpuFlags& flags) {
  emit_cuda::CudaOptions o;
  if (c.hierarchy.gpu) {
    o.arch = c.hierarchy.gpu->arch;
    o.machine = isa::GpuMachine::from(c.hierarchy);
  }
  o.tiles_from_kernel = tile_given || c.kernel.user_tile.has_value();
  if (!flags.tiles.empty() && !c.kernel.gpu_plan.empty() && flags.tiles != c.kernel.gpu_plan)
    throw UserError("--gpu-tiles " + flags.tiles + " and the plan " + c.kernel.gpu_plan + " (" + c.plan_source.describe() +
                    ") disagree; give one");
  const std::string& plan = !c.kernel.gpu_plan.empty() ? c.kernel.gpu_plan : flags.tiles;
  if (!plan.empty() && c.kernel.attention && is_attention_plan_text(plan)) {
    o.plan_required = true;  // the fused attention kernel's plan: the CUDA emitter reads Kernel::gpu_plan
  } else if (!plan.empty()) {
    if (emit_cuda::SimtGemmPlan::is_plan_text(plan)) o.simt_plan = emit_cuda::SimtGemmPlan::parse(plan);
    else o.config = emit_cuda::TcConfig::parse(plan);
    o.plan_required = true;
  }
  o.tf32 = flags.tf32;
  o.pdl = flags.pdl;
  o.row_kernels = !flags.no_row_kernels;
  o.pdl_prefetch = flags.pdl_prefetch;
  if (!o.pdl_prefetch.empty() && !o.pdl) throw UserError("--pdl-prefetch needs --pdl");
  for (const auto& t : o.pdl_prefetch) {
    const auto* tensor = c.kernel.find_tensor(t);
    if (!tensor || tensor->kind != ir::TensorKind::Input)
      throw UserError("--pdl-prefetch: '" + t + "' is not an input of " + c.kernel.name);
  }
  return o;
}

std::string compile_gpu_source(const Compilation& c, bool tile_given, const GpuFlags& flags, std::string* explain_out) {
  emit_cuda::CudaProgram p = emit_cuda::emit_cuda(c.kernel, gpu_options(c, tile_given, flags));
  if (explain_out) {
    explain_out->clear();
    for (const auto& x : c.splits) *explain_out += "reduction in two phases: " + x.to_string() + "\n";
    for (const auto& l : p.explain) *explain_out += l + "\n";
    for (const auto& l : p.launches)
      *explain_out += fmt::format("launch {}: grid {}x{}x{}, {} threads, {} B dynamic shared\n", l.kernel, l.grid[0], l.grid[1],
                                  l.grid[2], l.block, l.dynamic_shared_bytes);
  }
  return p.source;
}

std::vector<std::string> gpu_plan_space(const Compilation& c, const GpuFlags& flags) {
  if (!c.kernel.contraction) return {};
  GpuFlags choice = flags;
  choice.tiles.clear();
  emit_cuda::CudaOptions o = gpu_options(c, false, choice);
  o.config.reset();
  o.simt_plan.reset();
  o.plan_required = false;
  const emit_cuda::CudaProgram p = emit_cuda::emit_cuda(c.kernel, o);
  if (p.simt_gemm) {  // the register-blocked SIMT (or TF32) contraction kernel's plans
    std::vector<std::string> out;
    for (const auto& g : emit_cuda::simt_gemm_candidates(*c.kernel.contraction, emit_cuda::machine_for(o), o.tf32)) out.push_back(g.to_string());
    return out;
  }
  if (!p.tensor_cores) return {};
  std::vector<std::string> out;
  for (const auto& g : emit_cuda::tc_candidates(*c.kernel.contraction, emit_cuda::machine_for(o))) out.push_back(g.to_string());
  return out;
}

#ifndef TESSEL_HAVE_CUDA
bool gpu_present(std::string* why) {
  *why = "this tessel was built without the CUDA toolkit";
  return false;
}
GpuRunResult run_on_gpu(const Compilation&, const std::map<std::string, NpyArray>&, bool, bool, const GpuFlags&) {
  throw NoGpu("tessel run: this tessel was built without the CUDA toolkit; GPU targets can only be compiled (-o k.cu)");
}
GpuRunResult run_program_on_gpu(const program::ProgramCompilation& p, const std::map<std::string, NpyArray>&, bool, const GpuFlags&) {
  throw NoGpu("tessel run: " + p.def->name + ": this tessel was built without the CUDA toolkit (no GPU backend)");
}
nlohmann::json bench_gpu(const std::string&, bool) {
  throw UserError("tessel bench gpu: this tessel was built without the CUDA toolkit");
}
#else

bool gpu_present(std::string* why) { return gpu::device_count(why) > 0; }

namespace gpurun {

std::string device_arch() { return gpu::Context::get().device().properties.arch; }

LoadedProgram load_program(const kernel::Kernel& k, emit_cuda::CudaOptions o) {
  LoadedProgram lp;
  const std::string dev = device_arch();
  // An older description's code (sm70, sm75 on a Hopper GPU) is emitted within its own limits and
  // compiled for the device (PTX of older architectures runs on newer ones); a newer description's
  // code may use what the device lacks, so it is emitted for the device's own machine instead.
  auto number = [](const std::string& arch) { return arch.size() > 3 ? std::atoi(arch.c_str() + 3) : 0; };
  const bool older = o.arch != dev && number(o.arch) > 0 && number(o.arch) < number(dev);
  if (o.arch != dev) {
    lp.notes.push_back("description arch " + o.arch + " differs from the device's " + dev + "; " +
                       (older ? "its code (the description's limits) compiled for " + dev : "compiled for " + dev));
    if (!older) o.arch = dev;
  }
  lp.program = emit_cuda::emit_cuda(k, o);
  // wgmma kernels need the architecture-specific target (sm_90a); everything else the device's
  const std::string target = older ? dev : lp.program.arch;
  gpu::CompiledCubin cubin;
  try {
    cubin = gpu::compile_to_cubin(lp.program.source, {.arch = target, .options = {"-fmad=false"}});
  } catch (const gpu::CompileError& e) {  // CUDA tessel emitted that NVRTC refuses: a tessel bug (exit 3)
    throw InternalError("tessel bug: NVRTC refused the CUDA tessel emitted for operator '" + k.name + "' (" + target +
                        "): " + e.what());
  }
  lp.compile_from_cache = cubin.from_cache;
  lp.tensor_core_ops = gpu::cubin_tensor_core_op_count(cubin.cubin);
  lp.module = std::make_unique<gpu::Module>(cubin.cubin);
  for (const auto& l : lp.program.launches) lp.kernels.push_back(lp.module->function(l.kernel));
  for (auto& kn : lp.kernels) lp.attributes.push_back(kn.attributes());
  return lp;
}

DeviceTensors allocate(const kernel::Kernel& k, const std::map<std::string, NpyArray>& inputs, uint64_t scratch_bytes) {
  DeviceTensors d;
  for (const auto& t : k.tensors) {
    int64_t n = 1;
    for (int64_t s : t.shape) n *= s;
    const size_t bytes = size_t(std::max<int64_t>(n, 1)) * dtype_bytes(t.dtype);
    auto it = inputs.find(t.name);
    if (t.kind == ir::TensorKind::Input) {
      if (it == inputs.end()) throw UserError("tessel run: no input " + t.name);
      d.buffers.push_back(gpu::upload_npy(it->second));
    } else {
      gpu::DeviceBuffer b(bytes);
      b.fill_bytes(t.temporary ? 0 : 0xff);  // outputs poisoned: every element must be written
      d.buffers.push_back(std::move(b));
    }
    d.index[t.name] = d.buffers.size() - 1;
  }
  d.scratch = gpu::DeviceBuffer(std::max<uint64_t>(scratch_bytes, 256));
  d.scratch.fill_bytes(0);
  for (const auto& b : d.buffers) d.ptrs.push_back(b.ptr());
  d.ptrs.push_back(d.scratch.ptr());
  return d;
}

namespace {

// A launch's tensor map over its tensor's device buffer (cuTensorMapEncodeTiled)
CUtensorMap encode_map(const emit_cuda::TensorMapSpec& m, const DeviceTensors& d) {
  const auto encode = gpu::tensor_map_encode_tiled();
  if (!encode) throw gpu::GpuError("cuTensorMapEncodeTiled", "the CUDA driver has no cuTensorMapEncodeTiled (driver older than CUDA 12)");
  if (m.dtype != DType::F16 && m.dtype != DType::BF16 && m.dtype != DType::F32)
    throw InternalError("tensor map of " + m.tensor + ": only f16, bf16 and f32 maps are generated");
  const CUtensorMapDataType type = m.dtype == DType::F16    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                   : m.dtype == DType::BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                            : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  // an operand's copy in scratch (repack_plan.h) or a kernel tensor's buffer
  const CUdeviceptr origin = m.in_scratch ? d.scratch.ptr() + CUdeviceptr(m.scratch_offset) : d.ptrs.at(d.index.at(m.tensor));
  const CUdeviceptr base = origin + CUdeviceptr(m.base) * dtype_bytes(m.dtype);
  const cuuint32_t rank = cuuint32_t(m.dims.size());
  std::vector<cuuint64_t> dims(m.dims.begin(), m.dims.end()), strides(m.strides.begin(), m.strides.end());
  std::vector<cuuint32_t> box(m.box.begin(), m.box.end()), elem_strides(rank, 1);
  const CUtensorMapSwizzle swizzle = m.swizzle_bytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B
                                     : m.swizzle_bytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                     : m.swizzle_bytes == 32 ? CU_TENSOR_MAP_SWIZZLE_32B
                                                             : CU_TENSOR_MAP_SWIZZLE_NONE;
  CUtensorMap map{};
  if (m.im2col) {
    const auto im2col = gpu::tensor_map_encode_im2col();
    if (!im2col) throw gpu::GpuError("cuTensorMapEncodeIm2col", "the CUDA driver has no cuTensorMapEncodeIm2col (driver older than CUDA 12)");
    gpu::check_cu(im2col(&map, type, rank, reinterpret_cast<void*>(base), dims.data(), strides.data(), m.lower.data(),
                         m.upper.data(), m.channels, m.pixels, elem_strides.data(), CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                         CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
                  "cuTensorMapEncodeIm2col");
    return map;
  }
  gpu::check_cu(encode(&map, type, rank, reinterpret_cast<void*>(base), dims.data(), strides.data(), box.data(),
                       elem_strides.data(), CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                       CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
                "cuTensorMapEncodeTiled");
  return map;
}

}  // namespace

void launch_all(LoadedProgram& lp, DeviceTensors& d, CUstream s) {
  if (lp.maps_ptrs != d.ptrs) {  // encoded once per set of buffers (the maps hold their addresses)
    lp.maps.clear();
    for (const auto& l : lp.program.launches) {
      lp.maps.emplace_back();
      for (const auto& m : l.tensor_maps) lp.maps.back().push_back(encode_map(m, d));
    }
    lp.maps_ptrs = d.ptrs;
  }
  for (size_t i = 0; i < lp.kernels.size(); ++i) {
    const auto& l = lp.program.launches[i];
    std::vector<void*> params;
    for (auto& p : d.ptrs) params.push_back(&p);
    for (auto& m : lp.maps[i]) params.push_back(&m);
    params.push_back(nullptr);
    lp.kernels[i].launch_raw({.grid = {l.grid[0], l.grid[1], l.grid[2]}, .block = {l.block, 1, 1},
                              .dynamic_shared_bytes = l.dynamic_shared_bytes,
                              .programmatic = l.pdl},
                             s, params.data());
  }
}

std::map<std::string, NpyArray> download_outputs(const kernel::Kernel& k, const DeviceTensors& d) {
  std::map<std::string, NpyArray> out;
  for (const auto& t : k.tensors) {
    if (t.kind != ir::TensorKind::Output || t.temporary) continue;
    NpyArray a;
    a.dtype = t.dtype;
    a.shape = t.user_shape();
    a.data.resize(size_t(a.element_count()) * dtype_bytes(t.dtype));
    gpu::download_npy(d.buffers[d.index.at(t.name)], a);
    out[t.name] = std::move(a);
  }
  return out;
}

std::optional<Baseline> find_baseline(const kernel::Kernel& k) {
  const auto& c = k.contraction;
  if (!c || c->in_type != DType::F16 || c->acc_type != DType::F32 || !c->batch.empty()) return std::nullopt;
  Baseline b;
  if (!c->a.producer && !c->b.producer && c->m.size() == 1 && c->n.size() == 1 && c->k.size() == 1 && !c->swapped) {
    const int64_t M = c->size_m(), N = c->size_n(), K = c->size_k();
    const auto& ca = c->a.coeff;
    const auto& cb = c->b.coeff;
    if (ca.size() == 2 && ca.at(c->m[0].var) == K && ca.at(c->k[0].var) == 1 && cb.size() == 2 && cb.at(c->k[0].var) == N &&
        cb.at(c->n[0].var) == 1 && c->a.base == 0 && c->b.base == 0) {
      b.kind = Baseline::Gemm;
      b.gemm = {M, N, K};
      b.a = c->a.tensor;
      b.b = c->b.tensor;
      return b;
    }
  }
  // NHWC convolution: X[N,H,W,C] through a padding producer, filter [R,S,C,K], output [N,P,Q,K]
  if (!c->b.producer && c->m.size() == 3 && c->n.size() == 1 && c->k.size() == 3) {
    const auto* x = k.find_tensor(c->a.tensor);
    const auto* w = k.find_tensor(c->b.tensor);
    if (!x || !w || x->shape.size() != 4 || w->shape.size() != 4 || c->a.indices.size() != 4) return std::nullopt;
    gpu::ConvShape s{.n = int(x->shape[0]), .h = int(x->shape[1]), .w = int(x->shape[2]), .c = int(x->shape[3]),
                     .k = int(w->shape[3]), .r = int(w->shape[0]), .s = int(w->shape[1])};
    // X(n, p + r - pad, q + s - pad, c): the padding is the negated constant of the window index
    auto shift = [&](const ir::AffineExpr& e) {
      int64_t v = e.constant;
      for (const auto& [p, q] : e.param_coeffs) v += q * k.sizes.at(p);
      return int(-v);
    };
    s.pad_h = shift(c->a.indices[1]);
    s.pad_w = shift(c->a.indices[2]);
    if (w->shape[2] != s.c || s.out_h() != c->m[1].extent || s.out_w() != c->m[2].extent || c->n[0].extent != s.k) return std::nullopt;
    b.kind = Baseline::Conv;
    b.conv = s;
    b.a = c->a.tensor;
    b.b = c->b.tensor;
    return b;
  }
  return std::nullopt;
}

BaselineRun run_baseline(const Baseline& b, const DeviceTensors& d, const std::map<std::string, NpyArray>& inputs, gpu::Stream& stream,
                         const gpu::TimingOptions& o, const std::vector<gpu::TimedCall>& interleave) {
  BaselineRun r;
  auto time = [&](const gpu::TimedCall& call) {
    r.stream = gpu::time_on_stream(call, stream, o);
    r.graph = gpu::time_in_graph(call, stream, o);
    if (interleave.empty()) return;
    std::vector<gpu::TimedCall> calls{call};
    calls.insert(calls.end(), interleave.begin(), interleave.end());
    r.interleaved = gpu::time_interleaved_in_graph(calls, stream, o);
  };
  if (b.kind == Baseline::Gemm) {
    gpu::CublasHandle h;
    gpu::DeviceBuffer c(size_t(b.gemm.m * b.gemm.n) * 4);
    const CUdeviceptr A = d.buffers[d.index.at(b.a)].ptr(), B = d.buffers[d.index.at(b.b)].ptr();
    gpu::TimedCall call = [&](CUstream s) { gpu::cublas_gemm_f16(h, s, b.gemm, A, B, c.ptr()); };
    call(stream);
    stream.synchronize();
    r.output.dtype = DType::F32;
    r.output.shape = {b.gemm.m, b.gemm.n};
    r.output.data.resize(size_t(b.gemm.m * b.gemm.n) * 4);
    gpu::download_npy(c, r.output);
    r.library = "cuBLAS";
    time(call);
    return r;
  }
  gpu::CudnnConv conv(b.conv);
  const auto& wt = inputs.at(b.b);
  gpu::DeviceBuffer w = gpu::DeviceBuffer::from_host(gpu::filter_rsck_to_krsc(wt.data, b.conv, 2));
  const size_t ny = size_t(b.conv.n) * b.conv.out_h() * b.conv.out_w() * b.conv.k;
  gpu::DeviceBuffer y(ny * 2);
  const CUdeviceptr X = d.buffers[d.index.at(b.a)].ptr();
  gpu::TimedCall call = [&](CUstream s) { conv.run(s, X, w.ptr(), y.ptr()); };
  call(stream);
  stream.synchronize();
  r.output.dtype = DType::F16;
  r.output.shape = {b.conv.n, b.conv.out_h(), b.conv.out_w(), b.conv.k};
  r.output.data.resize(ny * 2);
  gpu::download_npy(y, r.output);
  r.library = "cuDNN " + conv.algorithm_name();
  time(call);
  return r;
}

}  // namespace gpurun

GpuRunResult run_on_gpu(const Compilation& c, const std::map<std::string, NpyArray>& inputs, bool tile_given, bool timing,
                        const GpuFlags& flags) {
  using namespace gpurun;
  std::string why;
  if (gpu::device_count(&why) == 0)
    throw NoGpu("tessel run: no GPU here (" + why + "); `tessel compile --target " + c.hierarchy.source_file +
                    " -o k.cu` writes the CUDA source");
  gpu::Context& ctx = gpu::Context::get();
  LoadedProgram lp = load_program(c.kernel, gpu_options(c, tile_given, flags));
  DeviceTensors d = allocate(c.kernel, inputs, lp.program.scratch_bytes);
  gpu::Stream stream;
  launch_all(lp, d, stream);
  stream.synchronize();
  GpuRunResult r;
  r.outputs = download_outputs(c.kernel, d);
  r.report["tensor_cores"] = lp.program.tensor_cores;
  r.report["explain"] = lp.program.explain;
  // the library's output stands for ours only when the kernel computes nothing after the contraction
  const std::optional<Baseline> baseline = find_baseline(c.kernel);
  std::string plain_out;
  if (baseline && c.kernel.contraction->plain_output)
    for (const auto& t : c.kernel.tensors)
      if (t.kind == ir::TensorKind::Output) plain_out = plain_out.empty() ? t.name : "";
  auto keep_library = [&](BaselineRun& br) {
    if (plain_out.empty()) return;
    r.library = br.library;
    r.library_tensor = plain_out;
    r.library_output = std::move(br.output);
    const auto ours = r.outputs.find(plain_out);  // the library's result in the same (declared) shape
    if (r.library_output && ours != r.outputs.end() && r.library_output->element_count() == ours->second.element_count())
      r.library_output->shape = ours->second.shape;
  };
  if (!timing) {
    if (flags.library_output && !plain_out.empty()) {
      BaselineRun br = run_baseline(*baseline, d, inputs, stream, gpu::TimingOptions{1, 1, 1});
      keep_library(br);
    }
    return r;
  }
  gpu::TimingOptions o;
  gpu::TimedCall ours = [&](CUstream s) { launch_all(lp, d, s); };
  const gpu::Timing ts = gpu::time_on_stream(ours, stream, o), tg = gpu::time_in_graph(ours, stream, o);
  auto& j = r.report;
  j["device"] = ctx.device().name;
  j["arch"] = ctx.device().properties.arch;
  j["tensor_cores"] = lp.program.tensor_cores;
  j["tensor_core_ops_in_cubin"] = lp.tensor_core_ops;
  if (lp.program.config) j["tiles"] = lp.program.config->to_string();
  else if (!lp.program.plan.empty()) j["tiles"] = lp.program.plan;
  j["explain"] = lp.program.explain;
  j["notes"] = lp.notes;
  j["stream_us"] = ts.median_us;
  j["graph_us"] = tg.median_us;
  j["flops"] = lp.program.flops;
  std::string s = fmt::format("GPU {} ({}): {} ({} launch(es){}), {:.2f} us/call on a stream, {:.2f} us/call in a CUDA graph",
                              ctx.device().name, ctx.device().properties.arch,
                              lp.program.tensor_cores ? "TensorCores, " + (lp.program.config ? lp.program.config->to_string() : lp.program.plan) : "SIMT",
                              lp.program.launches.size(),
                              lp.tensor_core_ops ? fmt::format(", {} tensor-core instructions", lp.tensor_core_ops) : "",
                              ts.median_us, tg.median_us);
  if (lp.program.flops > 0) {
    j["tflops_graph"] = lp.program.flops / tg.median_us * 1e-6;
    s += fmt::format(", {:.1f} TFLOP/s", lp.program.flops / tg.median_us * 1e-6);
  }
  s += "\n";
  for (const auto& n : lp.notes) s += "  note: " + n + "\n";
  for (const auto& l : lp.program.explain)  // the split-K and mma.sync decisions (full list: tessel compile --explain)
    if (l.find("split-K") != std::string::npos || l.find("mma.sync path") != std::string::npos) s += l + "\n";
  for (size_t i = 0; i < lp.attributes.size(); ++i)
    if (lp.attributes[i].local_bytes_per_thread > 0)
      s += fmt::format("  note: {} spills {} B per thread to local memory\n", lp.program.launches[i].kernel,
                       lp.attributes[i].local_bytes_per_thread);
  if (baseline) {
    BaselineRun br = run_baseline(*baseline, d, inputs, stream, o);
    j["baseline"] = br.library;
    j["baseline_stream_us"] = br.stream.median_us;
    j["baseline_graph_us"] = br.graph.median_us;
    j["speedup_stream"] = br.stream.median_us / ts.median_us;
    j["speedup_graph"] = br.graph.median_us / tg.median_us;
    s += fmt::format("  {}: {:.2f} us stream, {:.2f} us graph; ours is {:.2f}x (stream) / {:.2f}x (graph) its speed\n", br.library,
                     br.stream.median_us, br.graph.median_us, br.stream.median_us / ts.median_us,
                     br.graph.median_us / tg.median_us);
    keep_library(br);
  }
  r.summary = s;
  return r;
}

namespace {

// --autotune N: the kernel's plan becomes the fastest of the tile policy's shortlist of N
// (emit_cuda::tc_shortlist over its ranked plans) and the best-ranked plan of each other main loop, each timed alone in a CUDA graph on the
// program's buffers; `lp` and the scratch of `d` are replaced by the winner's. Returns one line
// for the report ("3 plans timed, 64x64x64/... 2.1 us, default 4.0 us").
std::string autotune_kernel(const Compilation& c, gpurun::LoadedProgram& lp, gpurun::DeviceTensors& d, gpu::Stream& stream,
                            const GpuFlags& flags) {
  using namespace gpurun;
  const std::vector<std::string> space = gpu_plan_space(c);
  if (space.empty()) return "no plan space (not a contraction)";
  std::vector<std::string> plans;
  if (emit_cuda::SimtGemmPlan::is_plan_text(space.front())) {
    plans.assign(space.begin(), space.begin() + std::min<size_t>(space.size(), size_t(flags.autotune)));
  } else {
    std::vector<emit_cuda::TcConfig> ranked;
    for (const auto& t : space) ranked.push_back(emit_cuda::TcConfig::parse(t));
    for (const auto& g : emit_cuda::tc_shortlist(ranked, size_t(flags.autotune))) plans.push_back(g.to_string());
    // and the best-ranked plan of each main loop the shortlist lacks (persistent TMA, wgmma,
    // mma.sync, WMMA): the ranking orders plans within a main loop better than across them
    auto kind = [](const emit_cuda::TcConfig& g) { return g.tma_ws() ? 3 : int(g.mma); };  // wmma, mma.sync, wgmma, persistent TMA
    std::set<int> kinds;
    for (const auto& t : plans) kinds.insert(kind(emit_cuda::TcConfig::parse(t)));
    for (const auto& g : ranked)
      if (kinds.insert(kind(g)).second) plans.push_back(g.to_string());
  }
  const gpu::TimingOptions quick{3, 10, 5};
  auto time_of = [&](LoadedProgram& l, DeviceTensors& t) {
    return gpu::time_in_graph([&](CUstream s) { launch_all(l, t, s); }, stream, quick).median_us;
  };
  const double default_us = time_of(lp, d);
  double best_us = default_us;
  std::string best = "default";
  int timed = 1;
  for (const auto& plan : plans) {
    emit_cuda::CudaOptions o = gpu_options(c, false, flags);
    o.config.reset();
    o.simt_plan.reset();
    if (emit_cuda::SimtGemmPlan::is_plan_text(plan)) o.simt_plan = emit_cuda::SimtGemmPlan::parse(plan);
    else o.config = emit_cuda::TcConfig::parse(plan);
    o.plan_required = true;
    try {
      LoadedProgram cand = load_program(c.kernel, o);
      DeviceTensors t;
      t.index = d.index;
      t.ptrs = d.ptrs;
      t.scratch = gpu::DeviceBuffer(std::max<uint64_t>(cand.program.scratch_bytes, 256));
      t.scratch.fill_bytes(0);
      t.ptrs.back() = t.scratch.ptr();
      launch_all(cand, t, stream);
      stream.synchronize();
      const double us = time_of(cand, t);
      ++timed;
      if (us < best_us) {
        best_us = us;
        best = plan;
        lp = std::move(cand);
        d.scratch = std::move(t.scratch);
        d.ptrs.back() = d.scratch.ptr();
        lp.maps_ptrs.clear();  // re-encode the tensor maps over `d`
      }
    } catch (const std::exception&) {  // a plan this kernel cannot take: not timed
    }
  }
  return fmt::format("autotuned: {} plans timed, {} {:.2f} us, default {:.2f} us", timed, best, best_us, default_us);
}

// A program's kernels launched along its kernel graph (program/kernel_graph.h): kernels with no
// path between them go to different streams, forked from the caller's stream and joined back to
// it, so in a stream capture they are parallel branches of one CUDA graph.
constexpr int kProgramStreams = 4;  // at most this many kernels of a program at once

class ConcurrentLaunch {
 public:
  explicit ConcurrentLaunch(const program::ProgramCompilation& p)
      : graph_(program::kernel_graph(p, kProgramStreams)), side_(size_t(graph_.streams - 1)), done_(p.kernels.size()),
        join_(size_t(graph_.streams)) {}
  const program::KernelGraph& graph() const { return graph_; }
  template <class Launch>
  void operator()(CUstream s0, const Launch& launch) const {
    auto on = [&](int st) { return st == 0 ? s0 : side_[size_t(st - 1)].handle(); };
    fork_.record(s0);
    for (int st = 1; st < graph_.streams; ++st) fork_.wait_on(on(st));
    for (size_t j = 0; j < graph_.stream.size(); ++j) {
      const CUstream s = on(graph_.stream[j]);
      for (int i : graph_.cross_waits[j]) done_[size_t(i)].wait_on(s);
      launch(j, s);
      if (graph_.signals[j]) done_[j].record(s);
    }
    for (int st = 1; st < graph_.streams; ++st) {
      join_[size_t(st)].record(on(st));
      join_[size_t(st)].wait_on(s0);
    }
  }

 private:
  program::KernelGraph graph_;
  std::vector<gpu::Stream> side_;
  std::vector<gpu::SyncEvent> done_;
  std::vector<gpu::SyncEvent> join_;
  gpu::SyncEvent fork_;
};

}  // namespace

GpuRunResult run_program_on_gpu(const program::ProgramCompilation& p, const std::map<std::string, NpyArray>& inputs, bool timing,
                                const GpuFlags& flags) {
  using namespace gpurun;
  std::string why;
  if (gpu::device_count(&why) == 0) throw NoGpu("tessel run: no GPU here (" + why + ")");
  gpu::Context& ctx = gpu::Context::get();
  std::vector<LoadedProgram> lps;
  for (const auto& k : p.kernels) lps.push_back(load_program(k->kernel, gpu_options(*k, false, flags)));
  // One buffer per tensor of the def: its inputs uploaded, its outputs and the tensors no later
  // kernel reads allocated, the intermediates at their memory-plan offsets in one arena.
  std::map<std::string, gpu::DeviceBuffer> owned;
  std::map<std::string, CUdeviceptr> where;
  gpu::DeviceBuffer arena(size_t(std::max<int64_t>(p.memory.arena_bytes, 256)));
  arena.fill_bytes(0xff);  // poisoned: every element read must have been written by an earlier kernel
  for (const auto& s : p.memory.slots) where[s.tensor] = arena.ptr() + CUdeviceptr(s.offset);
  std::vector<DeviceTensors> ds(p.kernels.size());
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    const kernel::Kernel& k = p.kernels[i]->kernel;
    DeviceTensors& d = ds[i];
    for (const auto& t : k.tensors) {
      int64_t n = 1;
      for (int64_t e : t.shape) n *= e;
      const size_t bytes = size_t(std::max<int64_t>(n, 1)) * dtype_bytes(t.dtype);
      const std::string key = t.temporary ? fmt::format("{}#{}", i, t.name) : t.name;  // a kernel's own scratch tensor
      if (!where.count(key)) {
        const auto in = inputs.find(t.name);
        if (!t.temporary && in != inputs.end()) {
          owned.emplace(key, gpu::upload_npy(in->second));
        } else {
          if (t.kind == ir::TensorKind::Input) throw InternalError("run_program_on_gpu: " + k.name + " reads " + t.name + ", which no earlier kernel wrote");
          gpu::DeviceBuffer b(bytes);
          b.fill_bytes(t.temporary ? 0 : 0xff);
          owned.emplace(key, std::move(b));
        }
        where[key] = owned.at(key).ptr();
      }
      d.index[t.name] = d.ptrs.size();
      d.ptrs.push_back(where.at(key));
    }
    d.scratch = gpu::DeviceBuffer(std::max<uint64_t>(lps[i].program.scratch_bytes, 256));
    d.scratch.fill_bytes(0);
    d.ptrs.push_back(d.scratch.ptr());
  }
  gpu::Stream stream;
  const ConcurrentLaunch concurrent(p);
  auto launch_serial = [&](CUstream s) {
    for (size_t i = 0; i < lps.size(); ++i) launch_all(lps[i], ds[i], s);
  };
  auto launch_program = [&](CUstream s) { concurrent(s, [&](size_t i, CUstream on) { launch_all(lps[i], ds[i], on); }); };
  launch_program(stream);  // every kernel's inputs hold data before any kernel is timed alone
  stream.synchronize();
  std::vector<std::string> tuned;
  if (flags.autotune > 0)
    for (size_t i = 0; i < lps.size(); ++i) tuned.push_back(autotune_kernel(*p.kernels[i], lps[i], ds[i], stream, flags));
  launch_program(stream);
  stream.synchronize();
  GpuRunResult r;
  for (const auto* t : p.def->outputs()) {
    NpyArray a;
    a.dtype = t->dtype;
    for (const auto& e : t->shape) a.shape.push_back(e.evaluate({}, p.sizes));
    a.data.resize(size_t(a.element_count()) * dtype_bytes(t->dtype));
    gpu::download_npy(owned.at(t->name), a);
    r.outputs[t->name] = std::move(a);
  }
  if (!timing) return r;
  gpu::TimingOptions o;
  const gpu::Timing ts = gpu::time_on_stream(launch_program, stream, o), tg = gpu::time_in_graph(launch_program, stream, o);
  auto& j = r.report;
  j["device"] = ctx.device().name;
  j["arch"] = ctx.device().properties.arch;
  j["stream_us"] = ts.median_us;
  j["graph_us"] = tg.median_us;
  const double serial_us = lps.size() > 1 ? gpu::time_in_graph(launch_serial, stream, o).median_us : tg.median_us;
  j["serial_graph_us"] = serial_us;
  j["streams"] = concurrent.graph().streams;
  j["kernel_graph"] = concurrent.graph().to_string();
  double flops = 0, kernels_us = 0;
  std::string lines;
  nlohmann::json ks = nlohmann::json::array();
  for (size_t i = 0; i < lps.size(); ++i) {  // each kernel alone in a CUDA graph, on the buffers the program left
    const gpu::Timing ki = gpu::time_in_graph([&](CUstream s) { launch_all(lps[i], ds[i], s); }, stream, o);
    const auto& lp = lps[i];
    flops += lp.program.flops;
    kernels_us += ki.median_us;
    ks.push_back({{"kernel", p.kernels[i]->kernel.name}, {"graph_us", ki.median_us}, {"flops", lp.program.flops},
                  {"tensor_cores", lp.program.tensor_cores}, {"launches", lp.program.launches.size()},
                  {"tiles", lp.program.config ? lp.program.config->to_string() : lp.program.plan.empty() ? std::string("SIMT") : lp.program.plan}});
    lines += fmt::format("  kernel {:<16} {:>9.2f} us  {:<7} {}{}\n", p.kernels[i]->kernel.name, ki.median_us,
                         lp.program.tensor_cores ? "TC" : "SIMT", lp.program.config ? lp.program.config->to_string() : lp.program.plan,
                         tuned.empty() ? "" : "  (" + tuned[i] + ")");
  }
  if (!tuned.empty())
    for (size_t i = 0; i < ks.size(); ++i) ks[i]["autotune"] = tuned[i];
  j["kernels"] = ks;
  j["autotune"] = flags.autotune;
  j["kernels_graph_us"] = kernels_us;
  j["flops"] = flops;
  r.summary = fmt::format("GPU {} ({}): program of {} kernels on {} streams, {:.2f} us on a stream, {:.2f} us in one CUDA graph "
                          "({:.2f} us with the kernels in sequence, {:.2f} us summing each kernel alone), {:.1f} TFLOP/s\n",
                          ctx.device().name, ctx.device().properties.arch, lps.size(), concurrent.graph().streams, ts.median_us,
                          tg.median_us, serial_us, kernels_us, flops / tg.median_us * 1e-6) +
              lines;
  return r;
}

#endif

}  // namespace tessel::cli
