// The verification bound of reassociated float sums on the NPU (emit_c::verify with the
// interpreter's term magnitudes): program fuzz seed 8808 program 141 sums 252 f32 terms that
// cancel to -1.04; the NPU's tree order differs from the interpreter's sequential one by 2.67e-5,
// beyond a bound relative to the result but well within one relative to the terms' magnitudes.
// The NPU's own outputs are checked here, and the same outputs perturbed past the bound fail.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "compiler/emit_c/run_c.h"
#include "compiler/frontend/frontend.h"
#include "compiler/interp/interpreter.h"
#include "compiler/interp/scalar.h"
#include "isa/base/npy.h"

using namespace tessel;

namespace {

const std::string kProgram = "tests/fuzz_programs/f32_sum_cancelling_terms.tsl";
const interp::Sizes kSizes{{"M", 6}, {"N", 7}};

struct Run {
  int code;
  std::string output;
  interp::Tensors inputs, outputs;
};

// `tessel run` of the program on `target` (naive or pruned sync), with its inputs and outputs read back.
Run run_on(const std::string& target, const std::string& sync) {
  const std::string dir = "/tmp/tessel-test-sum-tolerance-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  const std::string cmd = "cd " TESSEL_SOURCE_DIR " && " + std::string(TESSEL_CLI) + " run " + kProgram +
                          " --shape M=6,N=7 --target isa/targets/" + target + ".yaml --sync " + sync + " --save-inputs " +
                          dir + "/in --save-outputs " + dir + "/out > " + dir + ".txt 2>&1";
  const int rc = std::system(cmd.c_str());
  Run r{WEXITSTATUS(rc), "", {}, {}};
  std::stringstream ss;
  ss << std::ifstream(dir + ".txt").rdbuf();
  r.output = ss.str();
  for (const char* in : {"X0", "X1", "X2", "X3", "X4", "X5", "X6"}) r.inputs[in] = read_npy(dir + "/in/" + in + ".npy");
  for (const char* out : {"Y0", "Y1", "Y2", "Y3"}) r.outputs[out] = read_npy(dir + "/out/" + out + ".npy");
  std::filesystem::remove_all(dir);
  std::remove((dir + ".txt").c_str());
  return r;
}

}  // namespace

TEST_CASE("an f32 sum that cancels verifies on davinci-910 and davinci-310 within a bound relative to its terms") {
  const frontend::Module m = frontend::load_module(std::string(TESSEL_SOURCE_DIR) + "/" + kProgram);
  const ir::Function& f = frontend::select_function(m, "");
  const double tol = emit_c::reassociated_sum_tolerance(f, kSizes);
  CHECK(tol == doctest::Approx(1e-5));  // 252 terms: 8 sqrt(252) 2^-24 = 7.6e-6 is below the floor
  for (const char* target : {"davinci-910", "davinci-310"})
    for (const char* sync : {"naive", "pruned"}) {
      CAPTURE(target);
      CAPTURE(sync);
      const Run r = run_on(target, sync);
      CHECK(r.code == 0);
      CHECK(r.output.find(": verified, max_abs_err 2.67029e-05") != std::string::npos);
      interp::Tensors mags;
      const interp::Tensors expected = interp::evaluate(f, kSizes, r.inputs, &mags);
      const double e = interp::element_as_double(expected.at("Y0"), 0), got = interp::element_as_double(r.outputs.at("Y0"), 0);
      const double magnitude = interp::element_as_double(mags.at("Y0"), 0);
      CHECK(e == doctest::Approx(-1.03786087));
      CHECK(std::fabs(got - e) == doctest::Approx(2.67029e-05).epsilon(1e-3));
      CHECK(magnitude == doctest::Approx(1037.258).epsilon(1e-5));  // numpy over the saved inputs: 1037.2581
      CHECK(mags.count("Y1") == 0);  // an i32 sum: exact in any order
      CHECK(emit_c::verify(expected, r.outputs, tol, &mags).verified);
      // relative to the result alone, the NPU's order is a mismatch (the finding)
      const emit_c::Verification plain = emit_c::verify(expected, r.outputs, tol);
      CHECK_FALSE(plain.verified);
      CHECK(plain.first_mismatch == "Y0[]: expected -1.03786087, got -1.03783417");
      // a result off by 1.5 times the bound is still a mismatch, and half of it is not
      const double bound = tol + tol * magnitude;
      interp::Tensors wrong = r.outputs;
      interp::store_float(DType::F32, wrong.at("Y0").data.data(), e + 1.5 * bound);
      const emit_c::Verification beyond = emit_c::verify(expected, wrong, tol, &mags);
      CHECK_FALSE(beyond.verified);
      CHECK(beyond.mismatches == 1);
      CHECK(beyond.first_mismatch.find("Y0[]: expected -1.03786087") == 0);
      CHECK(beyond.first_mismatch.find("its error scale") != std::string::npos);
      interp::store_float(DType::F32, wrong.at("Y0").data.data(), e - 0.5 * bound);
      CHECK(emit_c::verify(expected, wrong, tol, &mags).verified);
      // an element of a min (no sum: no magnitudes) off by twice the bound relative to it still fails
      interp::store_float(DType::F32, wrong.at("Y0").data.data(), e);
      const double y3 = interp::element_as_double(expected.at("Y3"), 2);
      interp::store_float(DType::F32, wrong.at("Y3").data.data() + 8, y3 + 2 * (tol + tol * std::fabs(y3)));
      const emit_c::Verification min_off = emit_c::verify(expected, wrong, tol, &mags);
      CHECK(min_off.mismatches == 1);
      CHECK(min_off.first_mismatch.find("Y3[2]") == 0);
    }
}
