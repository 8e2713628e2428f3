// `tessel sim` and `tessel bench` end to end: .npy in, .npy/report/trace/CSV out, exit status 1
// with a located message for every kind of bad input.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "sim_test_util.h"

using namespace tessel;
using namespace tessel::npu_sim::testing;
namespace fs = std::filesystem;

namespace {

struct Run {
  int status;
  std::string output;
};

fs::path scratch_dir() {
  // One directory per process: ctest runs each case as its own process, several at a time.
  const fs::path d = fs::path(TESSEL_BINARY_DIR) / ("test_cli_sim_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

Run run_tessel(const std::string& args) {
  const fs::path out = scratch_dir() / "out.txt";
  const std::string cmd = std::string(TESSEL_CLI) + " " + args + " > " + out.string() + " 2>&1";
  const int raw = std::system(cmd.c_str());
  std::ifstream in(out);
  std::stringstream s;
  s << in.rdbuf();
  return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, s.str()};
}

std::string example_path(const std::string& name) { return std::string(TESSEL_SOURCE_DIR) + "/npu_sim/examples/" + name; }

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("tessel sim gemm64.npu: output equals the reference, report, trace and CSV are written") {
  const fs::path d = scratch_dir();
  const NpyArray a = random_f16({64, 64}, 1), b = random_f16({64, 64}, 2);
  write_npy((d / "a.npy").string(), a);
  write_npy((d / "b.npy").string(), b);
  const Run r = run_tessel("sim " + example_path("gemm64.npu") + " --target " + TESSEL_SOURCE_DIR +
                       "/isa/targets/davinci-910.yaml --input A=" + (d / "a.npy").string() + " --input B=" +
                       (d / "b.npy").string() + " --output C=" + (d / "c.npy").string() + " --report " +
                       (d / "r.json").string() + " --trace " + (d / "t.json").string() + " --csv " +
                       (d / "i.csv").string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  const NpyArray c = read_npy((d / "c.npy").string());
  CHECK(c.dtype == DType::F32);
  const std::vector<float> ref = reference_gemm(a, b, 64, 64, 64);
  CHECK(std::memcmp(ref.data(), c.data.data(), ref.size() * 4) == 0);

  const nlohmann::json report = read_json(d / "r.json");
  CHECK(report["total_cycles"].get<uint64_t>() > 0);
  CHECK(report["races"].empty());
  CHECK(report["deadlock"].is_null());
  const auto& m = report["per_core"][0]["pipes"]["M"];
  // M runs 4 mmads (64x16x64: 16 fractals each) and 10 flag instructions (1 + 4 x 2 + 1) of 1 cycle.
  CHECK(m["instructions"] == 4 + 10);
  CHECK(m["busy_cycles"] == 4 * 16 + 10);
  for (const char* key : {"stall_flag_cycles", "stall_barrier_cycles", "utilization"}) CHECK(m.contains(key));
  CHECK(report["bytes_per_path"]["GM->L1"] == 2 * 64 * 64 * 2);
  CHECK(report["bytes_per_path"]["UB->GM"] == 64 * 64 * 4);
  CHECK(report["peak_occupancy"]["L1"]["peak_bytes"] == 4096);

  // Trace: one process per core, one track per pipe, slices on a track never overlap, flows pair up.
  const nlohmann::json trace = read_json(d / "t.json");
  std::map<std::pair<int, int>, std::vector<std::pair<uint64_t, uint64_t>>> slices;
  int flow_starts = 0, flow_ends = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X") slices[{e["pid"].get<int>(), e["tid"].get<int>()}].push_back({e["ts"], e["dur"]});
    flow_starts += e["ph"] == "s";
    flow_ends += e["ph"] == "f";
  }
  CHECK(flow_starts > 0);
  CHECK(flow_starts == flow_ends);
  for (auto& [track, list] : slices) {
    std::sort(list.begin(), list.end());
    for (size_t i = 1; i < list.size(); ++i) CHECK(list[i - 1].first + list[i - 1].second <= list[i].first);
  }
  std::ifstream csv(d / "i.csv");
  std::string header;
  std::getline(csv, header);
  CHECK(header == "core,pipe,pc,line,instruction,start_cycle,end_cycle,completion_cycle,bytes,path");
}

TEST_CASE("tessel sim rejects bad input with status 1 and a located message") {
  const fs::path d = scratch_dir();
  {
    std::ofstream(d / "bad.npu") << "mov r1, 1\nvaddd f16\npipe_barrier ALL\n";
    const Run r = run_tessel("sim " + (d / "bad.npu").string());
    CHECK(r.status == 1);
    CHECK(r.output.find("bad.npu:2:1: unknown mnemonic 'vaddd'") != std::string::npos);
  }
  {
    write_npy((d / "small.npy").string(), random_f16({32, 64}, 1));
    const Run r = run_tessel("sim " + example_path("gemm64.npu") + " --input A=" + (d / "small.npy").string());
    CHECK(r.status == 1);
    CHECK(r.output.find("--input A: the .npy holds f16 [32, 64], the program declares f16 [64, 64]") != std::string::npos);
  }
  {
    const Run r = run_tessel("sim " + example_path("gemm64.npu") + " --input A=" + (d / "missing.npy").string());
    CHECK(r.status == 1);
    CHECK(r.output.find("missing.npy") != std::string::npos);
  }
  {
    write_npy((d / "a.npy").string(), random_f16({64, 64}, 1));
    const Run r = run_tessel("sim " + example_path("gemm64.npu") + " --input A=" + (d / "a.npy").string());
    CHECK(r.status == 1);
    CHECK(r.output.find("input tensor 'B' is not bound") != std::string::npos);
  }
  {
    const Run r = run_tessel("sim " + example_path("gemm64.npu") + " --timing-only --output C=" + (d / "c.npy").string());
    CHECK(r.status == 1);
    CHECK(r.output.find("timing-only") != std::string::npos);
  }
  {
    std::ofstream(d / "dead.npu") << "wait_flag MTE3, V, 2\npipe_barrier ALL\n";
    const Run r = run_tessel("sim " + (d / "dead.npu").string() + " --report " + (d / "dead.json").string());
    CHECK(r.status == 1);
    CHECK(r.output.find("deadlock") != std::string::npos);
    CHECK(read_json(d / "dead.json")["deadlock"].is_string());
  }
}

TEST_CASE("tessel sim on the missing-sync example prints both racing instructions") {
  const Run r = run_tessel("sim " + example_path("gemm16_missing_sync.npu") + " --timing-only");
  CHECK(r.status == 0);
  CHECK(r.output.find("race on L1[0, 512): MTE2 pc 0 'dma_in_nz f16, L1[0], GM[0], 16, 16, 16' (write) and MTE1 pc 2 "
                      "'load2d f16, L0A[0], L1[0], 1, 1, 0, 1, 0' (read)") != std::string::npos);
}

TEST_CASE("tessel bench: unknown suites are rejected with the list of known ones, sim writes JSON") {
  const Run bad = run_tessel("bench nosuch");
  CHECK(bad.status == 1);
  const size_t known = bad.output.find("unknown suite 'nosuch' (known suites: ");
  CHECK(known != std::string::npos);
  CHECK(bad.output.find("sim", known) != std::string::npos);
  const fs::path j = scratch_dir() / "bench.json";
  const Run ok = run_tessel("bench sim --size 256 --json " + j.string());
  INFO(ok.output);
  REQUIRE(ok.status == 0);
  const nlohmann::json result = read_json(j);
  CHECK(result["runs"].size() == 3);
  CHECK(result["runs"][0]["cube_macs"] == 256 * 256 * 256);
}

TEST_CASE("tessel sim --emit-binary / --disassemble: the binary form runs and prints back the same text") {
  const fs::path d = scratch_dir();
  const Run emit = run_tessel("sim " + example_path("conv_img2col.npu") + " --emit-binary " + (d / "conv.npubin").string());
  REQUIRE(emit.status == 0);
  const Run text = run_tessel("sim " + example_path("conv_img2col.npu") + " --disassemble");
  const Run from_binary = run_tessel("sim " + (d / "conv.npubin").string() + " --disassemble");
  CHECK(from_binary.status == 0);
  CHECK(from_binary.output == text.output);
  CHECK(text.output.find("load3d f16, L0A[0], L1[0], 16, 0, 64, 0, 9") != std::string::npos);
  const Run run = run_tessel("sim " + (d / "conv.npubin").string() + " --timing-only");
  CHECK(run.status == 0);
  CHECK(run.output.find("761 cycles") != std::string::npos);
}
