// `tessel bench gpu` (issue 7): the seed GEMM table, 1024^3, 4096^3 and the seed convolution (NHWC
// and blocked), ours vs cuBLAS / cuDNN in both timing harnesses (timing.h). For each problem the
// emitter's tile candidates (emit_tensor_core.h) are measured in the graph harness and the fastest
// is kept (the tuning step); the kept kernel is checked against the library's output and timed in
// both harnesses. Without a GPU (`prepare` mode) every candidate is only compiled, which fills the
// NVRTC cache for a later run on the device. Benchmarks are not tests: nothing here asserts a time.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <iostream>

#include "compiler/cli/run_gpu.h"
#include "compiler/emit_cuda/contraction.h"
#include "compiler/emit_cuda/emit_tensor_core.h"
#include "compiler/frontend/frontend.h"
#include "compiler/frontend/suite.h"
#include "compiler/interp/compare.h"
#include "compiler/interp/interpreter.h"
#include "isa/base/error.h"

#ifdef TESSEL_HAVE_CUDA
#include "compiler/cli/run_gpu_internal.h"
#include "gpu_backend/device_query.h"
#endif

namespace tessel::cli {

#ifdef TESSEL_HAVE_CUDA

namespace {

struct Entry {
  frontend::SuiteEntry e;
  frontend::Module module;
  std::unique_ptr<Compilation> c;
  std::optional<emit_cuda::Contraction> contraction;
  std::vector<emit_cuda::TcConfig> candidates;
};

constexpr size_t kMaxCandidates = 40;

// blocked [NB,H,W,CB,16,16] <-> NHWC [NB*16,H,W,CB*16] (16 images x 16 channels innermost)
template <int Bytes>
void nhwc_to_blocked(const NpyArray& x, NpyArray& b) {
  const int64_t N = x.shape[0], H = x.shape[1], W = x.shape[2], C = x.shape[3];
  b.dtype = x.dtype;
  b.shape = {N / 16, H, W, C / 16, 16, 16};
  b.data.resize(x.data.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w)
        for (int64_t c = 0; c < C; ++c) {
          const int64_t src = ((n * H + h) * W + w) * C + c;
          const int64_t dst = ((((n / 16 * H + h) * W + w) * (C / 16) + c / 16) * 16 + n % 16) * 16 + c % 16;
          std::memcpy(&b.data[dst * Bytes], &x.data[src * Bytes], Bytes);
        }
}
template <int Bytes>
void blocked_to_nhwc(const NpyArray& b, NpyArray& x) {
  const int64_t NB = b.shape[0], H = b.shape[1], W = b.shape[2], CB = b.shape[3];
  x.dtype = b.dtype;
  x.shape = {NB * 16, H, W, CB * 16};
  x.data.resize(b.data.size());
  for (int64_t n = 0; n < NB * 16; ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w)
        for (int64_t c = 0; c < CB * 16; ++c) {
          const int64_t dst = ((n * H + h) * W + w) * CB * 16 + c;
          const int64_t src = ((((n / 16 * H + h) * W + w) * CB + c / 16) * 16 + n % 16) * 16 + c % 16;
          std::memcpy(&x.data[dst * Bytes], &b.data[src * Bytes], Bytes);
        }
}
// filter [R,S,C,K] -> [R,S,C/16,K/16,16(c),16(k)]
void rsck_to_blocked(const NpyArray& w, NpyArray& b) {
  const int64_t R = w.shape[0], S = w.shape[1], C = w.shape[2], K = w.shape[3];
  b.dtype = w.dtype;
  b.shape = {R, S, C / 16, K / 16, 16, 16};
  b.data.resize(w.data.size());
  for (int64_t r = 0; r < R; ++r)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t k = 0; k < K; ++k) {
          const int64_t src = ((r * S + s) * C + c) * K + k;
          const int64_t dst = ((((r * S + s) * (C / 16) + c / 16) * (K / 16) + k / 16) * 16 + c % 16) * 16 + k % 16;
          std::memcpy(&b.data[dst * 2], &w.data[src * 2], 2);
        }
}

double geomean(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double s = 0;
  for (double x : v) s += std::log(x);
  return std::exp(s / double(v.size()));
}

}  // namespace

nlohmann::json bench_gpu(const std::string& source_dir_in) {
  using namespace gpurun;
  // "" : the source tree this tessel was built from, else the working directory (a GPU machine)
  const std::string source_dir = !source_dir_in.empty()                                        ? source_dir_in
                                 : std::filesystem::exists(TESSEL_SOURCE_DIR "/workloads/gemm.yaml") ? TESSEL_SOURCE_DIR
                                                                                                      : ".";
  const std::string target = source_dir + "/isa/targets/sm90.yaml";
  std::vector<Entry> entries;
  for (const char* suite_file : {"workloads/gemm.yaml", "workloads/conv.yaml"}) {
    frontend::Suite suite = frontend::load_suite(source_dir + "/" + suite_file);
    for (const auto& e : suite.entries) {
      if (e.def == "conv_bn_relu") continue;  // no library twin
      // TESSEL_BENCH_FILTER=a,b: only the entries whose name contains a or b (quick device runs)
      if (const char* f = std::getenv("TESSEL_BENCH_FILTER"); f && *f) {
        bool keep = false;
        std::string list = f;
        for (size_t at = 0; at <= list.size();) {
          const size_t end = std::min(list.find(',', at), list.size());
          const std::string part = list.substr(at, end - at);
          if (!part.empty() && e.name.find(part) != std::string::npos) keep = true;
          at = end + 1;
        }
        if (!keep) continue;
      }
      Entry en;
      en.e = e;
      entries.push_back(std::move(en));
    }
  }
  // the polyhedral compiles are independent: run them side by side
  std::vector<std::future<void>> jobs;
  for (auto& en : entries)
    jobs.push_back(std::async(std::launch::async, [&en, &target] {
      en.module = frontend::load_module(en.e.file);
      CompileOptions o;
      o.target = target;
      o.sizes = en.e.shape;
      en.c = compile(frontend::select_function(en.module, en.e.def), o);
      en.contraction = en.c->kernel.contraction;
      if (en.contraction) en.candidates = emit_cuda::tc_candidates(*en.contraction, "sm_90", int(en.c->hierarchy.cores));
      if (en.candidates.size() > kMaxCandidates) en.candidates.resize(kMaxCandidates);
    }));
  for (auto& j : jobs) j.get();

  std::string why;
  const bool have_gpu = gpu::device_count(&why) > 0;
  if (!have_gpu) {
    // prepare mode: fill the NVRTC cache
    int compiled = 0;
    for (auto& en : entries)
      for (const auto& cfg : en.candidates) {
        emit_cuda::CudaOptions o;
        o.arch = "sm_90";
        o.config = cfg;
        auto p = emit_cuda::emit_cuda(en.c->kernel, o);
        gpu::compile_to_cubin(p.source, {.arch = p.arch, .options = {"-fmad=false"}});
        ++compiled;
      }
    std::cout << "tessel bench gpu: no GPU (" << why << "); compiled " << compiled << " candidate kernels into the NVRTC cache ("
              << gpu::cache_directory() << ")\n";
    return {{"suite", "gpu"}, {"prepared", compiled}};
  }

  gpu::Context& ctx = gpu::Context::get();
  gpu::Stream stream;
  const gpu::TimingOptions full;
  gpu::TimingOptions quick;
  quick.repeats = 5;
  quick.warmup_calls = 5;
  nlohmann::json rows = nlohmann::json::array();
  std::vector<double> seed_graph, seed_stream, seed_graph_pdl, seed_stream_pdl, seed_graph_pre;
  const std::string device = ctx.device().name + " (" + ctx.device().properties.arch + ", " + std::to_string(ctx.device().sm_count) + " SMs)";
  std::cout << "tessel bench gpu on " << device << ": ours (best measured tile candidate) vs library, us per call\n";
  std::cout << fmt::format("{:<22} {:<26} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>9}\n", "problem", "tiles", "ours str",
                           "ours gra", "lib str", "lib gra", "x str", "x graph", "TFLOP/s", "check");
  std::map<std::string, NpyArray> nhwc_inputs;
  std::optional<BaselineRun> nhwc_baseline;
  for (auto& en : entries) {
    nlohmann::json row;
    row["name"] = en.e.name;
    row["tags"] = en.e.tags;
    if (en.candidates.empty()) {
      row["error"] = "no TensorCore candidate";
      rows.push_back(row);
      continue;
    }
    const bool blocked = en.e.def == "conv2d_blocked";
    std::map<std::string, NpyArray> inputs;
    if (blocked && nhwc_inputs.count("X")) {
      nhwc_to_blocked<2>(nhwc_inputs.at("X"), inputs["X"]);
      rsck_to_blocked(nhwc_inputs.at("Wt"), inputs["Wt"]);
    } else {
      inputs = interp::random_inputs(*en.c->function, en.e.shape, 1);
    }
    DeviceTensors d = allocate(en.c->kernel, inputs, 0);
    // tuning: every candidate in the graph harness, keep the fastest
    nlohmann::json cands = nlohmann::json::array();
    std::optional<LoadedProgram> best;
    double best_us = 1e30;
    // the tiles tuned with programmatic dependent launch (sm_90+, single-kernel programs): the
    // fastest tiles can differ once consecutive calls overlap their launches
    const bool pdl_ok = ctx.device().properties.arch >= std::string("sm_90");
    std::optional<emit_cuda::TcConfig> best_pdl;
    double best_pdl_us = 1e30;
    std::optional<emit_cuda::TcConfig> best_pre;  // PDL with the weights prefetched (CudaOptions::pdl_prefetch)
    double best_pre_us = 1e30;
    for (const auto& cfg : en.candidates) {
      emit_cuda::CudaOptions o;
      o.arch = ctx.device().properties.arch;
      o.config = cfg;
      try {
        LoadedProgram lp = load_program(en.c->kernel, o);
        if (lp.program.scratch_bytes > d.scratch.size()) {  // split-K partial tiles and counters (zeroed)
          d.scratch = gpu::DeviceBuffer(lp.program.scratch_bytes);
          d.scratch.fill_bytes(0);
          d.ptrs.back() = d.scratch.ptr();
        }
        gpu::TimedCall call = [&](CUstream s) { launch_all(lp, d, s); };
        const double us = gpu::time_in_graph(call, stream, quick).median_us;
        cands.push_back({{"tiles", cfg.to_string()}, {"graph_us", us}, {"registers", lp.attributes.back().registers_per_thread},
                         {"spill_bytes", lp.attributes.back().local_bytes_per_thread}});
        if (pdl_ok && !cfg.atomic_out && (en.candidates.size() > 12 ? cfg.bm < 128 || cfg.wgmma : true)) {
          // with PDL, then also with the weights (the contraction's B operand) copied before the wait
          auto time_pdl = [&](bool prefetch) {
            emit_cuda::CudaOptions op = o;
            op.pdl = true;
            if (prefetch) op.pdl_prefetch = {en.contraction->b.tensor};
            LoadedProgram lq = load_program(en.c->kernel, op);
            gpu::TimedCall callp = [&](CUstream s) { launch_all(lq, d, s); };
            return gpu::time_in_graph(callp, stream, quick).median_us;
          };
          const double usp = time_pdl(false), usr = time_pdl(true);
          cands.back()["graph_pdl_us"] = usp;
          cands.back()["graph_pdl_prefetch_us"] = usr;
          if (usp < best_pdl_us) best_pdl_us = usp, best_pdl = cfg;
          if (usr < best_pre_us) best_pre_us = usr, best_pre = cfg;
        }
        if (us < best_us) best_us = us, best = std::move(lp);
      } catch (const std::exception& ex) {
        cands.push_back({{"tiles", cfg.to_string()}, {"error", ex.what()}});
      }
    }
    row["candidates"] = cands;
    if (!best) {
      rows.push_back(row);
      continue;
    }
    LoadedProgram& lp = *best;
    for (const auto& t : en.c->kernel.tensors)
      if (t.kind == ir::TensorKind::Output) d.buffers[d.index.at(t.name)].fill_bytes(0xff);
    launch_all(lp, d, stream);
    stream.synchronize();
    auto outs = download_outputs(en.c->kernel, d);
    gpu::TimedCall call = [&](CUstream s) { launch_all(lp, d, s); };
    const gpu::Timing ts = gpu::time_on_stream(call, stream, full), tg = gpu::time_in_graph(call, stream, full);
    row["tiles"] = lp.program.config->to_string();
    row["stream_us"] = ts.median_us;
    row["graph_us"] = tg.median_us;
    row["flops"] = lp.program.flops;
    row["tflops_graph"] = lp.program.flops / tg.median_us * 1e-6;
    row["tensor_core_ops"] = lp.tensor_core_ops;
    row["registers"] = lp.attributes.back().registers_per_thread;
    // baseline and check
    std::optional<BaselineRun> br;
    std::string check = "-";
    if (auto b = find_baseline(en.c->kernel)) {
      br = run_baseline(*b, d, inputs, stream, full);
      const NpyArray& ours = outs.begin()->second;
      const bool conv = b->kind == Baseline::Conv;
      auto cmp = interp::compare(br->output, ours, conv ? 0.25 : 1e-2, conv ? 1e-2 : 1e-3, outs.begin()->first);
      row["matches_library"] = cmp.ok;
      row["max_abs_err_vs_library"] = cmp.max_abs_err;
      if (!cmp.ok) row["first_mismatch"] = cmp.first_mismatch;
      check = cmp.ok ? "=lib" : "MISMATCH";
      if (conv) nhwc_inputs = inputs, nhwc_baseline = br;
    } else if (blocked && nhwc_baseline) {
      br = nhwc_baseline;  // the same problem in NHWC through cuDNN
      NpyArray ours;
      blocked_to_nhwc<4>(outs.at("Y"), ours);
      auto cmp = interp::compare(br->output, ours, 0.25, 1e-2, "Y");
      row["matches_library"] = cmp.ok;
      row["max_abs_err_vs_library"] = cmp.max_abs_err;
      check = cmp.ok ? "=lib(nhwc)" : "MISMATCH";
    }
    // the same tiles with programmatic dependent launch (sm_90+): each call waits for the previous
    // one (griddepcontrol.wait before its first global access); only launch and set-up overlap
    // pdl_prefetch: also B (the weights) copied before the wait, which the library cannot do
    struct PdlRun {
      std::optional<gpu::Timing> ts, tg;
    };
    auto run_pdl = [&](const emit_cuda::TcConfig& cfg, bool prefetch, const std::string& key) {
      PdlRun r;
      try {
        emit_cuda::CudaOptions o;
        o.arch = ctx.device().properties.arch;
        o.config = cfg;
        row["tiles_" + key] = cfg.to_string();
        o.pdl = true;
        if (prefetch) o.pdl_prefetch = {en.contraction->b.tensor};
        LoadedProgram lq = load_program(en.c->kernel, o);
        for (const auto& t : en.c->kernel.tensors)
          if (t.kind == ir::TensorKind::Output) d.buffers[d.index.at(t.name)].fill_bytes(0xff);
        launch_all(lq, d, stream);
        stream.synchronize();
        auto outs_pdl = download_outputs(en.c->kernel, d);
        const NpyArray& a = outs.begin()->second;
        const NpyArray& b = outs_pdl.begin()->second;
        row[key + "_output_identical"] = a.data == b.data;  // bit-identical when the tiles are the same
        row[key + "_output_matches"] = interp::compare(a, b, 1e-2, 1e-3, outs.begin()->first).ok;
        gpu::TimedCall callp = [&](CUstream s) { launch_all(lq, d, s); };
        r.ts = gpu::time_on_stream(callp, stream, full);
        r.tg = gpu::time_in_graph(callp, stream, full);
        row["stream_" + key + "_us"] = r.ts->median_us;
        row["graph_" + key + "_us"] = r.tg->median_us;
      } catch (const std::exception& ex) {
        row[key + "_error"] = ex.what();
      }
      return r;
    };
    PdlRun pdl, pre;
    if (best_pdl) pdl = run_pdl(*best_pdl, false, "pdl");
    if (best_pre) pre = run_pdl(*best_pre, true, "pdl_prefetch");
    if (br) {
      row["library"] = br->library;
      row["library_stream_us"] = br->stream.median_us;
      row["library_graph_us"] = br->graph.median_us;
      row["speedup_stream"] = br->stream.median_us / ts.median_us;
      row["speedup_graph"] = br->graph.median_us / tg.median_us;
      if (std::count(en.e.tags.begin(), en.e.tags.end(), "seed_table")) {
        seed_graph.push_back(br->graph.median_us / tg.median_us);
        seed_stream.push_back(br->stream.median_us / ts.median_us);
        if (pdl.tg) {
          seed_graph_pdl.push_back(br->graph.median_us / pdl.tg->median_us);
          seed_stream_pdl.push_back(br->stream.median_us / pdl.ts->median_us);
        }
        if (pre.tg) seed_graph_pre.push_back(br->graph.median_us / pre.tg->median_us);
      }
      if (pdl.tg) {
        row["speedup_graph_pdl"] = br->graph.median_us / pdl.tg->median_us;
        row["speedup_stream_pdl"] = br->stream.median_us / pdl.ts->median_us;
      }
      if (pre.tg) {
        row["speedup_graph_pdl_prefetch"] = br->graph.median_us / pre.tg->median_us;
        row["speedup_stream_pdl_prefetch"] = br->stream.median_us / pre.ts->median_us;
      }
    }
    std::cout << fmt::format("{:<22} {:<26} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f} {:>8.2f} {:>8.2f} {:>8.1f} {:>9}\n", en.e.name,
                             row["tiles"].get<std::string>(), ts.median_us, tg.median_us, br ? br->stream.median_us : 0.0,
                             br ? br->graph.median_us : 0.0, br ? br->stream.median_us / ts.median_us : 0.0,
                             br ? br->graph.median_us / tg.median_us : 0.0, lp.program.flops / tg.median_us * 1e-6, check);
    if (pdl.tg)
      std::cout << fmt::format("{:<22} {:<26} {:>9.2f} {:>9.2f} {:>9} {:>9} {:>8.2f} {:>8.2f} {:>8.1f} {:>9}\n", "  + PDL", best_pdl->to_string(),
                               pdl.ts->median_us, pdl.tg->median_us, "", "", br ? br->stream.median_us / pdl.ts->median_us : 0.0,
                               br ? br->graph.median_us / pdl.tg->median_us : 0.0, lp.program.flops / pdl.tg->median_us * 1e-6,
                               row.value("pdl_output_matches", false) ? "=no PDL" : "DIFFERS");
    if (pre.tg)
      std::cout << fmt::format("{:<22} {:<26} {:>9.2f} {:>9.2f} {:>9} {:>9} {:>8.2f} {:>8.2f} {:>8.1f} {:>9}\n", "  + PDL, B prefetched",
                               best_pre->to_string(), pre.ts->median_us, pre.tg->median_us, "", "",
                               br ? br->stream.median_us / pre.ts->median_us : 0.0, br ? br->graph.median_us / pre.tg->median_us : 0.0,
                               lp.program.flops / pre.tg->median_us * 1e-6, row.value("pdl_prefetch_output_matches", false) ? "=no PDL" : "DIFFERS");
    std::cout.flush();
    rows.push_back(row);
  }
  const double gg = geomean(seed_graph), gs = geomean(seed_stream);
  const double ggp = geomean(seed_graph_pdl), gsp = geomean(seed_stream_pdl);
  std::cout << fmt::format("seed GEMM table geomean speedup over cuBLAS: {:.2f}x (CUDA graph), {:.2f}x (stream)\n", gg, gs);
  if (!seed_graph_pdl.empty())
    std::cout << fmt::format("  with programmatic dependent launch (ours only; cuBLAS called as-is): {:.2f}x (CUDA graph), {:.2f}x (stream)\n",
                             ggp, gsp);
  if (!seed_graph_pre.empty())
    std::cout << fmt::format("  with PDL and the weights (B) copied before the wait (B not written by earlier kernels): {:.2f}x (CUDA graph)\n",
                             geomean(seed_graph_pre));
  return {{"suite", "gpu"},
          {"device", device},
          {"rows", rows},
          {"seed_geomean_speedup_graph", gg},
          {"seed_geomean_speedup_stream", gs},
          {"seed_geomean_speedup_graph_pdl", ggp},
          {"seed_geomean_speedup_stream_pdl", gsp},
          {"seed_geomean_speedup_graph_pdl_prefetch", geomean(seed_graph_pre)}};
}

#endif

}  // namespace tessel::cli
