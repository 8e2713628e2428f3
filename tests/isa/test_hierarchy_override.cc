// Description overrides (isa/hierarchy_override.h): each key form reaches its field, sizes take
// suffixes, unknown keys are named with what exists, a variant breaking a rule is rejected with
// that rule, and the description hash identifies the effective description.
#include <doctest/doctest.h>

#include <yaml-cpp/yaml.h>

#include "isa/base/error.h"
#include "isa/hierarchy.h"
#include "isa/hierarchy_override.h"
#include "isa/npu_machine.h"
#include "tests/isa/description_text.h"

using namespace tessel;
using namespace tessel::isa;
using namespace tessel::isa::testing;

namespace {

Hierarchy davinci(const std::string& set) { return load_hierarchy(target_path("davinci-910.yaml"), parse_overrides(set)); }

std::string rejected(const std::string& set, const std::string& target = "davinci-910.yaml") {
  try {
    load_hierarchy(target_path(target), parse_overrides(set));
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return true;
  MESSAGE("'" << text << "' does not contain '" << part << "'");
  return false;
}

}  // namespace

TEST_CASE("override: each key form sets its field") {
  const Hierarchy base = davinci("");
  const Hierarchy h = davinci(
      "cores=16,clock_mhz=1500,L1.capacity_bytes=512KiB,GM.shared_bandwidth_bytes_per_cycle=64,cube.startup_cycles=7,"
      "vector.bytes_per_repeat=128,GM->L1.bandwidth_bytes_per_cycle=32.5,sync.event_ids_per_pipe_pair=8");
  CHECK(base.cores == 32);
  CHECK(h.cores == 16);
  CHECK(h.clock_mhz == 1500);
  CHECK(h.find_level("L1")->capacity_bytes == 512 * 1024);
  CHECK(h.find_level("GM")->shared_bandwidth_bytes_per_cycle == 64);
  CHECK(h.find_unit("cube")->startup_cycles == 7);
  CHECK(h.find_unit("vector")->bytes_per_repeat == 128);
  CHECK(h.find_path("GM", "L1")->bandwidth_bytes_per_cycle == 32.5);
  CHECK(h.sync->event_ids_per_pipe_pair == 8);
  // untouched fields keep the file's values
  CHECK(h.find_level("L0A")->capacity_bytes == base.find_level("L0A")->capacity_bytes);
  CHECK(h.find_path("L1", "L0A")->bandwidth_bytes_per_cycle == base.find_path("L1", "L0A")->bandwidth_bytes_per_cycle);
  CHECK(h.overrides ==
        "GM->L1.bandwidth_bytes_per_cycle=32.5,GM.shared_bandwidth_bytes_per_cycle=64,L1.capacity_bytes=524288,"
        "clock_mhz=1500,cores=16,cube.startup_cycles=7,sync.event_ids_per_pipe_pair=8,vector.bytes_per_repeat=128");
}

TEST_CASE("override: a field the schema knows may be set where the file leaves it out") {
  // davinci-910's L1 has no read_latency_cycles (default 0)
  CHECK(davinci("").find_level("L1")->read_latency_cycles == 0);
  CHECK(davinci("L1.read_latency_cycles=12").find_level("L1")->read_latency_cycles == 12);
  CHECK(davinci("mte2.count=2").find_unit("mte2")->count == 2);
}

TEST_CASE("override: size suffixes KiB MiB GiB") {
  CHECK(expand_size_suffix("k", "1KiB") == "1024");
  CHECK(expand_size_suffix("k", "1MiB") == "1048576");
  CHECK(expand_size_suffix("k", "2GiB") == "2147483648");
  CHECK(expand_size_suffix("k", "1.5KiB") == "1536");
  CHECK(expand_size_suffix("k", " 64 ") == "64");  // plain numbers unchanged
  CHECK(expand_size_suffix("k", "0.5") == "0.5");
  CHECK_THROWS_WITH_AS(expand_size_suffix("k", "1.3KiB"), "--set k=1.3KiB: is not a whole number of bytes", UserError);
  CHECK_THROWS_WITH_AS(expand_size_suffix("k", "xMiB"), "--set k=xMiB: expected a non-negative number before MiB", UserError);
  CHECK(davinci("L1.capacity_bytes=2MiB").find_level("L1")->capacity_bytes == 2u << 20);
}

TEST_CASE("override: malformed lists and a key given twice") {
  CHECK_THROWS_WITH_AS(parse_overrides("cores=2,cores=4"), "--set cores: given twice (2 and 4)", UserError);
  CHECK_THROWS_WITH_AS(parse_overrides("cores"), "--set cores: expected KEY=VALUE", UserError);
  CHECK_THROWS_WITH_AS(parse_overrides("cores="), "--set cores: empty value (expected KEY=VALUE)", UserError);
  CHECK_THROWS_WITH_AS(parse_overrides("cores=2,,clock_mhz=1"), doctest::Contains("an empty item"), UserError);
  CHECK(parse_overrides("").empty());
  // several --set flags are one list
  CHECK(parse_overrides(std::vector<std::string>{"cores=2", "L1.capacity_bytes=1KiB"}).text() ==
        "L1.capacity_bytes=1024,cores=2");
  CHECK_THROWS_WITH_AS(parse_overrides(std::vector<std::string>{"cores=2", "cores=2"}), doctest::Contains("given twice"), UserError);
}

TEST_CASE("override: unknown levels, units, paths and fields are named with what exists") {
  const std::string file = target_path("davinci-910.yaml");
  CHECK(rejected("L9.capacity_bytes=1") ==
        file + ": --set L9.capacity_bytes: no level or unit named 'L9' (levels: GM, L1, L0A, L0B, L0C, UB; units: scalar, "
               "cube, vector, mte1, mte2, mte3; paths: GM->L1, GM->UB, GM->L0A, GM->L0B, L1->L0A, L1->L0B, L1->UB, "
               "L0C->UB, UB->GM, UB->L1; sections: sync, gpu)");
  CHECK(rejected("L1.capcity_bytes=1") ==
        file + ": --set L1.capcity_bytes: unknown field 'capcity_bytes' of level 'L1' (fields: alignment_bytes, "
               "bank_width_bytes, banks, capacity_bytes, granularity_bytes, layout, name, read_energy_pj_per_byte, "
               "read_latency_cycles, role, shared_bandwidth_bytes_per_cycle, write_energy_pj_per_byte, write_latency_cycles)");
  CHECK(rejected("L0A->GM.latency_cycles=1") ==
        file + ": --set L0A->GM.latency_cycles: no transfer path L0A->GM (paths: GM->L1, GM->UB, GM->L0A, GM->L0B, "
               "L1->L0A, L1->L0B, L1->UB, L0C->UB, UB->GM, UB->L1)");
  CHECK(rejected("cube.speed=2") == file + ": --set cube.speed: unknown field 'speed' of unit 'cube' (fields: bytes_per_repeat, "
                                           "conversions, count, dtypes, energy_pj_per_byte, energy_pj_per_instruction, "
                                           "energy_pj_per_repeat, kind, mask_bits, max_repeat, name, pipe, reads, shapes, "
                                           "startup_cycles, writes)");
  CHECK(rejected("frequency=2") == file + ": --set frequency: unknown field 'frequency' of the description (fields: clock_mhz, "
                                          "cores, description, gpu, kind, levels, name, paths, sync, units)");
  CHECK(rejected("sync.flags=2") == file + ": --set sync.flags: unknown field 'flags' of the sync section (fields: "
                                           "barrier_cycles, cross_core_barrier_cycles, event_ids_per_pipe_pair, queue_depth, "
                                           "scalar_cycles, set_flag_cycles)");
  CHECK(rejected("cube.reads=L1") == file + ": --set cube.reads: reads of unit 'cube' is a list, not a value --set can replace");
  CHECK(rejected("sync.queue_depth=2", "sm90.yaml") ==
        target_path("sm90.yaml") + ": --set sync.queue_depth: this description has no sync section");
  CHECK(load_hierarchy(target_path("sm90.yaml"), parse_overrides("gpu.l2_cache_bytes=40MiB")).gpu->l2_cache_bytes == 40u << 20);
}

TEST_CASE("override: a variant that breaks a rule is rejected with that rule") {
  CHECK(rejected("L1.capacity_bytes=0") ==
        target_path("davinci-910.yaml") + ":47: level 'L1' capacity_bytes: capacity must be positive (got 0) "
                                          "(in the variant with --set L1.capacity_bytes=0)");
  CHECK(has(rejected("L0A.alignment_bytes=48"), "level 'L0A' alignment_bytes: must be a power of two (got 48)"));
  CHECK(has(rejected("cores=0"), "cores: must be at least 1 (in the variant with --set cores=0)"));
  CHECK(has(rejected("cores=5000"), "cores: got 5000, outside the plausible range 0..4096"));
  CHECK(has(rejected("GM->L1.bandwidth_bytes_per_cycle=0"), "path GM -> L1 bandwidth_bytes_per_cycle: must be positive"));
  CHECK(has(rejected("L1.capacity_bytes=2GiB"), "outside the plausible range 0..1073741824"));
  CHECK(has(rejected("GM->L1.engine=cube"), "engine 'cube' cannot read level 'GM'"));
  CHECK(has(rejected("cube.startup_cycles=many"), "cannot read 'many' as a number"));
}

TEST_CASE("description hash: stable under reordering, equal for equal descriptions, different for variants") {
  const Hierarchy base = davinci("");
  CHECK(base.description_hash.size() == 16);
  CHECK(base.description_hash.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(base.overrides.empty());
  const Hierarchy a = davinci("cores=16,L1.capacity_bytes=512KiB");
  const Hierarchy b = davinci("L1.capacity_bytes=524288,cores=16");
  CHECK(a.description_hash == b.description_hash);
  CHECK(a.overrides == b.overrides);
  CHECK(a.description_hash != base.description_hash);
  CHECK(davinci("cores=16").description_hash != a.description_hash);
  CHECK(davinci("cores=8").description_hash != davinci("cores=16").description_hash);
  // an override equal to the file's value is the description as written
  CHECK(davinci("cores=32,L1.capacity_bytes=1MiB").description_hash == base.description_hash);
  // the hash is of the content, not the path; comments and layout do not count
  const std::string text = read_text(target_path("davinci-910.yaml"));
  CHECK(parse_hierarchy(text, "elsewhere.yaml").description_hash == base.description_hash);
  CHECK(parse_hierarchy("# a comment\n" + text, "x.yaml").description_hash == base.description_hash);
  CHECK(canonical_yaml(YAML::Load("{b: 1, a: [2.50, x]}")) == canonical_yaml(YAML::Load("a: [2.5, \"x\"]\nb: 1.0\n")));
  // a field added where the file leaves it out is a different description
  CHECK(davinci("L1.read_latency_cycles=0").description_hash != base.description_hash);
  // every shipped description has its own hash
  CHECK(load_hierarchy(target_path("davinci-310.yaml")).description_hash != base.description_hash);
}

// The compiler's view of an NPU buffer is its capacity in whole alignment units and granules: a
// variant's UB of 196,615 bytes (description fuzzer, seed 7403 draw 249) placed a vdup at
// UB[195079], which the simulator refused as unaligned (exit 3).
TEST_CASE("npu machine: buffer capacities round down to whole alignment units") {
  const NpuMachine odd = npu_machine(davinci("UB.capacity_bytes=196615"));
  CHECK(odd.capacity(npu::Buffer::UB) == 196608);  // 6,144 x 32
  CHECK(odd.capacity(npu::Buffer::UB) % odd.buffer(npu::Buffer::UB).alignment_bytes == 0);
  const NpuMachine stock = npu_machine(davinci(""));
  CHECK(stock.capacity(npu::Buffer::UB) == int64_t(davinci("").level(Role::Vector).capacity_bytes));
}
