// The rules the compiler and the simulator rely on (issue 31 item 2, isa/README.md "What the
// validator checks"): a description variant they would not honour is refused by the validator,
// naming the key and the rule; the variants they do honour stay valid. Each case is the `--set`
// override a user (or scripts/description_fuzz.py) would write.
#include <doctest/doctest.h>

#include <string>

#include "isa/base/error.h"
#include "isa/hierarchy.h"
#include "isa/hierarchy_override.h"
#include "tests/isa/description_text.h"

using namespace tessel;
using namespace tessel::isa;
using namespace tessel::isa::testing;

namespace {

// The UserError message of davinci-910 (or `target`) with `set` applied ("" when it is valid).
std::string variant_rejection(const std::string& set, const std::string& target = "davinci-910.yaml") {
  try {
    parse_hierarchy(read_text(target_path(target)), "t.yaml", parse_overrides(set));
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

void refused(const std::string& set, const std::string& expected) {
  CAPTURE(set);
  const std::string message = variant_rejection(set);
  CHECK_MESSAGE(message.find(expected) != std::string::npos, "got: " << message);
  CHECK_MESSAGE(message.find("(in the variant with --set") != std::string::npos, "got: " << message);
}

void accepted(const std::string& set, const std::string& target = "davinci-910.yaml") {
  CAPTURE(set);
  CHECK(variant_rejection(set, target) == "");
}

}  // namespace

TEST_CASE("vector geometry: a repeat is whole blocks, every f16 lane has a mask bit, runs of whole blocks") {
  // issue 31: bytes_per_repeat=1 and UB granularity 1 divided by zero (SIGFPE); 16, 48 and
  // granularity 3 emitted code that mismatched
  refused("vector.bytes_per_repeat=1", "unit 'vector' bytes_per_repeat: got 1; a repeat must be a power of two of at least two vector blocks");
  refused("vector.bytes_per_repeat=16", "unit 'vector' bytes_per_repeat: got 16");
  refused("vector.bytes_per_repeat=48", "unit 'vector' bytes_per_repeat: got 48");
  refused("vector.bytes_per_repeat=96", "unit 'vector' bytes_per_repeat: got 96");
  refused("vector.bytes_per_repeat=32", "(2 x UB.granularity_bytes = 64)");  // one block: casts write half of it
  refused("UB.granularity_bytes=1", "level 'UB' granularity_bytes and alignment_bytes: granularity 1 must be a multiple of the alignment 32");
  refused("UB.granularity_bytes=3,UB.alignment_bytes=1", "level 'UB' granularity_bytes: the vector unit's block must be a power of two of at least 4 bytes that divides one fractal row (32 bytes) (got 3)");
  refused("UB.granularity_bytes=48,UB.alignment_bytes=16", "(got 48)");
  refused("UB.granularity_bytes=128", "level 'UB' granularity_bytes: the vector unit's block must be a power of two of at least 4 bytes that divides one fractal row (32 bytes) (got 128)");  // conv2d mismatched
  refused("UB.granularity_bytes=64,UB.alignment_bytes=64", "level 'UB' alignment_bytes: got 64; the compiler places vector buffers at multiples of 32 bytes");
  refused("vector.bytes_per_repeat=512", "unit 'vector' mask_bits: got 128; every f16 lane of a repeat needs its own mask bit (bytes_per_repeat 512 / 2 = 256)");
  refused("vector.mask_bits=64", "unit 'vector' mask_bits: got 64");
  refused("vector.max_repeat=7", "unit 'vector' max_repeat: got 7; the compiler walks rows in runs of whole blocks");
  // what the compiler honours (verified end to end by scripts/description_fuzz.py)
  accepted("vector.bytes_per_repeat=128");
  accepted("vector.bytes_per_repeat=64,vector.mask_bits=32");
  accepted("UB.granularity_bytes=16,UB.alignment_bytes=16");
  accepted("UB.granularity_bytes=8,UB.alignment_bytes=8");
  accepted("vector.max_repeat=32");
  accepted("vector.max_repeat=16777216");
}

TEST_CASE("alignments the compiler honours: GM at any byte, on-chip levels dividing their granule") {
  refused("GM.alignment_bytes=32", "level 'GM' alignment_bytes: must be 1 on an NPU (got 32)");
  refused("UB.alignment_bytes=512", "level 'UB' alignment_bytes: got 512; the compiler places vector buffers at multiples of 32 bytes (one fractal row), so the alignment must divide that");
  refused("L0C.granularity_bytes=4096,L0C.alignment_bytes=4096", "level 'L0C' alignment_bytes: got 4096; the compiler places accumulator buffers at multiples of 1024 bytes (one accumulator fractal)");
  refused("L1.granularity_bytes=4096,L1.alignment_bytes=4096", "level 'L1' alignment_bytes: got 4096; the compiler places stage buffers at multiples of 32 bytes");
  refused("L0A.alignment_bytes=1024,L0A.granularity_bytes=1024", "level 'L0A' alignment_bytes: got 1024; the compiler places operand_a buffers at multiples of 512 bytes (one operand fractal)");
  refused("UB.granularity_bytes=16", "level 'UB' granularity_bytes and alignment_bytes: granularity 16 must be a multiple of the alignment 32");
  accepted("L1.alignment_bytes=4");
  accepted("L0A.granularity_bytes=1024");
  accepted("L1.granularity_bytes=512");
  // the global granule: one_hot divided by zero below 4 bytes (SIGFPE), conv2d placed L1 buffers off their
  // alignment at 3 and 48, and one_hot's row padding ran away (minutes, gigabytes) at 1024
  refused("GM.granularity_bytes=2", "level 'GM' granularity_bytes: got 2; an NPU's global granule must be a power of two between 4 (the widest element, f32 / i32) and 512");
  refused("GM.granularity_bytes=48", "level 'GM' granularity_bytes: got 48");
  refused("GM.granularity_bytes=1024", "level 'GM' granularity_bytes: got 1024");
  accepted("GM.granularity_bytes=4");
  accepted("GM.granularity_bytes=512");
}

TEST_CASE("layouts: each role has the one its backend implements, another value is refused, not ignored") {
  refused("L0A.layout=fractal_nz", "level 'L0A' layout: 'fractal_nz' is not implemented for role operand_a on npu targets; the npu backend lays this level out as 'fractal_zz'");
  refused("UB.layout=banked", "level 'UB' layout: 'banked' is not implemented");
  refused("L1.layout=tiled", "level 'L1' layout: unknown layout 'tiled'");
  accepted("L0B.layout=fractal_zn");
  CHECK(variant_rejection("shared.layout=nd", "sm90.yaml").find("'nd' is not implemented for role stage on gpu targets") != std::string::npos);
  // a description that leaves layout out gets its role's own
  const Hierarchy h = parse_hierarchy(replaced(read_text(target_path("davinci-910.yaml")), "    layout: fractal_zz", ""), "t.yaml");
  CHECK(h.level(Role::OperandA).layout == "fractal_zz");
}

TEST_CASE("bandwidths within 1/1024..2^30 bytes per cycle, so no cycle count leaves 64 bits") {
  // issue 31: GM->L1 at 1e-20 reported fewer cycles than the stock description (the arithmetic wrapped)
  refused("GM->L1.bandwidth_bytes_per_cycle=1e-20", "path GM -> L1 bandwidth_bytes_per_cycle: got 1e-20 bytes/cycle, outside the plausible range 1/1024..1073741824");
  refused("GM.shared_bandwidth_bytes_per_cycle=1e-20", "level 'GM' shared_bandwidth_bytes_per_cycle: got 1e-20");
  refused("L1->L0A.bandwidth_bytes_per_cycle=1e20", "path L1 -> L0A bandwidth_bytes_per_cycle: got 1e+20");
  accepted("GM->L1.bandwidth_bytes_per_cycle=0.001");
  accepted("UB->GM.bandwidth_bytes_per_cycle=1e6");
}

TEST_CASE("on-chip capacities hold at least what the compiler needs of any kernel") {
  refused("L0A.capacity_bytes=1000", "level 'L0A' capacity_bytes: got 1000, less than the 1024 bytes the compiler needs at least (two left-operand fractals, double buffered)");
  refused("L0B.capacity_bytes=3", "level 'L0B' capacity_bytes: got 3");
  refused("L0C.capacity_bytes=1024", "level 'L0C' capacity_bytes: got 1024, less than the 2048 bytes");
  refused("L1.capacity_bytes=1", "level 'L1' capacity_bytes: got 1, less than the 2048 bytes");
  refused("UB.capacity_bytes=48", "level 'UB' capacity_bytes: got 48, less than the 4096 bytes the compiler needs at least (16 repeats of the vector unit)");
  accepted("L0A.capacity_bytes=1024,L0B.capacity_bytes=1024,L0C.capacity_bytes=2048,L1.capacity_bytes=2048,UB.capacity_bytes=4096");
}

TEST_CASE("every shipped description and test description follows the rules") {
  for (const char* name : {"davinci-910.yaml", "davinci-310.yaml", "sm75.yaml", "sm80.yaml", "sm90.yaml", "sm90-h100.yaml",
                           "sm90-h200.yaml"})
    accepted("", name);
  for (const char* path : {"/tests/tune/small-npu.yaml", "/tests/cli/hierarchy/davinci-910-4k-gm.yaml",
                           "/tests/cli/hierarchy/davinci-910-8k-gm.yaml"}) {
    CAPTURE(path);
    CHECK_NOTHROW(load_hierarchy(std::string(TESSEL_SOURCE_DIR) + path));
  }
}
