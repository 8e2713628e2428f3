// The plan a command runs and where it came from (compiler/pipeline.h PlanSource): a plan from the
// tuning database is named with its file and key by `tessel run`, its report and `compile
// --explain`; --no-tuned ignores the database; --tile takes a GPU plan on GPU targets and a plan a
// target cannot run is exit 1 with the reason, never silently replaced.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "compiler/tune/best_db.h"
#include "compiler/tune/tuning_log.h"
#include "isa/hierarchy.h"

using namespace tessel;

namespace {

struct Cli {
  int code = -1;
  std::string out;  // stdout and stderr
};

// `env` : VAR=VALUE assignments for the command
Cli run_cli(const std::string& args, const std::string& env = "") {
  Cli r;
  FILE* p = popen((env + " " + TESSEL_CLI + " " + args + " 2>&1").c_str(), "r");
  REQUIRE(p);
  char buf[512];
  while (fgets(buf, sizeof buf, p)) r.out += buf;
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string scratch(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() / ("tessel_plan_source_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove(p);
  return p.string();
}

const std::string kSrc = TESSEL_SOURCE_DIR;
const std::string kMatmul = kSrc + "/workloads/matmul.tsl";
const std::string kNpu = kSrc + "/isa/targets/davinci-910.yaml";
const std::string kSm90 = kSrc + "/isa/targets/sm90.yaml";

}  // namespace

TEST_CASE("plan source: a tuned plan is named with its database and key, --no-tuned ignores it") {
  const std::string db = scratch("best.json"), report = scratch("report.json");
  const isa::Hierarchy h = isa::load_hierarchy(kNpu);
  const tune::ProblemKey key{"matmul", h.name, "K=64,M=64,N=64", "", h.description_hash};
  REQUIRE(tune::db_update(db, key, {"m=32/32,n=32/32,k=32/16", 1234, "cycles", "model", 16}));
  const std::string base = kMatmul + " --target " + kNpu + " --shape M=64,N=64,K=64";
  const std::string env = "TESSEL_TUNE_DB=" + db;
  const Cli tuned = run_cli("run " + base + " --report " + report, env);
  CHECK_MESSAGE(tuned.code == 0, tuned.out);
  CHECK_MESSAGE(tuned.out.find("tile m=32/32,n=32/32,k=32/16 (from the tuning database)") != std::string::npos, tuned.out);
  CHECK_MESSAGE(tuned.out.find("key " + key.to_string()) != std::string::npos, tuned.out);
  {
    const auto j = nlohmann::json::parse(std::ifstream(report));
    CHECK(j["plan_source"]["kind"] == "tuning_database");
    CHECK(j["plan_source"]["database"] == db);
    CHECK(j["plan_source"]["key"] == key.to_string());
    CHECK(j["tile"] == "m=32/32,n=32/32,k=32/16");
  }
  const Cli ignored = run_cli("run " + base + " --no-tuned --report " + report, env);
  CHECK_MESSAGE(ignored.code == 0, ignored.out);
  {
    const auto j = nlohmann::json::parse(std::ifstream(report));
    CHECK(j["plan_source"]["kind"] == "policy");
    CHECK(j["tile"] != "m=32/32,n=32/32,k=32/16");
  }
  const Cli explained = run_cli("compile " + base + " --explain", env);
  CHECK_MESSAGE(explained.out.find("plan m=32/32,n=32/32,k=32/16 from the tuning database " + db) != std::string::npos,
                explained.out);
  const Cli home = run_cli("compile " + base + " --explain");  // the test's own home holds no database
  CHECK(home.out.find("from the target's tile policy") != std::string::npos);
  std::filesystem::remove(db);
  std::filesystem::remove(db + ".lock");
  std::filesystem::remove(report);
}

TEST_CASE("tile language: GPU plans on GPU targets, refused with the reason where they cannot run") {
  const std::string base = kMatmul + " --shape M=512,N=512,K=512 --target ";
  // a legal plan is what is compiled
  const Cli ok = run_cli("compile " + base + kSm90 + " --tile 64x64x128/32x64/ks4/st5 --explain");
  CHECK_MESSAGE(ok.code == 0, ok.out);
  CHECK(ok.out.find("plan 64x64x128/32x64/ks4/st5 (given)") != std::string::npos);
  // a plan the tile policy refuses: exit 1 with the reason and plans that can run
  const Cli too_big = run_cli("compile " + base + kSm90 + " --tile m=256/128,n=128/64,k=64/16");
  CHECK(too_big.code == 1);
  CHECK_MESSAGE(too_big.out.find("cannot run on sm_90: more than 16 accumulator fragments per warp") != std::string::npos,
                too_big.out);
  CHECK(too_big.out.find("plans that can:") != std::string::npos);
  // a malformed GPU plan names the expected form
  const Cli bad = run_cli("compile " + base + kSm90 + " --tile 256x128x64/64x64");
  CHECK(bad.code == 1);
  CHECK(bad.out.find("too few fields") != std::string::npos);
  // a GPU plan for an NPU target
  const Cli npu = run_cli("compile " + base + kNpu + " --tile 64x64x128/32x64/ks4/st5");
  CHECK(npu.code == 1);
  CHECK(npu.out.find("is not a GPU description") != std::string::npos);
  // a TensorCore plan for a kernel that runs as SIMT code (no contraction)
  const Cli simt = run_cli("compile " + kSrc + "/workloads/relu.tsl --shape N=1,C=16,H=8,W=16 --target " + kSm90 +
                           " --tile 64x64x128/32x64/ks4/st5");
  CHECK(simt.code == 1);
  CHECK_MESSAGE(simt.out.find("is a TensorCore plan, but the kernel runs as SIMT code") != std::string::npos, simt.out);
}

TEST_CASE("compile --explain: the plan, the bound it targets and the alternatives with predicted times") {
  const std::string npu = "compile " + kMatmul + " --target " + kNpu + " --shape M=256,N=256,K=256 --explain";
  const Cli five = run_cli(npu);
  CHECK_MESSAGE(five.code == 0, five.out);
  CHECK(five.out.find("plan: ") != std::string::npos);
  CHECK(five.out.find("bound: roofline ") != std::string::npos);
  CHECK(five.out.find(" bound (cube ") != std::string::npos);  // the bound that binds, then each part
  const auto count = [](const std::string& s, const std::string& what) {
    size_t n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
    return n;
  };
  CHECK(five.out.find("alternatives (5 of ") != std::string::npos);
  CHECK(count(five.out, " cycles ") >= 5);  // five alternatives, each with its predicted cycles and microseconds
  const Cli all = run_cli(npu + "=all");
  CHECK(all.code == 0);
  CHECK(count(all.out, "x the chosen plan's") > count(five.out, "x the chosen plan's"));
  const Cli gpu = run_cli("compile " + kMatmul + " --target " + kSm90 + " --shape M=4096,N=768,K=768 --explain=3");
  CHECK_MESSAGE(gpu.code == 0, gpu.out);
  CHECK(gpu.out.find("plan: 128x256x64/64x256/ks1/st4/ws/ts (from the target's tile policy), predicted ") != std::string::npos);
  CHECK(gpu.out.find("alternatives (3 of ") != std::string::npos);
  const Cli bad = run_cli(npu + "=0");
  CHECK(bad.code == 2);
  CHECK(bad.out.find("a positive count or 'all'") != std::string::npos);
}
