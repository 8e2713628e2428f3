// The roofline and the two utilizations in what `tessel run` prints and writes (--report), through
// the CLI binary (TESSEL_CLI). The bounds themselves: tests/kernel/test_roofline.cc.
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

struct Run {
  int code;
  std::string output;
  nlohmann::json report;
};

Run run_with_report(const std::string& args) {
  const std::string base = "/tmp/tessel-test-roofline-" + std::to_string(::getpid());
  const int rc = std::system(("cd " TESSEL_SOURCE_DIR " && " + std::string(TESSEL_CLI) + " run " + args + " --report " + base +
                              ".json > " + base + ".txt 2>&1")
                                 .c_str());
  Run r{WEXITSTATUS(rc), "", nullptr};
  std::stringstream ss;
  ss << std::ifstream(base + ".txt").rdbuf();
  r.output = ss.str();
  if (r.code == 0) r.report = nlohmann::json::parse(std::ifstream(base + ".json"));
  std::remove((base + ".txt").c_str());
  std::remove((base + ".json").c_str());
  return r;
}

const std::string kGemm512 = "workloads/matmul.tsl --shape M=512,N=512,K=512 --target isa/targets/davinci-910.yaml";

}  // namespace

TEST_CASE("tessel run --report carries the roofline parts and the summary prints the % reached and the bound") {
  const Run r = run_with_report(kGemm512);
  REQUIRE(r.code == 0);
  const nlohmann::json& roof = r.report["roofline"];
  // the 512^3 GEMM's bound on davinci-910 (tests/kernel/test_roofline.cc): max(cube 1,024, GM 753.3) + 452
  CHECK(roof["cycles"].get<double>() == doctest::Approx(1476));
  CHECK(roof["binds"] == "cube");
  CHECK(roof["cube_cycles"].get<double>() == doctest::Approx(1024));
  CHECK(roof["gm_cycles"].get<double>() == doctest::Approx(2097152.0 / 2784));
  CHECK(roof["latency_cycles"].get<double>() == doctest::Approx(452));
  for (const char* key : {"vector_cycles", "scalar_cycles", "vector_ops", "vector_op_bytes", "cube_macs", "cores"})
    CHECK(roof.contains(key));
  CHECK(roof["macs"] == 134217728);
  CHECK(roof["macs_per_dtype"]["f16"] == 134217728);
  CHECK(roof["gm_read_bytes"] == 1048576);
  CHECK(roof["gm_write_bytes"] == 1048576);
  const double cycles = r.report["total_cycles"].get<double>();
  CHECK(roof["fraction"].get<double>() == doctest::Approx(1476 / cycles));
  CHECK(roof["fraction"].get<double>() <= 1.0);  // the roofline is a lower bound
  CHECK(r.output.find("roofline     1476 cycles, cube bound") != std::string::npos);
  CHECK(r.output.find("% of roofline") != std::string::npos);
  CHECK(r.output.find("(over the 32 core(s) used)") != std::string::npos);
  CHECK(r.output.find("(over the chip's 32 cores)") != std::string::npos);
  CHECK(r.report["utilization_chip"].contains("M"));
  CHECK(r.report["chip_cores"] == 32);
}

TEST_CASE("utilization of the chip: a slower 8-core tile is busier on its cores but never busier on the chip") {
  const Run all = run_with_report(kGemm512);  // the default tile: 32 output tiles over 32 cores
  const Run eight = run_with_report(kGemm512 + " --tile m=256/128,n=128/64,k=128/64");  // 2 x 4 tiles
  REQUIRE(all.code == 0);
  REQUIRE(eight.code == 0);
  REQUIRE(all.report["cores"] == 32);
  REQUIRE(eight.report["cores"] == 8);
  REQUIRE(eight.report["total_cycles"].get<uint64_t>() > all.report["total_cycles"].get<uint64_t>());
  const double used8 = eight.report["utilization"]["M"], chip8 = eight.report["utilization_chip"]["M"];
  const double used32 = all.report["utilization"]["M"], chip32 = all.report["utilization_chip"]["M"];
  CHECK(used8 > used32);  // what the cores-used figure alone showed (issue 29)
  CHECK(chip8 < chip32);
  CHECK(chip8 == doctest::Approx(used8 * 8 / 32));
  CHECK(chip32 == doctest::Approx(used32));
  CHECK(eight.report["roofline"]["fraction"].get<double>() < all.report["roofline"]["fraction"].get<double>());
}

TEST_CASE("tessel compile records the roofline in the program, tessel sim prints the % reached and reports it") {
  const std::string base = "/tmp/tessel-test-roofline-sim-" + std::to_string(::getpid());
  const std::string cd = "cd " TESSEL_SOURCE_DIR " && " + std::string(TESSEL_CLI);
  REQUIRE(std::system((cd + " compile " + kGemm512 + " -o " + base + ".npu > /dev/null 2>&1").c_str()) == 0);
  const int rc = std::system((cd + " sim --timing-only " + base + ".npu --report " + base + ".json > " + base + ".txt 2>&1").c_str());
  CHECK(WEXITSTATUS(rc) == 0);
  std::stringstream out;
  out << std::ifstream(base + ".txt").rdbuf();
  CHECK(out.str().find("roofline     1476 cycles, cube bound") != std::string::npos);
  CHECK(out.str().find("of the chip's 32") != std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(base + ".json"));
  CHECK(j["roofline"]["cycles"].get<double>() == doctest::Approx(1476));
  CHECK(j["roofline"]["fraction"].get<double>() == doctest::Approx(1476 / j["total_cycles"].get<double>()));
  CHECK(j["utilization_chip"].contains("M"));
  // a program without the comment (hand-written) has no roofline: nothing printed, no field
  std::ofstream(base + "-bare.npu") << ".cores 1\npipe_barrier ALL\n";
  const int bare = std::system((cd + " sim " + base + "-bare.npu --report " + base + ".json > " + base + ".txt 2>&1").c_str());
  CHECK(WEXITSTATUS(bare) == 0);
  CHECK(!nlohmann::json::parse(std::ifstream(base + ".json")).contains("roofline"));
  for (const char* ext : {".npu", "-bare.npu", ".json", ".txt"}) std::remove((base + ext).c_str());
}
