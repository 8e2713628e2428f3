#include "gpu_backend/timing.h"

#include <algorithm>

#include "gpu_backend/driver_api.h"
#include "gpu_backend/error.h"
#include "isa/base/error.h"

namespace tessel::gpu {
namespace {

class Event {
 public:
  Event() { TESSEL_CU(cuEventCreate(&e_, CU_EVENT_DEFAULT)); }
  ~Event() { driver().cuEventDestroy(e_); }
  Event(const Event&) = delete;
  void record(CUstream s) { TESSEL_CU(cuEventRecord(e_, s)); }
  void synchronize() { TESSEL_CU(cuEventSynchronize(e_)); }
  CUevent get() const { return e_; }

 private:
  CUevent e_ = nullptr;
};

float elapsed_ms(const Event& start, Event& stop) {
  stop.synchronize();
  float ms = 0;
  TESSEL_CU(cuEventElapsedTime(&ms, start.get(), stop.get()));
  return ms;
}

struct GraphExec {
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  ~GraphExec() {
    if (exec) driver().cuGraphExecDestroy(exec);
    if (graph) driver().cuGraphDestroy(graph);
  }
};

Timing summarize(std::string harness, std::vector<double> samples, int calls) {
  Timing t;
  t.harness = std::move(harness);
  t.calls_per_sample = calls;
  t.median_us = median(samples);
  t.min_us = *std::min_element(samples.begin(), samples.end());
  t.max_us = *std::max_element(samples.begin(), samples.end());
  t.samples_us = std::move(samples);
  return t;
}

void check_options(const TimingOptions& o) {
  if (o.calls_per_sample < 1 || o.repeats < 1 || o.warmup_calls < 0)
    throw UserError("timing needs calls_per_sample >= 1, repeats >= 1 and warmup_calls >= 0");
}

}  // namespace

double median(std::vector<double> v) {
  TESSEL_CHECK(!v.empty(), "median of an empty sample");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

Timing time_on_stream(const TimedCall& call, CUstream stream, const TimingOptions& o) {
  check_options(o);
  for (int i = 0; i < o.warmup_calls; ++i) call(stream);
  TESSEL_CU(cuStreamSynchronize(stream));
  Event start, stop;
  std::vector<double> samples;
  for (int r = 0; r < o.repeats; ++r) {
    start.record(stream);
    for (int i = 0; i < o.calls_per_sample; ++i) call(stream);
    stop.record(stream);
    samples.push_back(1000.0 * elapsed_ms(start, stop) / o.calls_per_sample);
  }
  return summarize("stream", std::move(samples), o.calls_per_sample);
}

namespace {

// `calls_per_sample` calls of `call` captured into a graph (after the warm-up calls outside the
// capture) and launched three times
void capture(const TimedCall& call, CUstream stream, const TimingOptions& o, GraphExec& g) {
  // Warm up outside the capture: lazy module loading, library workspaces and autotuning happen here.
  for (int i = 0; i < std::max(1, o.warmup_calls); ++i) call(stream);
  TESSEL_CU(cuStreamSynchronize(stream));
  TESSEL_CU(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  try {
    for (int i = 0; i < o.calls_per_sample; ++i) call(stream);
  } catch (...) {
    CUgraph broken = nullptr;
    driver().cuStreamEndCapture(stream, &broken);
    if (broken) driver().cuGraphDestroy(broken);
    throw;
  }
  TESSEL_CU(cuStreamEndCapture(stream, &g.graph));
  TESSEL_CU(cuGraphInstantiate(&g.exec, g.graph, 0));
  for (int i = 0; i < 3; ++i) TESSEL_CU(cuGraphLaunch(g.exec, stream));
  TESSEL_CU(cuStreamSynchronize(stream));
}

double graph_sample(const GraphExec& g, CUstream stream, const TimingOptions& o) {
  Event start, stop;
  start.record(stream);
  TESSEL_CU(cuGraphLaunch(g.exec, stream));
  stop.record(stream);
  return 1000.0 * elapsed_ms(start, stop) / o.calls_per_sample;
}

}  // namespace

Timing time_in_graph(const TimedCall& call, CUstream stream, const TimingOptions& o) {
  check_options(o);
  GraphExec g;
  capture(call, stream, o, g);
  std::vector<double> samples;
  for (int r = 0; r < o.repeats; ++r) samples.push_back(graph_sample(g, stream, o));
  return summarize("graph", std::move(samples), o.calls_per_sample);
}

std::vector<Timing> time_interleaved_in_graph(const std::vector<TimedCall>& calls, CUstream stream, const TimingOptions& o) {
  check_options(o);
  std::vector<GraphExec> graphs(calls.size());
  for (size_t i = 0; i < calls.size(); ++i) capture(calls[i], stream, o, graphs[i]);
  std::vector<std::vector<double>> samples(calls.size());
  for (int r = 0; r < o.repeats; ++r)
    for (size_t i = 0; i < calls.size(); ++i) samples[i].push_back(graph_sample(graphs[i], stream, o));
  std::vector<Timing> out;
  for (auto& s : samples) out.push_back(summarize("graph (interleaved)", std::move(s), o.calls_per_sample));
  return out;
}

}  // namespace tessel::gpu
