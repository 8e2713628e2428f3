// `tessel compile` and `tessel run --target c` as a user sees them: exit codes, the report, errors.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
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

TEST_CASE("quasi-affine workloads run through the C target with their output sizes inferred") {
  for (const char* args : {"--def depthwise_stride2 --shape N=2,H=7,W=8,C=3,R=3,S=3",
                           "--def pixel_shuffle --shape N=2,CI=13,H=3,W=4 --tile c=2/1,h=4/2,w=3/3",
                           "--def maxpool2x2 --shape N=2,C=3,H=7,W=6,P=3"}) {
    Result r = run(std::string("run workloads/quasi.tsl --target c ") + args);
    INFO(args << "\n" << r.output);
    CHECK(r.code == 0);
    CHECK(r.output.find(": verified, max_abs_err 0") != std::string::npos);
  }
  // Negative numerators: floor((m - 5) / 2) and (m - 5) % 4 in the generated C equal the interpreter.
  Result n = run("run tests/frontend/data/floor_div_mod.tsl --target c --shape D=6,M=10");
  INFO(n.output);
  CHECK(n.code == 0);
  CHECK(n.output.find("verified") != std::string::npos);
  Result c = run("compile workloads/quasi.tsl --def depthwise_stride2 --target c --shape N=1,H=9,W=9,C=2,R=3,S=3");
  CHECK(c.code == 0);
  Result k = run("check workloads/quasi.tsl --def depthwise_stride2");
  CHECK(k.code == 0);
  CHECK(k.output.find("inferred P = floor((H - R)/2) + 1") != std::string::npos);
}

TEST_CASE("a given size that disagrees with the inferred one is exit 1 naming the parameter and both values") {
  for (const char* cmd : {"run", "compile"}) {
    Result r = run(std::string(cmd) + " workloads/quasi.tsl --def depthwise_stride2 --target c "
                   "--shape N=2,H=7,W=8,C=3,R=3,S=3,P=4");
    INFO(cmd << "\n" << r.output);
    CHECK(r.code == 1);
    CHECK(r.output.find("--shape: size parameter 'P' is given as 4 but is inferred as 3 from the range of 'p' in S0 "
                        "(dimension 1 of Y), floor((H - R)/2) + 1 (workloads/quasi.tsl:8:13)") != std::string::npos);
  }
  Result e = run("eval workloads/quasi.tsl --def maxpool2x2 --shape N=1,C=1,H=4,W=4,Q=3");
  CHECK(e.code == 1);
  CHECK(e.output.find("size parameter 'Q' is given as 3 but is inferred as 2") != std::string::npos);
}

TEST_CASE("the NPU runs division (divided indices split), the CUDA target runs it as SIMT and says why") {
  for (const char* def : {"maxpool2x2", "pixel_shuffle", "depthwise_stride2"}) {
    const std::string shape = std::string(def) == "maxpool2x2" ? "N=1,C=2,H=8,W=8"
                              : std::string(def) == "pixel_shuffle" ? "N=2,CI=13,H=3,W=4" : "N=2,H=7,W=8,C=3,R=3,S=3";
    Result npu = run(std::string("run workloads/quasi.tsl --def ") + def + " --target isa/targets/davinci-910.yaml --shape " + shape);
    INFO(npu.output);
    CHECK(npu.code == 0);
    CHECK(npu.output.find(": verified, max_abs_err 0") != std::string::npos);
  }
  Result gpu = run("compile workloads/quasi.tsl --def depthwise_stride2 --target isa/targets/sm90.yaml "
                   "--shape N=1,H=9,W=9,C=16,R=3,S=3 --explain -o /tmp/tessel-test-quasi.cu");
  INFO(gpu.output);
  CHECK(gpu.code == 0);
  CHECK(gpu.output.find("SIMT: TensorCores not used: floor division or modulo in indices "
                        "(S0: range of p 0:floor((H - R)/2) + 1)") != std::string::npos);
  std::ifstream cu("/tmp/tessel-test-quasi.cu");
  const std::string src((std::istreambuf_iterator<char>(cu)), std::istreambuf_iterator<char>());
  CHECK(src.find("tessel_floordiv(") != std::string::npos);
}

TEST_CASE("without a GPU, run and bench gpu exit 2 at once naming why, bench gpu --prepare is the cache-priming mode") {
  Result probe = run("run workloads/matmul.tsl --target isa/targets/sm90.yaml --shape M=16,N=16,K=16 --no-timing");
  if (probe.output.find("no GPU here") == std::string::npos && probe.output.find("built without the CUDA toolkit") == std::string::npos) {
    MESSAGE("skipped: a GPU is present");
    return;
  }
  CHECK(probe.code == 2);
  const auto t0 = std::chrono::steady_clock::now();
  Result bench = run("bench gpu");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(bench.code == 2);
  CHECK(bench.output.find("tessel bench gpu: no GPU here") != std::string::npos);
  CHECK(bench.output.find("--prepare") != std::string::npos);
  CHECK(seconds < 10);  // at once, not after compiling the benchmark's kernels
}

TEST_CASE("tessel run --input replays inputs saved by --save-inputs, a file of the wrong shape is exit 1 naming it") {
  const std::string d1 = "/tmp/tessel-test-inputs1-" + std::to_string(::getpid()), d2 = "/tmp/tessel-test-inputs2-" + std::to_string(::getpid());
  Result first = run("run workloads/matmul.tsl --target c --shape M=5,N=7,K=3 --seed 9 --save-inputs " + d1);
  INFO(first.output);
  REQUIRE(first.code == 0);
  Result again = run("run workloads/matmul.tsl --target isa/targets/davinci-910.yaml --shape M=5,N=7,K=3 --seed 5 --input A=" + d1 +
                     "/A.npy --input B=" + d1 + "/B.npy --save-inputs " + d2);
  INFO(again.output);
  CHECK(again.code == 0);
  CHECK(again.output.find(": verified") != std::string::npos);
  auto bytes = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  CHECK(!bytes(d1 + "/A.npy").empty());
  CHECK(bytes(d1 + "/A.npy") == bytes(d2 + "/A.npy"));  // the given file, not seed 5's random data
  CHECK(bytes(d1 + "/B.npy") == bytes(d2 + "/B.npy"));
  Result wrong = run("run workloads/matmul.tsl --target c --shape M=5,N=8,K=3 --input B=" + d1 + "/B.npy");
  CHECK(wrong.code == 1);
  CHECK(wrong.output.find(d1 + "/B.npy: has shape [3, 7] but input 'B' needs [3, 8] for the given sizes") != std::string::npos);
  Result twice = run("run workloads/matmul.tsl --target c --shape M=5,N=7,K=3 --input A=" + d1 + "/A.npy --input A=" + d1 + "/A.npy");
  CHECK(twice.code == 1);
  CHECK(twice.output.find("--input: 'A' is given twice") != std::string::npos);
  std::filesystem::remove_all(d1);
  std::filesystem::remove_all(d2);
}

TEST_CASE("usage and input mistakes get messages that say what is wrong: unknown command, a directory, a 1 MB line") {
  Result cmd = run("frobnicate");
  CHECK(cmd.code == 2);
  CHECK(cmd.output.find("tessel: unknown command 'frobnicate' (commands: ") != std::string::npos);
  CHECK(cmd.output.find("eval") != std::string::npos);
  Result dir = run("check workloads/");
  CHECK(dir.code == 1);
  CHECK(dir.output.find("workloads/: is a directory, not an operator file (.tsl)") != std::string::npos);
  const std::string path = "/tmp/tessel-test-long-line-" + std::to_string(::getpid()) + ".tsl";
  {
    std::ofstream out(path);
    out << "def f(f32[N] A) -> (f32[N] B) {\n  B(i) = A(i)" << std::string(1 << 20, ' ') << " + @\n}\n";
  }
  Result longline = run("check " + path);
  std::remove(path.c_str());
  CHECK(longline.code == 1);
  CHECK(longline.output.find(":2:1048593: unexpected '@'") != std::string::npos);
  CHECK(longline.output.size() < 2000);  // an excerpt around the column, not the whole line
  CHECK(longline.output.find("...") != std::string::npos);
}

TEST_CASE("a size given twice in --shape is an error naming it, not last-wins (compile, run, eval)") {
  Result c = run("compile workloads/matmul.tsl --target c --shape M=4,N=4,K=4,M=8");
  CHECK(c.code == 1);
  CHECK(c.output.find("--shape: 'M' is given twice (M=4 and M=8)") != std::string::npos);
  Result r = run("run workloads/matmul.tsl --target c --shape M=4,N=4,K=4,K=4");
  CHECK(r.code == 1);
  CHECK(r.output.find("--shape: 'K' is given twice") != std::string::npos);
  Result e = run("eval workloads/matmul.tsl --shape N=4,M=4,K=4,N=5");
  CHECK(e.code == 1);
  CHECK(e.output.find("--shape: 'N' is given twice") != std::string::npos);
}
