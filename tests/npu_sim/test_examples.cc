// Every example program in npu_sim/examples/ computes exactly what a plain C++ reference computes
// (element by element, bit for bit), and the double-buffered GEMM really overlaps its pipes.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <set>

#include "npu_sim/gemm_program.h"
#include "npu_sim/report.h"
#include "sim_test_util.h"

using namespace tessel;
using namespace tessel::npu_sim;
using namespace tessel::npu_sim::testing;

namespace {

SimResult run_gemm64(const std::string& file) {
  const npu::Program p = example(file);
  return simulate(p, davinci(), {{"A", random_f16({64, 64}, 1)}, {"B", random_f16({64, 64}, 2)}});
}

void check_gemm64(const std::string& file) {
  const npu::Program p = example(file);
  const NpyArray a = random_f16({64, 64}, 1), b = random_f16({64, 64}, 2);
  const SimResult r = simulate(p, davinci(), {{"A", a}, {"B", b}});
  CHECK(r.record.races.empty());
  CHECK_FALSE(r.record.deadlock);
  const NpyArray c = r.tensor(p, "C");
  const std::vector<float> ref = reference_gemm(a, b, 64, 64, 64);
  int mismatches = 0;
  for (int64_t i = 0; i < 64 * 64; ++i) mismatches += std::memcmp(&ref[i], c.data.data() + 4 * i, 4) != 0;
  CHECK(mismatches == 0);
}

}  // namespace

TEST_CASE("gemm64.npu: C equals the f32-accumulated reference bit for bit") { check_gemm64("gemm64.npu"); }

TEST_CASE("gemm64_double.npu: C equals the f32-accumulated reference bit for bit") {
  check_gemm64("gemm64_double.npu");
}

TEST_CASE("double buffering takes fewer cycles than single buffering, and its pipes overlap") {
  const SimResult single = run_gemm64("gemm64.npu");
  const SimResult dbl = run_gemm64("gemm64_double.npu");
  MESSAGE("single-buffered: " << single.record.total_cycles << " cycles, double-buffered: " << dbl.record.total_cycles);
  CHECK(dbl.record.total_cycles < single.record.total_cycles);
  // At 64x64x64 the GM latencies (300 in, 150 out) dominate: measure overlap as cycles in flight
  // (busy plus latency) per pipe, which only sum past the total when pipes work at the same time.
  uint64_t in_flight = 0;
  for (const InstructionEvent& e : dbl.record.instructions) in_flight += e.completion - e.start;
  CHECK(dbl.record.total_cycles < in_flight);
}

TEST_CASE("add_relu.npu: Z = relu(X + Y) with f16 rounding per operation") {
  const npu::Program p = example("add_relu.npu");
  const NpyArray x = random_f16({32, 128}, 3), y = random_f16({32, 128}, 4);
  const SimResult r = simulate(p, davinci(), {{"X", x}, {"Y", y}});
  CHECK(r.record.races.empty());
  const NpyArray z = r.tensor(p, "Z");
  int mismatches = 0;
  for (int64_t i = 0; i < 32 * 128; ++i) {
    const float sum = round_to_f16(f16_at(x, i) + f16_at(y, i));
    const uint16_t expected = f32_to_f16_bits(sum > 0 ? sum : 0.0f);
    uint16_t got;
    std::memcpy(&got, z.data.data() + 2 * i, 2);
    mismatches += got != expected;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("conv_img2col.npu: 3x3 padded convolution through Load3D equals the direct loop nest") {
  const npu::Program p = example("conv_img2col.npu");
  const NpyArray x = random_f16({1, 8, 8, 16}, 5), w = random_f16({144, 16}, 6);
  const SimResult r = simulate(p, davinci(), {{"X", x}, {"W", w}});
  CHECK(r.record.races.empty());
  const NpyArray y = r.tensor(p, "Y");
  int mismatches = 0;
  for (int oh = 0; oh < 8; ++oh)
    for (int ow = 0; ow < 8; ++ow)
      for (int n = 0; n < 16; ++n) {
        float acc = 0.0f;
        for (int kh = 0; kh < 3; ++kh)
          for (int kw = 0; kw < 3; ++kw)
            for (int c = 0; c < 16; ++c) {
              const int h = oh + kh - 1, wi = ow + kw - 1;
              const float xv = (h < 0 || h >= 8 || wi < 0 || wi >= 8) ? 0.0f : f16_at(x, (h * 8 + wi) * 16 + c);
              acc += xv * f16_at(w, ((kh * 3 + kw) * 16 + c) * 16 + n);
            }
        const uint16_t expected = f32_to_f16_bits(acc > 0 ? acc : 0.0f);
        uint16_t got;
        std::memcpy(&got, y.data.data() + 2 * ((oh * 8 + ow) * 16 + n), 2);
        mismatches += got != expected;
      }
  CHECK(mismatches == 0);
}

TEST_CASE("gemm16_missing_sync.npu: the race names both instructions of each unordered pair") {
  const npu::Program p = example("gemm16_missing_sync.npu");
  const SimResult r = simulate(p, davinci(), {{"A", random_f16({16, 16}, 7)}, {"B", random_f16({16, 16}, 8)}});
  REQUIRE(r.record.races.size() == 2);
  const Race& first = r.record.races[0];
  CHECK(first.buffer == npu::Buffer::L1);
  CHECK(first.first.pipe == npu::Pipe::MTE2);
  CHECK(first.first.write);
  CHECK(first.first.text == "dma_in_nz f16, L1[0], GM[0], 16, 16, 16");
  CHECK(first.second.pipe == npu::Pipe::MTE1);
  CHECK_FALSE(first.second.write);
  CHECK(first.second.text == "load2d f16, L0A[0], L1[0], 1, 1, 0, 1, 0");
  CHECK(first.second.begin == 0);
  CHECK(first.second.end == 512);
  // MTE1 reaches the second load2d before MTE2 writes B: here the read comes first.
  const Race& second = r.record.races[1];
  CHECK(second.first.text == "load2d f16, L0B[0], L1[512], 1, 1, 0, 1, 1");
  CHECK(second.second.text == "dma_in_nz f16, L1[512], GM[512], 16, 16, 16");
  CHECK(second.second.write);
  const auto report = report_json(r.record);
  CHECK(report["races"].size() == 2);
  CHECK(report["races"][0]["first"]["line"] == 7);
}

TEST_CASE("a generated double-buffered 256x256x256 GEMM on 2 cores: exact result, pipes overlap") {
  GemmTiling t;
  t.m = t.n = t.k = 256;
  t.cores = 2;
  const npu::Program p = make_gemm_program(t, isa::npu_machine(davinci()));
  const NpyArray a = random_f16({256, 256}, 11), b = random_f16({256, 256}, 12);
  const SimResult r = simulate(p, davinci(), {{"A", a}, {"B", b}});
  CHECK(r.record.races.empty());
  CHECK_FALSE(r.record.deadlock);
  const NpyArray c = r.tensor(p, "C");
  const std::vector<float> ref = reference_gemm(a, b, 256, 256, 256);
  int mismatches = 0;
  for (int64_t i = 0; i < 256 * 256; ++i) mismatches += std::memcmp(&ref[i], c.data.data() + 4 * i, 4) != 0;
  CHECK(mismatches == 0);
  // Overlap is real: on core 0 the busy cycles (occupancy) of its pipes add up to more than the run.
  uint64_t busy = 0;
  const auto stats = pipe_stats(r.record);
  for (const PipeStats& s : stats[0]) busy += s.busy_cycles;
  MESSAGE("256^3 on 2 cores: " << r.record.total_cycles << " cycles, core 0 pipes busy " << busy);
  CHECK(r.record.total_cycles < busy);
  // The trace has one process per core and never overlaps two slices on one pipe's track.
  const nlohmann::json trace = chrome_trace_json(r.record);
  std::map<std::pair<int, int>, std::vector<std::pair<uint64_t, uint64_t>>> tracks;
  std::set<int> processes;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") processes.insert(e["pid"].get<int>());
    if (e["ph"] == "X") tracks[{e["pid"].get<int>(), e["tid"].get<int>()}].push_back({e["ts"], e["dur"]});
  }
  CHECK(processes == std::set<int>{0, 1});
  int overlaps = 0;
  for (auto& [track, slices] : tracks) {
    std::sort(slices.begin(), slices.end());
    for (size_t i = 1; i < slices.size(); ++i) overlaps += slices[i - 1].first + slices[i - 1].second > slices[i].first;
  }
  CHECK(overlaps == 0);
  // And the printed program assembles back to itself.
  CHECK(npu::assemble_program(npu::print_program(p), "printed") == p);
}
