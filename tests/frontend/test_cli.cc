// `tessel check` and `tessel eval` as a user runs them: outputs written with --output equal the
// in-process interpreter, --save-inputs / --input round-trip, and the exit status.
#include <doctest/doctest.h>

#include <array>
#include <cstdio>
#include <filesystem>

#include "compiler/frontend/frontend.h"
#include "compiler/interp/compare.h"
#include "compiler/interp/interpreter.h"

using namespace tessel;

namespace {

struct Result {
  int status;
  std::string output;
};

Result run(const std::string& args) {
  const std::string cmd = std::string(TESSEL_CLI) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WEXITSTATUS(status), out};
}

std::string workload(const std::string& name) { return std::string(TESSEL_SOURCE_DIR) + "/workloads/" + name; }

std::filesystem::path scratch(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(TESSEL_BINARY_DIR) / "test_frontend_cli" / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("tessel check prints every def's IR, or one with --def") {
  const Result all = run("check " + workload("bert.tsl"));
  CHECK(all.status == 0);
  CHECK(all.output.find("func matmul_bias_gelu") != std::string::npos);
  CHECK(all.output.find("func layer_norm") != std::string::npos);
  const Result one = run("check " + workload("bert.tsl") + " --def softmax");
  CHECK(one.status == 0);
  CHECK(one.output.find("func softmax") == 0);
  CHECK(one.output.find("func layer_norm") == std::string::npos);
}

TEST_CASE("tessel eval writes the interpreter's outputs, saved inputs given back reproduce them") {
  const std::filesystem::path dir = scratch("eval");
  const std::string shape = "--shape M=6,N=5,K=7";
  const Result r = run("eval " + workload("gemm_fused.tsl") + " --def matmul_bias_relu " + shape + " --seed 9 --output D=" +
                       (dir / "d.npy").string() + " --save-inputs " + (dir / "in").string());
  REQUIRE_MESSAGE(r.status == 0, r.output);
  CHECK(r.output.find("D: f16[6, 5]") != std::string::npos);

  const frontend::Module m = frontend::load_module(workload("gemm_fused.tsl"));
  const ir::Function& f = frontend::select_function(m, "matmul_bias_relu");
  const interp::Sizes s{{"M", 6}, {"N", 5}, {"K", 7}};
  const interp::Tensors expected = interp::evaluate(f, s, interp::random_inputs(f, s, 9));
  const interp::Comparison c = interp::compare(expected.at("D"), read_npy((dir / "d.npy").string()), 0, 0, "D");
  CHECK_MESSAGE(c.ok, c.first_mismatch);

  const Result again = run("eval " + workload("gemm_fused.tsl") + " --def matmul_bias_relu " + shape + " --input A=" +
                           (dir / "in/A.npy").string() + " --input B=" + (dir / "in/B.npy").string() + " --input bias=" +
                           (dir / "in/bias.npy").string() + " --output D=" + (dir / "d2.npy").string() + " --seed 1");
  REQUIRE_MESSAGE(again.status == 0, again.output);
  CHECK(interp::compare(read_npy((dir / "d.npy").string()), read_npy((dir / "d2.npy").string()), 0, 0).ok);
}

TEST_CASE("tessel eval: bad programs and binary garbage exit with status 1 and a located message") {
  const std::filesystem::path dir = scratch("garbage");
  const std::string path = (dir / "garbage.tsl").string();
  FILE* f = std::fopen(path.c_str(), "wb");
  for (int i = 0; i < 4096; ++i) std::fputc((i * 7919 + 13) & 0xff, f);
  std::fclose(f);
  const Result r = run("eval " + path + " --shape M=1");
  CHECK(r.status == 1);
  CHECK(r.output.find(path + ":1:") != std::string::npos);
  const Result c = run("check " + std::string(TESSEL_SOURCE_DIR) + "/tests/errors/tsl/deep_nesting.tsl");
  CHECK(c.status == 1);
  CHECK(c.output.find("nested too deeply") != std::string::npos);
}
