// Absurd numbers (issue 17, items 3 and 4): a description's integers are checked against plausible
// ranges before they reach their (often 32-bit) fields, and a .npu tensor whose byte size or end
// overflows is rejected by name instead of wrapping into an overlap.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include "isa/base/error.h"
#include "isa/hierarchy.h"
#include "isa/npu_program.h"
#include "tests/isa/description_text.h"

using namespace tessel;
using namespace tessel::isa;

namespace {

std::string target_text(const std::string& name) { return testing::read_text(testing::target_path(name)); }
using testing::rejection;
using testing::replaced;

std::string program_rejection(const std::string& text) {
  try {
    npu::assemble_program(text, "t.npu");
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a number past its key's plausible range names the key, the line and the range") {
  const std::string npu = target_text("davinci-910.yaml"), gpu = target_text("sm90.yaml");
  REQUIRE(rejection(npu).empty());
  REQUIRE(rejection(gpu).empty());
  struct Case {
    std::string rule, text;
    const char* expected;
  };
  const Case cases[] = {
      {"on-chip capacity of 2^63 - 1 (bad_alloc in run before)",
       replaced(npu, "capacity_bytes: 1048576", "capacity_bytes: 9223372036854775807"),
       "t.yaml:49: levels[1].capacity_bytes: got 9223372036854775807, outside the plausible range 0..1073741824"},
      {"cores of 2^32 + 1 (narrowed to 1 core before)", replaced(npu, "cores: 32", "cores: 4294967297"),
       "t.yaml:32: cores: got 4294967297, outside the plausible range 0..4096"},
      {"global capacity past 16 TiB", replaced(npu, "capacity_bytes: 34359738368", "capacity_bytes: 17592186044417"),
       "levels[0].capacity_bytes: got 17592186044417, outside the plausible range 0..17592186044416"},
      {"a 32-bit field given 2^32 (would narrow to 0)", replaced(npu, "queue_depth: ", "queue_depth: 4294967296 #"),
       "sync.queue_depth: got 4294967296, outside the plausible range 0..4096"},
      {"a GPU count", replaced(gpu, "warp_size: 32", "warp_size: 4294967328"),
       "gpu.warp_size: got 4294967328, outside the plausible range 0..4096"},
      {"a number too large for 64 bits", replaced(npu, "cores: 32", "cores: 99999999999999999999"),
       "t.yaml:32: cores: cannot read '99999999999999999999' as a number"},
  };
  for (const Case& c : cases) {
    INFO(c.rule);
    const std::string message = rejection(c.text);
    INFO("got: " << message);
    CHECK(message.find(c.expected) != std::string::npos);
  }
  CHECK(rejection(replaced(npu, "capacity_bytes: 34359738368", "capacity_bytes: 17592186044416")).empty());
}

TEST_CASE(".tensor sizes and ends that overflow int64 are rejected by name") {
  CHECK(program_rejection(".tensor X f32 [4611686018427387904, 4] at GM+0 in\npipe_barrier ALL\n")
            .find("tensor 'X' needs more than 9223372036854775807 bytes; its size overflows") != std::string::npos);
  CHECK(program_rejection(".tensor X f32 [4] at GM+9223372036854775800 in\npipe_barrier ALL\n")
            .find("tensor 'X' at GM+9223372036854775800 with 16 bytes ends past 9223372036854775807") != std::string::npos);
  CHECK(program_rejection(".tensor X f32 [4] at GM+0 in\n.tensor Y f32 [4] at GM+16 out\npipe_barrier ALL\n").empty());
}
