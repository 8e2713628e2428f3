// `tessel compile` and `tessel run --target c` as a user sees them: exit codes, the report, errors.
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
Result run(const std::string& args) {
  const std::string out = "/tmp/tessel-test-cli-" + std::to_string(::getpid()) + ".txt";
  int rc = std::system((std::string(TESSEL_CLI) + " " + args + " > " + out + " 2>&1").c_str());
  std::stringstream ss;
  ss << std::ifstream(out).rdbuf();
  std::remove(out.c_str());
  return {WEXITSTATUS(rc), ss.str()};
}
}  // namespace

TEST_CASE("tessel run --target c verifies and writes verified, max_abs_err and compile_ms") {
  const std::string report = "/tmp/tessel-test-report-" + std::to_string(::getpid()) + ".json";
  Result r = run("run workloads/gemm_fused.tsl --def matmul_bias_relu --target c --shape M=67,N=45,K=33 "
                 "--tile m=32/16,n=32/16,k=16/16 --report " + report);
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(r.output.find("verified") != std::string::npos);
  nlohmann::json j = nlohmann::json::parse(std::ifstream(report));
  CHECK(j["verified"] == true);
  CHECK(j["max_abs_err"].get<double>() == 0.0);
  CHECK(j["compile_ms"].get<double>() > 0);
  CHECK(j.contains("c_compile_ms"));
  std::remove(report.c_str());
}

TEST_CASE("tessel compile prints the schedule and the kernel IR and writes C") {
  const std::string c = "/tmp/tessel-test-kernel-" + std::to_string(::getpid()) + ".c";
  Result r = run("compile workloads/matmul.tsl --target c --shape M=64,N=64,K=64 --tile m=32/16,n=32/16,k=32/16 "
                 "--print-schedule --print-kernel -o " + c);
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(r.output.find("isl schedule:") != std::string::npos);
  CHECK(r.output.find("// parallel_cores") != std::string::npos);
  std::stringstream ss;
  ss << std::ifstream(c).rdbuf();
  CHECK(ss.str().find("void tessel_kernel(void** args)") != std::string::npos);
  std::remove(c.c_str());
}

TEST_CASE("user errors: bad tile spec, unknown axis, oversize tile, missing size (exit 1, message names the fix)") {
  Result a = run("compile workloads/matmul.tsl --target c --shape M=64,N=64,K=64 --tile m=16/32");
  CHECK(a.code == 1);
  CHECK(a.output.find("larger than the outer") != std::string::npos);
  Result b = run("compile workloads/matmul.tsl --target c --shape M=64,N=64,K=64 --tile z=16");
  CHECK(b.code == 1);
  CHECK(b.output.find("unknown axis 'z'") != std::string::npos);
  Result c = run("compile workloads/matmul.tsl --target isa/targets/davinci-910.yaml --shape M=1024,N=1024,K=1024 "
                 "--tile m=512/512,n=512/512,k=512/512");
  CHECK(c.code == 1);
  CHECK(c.output.find("level L0A") != std::string::npos);
  Result d = run("compile workloads/matmul.tsl --target c --shape M=64,N=64");
  CHECK(d.code == 1);
  CHECK(d.output.find("no size for K") != std::string::npos);
  Result e = run("compile workloads/matmul.tsl --target c --shape M=64,N=64,K=64 --dump-after nonsense");
  CHECK(e.code == 1);
  CHECK(e.output.find("unknown pass") != std::string::npos);
}
