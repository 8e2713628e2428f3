// `tessel bench gpu` (issue 7): the seed GEMM table, 1024^3, 4096^3 and the seed convolution (NHWC
// and blocked), ours vs cuBLAS / cuDNN in both timing harnesses (timing.h). For each problem the
// emitter's tile candidates (emit_tensor_core.h) are measured in the graph harness and the fastest
// is kept (the tuning step); the kept kernel is checked against the library's output and timed in
// both harnesses. Then the memory-bound table (issue 15, workloads/memory_bound.yaml; bench_gpu.h):
// each kernel verified against the reference interpreter, timed in the graph harness, its bytes
// moved over its time as a fraction of a device-to-device copy timed in the same process. Without
// a GPU (`prepare` mode) every candidate and memory-bound kernel is only compiled, which fills the
// NVRTC cache for a later run on the device. Benchmarks are not tests: nothing here asserts a time.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <iostream>

#include "compiler/cli/bench_gpu.h"
#include "compiler/cli/run_gpu.h"
#include "isa/gpu_machine.h"
#include "compiler/emit_cuda/contraction.h"
#include "compiler/emit_c/run_c.h"
#include "compiler/emit_cuda/emit_tensor_core.h"
#include "compiler/frontend/frontend.h"
#include "compiler/frontend/suite.h"
#include "compiler/interp/compare.h"
#include "compiler/interp/interpreter.h"
#include "compiler/interp/row_sample.h"
#include "isa/base/error.h"

#ifdef TESSEL_HAVE_CUDA
#include "compiler/cli/run_gpu_internal.h"
#include "gpu_backend/device_query.h"
#include "gpu_backend/runtime_bench.h"
#endif

namespace tessel::cli {

uint64_t bytes_moved_once(const kernel::Kernel& k) {
  uint64_t bytes = 0;
  for (const auto& t : k.tensors) {
    if (t.temporary || t.kind == ir::TensorKind::Local) continue;
    uint64_t n = 1;
    for (int64_t s : t.shape) n *= uint64_t(s);
    bytes += n * dtype_bytes(t.dtype);
  }
  return bytes;
}

std::string shape_text(const std::map<std::string, int64_t>& sizes) {
  std::string s;
  for (const auto& [name, value] : sizes) s += (s.empty() ? "" : ",") + name + "=" + std::to_string(value);
  return s;
}

namespace {

std::string check_text(const MemoryBoundRow& r) {
  if (!r.error.empty()) return "error: " + r.error;
  return r.verified ? "verified" : fmt::format("MISMATCH ({} elements)", r.mismatches);
}

bool fits_l2(const MemoryBoundTable& t, const MemoryBoundRow& r) { return r.bytes_moved <= t.l2_cache_bytes; }

}  // namespace

std::string memory_bound_header(const MemoryBoundTable& t) {
  std::string s = fmt::format(
      "memory-bound kernels on {}: device-to-device copy of {} MiB: {:.2f} us, {:.1f} GB/s (read + write); "
      "bytes moved = inputs read once + outputs written once; L2 warm = moved bytes fit the {} MiB L2 (inputs not rotated)\n",
      t.device, t.copy.bytes >> 20, t.copy.graph_us, t.copy.bytes_per_second() * 1e-9, t.l2_cache_bytes >> 20);
  s += fmt::format("{:<22} {:<11} {:<16} {:>9} {:>11} {:>9} {:>8} {:>7}  {}\n", "name", "kernel", "shape", "MB moved", "graph us",
                   "GB/s", "of copy", "L2", "check");
  return s;
}

std::string memory_bound_line(const MemoryBoundTable& t, const MemoryBoundRow& r) {
  const std::string l2 = fits_l2(t, r) ? "warm" : "-";
  if (r.graph_us <= 0)
    return fmt::format("{:<22} {:<11} {:<16} {:>9.2f} {:>11} {:>9} {:>8} {:>7}  {}\n", r.name, r.kernel, shape_text(r.shape),
                       double(r.bytes_moved) * 1e-6, "-", "-", "-", l2, check_text(r));
  return fmt::format("{:<22} {:<11} {:<16} {:>9.2f} {:>11.2f} {:>9.1f} {:>7.1f}% {:>7}  {}\n", r.name, r.kernel, shape_text(r.shape),
                     double(r.bytes_moved) * 1e-6, r.graph_us, r.bytes_per_second() * 1e-9, 100.0 * r.fraction_of_copy(t.copy), l2,
                     check_text(r));
}

std::string memory_bound_text(const MemoryBoundTable& t) {
  std::string s = memory_bound_header(t);
  for (const auto& r : t.rows) s += memory_bound_line(t, r);
  return s;
}

nlohmann::json memory_bound_json(const MemoryBoundTable& t) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : t.rows) {
    nlohmann::json j = {{"name", r.name},          {"kernel", r.kernel},     {"shape", r.shape},
                        {"bytes_moved", r.bytes_moved}, {"verified", r.verified}, {"max_abs_err", r.max_abs_err},
                        {"mismatches", r.mismatches}, {"launches", r.launches}, {"notes", r.notes},
                        {"fits_l2", fits_l2(t, r)}};
    if (!r.first_mismatch.empty()) j["first_mismatch"] = r.first_mismatch;
    if (!r.error.empty()) j["error"] = r.error;
    if (r.graph_us > 0) {
      j["graph_us"] = r.graph_us;
      j["bytes_per_s"] = r.bytes_per_second();
      j["fraction_of_copy"] = r.fraction_of_copy(t.copy);
    }
    rows.push_back(std::move(j));
  }
  return {{"copy", {{"method", "cuMemcpyDtoDAsync in a CUDA graph"}, {"bytes", t.copy.bytes}, {"graph_us", t.copy.graph_us},
                    {"bytes_per_s", t.copy.bytes_per_second()}}},
          {"l2_cache_bytes", t.l2_cache_bytes},
          {"rows", rows}};
}

#ifdef TESSEL_HAVE_CUDA

namespace {

using namespace gpurun;

struct Entry {
  frontend::SuiteEntry e;
  frontend::Module module;
  std::unique_ptr<Compilation> c;
  std::optional<isa::GpuMachine> machine;  // the suite's description (sm90.yaml), as the emitter reads it
  std::vector<emit_cuda::TcConfig> candidates;
};

constexpr size_t kMaxCandidates = 40;

// `x` read as a dense tensor of shape `view` (its own shape when empty) with the dims permuted:
// output dim d is view dim perm[d] (NHWC <-> NCHW, RSCK -> KCRS, NHWC <-> blocked)
template <int Bytes>
NpyArray permuted(const NpyArray& x, const std::vector<int>& perm, std::vector<int64_t> view = {}) {
  if (view.empty()) view = x.shape;
  NpyArray y;
  y.dtype = x.dtype;
  const size_t rank = view.size();
  std::vector<int64_t> in_stride(rank, 1);
  for (size_t d = rank; d-- > 1;) in_stride[d - 1] = in_stride[d] * view[d];
  for (int p : perm) y.shape.push_back(view[size_t(p)]);
  y.data.resize(x.data.size());
  const int64_t n = int64_t(x.data.size()) / Bytes;
  std::vector<int64_t> idx(rank, 0);  // the output index, odometer order
  for (int64_t o = 0; o < n; ++o) {
    int64_t src = 0;
    for (size_t d = 0; d < rank; ++d) src += idx[d] * in_stride[size_t(perm[d])];
    std::memcpy(&y.data[size_t(o) * Bytes], &x.data[size_t(src) * Bytes], Bytes);
    for (size_t d = rank; d-- > 0;) {
      if (++idx[d] < y.shape[d]) break;
      idx[d] = 0;
    }
  }
  return y;
}

// blocked [NB,H,W,CB,16,16] <-> NHWC [NB*16,H,W,CB*16] (16 images x 16 channels innermost)
template <int Bytes>
NpyArray nhwc_to_blocked(const NpyArray& x) {
  const int64_t N = x.shape[0], H = x.shape[1], W = x.shape[2], C = x.shape[3];
  return permuted<Bytes>(x, {0, 2, 3, 4, 1, 5}, {N / 16, 16, H, W, C / 16, 16});
}
template <int Bytes>
NpyArray blocked_to_nhwc(const NpyArray& b) {
  NpyArray x = permuted<Bytes>(b, {0, 4, 1, 2, 3, 5});  // [NB, 16 n, H, W, CB, 16 c]
  x.shape = {b.shape[0] * 16, b.shape[1], b.shape[2], b.shape[3] * 16};
  return x;
}
// filter [R,S,C,K] -> [R,S,C/16,K/16,16(c),16(k)]
NpyArray rsck_to_blocked(const NpyArray& w) {
  const int64_t R = w.shape[0], S = w.shape[1], C = w.shape[2], K = w.shape[3];
  return permuted<2>(w, {0, 1, 2, 4, 3, 5}, {R, S, C / 16, 16, K / 16, 16});
}

// The seed convolution in another layout than NHWC (workloads/conv.yaml, conv_layouts.yaml), timed against cuDNN's
// NHWC run on the same data: the blocked layout, or NCHW with a KCRS filter (conv2d.tsl conv2d)
bool nchw_seed(const Entry& en) { return en.e.def == "conv2d"; }

double geomean(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double s = 0;
  for (double x : v) s += std::log(x);
  return std::exp(s / double(v.size()));
}

// TESSEL_BENCH_FILTER=a,b: only the entries whose name contains a or b (quick device runs)
bool selected(const std::string& name) {
  const char* f = std::getenv("TESSEL_BENCH_FILTER");
  if (!f || !*f) return true;
  const std::string list = f;
  for (size_t at = 0; at <= list.size();) {
    const size_t end = std::min(list.find(',', at), list.size());
    const std::string part = list.substr(at, end - at);
    if (!part.empty() && name.find(part) != std::string::npos) return true;
    at = end + 1;
  }
  return false;
}

// The GEMM and convolution suites compiled for `target`, each with its TensorCore tile candidates
// for sm_90.
std::vector<Entry> compile_suites(const std::string& source_dir, const std::string& target, bool exhaustive) {
  std::vector<Entry> entries;
  for (const char* suite_file : {"workloads/gemm.yaml", "workloads/gemm_large.yaml", "workloads/conv.yaml", "workloads/conv_layouts.yaml"}) {
    frontend::Suite suite = frontend::load_suite(source_dir + "/" + suite_file);
    for (const auto& e : suite.entries) {
      if (!selected(e.name)) continue;
      Entry en;
      en.e = e;
      entries.push_back(std::move(en));
    }
  }
  // the polyhedral compiles are independent: run them side by side
  std::vector<std::future<void>> jobs;
  for (auto& en : entries)
    jobs.push_back(std::async(std::launch::async, [&en, &target, exhaustive] {
      en.module = frontend::load_module(en.e.file);
      CompileOptions o;
      o.target = target;
      o.sizes = en.e.shape;
      en.c = compile(frontend::select_function(en.module, en.e.def), o);
      en.machine = isa::GpuMachine::from(en.c->hierarchy);
      if (const auto& contraction = en.c->kernel.contraction) en.candidates = emit_cuda::tc_candidates(*contraction, *en.machine);
      if (en.candidates.size() > kMaxCandidates) en.candidates.resize(kMaxCandidates);
      if (!exhaustive) en.candidates = emit_cuda::tc_shortlist(en.candidates);
    }));
  for (auto& j : jobs) j.get();
  return entries;
}

// A memory-bound kernel of workloads/memory_bound.yaml, compiled for the suite's description; the
// emitter's own mapping (SIMT), no tile candidates. `error`: the compile failed (a row saying so).
struct MemoryEntry {
  frontend::SuiteEntry e;
  frontend::Module module;
  std::unique_ptr<Compilation> c;
  std::string error;
};

// The memory-bound suite's entries selected by TESSEL_BENCH_FILTER: by entry name, or all of them
// when the filter names the suite ("memory_bound").
std::vector<MemoryEntry> compile_memory_bound(const std::string& source_dir, const std::string& target) {
  const frontend::Suite suite = frontend::load_suite(source_dir + "/workloads/memory_bound.yaml");
  std::vector<MemoryEntry> entries;
  for (const auto& e : suite.entries)
    if (selected(e.name) || selected(suite.name)) entries.push_back(MemoryEntry{.e = e});
  std::vector<std::future<void>> jobs;
  for (auto& en : entries)
    jobs.push_back(std::async(std::launch::async, [&en, &target] {
      try {
        en.module = frontend::load_module(en.e.file);
        CompileOptions o;
        o.target = target;
        o.sizes = en.e.shape;
        en.c = compile(frontend::select_function(en.module, en.e.def), o);
      } catch (const std::exception& ex) {
        en.error = ex.what();
      }
    }));
  for (auto& j : jobs) j.get();
  return entries;
}

// Prepare mode (no GPU): every candidate compiled into the NVRTC cache.
nlohmann::json prepare_cache(const std::vector<Entry>& entries, const std::vector<MemoryEntry>& memory, const std::string& why) {
  int compiled = 0;
  for (const auto& en : memory) {
    if (!en.c) {
      std::cout << "tessel bench gpu: " << en.e.name << ": " << en.error << "\n";
      continue;
    }
    auto p = emit_cuda::emit_cuda(en.c->kernel, gpu_options(*en.c, false));
    gpu::compile_to_cubin(p.source, {.arch = p.arch, .options = {"-fmad=false"}});
    ++compiled;
  }
  for (const auto& en : entries)
    for (const auto& cfg : en.candidates) {
      emit_cuda::CudaOptions o;
      o.arch = en.machine->arch;
      o.machine = en.machine;
      o.config = cfg;
      auto p = emit_cuda::emit_cuda(en.c->kernel, o);
      gpu::compile_to_cubin(p.source, {.arch = p.arch, .options = {"-fmad=false"}});
      ++compiled;
    }
  std::cout << "tessel bench gpu: no GPU (" << why << "); compiled " << compiled << " candidate and memory-bound kernels into the NVRTC cache ("
            << gpu::cache_directory() << ")\n";
  return {{"suite", "gpu"}, {"prepared", compiled}};
}

// The device, a stream, and the two timing settings: `full` for reported figures, `quick` for tuning.
struct Harness {
  gpu::Context& ctx = gpu::Context::get();
  gpu::Stream stream;
  gpu::TimingOptions full, quick{.warmup_calls = 5, .repeats = 5};
  std::string arch() const { return ctx.device().properties.arch; }
};

// Options for one candidate on this device: `pdl`, programmatic dependent launch; `prefetch`, the
// contraction's B operand (the weights) copied before the PDL wait.
emit_cuda::CudaOptions options_for(const Harness& h, const Entry& en, const emit_cuda::TcConfig& cfg, bool pdl, bool prefetch) {
  emit_cuda::CudaOptions o;
  o.arch = h.arch();
  o.machine = en.machine;  // used where the device's arch is the description's
  o.config = cfg;
  o.pdl = pdl;
  if (prefetch) o.pdl_prefetch = {en.c->kernel.contraction->b.tensor};
  return o;
}

double graph_us(LoadedProgram& lp, DeviceTensors& d, Harness& h, const gpu::TimingOptions& o) {
  gpu::TimedCall call = [&](CUstream s) { launch_all(lp, d, s); };
  return gpu::time_in_graph(call, h.stream, o).median_us;
}

// The tuning step: every candidate timed in the graph harness, the fastest kept; on sm_90+ also
// the fastest with programmatic dependent launch (the best tiles can differ once consecutive calls
// overlap their launches), without and with the weights prefetched.
struct Tuned {
  std::optional<LoadedProgram> best;
  std::optional<emit_cuda::TcConfig> best_pdl, best_pre;
  nlohmann::json candidates = nlohmann::json::array();
};

Tuned tune(const Entry& en, DeviceTensors& d, Harness& h) {
  Tuned t;
  double best_us = 1e30, best_pdl_us = 1e30, best_pre_us = 1e30;
  const bool pdl_ok = h.arch() >= std::string("sm_90");
  for (const auto& cfg : en.candidates) {
    try {
      LoadedProgram lp = load_program(en.c->kernel, options_for(h, en, cfg, false, false));
      if (lp.program.scratch_bytes > d.scratch.size()) {  // split-K partial tiles and counters (zeroed)
        d.scratch = gpu::DeviceBuffer(lp.program.scratch_bytes);
        d.scratch.fill_bytes(0);
        d.ptrs.back() = d.scratch.ptr();
      }
      const double us = graph_us(lp, d, h, h.quick);
      t.candidates.push_back({{"tiles", cfg.to_string()}, {"graph_us", us}, {"registers", lp.attributes.back().registers_per_thread},
                              {"spill_bytes", lp.attributes.back().local_bytes_per_thread}});
      if (pdl_ok && cfg.reduce != emit_cuda::SplitKReduce::atomic && (en.candidates.size() > 12 ? cfg.bm < 128 || cfg.wgmma() : true)) {
        auto time_pdl = [&](bool prefetch) {
          LoadedProgram lq = load_program(en.c->kernel, options_for(h, en, cfg, true, prefetch));
          return graph_us(lq, d, h, h.quick);
        };
        const double usp = time_pdl(false), usr = time_pdl(true);
        t.candidates.back()["graph_pdl_us"] = usp;
        t.candidates.back()["graph_pdl_prefetch_us"] = usr;
        if (usp < best_pdl_us) best_pdl_us = usp, t.best_pdl = cfg;
        if (usr < best_pre_us) best_pre_us = usr, t.best_pre = cfg;
      }
      if (us < best_us) best_us = us, t.best = std::move(lp);
    } catch (const std::exception& ex) {
      t.candidates.push_back({{"tiles", cfg.to_string()}, {"error", ex.what()}});
    }
  }
  return t;
}

// One call with the outputs pre-filled with 0xff, then the outputs.
std::map<std::string, NpyArray> run_once(LoadedProgram& lp, const Entry& en, DeviceTensors& d, Harness& h) {
  for (const auto& t : en.c->kernel.tensors)
    if (t.kind == ir::TensorKind::Output) d.buffers[d.index.at(t.name)].fill_bytes(0xff);
  launch_all(lp, d, h.stream);
  h.stream.synchronize();
  return download_outputs(en.c->kernel, d);
}

// The NHWC convolution's inputs and cuDNN run, which the blocked layout reuses.
struct NhwcReference {
  std::map<std::string, NpyArray> inputs;
  std::optional<BaselineRun> baseline;
};

// The library's run of the same problem and the comparison with ours (row: matches_library, ...).
// Sampled rows of every output recomputed by the reference interpreter (as `tessel run --verify
// sample`): whole rows of the first output dim, about 5e8 iteration points. True when they match.
bool sampled_check(const ir::Function& f, const std::map<std::string, int64_t>& sizes, const std::map<std::string, NpyArray>& inputs,
                   const std::map<std::string, NpyArray>& outs, nlohmann::json& row) {
  const auto sep = interp::row_separability(f, sizes);
  if (!sep.separable) {
    row["check_note"] = "no sampled check: " + sep.reason;
    return false;
  }
  const double points = interp::iteration_points(f, sizes);
  const int64_t per_block = std::max<int64_t>(1, int64_t(5e8 / (points / double(sep.rows)) / 4));
  const auto blocks = interp::choose_row_blocks(sep.rows, 4, per_block, 1);
  std::map<std::string, NpyArray> mags;
  const auto expected = interp::evaluate_rows(f, sizes, inputs, blocks, &mags);
  const auto v = emit_c::verify(expected, interp::take_rows(outs, blocks), emit_c::reassociated_sum_tolerance(f, sizes), &mags);
  row["checked_rows"] = interp::describe_row_blocks(blocks, sep.rows);
  row["matches_interpreter"] = v.verified;
  if (!v.verified) row["first_mismatch"] = interp::unsample_position(v.first_mismatch, blocks);
  return v.verified;
}

std::optional<BaselineRun> check_against_library(const Entry& en, DeviceTensors& d, const std::map<std::string, NpyArray>& inputs,
                                                 const std::map<std::string, NpyArray>& outs, Harness& h, NhwcReference& nhwc,
                                                 nlohmann::json& row, std::string& check, const gpu::TimedCall& ours) {
  std::optional<BaselineRun> br;
  check = "-";
  if (auto b = find_baseline(en.c->kernel)) {
    br = run_baseline(*b, d, inputs, h.stream, h.full, {ours});
    if (!en.c->kernel.contraction->epilogue.empty()) {
      // the library computes the contraction alone (e.g. cuDNN's convolution for conv + bn + relu):
      // the time is compared with it, the output is checked on sampled rows against the interpreter
      check = sampled_check(frontend::select_function(en.module, en.e.def), en.c->kernel.sizes, inputs, outs, row) ? "=interp" : "MISMATCH";
      row["library_computes"] = "the contraction alone, without the fused epilogue";
      return br;
    }
    const NpyArray& ours = outs.begin()->second;
    const bool conv = b->kind == Baseline::Conv;
    auto cmp = interp::compare(br->output, ours, conv ? 0.25 : 1e-2, conv ? 1e-2 : 1e-3, outs.begin()->first);
    row["matches_library"] = cmp.ok;
    row["max_abs_err_vs_library"] = cmp.max_abs_err;
    if (!cmp.ok) row["first_mismatch"] = cmp.first_mismatch;
    check = cmp.ok ? "=lib" : "MISMATCH";
    if (conv) nhwc = {inputs, br};
  } else if ((en.e.def == "conv2d_blocked" || nchw_seed(en)) && nhwc.baseline) {
    br = nhwc.baseline;  // the same problem in NHWC through cuDNN
    br->interleaved.clear();  // those samples were interleaved with the NHWC kernel, not this one
    NpyArray ours;
    if (nchw_seed(en)) ours = permuted<4>(outs.at("Y"), {0, 2, 3, 1});
    else ours = blocked_to_nhwc<4>(outs.at("Y"));
    auto cmp = interp::compare(br->output, ours, 0.25, 1e-2, "Y");
    row["matches_library"] = cmp.ok;
    row["max_abs_err_vs_library"] = cmp.max_abs_err;
    check = cmp.ok ? "=lib(nhwc)" : "MISMATCH";
  }
  return br;
}

// The kept tiles with programmatic dependent launch (sm_90+): each call waits for the previous one
// (griddepcontrol.wait before its first global access); only launch and set-up overlap. With
// `prefetch` also B (the weights) is copied before the wait, which the library cannot do.
struct PdlRun {
  std::optional<gpu::Timing> ts, tg;
};

PdlRun run_pdl(const Entry& en, DeviceTensors& d, Harness& h, const emit_cuda::TcConfig& cfg, bool prefetch, const std::string& key,
               const std::map<std::string, NpyArray>& outs, nlohmann::json& row) {
  PdlRun r;
  try {
    row["tiles_" + key] = cfg.to_string();
    LoadedProgram lq = load_program(en.c->kernel, options_for(h, en, cfg, true, prefetch));
    auto outs_pdl = run_once(lq, en, d, h);
    const NpyArray& a = outs.begin()->second;
    const NpyArray& b = outs_pdl.begin()->second;
    row[key + "_output_identical"] = a.data == b.data;  // bit-identical when the tiles are the same
    row[key + "_output_matches"] = interp::compare(a, b, 1e-2, 1e-3, outs.begin()->first).ok;
    gpu::TimedCall callp = [&](CUstream s) { launch_all(lq, d, s); };
    r.ts = gpu::time_on_stream(callp, h.stream, h.full);
    r.tg = gpu::time_in_graph(callp, h.stream, h.full);
    row["stream_" + key + "_us"] = r.ts->median_us;
    row["graph_" + key + "_us"] = r.tg->median_us;
  } catch (const std::exception& ex) {
    row[key + "_error"] = ex.what();
  }
  return r;
}

// Library time over ours per harness, for the seed GEMM table's geomeans.
struct SeedRatios {
  std::vector<double> graph, stream, graph_pdl, stream_pdl, graph_pre;
};

// The timings of one entry: ours (kept tiles), with PDL, with PDL and B prefetched, the library.
struct Measured {
  gpu::Timing ts, tg;
  PdlRun pdl, pre;
  std::optional<BaselineRun> br;
  std::string check;
};

void record_speedups(const Entry& en, const Measured& m, nlohmann::json& row, SeedRatios& seeds) {
  const BaselineRun& br = *m.br;
  row["library"] = br.library;
  row["library_stream_us"] = br.stream.median_us;
  row["library_graph_us"] = br.graph.median_us;
  row["speedup_stream"] = br.stream.median_us / m.ts.median_us;
  row["speedup_graph"] = br.graph.median_us / m.tg.median_us;
  if (br.interleaved.size() == 2) {  // the library's samples and ours alternated
    row["library_graph_interleaved_us"] = br.interleaved[0].median_us;
    row["graph_interleaved_us"] = br.interleaved[1].median_us;
    row["speedup_graph_interleaved"] = br.interleaved[0].median_us / br.interleaved[1].median_us;
  }
  if (std::count(en.e.tags.begin(), en.e.tags.end(), "seed_table")) {
    seeds.graph.push_back(br.graph.median_us / m.tg.median_us);
    seeds.stream.push_back(br.stream.median_us / m.ts.median_us);
    if (m.pdl.tg) {
      seeds.graph_pdl.push_back(br.graph.median_us / m.pdl.tg->median_us);
      seeds.stream_pdl.push_back(br.stream.median_us / m.pdl.ts->median_us);
    }
    if (m.pre.tg) seeds.graph_pre.push_back(br.graph.median_us / m.pre.tg->median_us);
  }
  if (m.pdl.tg) {
    row["speedup_graph_pdl"] = br.graph.median_us / m.pdl.tg->median_us;
    row["speedup_stream_pdl"] = br.stream.median_us / m.pdl.ts->median_us;
  }
  if (m.pre.tg) {
    row["speedup_graph_pdl_prefetch"] = br.graph.median_us / m.pre.tg->median_us;
    row["speedup_stream_pdl_prefetch"] = br.stream.median_us / m.pre.ts->median_us;
  }
}

void print_header(const std::string& device) {
  std::cout << "tessel bench gpu on " << device << ": ours (best measured tile candidate) vs library, us per call\n";
  std::cout << fmt::format("{:<22} {:<26} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>9}\n", "problem", "tiles", "ours str",
                           "ours gra", "lib str", "lib gra", "x str", "x graph", "TFLOP/s", "check");
}

// One table line for ours, and one each for the PDL variants that ran.
void print_rows(const Entry& en, const Measured& m, const Tuned& t, double flops, const nlohmann::json& row) {
  const std::optional<BaselineRun>& br = m.br;
  std::cout << fmt::format("{:<22} {:<26} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f} {:>8.2f} {:>8.2f} {:>8.1f} {:>9}\n", en.e.name,
                           row["tiles"].get<std::string>(), m.ts.median_us, m.tg.median_us, br ? br->stream.median_us : 0.0,
                           br ? br->graph.median_us : 0.0, br ? br->stream.median_us / m.ts.median_us : 0.0,
                           br ? br->graph.median_us / m.tg.median_us : 0.0, flops / m.tg.median_us * 1e-6, m.check);
  auto variant = [&](const char* label, const emit_cuda::TcConfig& cfg, const PdlRun& r, const char* key) {
    std::cout << fmt::format("{:<22} {:<26} {:>9.2f} {:>9.2f} {:>9} {:>9} {:>8.2f} {:>8.2f} {:>8.1f} {:>9}\n", label, cfg.to_string(),
                             r.ts->median_us, r.tg->median_us, "", "", br ? br->stream.median_us / r.ts->median_us : 0.0,
                             br ? br->graph.median_us / r.tg->median_us : 0.0, flops / r.tg->median_us * 1e-6,
                             row.value(key, false) ? "=no PDL" : "DIFFERS");
  };
  if (br && br->interleaved.size() == 2) {
    const double ours = br->interleaved[1].median_us, lib = br->interleaved[0].median_us;
    std::cout << fmt::format("{:<22} {:<26} {:>9} {:>9.2f} {:>9} {:>9.2f} {:>8} {:>8.2f} {:>8.1f} {:>9}\n", "  graph, interleaved", row["tiles"].get<std::string>(),
                             "", ours, "", lib, "", lib / ours, flops / ours * 1e-6, "");
  }
  if (m.pdl.tg) variant("  + PDL", *t.best_pdl, m.pdl, "pdl_output_matches");
  if (m.pre.tg) variant("  + PDL, B prefetched", *t.best_pre, m.pre, "pdl_prefetch_output_matches");
  std::cout.flush();
}

// One entry: tune, check the kept kernel against the library, time it in both harnesses (and with
// PDL), print its lines; the JSON row.
nlohmann::json bench_entry(const Entry& en, Harness& h, NhwcReference& nhwc, SeedRatios& seeds) {
  nlohmann::json row;
  row["name"] = en.e.name;
  row["tags"] = en.e.tags;
  if (en.candidates.empty()) {
    row["error"] = "no TensorCore candidate";
    return row;
  }
  std::map<std::string, NpyArray> inputs;
  if (en.e.def == "conv2d_blocked" && nhwc.inputs.count("X")) {
    inputs["X"] = nhwc_to_blocked<2>(nhwc.inputs.at("X"));
    inputs["Wt"] = rsck_to_blocked(nhwc.inputs.at("Wt"));
  } else if (nchw_seed(en) && nhwc.inputs.count("X")) {
    inputs["X"] = permuted<2>(nhwc.inputs.at("X"), {0, 3, 1, 2});    // [N, C, H, W]
    inputs["Wt"] = permuted<2>(nhwc.inputs.at("Wt"), {3, 2, 0, 1});  // [K, C, R, S]
  } else {
    inputs = interp::random_inputs(*en.c->function, en.e.shape, 1);
  }
  DeviceTensors d = allocate(en.c->kernel, inputs, 0);
  Tuned t = tune(en, d, h);
  row["candidates"] = t.candidates;
  if (!t.best) return row;
  LoadedProgram& lp = *t.best;
  const auto outs = run_once(lp, en, d, h);
  gpu::TimedCall call = [&](CUstream s) { launch_all(lp, d, s); };
  Measured m{gpu::time_on_stream(call, h.stream, h.full), gpu::time_in_graph(call, h.stream, h.full)};
  row["tiles"] = lp.program.config ? lp.program.config->to_string() : lp.program.plan;
  row["stream_us"] = m.ts.median_us;
  row["graph_us"] = m.tg.median_us;
  row["flops"] = lp.program.flops;
  row["tflops_graph"] = lp.program.flops / m.tg.median_us * 1e-6;
  row["tensor_core_ops"] = lp.tensor_core_ops;
  row["registers"] = lp.attributes.back().registers_per_thread;
  m.br = check_against_library(en, d, inputs, outs, h, nhwc, row, m.check, call);
  if (t.best_pdl) m.pdl = run_pdl(en, d, h, *t.best_pdl, false, "pdl", outs, row);
  if (t.best_pre) m.pre = run_pdl(en, d, h, *t.best_pre, true, "pdl_prefetch", outs, row);
  if (m.br) record_speedups(en, m, row, seeds);
  print_rows(en, m, t, lp.program.flops, row);
  return row;
}

// The copy the memory-bound kernels are compared with: large enough that it streams from device
// memory on any GPU tessel targets (the L2 is well under it), as PyTorch peers measure it
// (scripts/gpu_peers.py).
constexpr uint64_t kCopyBytes = uint64_t(256) << 20;

// The reference interpreter's outputs for each entry's random inputs (seed 1), side by side on the
// host while nothing else runs.
struct MemoryReference {
  std::map<std::string, NpyArray> inputs, expected;
};

std::vector<MemoryReference> memory_references(const std::vector<MemoryEntry>& entries) {
  std::vector<MemoryReference> refs(entries.size());
  std::vector<std::future<void>> jobs;
  for (size_t i = 0; i < entries.size(); ++i)
    if (entries[i].c)
      jobs.push_back(std::async(std::launch::async, [&en = entries[i], &r = refs[i]] {
        r.inputs = interp::random_inputs(*en.c->function, en.e.shape, 1);
        r.expected = interp::evaluate(*en.c->function, en.e.shape, r.inputs);
      }));
  for (auto& j : jobs) j.get();
  return refs;
}

// One memory-bound kernel: one call checked against the interpreter, then timed in the graph harness.
MemoryBoundRow bench_memory_entry(const MemoryEntry& en, const MemoryReference& ref, Harness& h) {
  MemoryBoundRow row{.name = en.e.name, .kernel = en.e.def, .shape = en.e.shape};
  if (!en.c) {
    row.error = en.error;
    return row;
  }
  row.bytes_moved = bytes_moved_once(en.c->kernel);
  try {
    LoadedProgram lp = load_program(en.c->kernel, gpu_options(*en.c, false));
    row.launches = lp.kernels.size();
    row.notes = lp.notes;
    for (size_t i = 0; i < lp.attributes.size(); ++i)
      if (lp.attributes[i].local_bytes_per_thread > 0)
        row.notes.push_back(fmt::format("{} spills {} B per thread", lp.program.launches[i].kernel, lp.attributes[i].local_bytes_per_thread));
    DeviceTensors d = allocate(en.c->kernel, ref.inputs, lp.program.scratch_bytes);  // outputs poisoned
    launch_all(lp, d, h.stream);
    h.stream.synchronize();
    const emit_c::Verification v = emit_c::verify(ref.expected, download_outputs(en.c->kernel, d));
    row.verified = v.verified;
    row.max_abs_err = v.max_abs_err;
    row.mismatches = v.mismatches;
    row.first_mismatch = v.first_mismatch;
    gpu::TimedCall call = [&](CUstream s) { launch_all(lp, d, s); };
    row.graph_us = gpu::time_in_graph(call, h.stream, h.full).median_us;
  } catch (const std::exception& ex) {
    row.error = ex.what();
  }
  return row;
}

// The copy first, then each kernel, its line printed as it is measured.
MemoryBoundTable bench_memory_bound(const std::vector<MemoryEntry>& entries, const std::string& device, Harness& h) {
  MemoryBoundTable t;
  t.device = device;
  t.l2_cache_bytes = h.ctx.device().properties.l2_cache_bytes;
  const gpu::CopyBandwidth copy = gpu::measure_copy_bandwidth(kCopyBytes, h.stream, h.full);
  t.copy = {.bytes = copy.bytes, .graph_us = copy.graph.median_us};
  const std::vector<MemoryReference> refs = memory_references(entries);
  std::cout << memory_bound_header(t);
  for (size_t i = 0; i < entries.size(); ++i) {
    t.rows.push_back(bench_memory_entry(entries[i], refs[i], h));
    std::cout << memory_bound_line(t, t.rows.back());
    std::cout.flush();
  }
  return t;
}

nlohmann::json summary(const std::string& device, const nlohmann::json& rows, const SeedRatios& seeds) {
  const double gg = geomean(seeds.graph), gs = geomean(seeds.stream);
  const double ggp = geomean(seeds.graph_pdl), gsp = geomean(seeds.stream_pdl);
  if (!seeds.graph.empty())
    std::cout << fmt::format("seed GEMM table geomean speedup over cuBLAS: {:.2f}x (CUDA graph), {:.2f}x (stream)\n", gg, gs);
  if (!seeds.graph_pdl.empty())
    std::cout << fmt::format("  with programmatic dependent launch (ours only; cuBLAS called as-is): {:.2f}x (CUDA graph), {:.2f}x (stream)\n",
                             ggp, gsp);
  if (!seeds.graph_pre.empty())
    std::cout << fmt::format("  with PDL and the weights (B) copied before the wait (B not written by earlier kernels): {:.2f}x (CUDA graph)\n",
                             geomean(seeds.graph_pre));
  return {{"suite", "gpu"},
          {"device", device},
          {"rows", rows},
          {"seed_geomean_speedup_graph", gg},
          {"seed_geomean_speedup_stream", gs},
          {"seed_geomean_speedup_graph_pdl", ggp},
          {"seed_geomean_speedup_stream_pdl", gsp},
          {"seed_geomean_speedup_graph_pdl_prefetch", geomean(seeds.graph_pre)}};
}

}  // namespace

nlohmann::json bench_gpu(const std::string& source_dir_in, bool exhaustive) {
  // "" : the source tree this tessel was built from, else the working directory (a GPU machine)
  const std::string source_dir = !source_dir_in.empty()                                        ? source_dir_in
                                 : std::filesystem::exists(TESSEL_SOURCE_DIR "/workloads/gemm.yaml") ? TESSEL_SOURCE_DIR
                                                                                                      : ".";
  const std::string target = source_dir + "/isa/targets/sm90.yaml";
  std::vector<Entry> entries = compile_suites(source_dir, target, exhaustive);
  const std::vector<MemoryEntry> memory = compile_memory_bound(source_dir, target);
  std::string why;
  if (gpu::device_count(&why) == 0) return prepare_cache(entries, memory, why);
  Harness h;
  const std::string device = h.ctx.device().name + " (" + h.arch() + ", " + std::to_string(h.ctx.device().sm_count) + " SMs)";
  nlohmann::json rows = nlohmann::json::array();
  NhwcReference nhwc;
  SeedRatios seeds;
  if (!entries.empty()) print_header(device);
  for (const auto& en : entries) rows.push_back(bench_entry(en, h, nhwc, seeds));
  nlohmann::json result = summary(device, rows, seeds);
  if (!memory.empty()) result["memory_bound"] = memory_bound_json(bench_memory_bound(memory, device, h));
  return result;
}

#endif

}  // namespace tessel::cli
