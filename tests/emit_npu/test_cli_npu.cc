// `tessel run / compile / bench` on the NPU description, through the CLI binary (TESSEL_CLI).
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace {

struct Result {
  int code;
  std::string output;
};

Result cli(const std::string& args) {
  const std::string out = "/tmp/tessel-test-npu-cli-" + std::to_string(::getpid()) + ".txt";
  const int rc = std::system(("cd " TESSEL_SOURCE_DIR " && " + std::string(TESSEL_CLI) + " " + args + " > " + out + " 2>&1").c_str());
  std::stringstream ss;
  ss << std::ifstream(out).rdbuf();
  std::remove(out.c_str());
  return {WEXITSTATUS(rc), ss.str()};
}

const std::string kTarget = " --target isa/targets/davinci-910.yaml";

}  // namespace

TEST_CASE("tessel run on the NPU: summary on stdout, report with cycles, utilization, syncs and races") {
  const std::string report = "/tmp/tessel-test-npu-report-" + std::to_string(::getpid()) + ".json";
  const std::string trace = "/tmp/tessel-test-npu-trace-" + std::to_string(::getpid()) + ".json";
  const Result r = cli("run workloads/gemm_fused.tsl --def matmul_bias_relu --shape M=40,N=24,K=33" + kTarget +
                       " --report " + report + " --trace " + trace);
  CHECK(r.code == 0);
  CHECK(r.output.find("utilization  cube") != std::string::npos);
  CHECK(r.output.find("verified") != std::string::npos);
  nlohmann::json j = nlohmann::json::parse(std::ifstream(report));
  CHECK(j["verified"] == true);
  CHECK(j["max_abs_err"].get<double>() == 0);
  CHECK(j["total_cycles"].get<uint64_t>() > 0);
  CHECK(j["utilization"].contains("M"));
  CHECK(j["syncs_pruned"].get<int>() <= j["syncs_naive"].get<int>());
  CHECK(j["races"].get<int>() == 0);
  CHECK(std::ifstream(trace).good());
  std::remove(report.c_str());
  std::remove(trace.c_str());
}

TEST_CASE("tessel run --sync naive runs the naive program, a bad --sync value is a usage error (exit 2)") {
  const Result naive = cli("run workloads/add.tsl --shape N=2,C=3,H=4,W=5" + kTarget + " --sync naive");
  CHECK(naive.code == 0);
  CHECK(naive.output.find("(naive)") != std::string::npos);
  const Result bad = cli("run workloads/add.tsl --shape N=2,C=3,H=4,W=5" + kTarget + " --sync fast");
  CHECK(bad.code == 2);
  CHECK(bad.output.find("--sync: fast not in {naive,pruned}") != std::string::npos);
}

TEST_CASE("tessel compile -o writes an .npu program that tessel sim runs (timing-only)") {
  const std::string npu = "/tmp/tessel-test-npu-" + std::to_string(::getpid()) + ".npu";
  const Result c = cli("compile workloads/matmul.tsl --shape M=64,N=32,K=48" + kTarget + " --sync pruned -o " + npu);
  CHECK(c.code == 0);
  CHECK(c.output.find("naive") != std::string::npos);  // the report line counts syncs before and after
  const Result s = cli("sim --timing-only " + npu);
  CHECK(s.code == 0);
  std::remove(npu.c_str());
}

TEST_CASE("an operator the NPU backend cannot map yet is a user error naming the kernel") {
  // One output row's input window (3 x 40000 x 16 f16 = 3.84 MB) exceeds L1, its accumulator L0C
  // (larger feature maps run in bands of output rows: tests/emit_npu/test_emit_npu_conv_bands.cc);
  // without a tile the general vector lowering takes it, with the user's cube tile nothing may.
  const Result r = cli("run workloads/conv_seed.tsl --def conv2d_nhwc --shape N=1,H=4,W=40000,C=16,K=16,R=3,S=3"
                       " --tile n=1,p=1,q=128/64,k=16,r=1,s=1,c=16" + kTarget);
  CHECK(r.code == 1);
  CHECK(r.output.find("kernel conv2d_nhwc") != std::string::npos);
}

TEST_CASE("tessel run verifies softmax on the NPU (vbrcb broadcast)") {
  const Result r = cli("run workloads/bert.tsl --def softmax --shape M=6,N=11" + kTarget);
  CHECK(r.code == 0);
  CHECK(r.output.find("verified") != std::string::npos);
}
