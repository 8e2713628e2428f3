#include "gpu_backend/microbench.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <numeric>
#include <random>

#include <fmt/format.h>

#include "gpu_backend/driver_api.h"
#include "gpu_backend/error.h"
#include "gpu_backend/microbench_kernels.h"
#include "gpu_backend/nvrtc_compile.h"
#include "gpu_backend/runtime.h"
#include "gpu_backend/timing.h"
#include "isa/base/error.h"

namespace tessel::gpu {
namespace {

constexpr size_t kDramBytes = size_t(1) << 30;        // well beyond any L2 (60 MiB on the H200)
constexpr size_t kChaseDramBytes = size_t(256) << 20;  // pointer chase beyond the L2
constexpr int kLineBytes = 128;

struct Bench {
  const isa::Hierarchy& h;
  const DeviceInfo& dev;
  Stream stream;
  DeviceBuffer sink{4096};
  std::map<std::string, std::unique_ptr<Module>> modules;  // by module name

  Kernel kernel(const MicrobenchModule& m, const std::string& fn) {
    auto it = modules.find(m.name);
    if (it == modules.end()) {
      const CompiledCubin c = compile_to_cubin(m.source, {.arch = m.arch});
      it = modules.emplace(m.name, std::make_unique<Module>(c.cubin)).first;
    }
    return it->second->function(fn);
  }
  MicrobenchModule module(const std::string& name) const {
    for (auto& m : microbench_modules(dev.properties.arch))
      if (m.name == name) return m;
    throw GpuError("microbench", "no microbenchmark module '" + name + "' for " + dev.properties.arch);
  }
  double clock_hz() const { return h.clock_mhz * 1e6; }
  // bytes per second -> bytes per cycle at the description's clock
  double per_cycle(double bytes_per_s) const { return bytes_per_s / clock_hz(); }
  // dynamic shared bytes that keep a block alone on its SM
  uint32_t alone_on_sm() const { return uint32_t(dev.properties.shared_bytes_per_sm / 2 + 1024); }
  unsigned blocks_per_sm_grid(unsigned per_sm) const { return dev.sm_count * per_sm; }
};

double timed_us(Bench& b, const TimedCall& call, int calls = 5) {
  return time_on_stream(call, b.stream, {.warmup_calls = 2, .calls_per_sample = calls, .repeats = 5}).median_us;
}

std::vector<long long> download_ll(const DeviceBuffer& d, size_t n) {
  std::vector<long long> v(n);
  d.download(v.data(), n * sizeof(long long));
  return v;
}

double median_d(std::vector<double> v) { return median(std::move(v)); }

// ---- global memory and L2 ----
double stream_bandwidth(Bench& b, const std::string& fn, size_t bytes, int reps, double traffic_factor) {
  const MicrobenchModule m = b.module("memory");
  Kernel k = b.kernel(m, fn);
  DeviceBuffer src(bytes), dst(fn == "mb_copy" ? bytes : 16);
  src.fill_bytes(1);
  const unsigned long long n = bytes / 16;
  const LaunchConfig cfg{.grid = {b.blocks_per_sm_grid(4)}, .block = {512}};
  const CUdeviceptr s = src.ptr(), d = dst.ptr(), sink = b.sink.ptr();
  TimedCall call;
  if (fn == "mb_read") call = [&](CUstream st) { k.launch(cfg, st, s, n, reps, sink); };
  else if (fn == "mb_write") call = [&](CUstream st) { k.launch(cfg, st, s, n, 7); };
  else call = [&](CUstream st) { k.launch(cfg, st, s, d, n); };
  const double us = timed_us(b, call);
  return b.per_cycle(double(bytes) * reps * traffic_factor / (us * 1e-6));
}

// One thread chasing a random cyclic permutation of the lines of `bytes`: SM cycles per load.
double chase_latency(Bench& b, size_t bytes, int warm_steps, int steps) {
  const size_t words = bytes / 4, lines = bytes / kLineBytes, per_line = kLineBytes / 4;
  std::vector<uint32_t> order(lines);
  std::iota(order.begin(), order.end(), 0u);
  std::mt19937_64 rng(19);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<uint32_t> next(words, 0);
  for (size_t i = 0; i < lines; ++i) next[size_t(order[i]) * per_line] = uint32_t(order[(i + 1) % lines] * per_line);
  DeviceBuffer d(bytes), cycles(8 * sizeof(long long));
  d.upload(next.data(), bytes);
  Kernel k = b.kernel(b.module("memory"), "mb_chase");
  const unsigned start = order[0] * per_line;
  k.launch({.grid = {1}, .block = {1}}, b.stream, d.ptr(), start, warm_steps, steps, cycles.ptr(), b.sink.ptr());
  b.stream.synchronize();
  return double(download_ll(cycles, 1)[0]) / steps;
}

// ---- shared memory (per SM, clock64) ----
double shared_bandwidth(Bench& b) {
  Kernel k = b.kernel(b.module("memory"), "mb_shared_bw");
  const int iters = 256, threads = 1024;
  DeviceBuffer cycles(b.dev.sm_count * sizeof(long long));
  k.launch({.grid = {b.dev.sm_count}, .block = {unsigned(threads)}, .dynamic_shared_bytes = b.alone_on_sm()}, b.stream, iters,
           cycles.ptr(), b.sink.ptr());
  k.launch({.grid = {b.dev.sm_count}, .block = {unsigned(threads)}, .dynamic_shared_bytes = b.alone_on_sm()}, b.stream, iters,
           cycles.ptr(), b.sink.ptr());
  b.stream.synchronize();
  std::vector<double> rates;
  for (long long c : download_ll(cycles, b.dev.sm_count)) rates.push_back(double(threads) * iters * 8 * 16 / double(c));
  return median_d(rates);
}

double shared_latency(Bench& b) {
  Kernel k = b.kernel(b.module("memory"), "mb_shared_chase");
  DeviceBuffer cycles(8 * sizeof(long long));
  const int steps = 4096;
  k.launch({.grid = {1}, .block = {32}}, b.stream, steps, cycles.ptr(), b.sink.ptr());
  b.stream.synchronize();
  return double(download_ll(cycles, 1)[0]) / steps;
}

// ---- global -> shared copy engines (per SM at the description's clock) ----
double copy_to_shared(Bench& b, bool cp_async) {
  Kernel k = b.kernel(b.module("memory"), cp_async ? "mb_cp_async" : "mb_load_store");
  DeviceBuffer src(kDramBytes);
  src.fill_bytes(1);
  const unsigned threads = 256;
  const unsigned long long tile_int4 = threads * 4, tiles = kDramBytes / 16 / tile_int4;
  const LaunchConfig cfg{.grid = {b.blocks_per_sm_grid(4)}, .block = {threads}, .dynamic_shared_bytes = uint32_t(2 * tile_int4 * 16)};
  const CUdeviceptr s = src.ptr(), sink = b.sink.ptr();
  const double us = timed_us(b, [&](CUstream st) { k.launch(cfg, st, s, tiles, sink); });
  return b.per_cycle(double(kDramBytes) / (us * 1e-6)) / b.dev.sm_count;
}

double tma_copy(Bench& b) {
  const auto encode = tensor_map_encode_tiled();
  if (!encode) throw GpuError("cuTensorMapEncodeTiled", "the CUDA driver has no cuTensorMapEncodeTiled (driver older than CUDA 12)");
  Kernel k = b.kernel(b.module("tma"), "mb_tma");
  DeviceBuffer src(kDramBytes);
  src.fill_bytes(1);
  const cuuint32_t row_floats = 64, box_rows = 64;  // 256-byte rows, 16 KiB boxes
  const cuuint64_t rows = kDramBytes / (row_floats * 4);
  const cuuint64_t dims[2] = {row_floats, rows};
  const cuuint64_t strides[1] = {row_floats * 4};
  const cuuint32_t box[2] = {row_floats, box_rows};
  const cuuint32_t elem_strides[2] = {1, 1};
  CUtensorMap map{};
  check_cu(encode(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, reinterpret_cast<void*>(src.ptr()), dims, strides, box, elem_strides,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
           "cuTensorMapEncodeTiled");
  const int tiles = int(rows / box_rows), box_bytes = int(row_floats * 4 * box_rows);
  const LaunchConfig cfg{.grid = {b.blocks_per_sm_grid(2)}, .block = {128}, .dynamic_shared_bytes = uint32_t(4 * box_bytes + 1024)};
  const CUdeviceptr sink = b.sink.ptr();
  const int rows_per_box = int(box_rows);
  const double us = timed_us(b, [&](CUstream st) { k.launch(cfg, st, map, tiles, rows_per_box, box_bytes, sink); });
  return b.per_cycle(double(kDramBytes) / (us * 1e-6)) / b.dev.sm_count;
}

// ---- tensor cores: MAC per SM cycle of one path (one block alone on each SM) ----
double tensor_rate(Bench& b, const MicrobenchModule& m, const std::string& fn, unsigned threads, double macs_per_iter_per_block) {
  Kernel k = b.kernel(m, fn);
  const int iters = 2048;
  DeviceBuffer cycles(b.dev.sm_count * sizeof(long long));
  const LaunchConfig cfg{.grid = {b.dev.sm_count}, .block = {threads}, .dynamic_shared_bytes = b.alone_on_sm()};
  for (int rep = 0; rep < 2; ++rep) k.launch(cfg, b.stream, iters, cycles.ptr(), b.sink.ptr());  // the first warms the clocks
  b.stream.synchronize();
  std::vector<double> rates;
  for (long long c : download_ll(cycles, b.dev.sm_count)) rates.push_back(macs_per_iter_per_block * iters / double(c));
  return median_d(rates);
}

// The rate of each tensor-core path of `f`'s types into `out` (best value, detail, errors);
// `async_paths`: only wgmma (run last: a fault there leaves the context unusable), else the others.
void tensor_paths(Bench& b, const isa::Figure& f, bool async_paths, isa::Measurement& out) {
  for (const MicrobenchModule& m : microbench_modules(b.dev.properties.arch)) {
    if (m.a != f.a || m.acc != f.acc || m.path.empty() || (m.name.rfind("wgmma", 0) == 0) != async_paths) continue;
    try {
      const double r = tensor_rate(b, m, m.kernel, m.threads, m.macs_per_iter_per_block);
      out.detail += (out.detail.empty() ? "" : ", ") + fmt::format("{} {:.0f}", m.path, r);
      out.value = std::max(out.value.value_or(0.0), r);
    } catch (const std::exception& e) {
      out.error += (out.error.empty() ? "" : "; ") + m.path + ": " + e.what();
    }
  }
}

// A tensor figure's measurement once every path ran: the best rate, failures in the detail.
void finish_tensor(isa::Measurement& out, const isa::Figure& f) {
  if (out.value && !out.error.empty()) out.detail += " (failed: " + out.error + ")", out.error.clear();
  if (!out.value && out.error.empty()) out.error = "no tensor-core path of this device runs " + std::string(dtype_name(f.a));
}

isa::Measurement measure(Bench& b, const isa::Figure& f) {
  isa::Measurement out{f.id, std::nullopt, "", ""};
  const uint64_t l2 = std::max<uint64_t>(b.dev.properties.l2_cache_bytes, 4u << 20);
  const size_t l2_quarter = size_t(l2 / 4) / 4096 * 4096;
  try {
    if (f.id == "global.read_bandwidth") out.value = stream_bandwidth(b, "mb_read", kDramBytes, 1, 1), out.detail = "1 GiB, ld.global.cg 16 B";
    else if (f.id == "global.write_bandwidth") out.value = stream_bandwidth(b, "mb_write", kDramBytes, 1, 1), out.detail = "1 GiB, st.global.cg 16 B";
    else if (f.id == "global.copy_bandwidth") out.value = stream_bandwidth(b, "mb_copy", kDramBytes, 1, 2), out.detail = "1 GiB -> 1 GiB, bytes read + written";
    else if (f.id == "global.read_latency") out.value = chase_latency(b, kChaseDramBytes, 0, 16384), out.detail = "random 128-byte lines over 256 MiB";
    else if (f.id == "l2.bandwidth") out.value = stream_bandwidth(b, "mb_read", l2_quarter, 64, 1), out.detail = fmt::format("{} MiB (a quarter of the L2) read 64 times", l2_quarter >> 20);
    else if (f.id == "l2.hit_latency") {
      const int lines = int(l2_quarter / kLineBytes);
      out.value = chase_latency(b, l2_quarter, lines, std::min(lines, 32768));
      out.detail = fmt::format("random 128-byte lines over {} MiB, after one warming pass", l2_quarter >> 20);
    } else if (f.id == "shared.bandwidth") out.value = shared_bandwidth(b), out.detail = "1024 threads, 16-byte conflict-free loads, clock64";
    else if (f.id == "shared.latency") out.value = shared_latency(b), out.detail = "dependent ld.shared chain, clock64";
    else if (f.id == "copy.cp_async") out.value = copy_to_shared(b, true), out.detail = "cp.async.cg 16 B from 1 GiB, 2 stages per block";
    else if (f.id == "copy.load_store") out.value = copy_to_shared(b, false), out.detail = "ld.global.cg + st.shared 16 B from 1 GiB";
    else if (f.id == "copy.tma") out.value = tma_copy(b), out.detail = "cp.async.bulk.tensor.2d, 16 KiB boxes, 4 stages, from 1 GiB";
    else out.error = "no microbenchmark for this figure";
  } catch (const std::exception& e) {
    out.value.reset();
    out.error = e.what();
  }
  return out;
}

}  // namespace

std::vector<isa::Measurement> run_microbenchmarks(const isa::Hierarchy& h, const std::vector<isa::Figure>& figures) {
  Context& ctx = Context::get();
  Bench b{h, ctx.device(), Stream()};
  std::vector<isa::Measurement> out(figures.size());
  const auto is_tensor = [](const isa::Figure& f) { return f.id.rfind("tensor.", 0) == 0; };
  // the plain benchmarks first, then the tensor paths, wgmma and TMA last: a kernel that faults
  // leaves the context unusable, and the figures measured before it keep their values
  for (size_t i = 0; i < figures.size(); ++i)
    if (!is_tensor(figures[i]) && figures[i].id != "copy.tma") out[i] = measure(b, figures[i]);
  for (bool async_paths : {false, true})
    for (size_t i = 0; i < figures.size(); ++i)
      if (is_tensor(figures[i])) {
        out[i].id = figures[i].id;
        tensor_paths(b, figures[i], async_paths, out[i]);
      }
  for (size_t i = 0; i < figures.size(); ++i) {
    if (is_tensor(figures[i])) finish_tensor(out[i], figures[i]);
    if (figures[i].id == "copy.tma") out[i] = measure(b, figures[i]);
  }
  return out;
}

}  // namespace tessel::gpu
