// Hierarchy descriptions: every shipped target validates; each kind of malformed description is
// rejected with its own message (file, key, line, reason); the two-file comparison names the
// differences a user expects between the NPU and Hopper; the GPU machine model built from them.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "isa/base/error.h"
#include "isa/gpu_machine.h"
#include "isa/hierarchy.h"
#include "isa/hierarchy_report.h"
#include "tests/isa/description_text.h"

using namespace tessel;
using namespace tessel::isa;

using namespace tessel::isa::testing;

TEST_CASE("every shipped description validates") {
  for (const char* name : {"davinci-910.yaml", "davinci-310.yaml", "sm75.yaml", "sm80.yaml", "sm90.yaml",
                           "sm90-h100.yaml", "sm90-h200.yaml"}) {
    CAPTURE(name);
    const Hierarchy h = load_hierarchy(target_path(name));
    for (int r = 0; r < kRoleCount; ++r) CHECK(h.level_with_role(static_cast<Role>(r)) != nullptr);
    CHECK(h.cores > 0);
    CHECK(h.peak_macs_per_cycle(DType::F16, DType::F32) > 0);
  }
}

TEST_CASE("davinci-910 carries the published Ascend 910 figures") {
  const Hierarchy h = load_hierarchy(target_path("davinci-910.yaml"));
  CHECK(h.kind == TargetKind::Npu);
  CHECK(h.cores == 32);
  CHECK(h.level(Role::OperandA).capacity_bytes == 64 * 1024);
  CHECK(h.level(Role::OperandB).capacity_bytes == 64 * 1024);
  CHECK(h.level(Role::Accumulator).capacity_bytes == 256 * 1024);
  CHECK(h.level(Role::Stage).capacity_bytes == 1024 * 1024);
  CHECK(h.level(Role::Vector).capacity_bytes == 256 * 1024);
  CHECK(h.peak_macs_per_cycle(DType::F16, DType::F32) == 4096);  // one 16x16x16 fractal per cycle
  CHECK(h.peak_macs_per_cycle(DType::I8, DType::I32) == 8192);   // 16x16x32
  REQUIRE(h.sync);
  CHECK(h.sync->event_ids_per_pipe_pair == 4);
  const Unit* v = h.find_unit("vector");
  REQUIRE(v);
  CHECK(v->bytes_per_repeat == 256);
  CHECK(v->max_repeat == 255);
  CHECK(v->mask_bits == 128);
  const TransferPath* l1_l0a = h.find_path("L1", "L0A");
  REQUIRE(l1_l0a);
  CHECK(l1_l0a->engine == "mte1");
  CHECK(l1_l0a->bandwidth_bytes_per_cycle == 256);
}

TEST_CASE("sm90 carries the Hopper device properties") {
  const Hierarchy h = load_hierarchy(target_path("sm90.yaml"));
  REQUIRE(h.gpu);
  CHECK(h.gpu->arch == "sm_90");
  CHECK(h.gpu->compute_capability_major == 9);
  CHECK(h.gpu->shared_bytes_per_sm == 228 * 1024);
  CHECK(h.gpu->shared_bytes_per_block_optin == 227 * 1024);
  CHECK(h.level(Role::Stage).capacity_bytes == h.gpu->shared_bytes_per_sm);
  CHECK(h.cores == 132);
}

// Issue 17 item 16: one description per Hopper part, each matching what its GPU reports; the
// compiler's view (GpuMachine: SMs, shared memory, shapes, features) is the same for all three.
TEST_CASE("per-part Hopper descriptions: H100 and H200 differ in L2 and HBM only, sm90 stays the generic one") {
  const Hierarchy h100 = load_hierarchy(target_path("sm90-h100.yaml"));
  const Hierarchy h200 = load_hierarchy(target_path("sm90-h200.yaml"));
  const Hierarchy generic = load_hierarchy(target_path("sm90.yaml"));
  CHECK(h100.gpu->l2_cache_bytes == 50u * 1024 * 1024);   // what cuDeviceGetAttribute reports on an H100 SXM
  CHECK(h200.gpu->l2_cache_bytes == 60u * 1024 * 1024);   // and on the H200 lent here
  CHECK(generic.gpu->l2_cache_bytes == h200.gpu->l2_cache_bytes);
  CHECK(h100.level(Role::Global).shared_bandwidth_bytes_per_cycle == 1830);  // 3.35 TB/s at 1830 MHz
  CHECK(h200.level(Role::Global).shared_bandwidth_bytes_per_cycle == 2623);  // 4.8 TB/s at 1830 MHz
  for (const Hierarchy* h : {&h100, &h200}) {
    CHECK(h->cores == generic.cores);
    CHECK(h->clock_mhz == generic.clock_mhz);
    CHECK(h->gpu->shared_bytes_per_sm == generic.gpu->shared_bytes_per_sm);
    CHECK(h->gpu->shared_bytes_per_block_optin == generic.gpu->shared_bytes_per_block_optin);
    CHECK(h->gpu->features == generic.gpu->features);
    CHECK(h->units.size() == generic.units.size());
    CHECK(h->level(Role::Stage).capacity_bytes == generic.level(Role::Stage).capacity_bytes);
  }
  // several descriptions of sm_90: the one named after the architecture is the stock machine
  CHECK(stock_gpu_machine("sm_90").name == "sm90");
}

// Each malformed description names the file, the key or element, the line where known, and the reason.
TEST_CASE("malformed descriptions are rejected with a specific message") {
  const std::string good = read_text(target_path("davinci-910.yaml"));
  REQUIRE(rejection(good).empty());
  struct Case {
    std::string rule;
    std::string text;
    const char* expected;
  };
  const Case cases[] = {
      {"unknown key is an error, not ignored", replaced(good, "    layout: fractal_zz", "    layuot: fractal_zz"),
       "t.yaml:60: levels[2].layuot: unknown key"},
      {"zero capacity", replaced(good, "capacity_bytes: 65536", "capacity_bytes: 0"),
       "t.yaml:55: level 'L0A' capacity_bytes: capacity must be positive (got 0)"},
      {"negative capacity", replaced(good, "capacity_bytes: 1048576", "capacity_bytes: -5"),
       "t.yaml:49: levels[1].capacity_bytes: must not be negative (got -5)"},
      {"missing role", replaced(good, "role: operand_b", "role: operand_a"),
       "level 'L0B': role operand_a is already carried by level 'L0A'"},
      {"unknown role", replaced(good, "role: vector", "role: vectr"),
       "t.yaml:80: levels[5].role: unknown role 'vectr'"},
      {"path to an undefined level", replaced(good, "{from: GM, to: UB, engine: mte2", "{from: GM, to: UBB, engine: mte2"),
       "path GM -> UBB: 'to' names undefined level 'UBB'"},
      {"path with an undefined engine", replaced(good, "{from: GM, to: UB, engine: mte2", "{from: GM, to: UB, engine: mte9"),
       "path GM -> UB engine: names undefined unit 'mte9'"},
      {"a level no path reaches", replaced(good, "  - {from: L1, to: L0B, engine: mte1", "  - {from: L0A, to: L0B, engine: mte1"),
       "path L0A -> L0B: engine 'mte1' cannot read level 'L0A'"},
      {"a unit reading a level it cannot reach",
       replaced(replaced(replaced(good, "  - {from: GM, to: L0B,", "  #"), "  - {from: L1, to: L0B,", "  #"),
                "writes: [L1, L0A, L0B, UB]", "writes: [L1, L0A, UB]"),
       "level 'L0B': no transfer path reaches it from the global level 'GM'"},
      {"unit reads undefined level", replaced(good, "reads: [L0A, L0B, L0C]", "reads: [L0A, L0X, L0C]"),
       "unit 'cube' reads: names undefined level 'L0X'"},
      {"matrix shape not positive", replaced(good, "{m: 16, n: 16, k: 16, a: f16", "{m: 0, n: 16, k: 16, a: f16"),
       "units[1].shapes[0].m: matrix shape dimension must be a positive integer (got 0)"},
      {"matrix shape negative", replaced(good, "{m: 16, n: 16, k: 32, a: i8", "{m: 16, n: -16, k: 32, a: i8"),
       "units[1].shapes[1].n: matrix shape dimension must be a positive integer (got -16)"},
      {"unknown dtype", replaced(good, "a: i8, b: i8, acc: i32", "a: i7, b: i8, acc: i32"),
       "units[1].shapes[1].a: unknown dtype 'i7'"},
      {"missing required key", replaced(good, "clock_mhz: 1000 ", "# clock_mhz: 1000 "), "clock_mhz: required key is missing"},
      {"zero cores", replaced(good, "cores: 32 ", "cores: 0 "), "t.yaml:32: cores: must be at least 1"},
      {"NPU pipe missing", replaced(good, "pipe: MTE3", "pipe: MTE2"), "units: no unit runs on NPU pipe MTE3"},
      {"event ids zero", replaced(good, "event_ids_per_pipe_pair: 4 ", "event_ids_per_pipe_pair: 0 "),
       "sync.event_ids_per_pipe_pair: must be at least 1"},
      {"NPU without sync section", good.substr(0, good.find("sync:")), "an NPU description needs a sync section"},
      {"invalid YAML", replaced(good, "cores: 32 ", "cores: [32 "), "t.yaml:33:1: invalid YAML"},
      {"accumulator cannot drain",
       replaced(replaced(good, "  - {from: L0C, to: UB, engine: vector", "  #"), "reads: [UB, L0C]", "reads: [UB]"),
       "level 'L0C': results in this accumulator level cannot reach the global level"},
      {"alignment not a power of two", replaced(good, "alignment_bytes: 1024 ", "alignment_bytes: 1000 "),
       "level 'L0C' alignment_bytes: must be a power of two (got 1000)"},
      {"text where a number belongs", replaced(good, "bandwidth_bytes_per_cycle: 87, latency_cycles: 150",
                                               "bandwidth_bytes_per_cycle: fast, latency_cycles: 150"),
       "bandwidth_bytes_per_cycle: cannot read 'fast' as a number"},
  };
  static_assert(std::size(cases) >= 12);
  for (const Case& c : cases) {
    CAPTURE(c.rule);
    const std::string message = rejection(c.text);
    CHECK_MESSAGE(message.find(c.expected) != std::string::npos, "got: " << message);
  }
}

// Energies (isa/README.md "Energy"): plausible, on the kind of unit whose operation they price, and
// complete in NPU descriptions; optional in GPU ones.
TEST_CASE("energy fields are validated like the other numbers") {
  const std::string good = read_text(target_path("davinci-910.yaml"));
  struct Case {
    std::string rule;
    std::string text;
    const char* expected;
  };
  const Case cases[] = {
      {"zero energy", replaced(good, "read_energy_pj_per_byte: 0.86 ", "read_energy_pj_per_byte: 0 "),
       "t.yaml:61: levels[2].read_energy_pj_per_byte: got 0 pJ, outside the plausible range (0, 1000]"},
      {"a unit slip (nJ for pJ)", replaced(good, "energy_pj_per_mac: 0.5}", "energy_pj_per_mac: 500}"),
       "units[1].shapes[0].energy_pj_per_mac: got 500 pJ, outside the plausible range (0, 100]"},
      {"negative", replaced(good, "energy_pj_per_repeat: 24 ", "energy_pj_per_repeat: -24 "),
       "units[2].energy_pj_per_repeat: got -24 pJ, outside the plausible range (0, 100000]"},
      {"text", replaced(good, "energy_pj_per_instruction: 17.5", "energy_pj_per_instruction: cheap"),
       "units[0].energy_pj_per_instruction: cannot read 'cheap' as a number"},
      {"NPU level without its read energy", replaced(good, "    read_energy_pj_per_byte: 3.1 ", "    # "),
       "level 'L1': an NPU level needs read_energy_pj_per_byte and write_energy_pj_per_byte"},
      {"NPU matrix shape without energy", replaced(good, ", energy_pj_per_mac: 0.075}", "}"),
       "unit 'cube' shape 16x16x32: an NPU matrix shape needs energy_pj_per_mac"},
      {"NPU vector unit without energy per repeat", replaced(good, "    energy_pj_per_repeat: 24 ", "    # "),
       "unit 'vector': an NPU vector unit needs energy_pj_per_repeat"},
      {"NPU path engine without energy per byte", replaced(good, "    energy_pj_per_byte: 0.4          # [K11] 0.5 mm inside", "    # "),
       "unit 'mte1': an NPU unit that moves data along a path needs energy_pj_per_byte"},
      {"energy per repeat on a copy engine",
       replaced(good, "    energy_pj_per_byte: 2.0          # [K11] 2.5 mm to the memory side (assumed)\n  - name: mte3",
                "    energy_pj_per_byte: 2.0\n    energy_pj_per_repeat: 3\n  - name: mte3"),
       "unit 'mte2' energy_pj_per_repeat: only vector units have repeats"},
      {"energy per byte on a unit that moves nothing", replaced(good, "    energy_pj_per_instruction: 17.5", "    energy_pj_per_instruction: 17.5\n    energy_pj_per_byte: 1"),
       "unit 'scalar' energy_pj_per_byte: the unit is the engine of no transfer path"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.rule);
    const std::string message = rejection(c.text);
    CHECK_MESSAGE(message.find(c.expected) != std::string::npos, "got: " << message);
  }
  // every shipped NPU description prices everything; GPU descriptions may leave energy out
  for (const char* name : {"davinci-910.yaml", "davinci-310.yaml"}) {
    const Hierarchy h = load_hierarchy(target_path(name));
    for (const Level& l : h.levels) CHECK((l.read_energy_pj_per_byte && l.write_energy_pj_per_byte));
  }
  CHECK_FALSE(load_hierarchy(target_path("sm90.yaml")).levels[0].read_energy_pj_per_byte.has_value());
  const Hierarchy h = load_hierarchy(target_path("davinci-910.yaml"));
  CHECK(*h.level(Role::Global).read_energy_pj_per_byte == 31.2);
  CHECK(*h.find_unit("cube")->shapes[1].energy_pj_per_mac == 0.075);
  CHECK(*h.find_unit("mte2")->energy_pj_per_byte == 2.0);
}

TEST_CASE("a GPU description's arch must match its compute capability") {
  const std::string good = read_text(target_path("sm90.yaml"));
  const std::string message = rejection(replaced(good, "arch: sm_90", "arch: sm_80"));
  CHECK(message.find("gpu.arch: 'sm_80' does not match compute_capability 9.0 (expected sm_90)") != std::string::npos);
}

TEST_CASE("a missing file names the path") {
  CHECK_THROWS_WITH_AS(load_hierarchy("/no/such/file.yaml"),
                       doctest::Contains("/no/such/file.yaml: cannot open hierarchy description"), UserError);
}

TEST_CASE("comparing davinci-910 with sm90 lists what each offers that the other lacks") {
  const Hierarchy npu = load_hierarchy(target_path("davinci-910.yaml"));
  const Hierarchy gpu = load_hierarchy(target_path("sm90.yaml"));
  const HierarchyComparison c = compare_hierarchies(npu, gpu);
  // The NPU: explicit flags between pipes, a scalar unit, fractal transforms, int8 at k=32.
  CHECK(c.only_in_first.count("explicit sync flags between pipes"));
  CHECK(c.only_in_first.count("unit kind scalar"));
  CHECK(c.only_in_first.count("transform nd2nz"));
  CHECK(c.only_in_first.count("matrix 16x16x32 i8*i8->i32"));
  CHECK(c.only_in_first.count("transform relu"));
  // Hopper: bf16, int8 at k=16, banked shared memory, warps.
  CHECK(c.only_in_second.count("matrix dtype bf16"));
  CHECK(c.only_in_second.count("matrix 16x16x16 i8*i8->i32"));
  CHECK(c.only_in_second.count("banked stage level"));
  CHECK(c.only_in_second.count("warp-level SIMT execution"));
  // Both: img2col addressing, the 16x16x16 f16 shape — so neither list holds them.
  CHECK_FALSE(c.only_in_first.count("transform img2col"));
  CHECK_FALSE(c.only_in_first.count("matrix 16x16x16 f16*f16->f32"));
  CHECK_FALSE(c.only_in_second.count("matrix 16x16x16 f16*f16->f32"));
  CHECK(c.table.find("operand_a    L0A (64 KiB, fractal_zz)") != std::string::npos);
}

TEST_CASE("comparing sm75 with sm80: bf16 and cp.async arrive with Ampere") {
  const HierarchyComparison c =
      compare_hierarchies(load_hierarchy(target_path("sm75.yaml")), load_hierarchy(target_path("sm80.yaml")));
  CHECK(c.only_in_first.empty());
  CHECK(c.only_in_second.count("matrix dtype bf16"));
}

// The GPU machine model (isa/gpu_machine.h): every number the CUDA emitter and the GPU tile policy
// use comes from the description, per architecture; its gpu keys are validated.
TEST_CASE("sm90's machine: Hopper budgets, wgmma, clusters, bulk copies and PDL from the description") {
  const GpuMachine m = GpuMachine::from(load_hierarchy(target_path("sm90.yaml")));
  CHECK(m.arch == "sm_90");
  CHECK(m.compute_capability == 90);
  CHECK(m.sm_count == 132);
  CHECK(m.warp_size == 32);
  CHECK(m.shared_bytes_per_block_optin == 227 * 1024);
  CHECK(m.shared_bytes_per_sm == 228 * 1024);
  CHECK(m.shared_bytes_reserved_per_block == 1024);
  CHECK(m.shared_banks == 32);
  CHECK(m.shared_bank_width_bytes == 4);
  CHECK(m.vector_access_bytes == 16);
  CHECK((m.wmma.m == 16 && m.wmma.n == 16 && m.wmma.k == 16));
  REQUIRE(m.mma_sync);
  CHECK((m.mma_sync->m == 16 && m.mma_sync->n == 8 && m.mma_sync->k == 16));
  REQUIRE(m.wgmma);
  CHECK((m.wgmma->m == 64 && m.wgmma->n == 256 && m.wgmma->k == 16));
  CHECK(m.threads_per_warpgroup() == 128);
  CHECK(m.cluster_max_blocks == 8);
  CHECK(m.bulk_copy_alignment_bytes == 16);
  for (GpuFeature f : {GpuFeature::CpAsync, GpuFeature::ThreadBlockClusters, GpuFeature::BulkCopy, GpuFeature::ProgrammaticDependentLaunch})
    CHECK(m.has(f));
}

TEST_CASE("older architectures lack what they lack: sm80 has cp.async and mma.sync, sm75 neither") {
  const GpuMachine a = GpuMachine::from(load_hierarchy(target_path("sm80.yaml")));
  CHECK(a.shared_bytes_per_block_optin == 163 * 1024);
  CHECK(a.sm_count == 108);
  CHECK(a.mma_sync);
  CHECK_FALSE(a.wgmma);
  CHECK(a.has(GpuFeature::CpAsync));
  CHECK_FALSE(a.has(GpuFeature::ThreadBlockClusters));
  const GpuMachine t = GpuMachine::from(load_hierarchy(target_path("sm75.yaml")));
  CHECK(t.shared_bytes_per_block_optin == 64 * 1024);
  CHECK(t.shared_bytes_reserved_per_block == 0);
  CHECK_FALSE(t.mma_sync);
  CHECK_FALSE(t.has(GpuFeature::CpAsync));
}

TEST_CASE("stock machines are found by architecture, an unknown architecture is a user error naming those there are") {
  CHECK(stock_gpu_machine("sm_80").name == "sm80");
  CHECK(stock_gpu_machine("sm_90").sm_count == 132);
  try {
    stock_gpu_machine("sm_86");
    FAIL("sm_86 has no description");
  } catch (const UserError& e) {
    CHECK(std::string(e.what()).find("no GPU description for sm_86") != std::string::npos);
    CHECK(std::string(e.what()).find("sm_90 (sm90)") != std::string::npos);
  }
}

TEST_CASE("an NPU description has no GPU machine") {
  CHECK_THROWS_AS(GpuMachine::from(load_hierarchy(target_path("davinci-910.yaml"))), InternalError);
}

TEST_CASE("the gpu keys of the machine model are validated") {
  const std::string good = read_text(target_path("sm90.yaml"));
  REQUIRE(rejection(good).empty());
  CHECK(rejection(replaced(good, "  vector_access_bytes: 16", "  vector_access_bytes: 12")).find("gpu.vector_access_bytes: must be a power of two") !=
        std::string::npos);
  CHECK(rejection(replaced(good, "  vector_access_bytes: 16", "")).find("vector_access_bytes") != std::string::npos);
  CHECK(rejection(replaced(good, "tensor_maps]", "warp_specialisation]")).find("unknown feature 'warp_specialisation'") !=
        std::string::npos);
  CHECK(rejection(replaced(good, "  warps_per_warpgroup: 4", "")).find("needs warps_per_warpgroup") != std::string::npos);
  CHECK(rejection(replaced(good, "  cluster_max_blocks: 8", "")).find("needs cluster_max_blocks") != std::string::npos);
  CHECK(rejection(replaced(good, "  bulk_copy_alignment_bytes: 16", "")).find("needs bulk_copy_alignment_bytes") != std::string::npos);
}

// Warp-level MMA on Hopper (issue 19 item 2): mma.sync and WMMA issue below the tensor cores' peak,
// which only wgmma reaches; the descriptions carry the measured rate (MAC/cycle/SM, f16 -> f32).
TEST_CASE("gpu.warp_mma_f16_macs_per_cycle: Hopper's measured warp-level MMA rate, absent before Hopper, validated") {
  for (const char* part : {"sm90.yaml", "sm90-h100.yaml", "sm90-h200.yaml"}) {
    const Hierarchy h = load_hierarchy(target_path(part));
    CHECK(h.gpu->warp_mma_f16_macs_per_cycle == 1277);
    CHECK(h.gpu->warp_mma_f16_macs_per_cycle < double(h.peak_macs_per_cycle(DType::F16, DType::F32)));  // 2048
  }
  for (const char* older : {"sm75.yaml", "sm80.yaml"}) CHECK(load_hierarchy(target_path(older)).gpu->warp_mma_f16_macs_per_cycle == 0);
  const std::string good = read_text(target_path("sm90.yaml"));
  CHECK(rejection(replaced(good, "warp_mma_f16_macs_per_cycle: 1277", "warp_mma_f16_macs_per_cycle: -5"))
            .find("gpu.warp_mma_f16_macs_per_cycle: must be between 0 and 1e6") != std::string::npos);
}

// The partitioned L2 (issue 19 item 2): A100, H100 and H200 split their L2 into two partitions
// joined by the L2 fabric ([L2P] in the descriptions); a T4's L2 is one. The count must divide the
// L2 (every partition holds an equal share) and stay plausible.
TEST_CASE("gpu.l2_partitions: two on A100 and Hopper, none described on Turing, validated") {
  for (const char* part : {"sm80.yaml", "sm90.yaml", "sm90-h100.yaml", "sm90-h200.yaml"})
    CHECK(load_hierarchy(target_path(part)).gpu->l2_partitions == 2);
  CHECK(load_hierarchy(target_path("sm75.yaml")).gpu->l2_partitions == 0);
  const std::string good = read_text(target_path("sm90-h100.yaml"));  // 52428800 B of L2
  CHECK(rejection(replaced(good, "l2_partitions: 2 ", "l2_partitions: 3 "))
            .find("gpu.l2_partitions: must divide l2_cache_bytes (52428800)") != std::string::npos);
  CHECK(rejection(replaced(good, "l2_partitions: 2 ", "l2_partitions: 128 ")).find("outside the plausible range 0..64") !=
        std::string::npos);
  CHECK(rejection(replaced(good, "l2_partitions: 2 ", "l2_partitions: 1 ")).empty());  // one L2: nothing crosses
}
