// Mutated programs (deterministic single-character edits of the examples) either assemble or are
// rejected with a UserError; those that assemble run (timing-only, bounded) to a result, a deadlock
// report or a UserError — never an internal error, a crash or a hang.
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "isa/base/error.h"
#include "sim_test_util.h"

using namespace tessel;
using namespace tessel::npu_sim;
using namespace tessel::npu_sim::testing;

TEST_CASE("mutated example programs fail only with user errors") {
  std::vector<std::string> originals;
  for (const char* name : {"gemm64_double.npu", "conv_img2col.npu", "add_relu.npu"}) {
    std::ifstream in(std::string(TESSEL_SOURCE_DIR) + "/npu_sim/examples/" + name);
    std::stringstream s;
    s << in.rdbuf();
    originals.push_back(s.str());
  }
  const std::string alphabet = "0123456789,[]+-rLUBGMSVAEwx. \n";
  std::mt19937 rng(2024);
  int assembled = 0, ran = 0, rejected = 0, deadlocks = 0;
  SimOptions options;
  options.timing_only = true;
  options.max_cycles = 200000;
  for (int trial = 0; trial < 1500; ++trial) {
    std::string text = originals[trial % originals.size()];
    for (int edits = 1 + rng() % 3; edits > 0; --edits) {
      const size_t at = rng() % text.size();
      switch (rng() % 3) {
        case 0: text[at] = alphabet[rng() % alphabet.size()]; break;
        case 1: text.erase(at, 1); break;
        default: text.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
      }
    }
    npu::Program p;
    try {
      p = npu::assemble_program(text, "mutant.npu");
      ++assembled;
    } catch (const UserError&) {
      ++rejected;
      continue;
    }
    // Functional runs bind every input with zeros of its declared shape; they touch real memory,
    // so any access the checks let through would show up here (and under sanitizers).
    std::map<std::string, NpyArray> inputs;
    for (const npu::TensorBinding& t : p.tensors) {
      if (!t.is_input() || t.byte_size() > (1 << 20)) continue;
      NpyArray a;
      a.dtype = t.dtype;
      a.shape = t.shape;
      a.data.assign(t.byte_size(), 0);
      inputs[t.name] = a;
    }
    for (bool timing_only : {true, false}) {
      options.timing_only = timing_only;
      try {
        const SimResult r = simulate(p, davinci(), timing_only ? std::map<std::string, NpyArray>{} : inputs, options);
        ++ran;
        deadlocks += r.record.deadlock.has_value();
      } catch (const UserError&) {
        ++rejected;
      }
    }
  }
  MESSAGE(assembled << " mutants assembled, " << ran << " ran (" << deadlocks << " deadlocked), " << rejected
                    << " rejected with a user error");
  CHECK(assembled > 0);
}
