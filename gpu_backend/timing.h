// Timing with CUDA events, for our kernels and the library baselines alike.
//
// A TimedCall enqueues one call of the thing measured on the given stream (a kernel launch, a
// cublasGemmEx, a cudnnConvolutionForward) and nothing else. Two harnesses:
//   time_on_stream: `calls_per_sample` back-to-back calls between two events; includes the host's
//                   launch cost whenever that exceeds the kernel's run time.
//   time_in_graph:  `calls_per_sample` calls captured once into a CUDA graph, the graph launched
//                   between two events; removes host launch overhead (time per call = graph time /
//                   calls).
// Both warm up first and report the median over `repeats` samples, in microseconds per call.
// Inputs are not rotated: a problem that fits in L2 is timed L2-warm, as libraries are usually
// benchmarked; rotate buffers inside the TimedCall where that matters.
#pragma once

#include <cuda.h>

#include <functional>
#include <string>
#include <vector>

namespace tessel::gpu {

using TimedCall = std::function<void(CUstream)>;

struct TimingOptions {
  int warmup_calls = 20;
  int calls_per_sample = 100;
  int repeats = 15;
};

struct Timing {
  std::string harness;              // "stream" or "graph"
  double median_us = 0;             // per call
  double min_us = 0, max_us = 0;    // over samples, per call
  int calls_per_sample = 0;
  std::vector<double> samples_us;   // per call, one per repeat
};

Timing time_on_stream(const TimedCall& call, CUstream stream, const TimingOptions& options = {});
Timing time_in_graph(const TimedCall& call, CUstream stream, const TimingOptions& options = {});
// Several calls timed in the graph harness with their samples interleaved (sample r of every call,
// then sample r + 1 ...), so that each sees the same clock and temperature drift: the fair way to
// compare a kernel with a library's on a GPU whose clocks move under load. One Timing per call.
std::vector<Timing> time_interleaved_in_graph(const std::vector<TimedCall>& calls, CUstream stream, const TimingOptions& options = {});

// Median of a non-empty sample (the mean of the two middle values for an even count).
double median(std::vector<double> values);

}  // namespace tessel::gpu
