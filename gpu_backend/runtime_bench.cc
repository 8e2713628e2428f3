#include "gpu_backend/runtime_bench.h"

#include <iomanip>
#include <random>
#include <sstream>

#include "gpu_backend/driver_api.h"
#include "gpu_backend/error.h"
#include "gpu_backend/nvrtc_compile.h"
#include "gpu_backend/runtime.h"
#include "isa/base/f16.h"

namespace tessel::gpu {
namespace {

// Random f16 values in [-1, 1]: never zeros, which hide unwritten outputs and can run faster.
DeviceBuffer random_f16_buffer(size_t count, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<uint16_t> v(count);
  for (auto& x : v) x = f32_to_f16_bits(dist(gen));
  return DeviceBuffer::from_vector(v);
}

void time_both(RuntimeBenchRow& row, const TimedCall& call, CUstream stream, const TimingOptions& o) {
  row.stream = time_on_stream(call, stream, o);
  try {
    row.graph = time_in_graph(call, stream, o);
  } catch (const GpuError& e) {
    row.graph_error = e.what();
  }
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else if (static_cast<unsigned char>(c) < 0x20) out += ' ';
    else out += c;
  }
  return out + "\"";
}

std::string timing_json(const Timing& t) {
  std::ostringstream o;
  o << "{\"median_us\": " << t.median_us << ", \"min_us\": " << t.min_us << ", \"max_us\": " << t.max_us
    << ", \"calls_per_sample\": " << t.calls_per_sample << ", \"samples_us\": [";
  for (size_t i = 0; i < t.samples_us.size(); ++i) o << (i ? ", " : "") << t.samples_us[i];
  o << "]}";
  return o.str();
}

}  // namespace

std::vector<GemmShape> seed_gemm_shapes() {
  return {{512, 16, 512},  {512, 32, 512},   {512, 64, 512},  {512, 128, 512},     {256, 256, 256},
          {1024, 32, 512}, {2048, 32, 512}, {1024, 1024, 1024}, {4096, 4096, 4096}};
}

ConvShape seed_conv_shape() {
  return {.n = 256, .h = 14, .w = 14, .c = 256, .k = 512, .r = 3, .s = 3, .pad_h = 1, .pad_w = 1};
}

CopyBandwidth measure_copy_bandwidth(uint64_t bytes, CUstream stream, const TimingOptions& o) {
  DeviceBuffer src(bytes), dst(bytes);
  src.fill_bytes(0x5a);  // touched once: no first-use page mapping inside the timed calls
  dst.fill_bytes(0);
  CopyBandwidth c;
  c.bytes = bytes;
  c.graph = time_in_graph([&](CUstream s) { TESSEL_CU(cuMemcpyDtoDAsync(dst.ptr(), src.ptr(), bytes, s)); }, stream, o);
  return c;
}

RuntimeBenchReport run_runtime_bench(const RuntimeBenchOptions& options) {
  Context& ctx = Context::get();
  RuntimeBenchReport report;
  report.device = ctx.device().name + " (" + ctx.device().properties.arch + ", " +
                  std::to_string(ctx.device().sm_count) + " SMs)";
  Stream stream;
  const TimingOptions& o = options.timing;

  {
    const char* src = "extern \"C\" __global__ void empty_kernel() {}\n";
    Module module(compile_to_cubin(src, {.arch = ctx.device().properties.arch}).cubin);
    Kernel empty = module.function("empty_kernel");
    RuntimeBenchRow row{.name = "empty kernel <<<1,32>>>", .library = "driver"};
    time_both(row, [&](CUstream s) { empty.launch({.grid = {1, 1, 1}, .block = {32, 1, 1}}, s); }, stream, o);
    report.rows.push_back(std::move(row));
  }

  CublasHandle cublas;
  const auto gemms = options.gemms.empty() ? seed_gemm_shapes() : options.gemms;
  for (const GemmShape& g : gemms) {
    DeviceBuffer a = random_f16_buffer(g.m * g.k, 1), b = random_f16_buffer(g.k * g.n, 2), c(g.m * g.n * 4);
    RuntimeBenchRow row{.name = "gemm " + std::to_string(g.m) + "x" + std::to_string(g.n) + "x" + std::to_string(g.k),
                        .library = "cuBLAS",
                        .detail = "cublasGemmEx f16 in, f32 out, CUBLAS_COMPUTE_32F",
                        .flops = g.flops()};
    time_both(row, [&](CUstream s) { cublas_gemm_f16(cublas, s, g, a.ptr(), b.ptr(), c.ptr()); }, stream, o);
    report.rows.push_back(std::move(row));
  }

  const auto convs = options.convs.empty() ? std::vector<ConvShape>{seed_conv_shape()} : options.convs;
  for (const ConvShape& cs : convs) {
    CudnnConv conv(cs);
    DeviceBuffer x = random_f16_buffer(size_t(cs.n) * cs.h * cs.w * cs.c, 3);
    DeviceBuffer w = random_f16_buffer(size_t(cs.k) * cs.r * cs.s * cs.c, 4);
    DeviceBuffer y(size_t(cs.n) * cs.out_h() * cs.out_w() * cs.k * 2);
    std::ostringstream name;
    name << "conv NHWC " << cs.n << "x" << cs.h << "x" << cs.w << "x" << cs.c << " -> " << cs.k << ", " << cs.r << "x"
         << cs.s;
    RuntimeBenchRow row{.name = name.str(), .library = "cuDNN", .detail = conv.algorithm_name(), .flops = cs.flops()};
    time_both(row, [&](CUstream s) { conv.run(s, x.ptr(), w.ptr(), y.ptr()); }, stream, o);
    report.rows.push_back(std::move(row));
  }
  return report;
}

std::string RuntimeBenchReport::table() const {
  std::ostringstream o;
  o << "gpu-runtime suite on " << device << " (median of repeats, microseconds per call)\n";
  o << std::left << std::setw(40) << "case" << std::setw(8) << "lib" << std::right << std::setw(12) << "stream us"
    << std::setw(12) << "graph us" << std::setw(14) << "TFLOP/s graph" << "  detail\n";
  for (const auto& r : rows) {
    o << std::left << std::setw(40) << r.name << std::setw(8) << r.library << std::right << std::fixed
      << std::setprecision(2) << std::setw(12) << r.stream.median_us;
    if (r.graph_error.empty())
      o << std::setw(12) << r.graph.median_us << std::setw(14)
        << (r.flops > 0 ? r.flops / (r.graph.median_us * 1e6) : 0.0);
    else
      o << std::setw(12) << "n/a" << std::setw(14) << "-";
    o << "  " << r.detail << (r.graph_error.empty() ? "" : " [graph: " + r.graph_error + "]") << "\n";
  }
  return o.str();
}

std::string RuntimeBenchReport::json() const {
  std::ostringstream o;
  o << "{\"suite\": \"gpu-runtime\", \"device\": " << json_string(device) << ", \"rows\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    o << (i ? ",\n  " : "\n  ") << "{\"name\": " << json_string(r.name) << ", \"library\": " << json_string(r.library)
      << ", \"detail\": " << json_string(r.detail) << ", \"flops\": " << r.flops << ", \"stream\": "
      << timing_json(r.stream);
    if (r.graph_error.empty())
      o << ", \"graph\": " << timing_json(r.graph);
    else
      o << ", \"graph_error\": " << json_string(r.graph_error);
    o << "}";
  }
  o << "\n]}\n";
  return o.str();
}

}  // namespace tessel::gpu
