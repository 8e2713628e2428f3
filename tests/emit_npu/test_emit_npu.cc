// The NPU emitter (compiler/emit_npu) end to end: .tsl -> polyhedral pipeline -> kernel IR -> NPU
// program -> syncs (naive and pruned) -> simulator, compared with the reference interpreter.
// f32 results of f16 GEMMs are compared with emit_c::verify's f32 bound (1e-5 absolute + 1e-5
// relative): the cube accumulates every product in f32 in ascending k, the interpreter's order, so
// the results are in fact bit-identical (max_abs_err 0 is checked too).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>

#include "compiler/emit_c/run_c.h"
#include "compiler/emit_npu/emit_npu.h"
#include "compiler/frontend/frontend.h"
#include "compiler/frontend/suite.h"
#include "compiler/interp/interpreter.h"
#include "compiler/npu_sync/sync_insertion.h"
#include "compiler/pipeline.h"
#include "isa/base/error.h"
#include "npu_sim/simulator.h"
#include "npu_case.h"

using namespace tessel;
using namespace tessel::npu_test;

namespace {

// Float reductions and normalisations: within emit_c's documented bound (not bit for bit).
void check_within_bound(const std::string& file, const std::string& def, const std::string& shape) {
  CAPTURE(shape);
  auto c = compile_case(file, def, shape);
  const Run naive = run(*c, npu_sync::SyncMode::Naive);
  const Run pruned = run(*c, npu_sync::SyncMode::Pruned);
  MESSAGE(def << " " << shape << ": syncs " << naive.sync.sync_instructions << " -> " << pruned.sync.sync_instructions
              << ", cycles " << naive.sim.record.total_cycles << " -> " << pruned.sim.record.total_cycles << ", max_abs_err "
              << pruned.verification.max_abs_err);
  for (const Run* r : {&naive, &pruned}) {
    CHECK(r->verification.verified);
    CHECK(r->sim.record.races.empty());
    CHECK_FALSE(r->sim.record.deadlock);
  }
  CHECK(pruned.sync.sync_instructions <= naive.sync.sync_instructions);
}

}  // namespace

TEST_CASE("batch-norm reduce and update (NHWC, channel-last rows): verify within the f32/f16 bound, race-free") {
  check_within_bound("batch_norm.tsl", "bn_reduce", "N=2,H=3,W=4,C=5");
  check_within_bound("batch_norm.tsl", "bn_reduce", "N=4,H=9,W=10,C=64");  // several chunks of rows, a tail
  check_within_bound("batch_norm.tsl", "bn_update", "N=2,H=3,W=4,C=5");
  check_within_bound("batch_norm.tsl", "bn_update", "N=4,H=9,W=10,C=48");
  check_within_bound("batch_norm.tsl", "bn_reduce", "N=2,H=3,W=4,C=80");  // past the template's 64 channels: nest.h
}

TEST_CASE("softmax and layer-norm over the last axis (vcadd / vcmax per row, vbrcb broadcast) verify within the bound") {
  check_within_bound("bert.tsl", "softmax", "M=6,N=11");
  check_within_bound("bert.tsl", "softmax", "M=300,N=64");  // several chunks of rows and a tail
  check_within_bound("bert.tsl", "layer_norm", "M=6,N=11");
  check_within_bound("bert.tsl", "layer_norm", "M=200,N=48");
  check_within_bound("bert.tsl", "softmax", "M=6,N=100");  // past the template's one repeat per row: nest.h
}

TEST_CASE("pruned softmax and layer-norm keep only needed syncs: removing any kept pair lets the race detector fire") {
  check_mutants_of("bert.tsl", "layer_norm", "M=200,N=48");
  check_mutants_of("bert.tsl", "softmax", "M=300,N=64");
}

TEST_CASE("NHWC -> NCHW transpose (masked vbrcb per pixel row) is bit-exact, race-free, mutation") {
  check_verifies("transpose.tsl", "transpose", "N=2,H=3,W=4,C=5");
  check_verifies("transpose.tsl", "transpose", "N=2,H=10,W=15,C=20");  // pixels past one 128-lane window
  check_mutants_of("transpose.tsl", "transpose", "N=2,H=10,W=15,C=20");
}

TEST_CASE("transposes of bf16 (moved as f16 bits) and of 1-byte elements (the general lowering) verify, mutation") {
  // seed 7501 program 240: the transpose mapping's touches and vbrcb took the tensor's dtype ('vmuls
  // i8', refused by the program format: compile_case threw)
  const std::string file = "../tests/emit_npu/data/transpose_narrow.tsl", shape = "N=2,H=10,W=15,C=20";
  for (const char* def : {"transpose_bf16", "transpose_i8", "transpose_u8"}) {
    CAPTURE(def);
    auto c = compile_case(file, def, shape, "", false);
    bool transpose_mapping = false;
    for (const std::string& n : c->kernel.notes) transpose_mapping |= n.find("one masked vbrcb per pixel row") != std::string::npos;
    CHECK(transpose_mapping == (std::string(def) == "transpose_bf16"));
    check_verifies(file, def, shape);
  }
  check_mutants_of(file, "transpose_bf16", shape);
}

TEST_CASE("one-hot (vbrcb of the indices, clamped distance) is exact, out-of-range indices included, mutation") {
  check_verifies("one_hot.tsl", "one_hot", "N=9,D=6");
  check_verifies("one_hot.tsl", "one_hot", "N=300,D=64");  // several chunks of rows
  check_mutants_of("one_hot.tsl", "one_hot", "N=300,D=64");
}

TEST_CASE("pruned batch-norm programs keep only needed syncs (mutation)") {
  check_mutants_of("batch_norm.tsl", "bn_reduce", "N=4,H=9,W=10,C=64");
  check_mutants_of("batch_norm.tsl", "bn_update", "N=4,H=9,W=10,C=48");
}

TEST_CASE("GEMM with sizes multiple of 16: verifies bit for bit, race-free naive and pruned") {
  check_verifies("matmul.tsl", "matmul", "M=32,N=16,K=48");
  check_verifies("matmul.tsl", "matmul", "M=64,N=48,K=80");
}

TEST_CASE("GEMM over several cores, double-buffered K chunks (odd and even chunk counts)") {
  check_verifies("matmul.tsl", "matmul", "M=128,N=64,K=192", "m=64/32,n=32/32,k=64/32");
  check_verifies("matmul.tsl", "matmul", "M=64,N=64,K=256", "m=32/32,n=32/16,k=64/16");
}

TEST_CASE("GEMM with an L1 ring of 2 or 3 chunks: peeled chunks, the unrolled chunk loop and its remainder, tile loop") {
  // Small stage tiles: the last chunk(s) computed block by block (an L1 ring of tail + 1 chunks, the
  // model's choice: 2 and 1 here; the first deepened to 6 by choose_l1_ring, test_gemm_l1_ring.cc),
  // 16 chunks peeled, the chunks between in a loop unrolled once per ring slot, plus the remainder.
  std::set<int> rings;
  for (const auto& [shape, tile] : {std::pair<std::string, std::string>{"M=128,N=128,K=1024", "m=64/32,n=64/32,k=32/16"},
                                    {"M=128,N=128,K=2048", "m=128/64,n=128/64,k=64/32"}}) {
    auto c = compile_case("matmul.tsl", "matmul", shape, tile);
    int ring = 0;
    for (const std::string& n : c->kernel.notes)
      if (n.rfind("last ", 0) == 0) ring = std::stoi(n.substr(n.find("L1 ring of ") + 11));
    CAPTURE(shape);
    rings.insert(ring);
    int loops = 0;
    for (const auto& in : c->kernel.program.code) loops += in.opcode == npu::Opcode::Loop;
    CHECK(loops == 1);
    check_verifies("matmul.tsl", "matmul", shape, tile);
  }
  CHECK(rings == std::set<int>{2, 3});
  check_verifies("matmul.tsl", "matmul", "M=384,N=384,K=256", "m=64/32,n=64/32,k=32/16");  // 36 tiles: tile loop
}

// The 1024^3 demo's stage tile (256x256x128, operand tile 128x64x64) on 2 cores: every output block
// but the last is written back while the cube computes, so a core's time stays below
//   cube + exposed start + the last block's drain (+ 3 % of the cube: flag hand-offs and MTE1 at its
//   limit while the last chunks are computed block by block),
// every figure from the description. Without the overlap (all of the f32 tile written after the
// cube: 256 KiB at 87 B/cycle, 3013 cycles) it would exceed it.
TEST_CASE("GEMM write-back overlaps the cube: 2 cores of 256x256x1024 within a bound from the description") {
  auto c = compile_case("matmul.tsl", "matmul", "M=512,N=256,K=1024", "m=256/128,n=256/64,k=128/64");
  REQUIRE(c->kernel.program.cores == 2);
  const Run r = run(*c, npu_sync::SyncMode::Pruned);
  CHECK(r.verification.verified);
  CHECK(r.verification.max_abs_err == 0);
  CHECK(r.sim.record.races.empty());
  const isa::NpuMachine& m = r.sim.record.machine;
  auto cycles = [](double bytes, const isa::NpuPathSpec& p) { return uint64_t(std::ceil(bytes / p.bandwidth_bytes_per_cycle)); };
  using npu::Buffer;
  const auto& gm_l1 = m.path(Buffer::GM, Buffer::L1);
  const auto& l1_l0a = m.path(Buffer::L1, Buffer::L0A);
  const auto& l1_l0b = m.path(Buffer::L1, Buffer::L0B);
  const auto& l0c_ub = m.path(Buffer::L0C, Buffer::UB);
  const auto& ub_gm = m.path(Buffer::UB, Buffer::GM);
  const auto& cube_shape = m.cube(DType::F16);
  const uint64_t cube = uint64_t(256 / cube_shape.m0) * (256 / cube_shape.n0) * (1024 / cube_shape.k0) * cube_shape.cycles;
  // The first operand tiles: A 128x64 and B 64x64 f16 from GM to L1, then to L0A and L0B.
  const uint64_t start = gm_l1.latency_cycles + cycles(128 * 64 * 2 + 64 * 64 * 2, gm_l1) + cycles(128 * 64 * 2, l1_l0a) +
                         cycles(64 * 64 * 2, l1_l0b) + l1_l0b.latency_cycles + m.cube_startup_cycles;
  // The last 128x64 f32 block: its first 16-column block moved to UB, then its four column blocks to GM.
  const uint64_t drain = cycles(128 * 16 * 4, l0c_ub) + l0c_ub.latency_cycles + 4 * cycles(128 * 16 * 4, ub_gm) + ub_gm.latency_cycles;
  const uint64_t bound = cube + start + drain + cube * 3 / 100;
  MESSAGE("2-core 256x256x1024 tiles: " << r.sim.record.total_cycles << " cycles, bound " << bound << " (cube " << cube
                                        << ", start " << start << ", drain " << drain << ")");
  CHECK(r.sim.record.total_cycles <= bound);
  CHECK(bound < cube + cycles(256 * 256 * 4, ub_gm));  // the bound excludes a write-back after the cube
  CHECK(10 * cube >= 9 * r.sim.record.total_cycles);   // cube utilization >= 90 %
  // Overlap, from the record: on each core, the dma_outs of at least 6 of the 8 blocks (4 column
  // blocks each) finish before the cube's last mmad does (the 7th is written while the last block
  // computes, the 8th after).
  for (int core = 0; core < 2; ++core) {
    auto is = [&](const npu_sim::InstructionEvent& e, const char* opcode) {
      return e.core == core && e.pipe != npu::Pipe::S && r.sim.record.instruction_text[e.pc].rfind(opcode, 0) == 0;
    };
    uint64_t last_mmad = 0;
    for (const auto& e : r.sim.record.instructions)
      if (is(e, "mmad")) last_mmad = std::max(last_mmad, e.end);
    int before = 0, outs = 0;
    for (const auto& e : r.sim.record.instructions)
      if (is(e, "dma_out")) {
        ++outs;
        before += e.end <= last_mmad;
      }
    CAPTURE(core);
    CHECK(outs == 32);
    CHECK(before >= 24);
  }
}

TEST_CASE("batched GEMM: the batch is one more dimension of the output tiles spread over the cores") {
  check_verifies("batch_matmul.tsl", "batch_matmul", "B=4,M=64,N=32,K=48");
  check_verifies("batch_matmul.tsl", "batch_matmul", "B=3,M=32,N=32,K=64", "b=1/1,m=16/16,n=16/16,k=32/16");
  check_verifies("batch_matmul.tsl", "batch_matmul", "B=3,M=4,N=5,K=6");  // tails: the batch padded through UB
  check_verifies("batch_matmul.tsl", "batch_matmul", "B=5,M=20,N=33,K=17");
}

TEST_CASE("NHWC convolution through img2col (load3d) verifies, padding and partial pixel blocks included") {
  check_verifies("conv_seed.tsl", "conv2d_nhwc", "N=2,H=5,W=6,C=16,K=16,R=3,S=3");
  check_verifies("conv_seed.tsl", "conv2d_nhwc", "N=3,H=7,W=7,C=48,K=32,R=3,S=3");
  check_verifies("conv_seed.tsl", "conv2d_nhwc", "N=128,H=4,W=4,C=32,K=16,R=3,S=3");  // two jobs at a time, job loop
}

TEST_CASE("NHWC convolution with channel counts not multiples of 16 (zero-padded scratch copies) verifies, mutation") {
  check_verifies("conv_seed.tsl", "conv2d_nhwc", "N=2,H=5,W=6,C=3,K=4,R=3,S=3");
  check_verifies("conv_seed.tsl", "conv2d_nhwc", "N=3,H=7,W=7,C=20,K=40,R=3,S=3");
  check_mutants_of("conv_seed.tsl", "conv2d_nhwc", "N=2,H=5,W=6,C=3,K=4,R=3,S=3");
}

TEST_CASE("depthwise convolution + relu6 on the vector unit verifies, race-free, mutation") {
  check_within_bound("mobilenet.tsl", "depthwise_relu6", "N=2,H=5,W=4,C=3,R=3,S=3");
  check_within_bound("mobilenet.tsl", "depthwise_relu6", "N=2,H=6,W=7,C=40,R=3,S=3");
  check_mutants_of("mobilenet.tsl", "depthwise_relu6", "N=2,H=6,W=7,C=40,R=3,S=3");
}

TEST_CASE("convolution with a fused batch-norm + relu epilogue (per-channel broadcasts on UB) verifies, mutation") {
  check_within_bound("resnet50.tsl", "conv_bn_relu", "N=2,H=5,W=4,C=3,K=4,R=3,S=3");
  check_within_bound("resnet50.tsl", "conv_bn_relu", "N=4,H=6,W=6,C=32,K=48,R=3,S=3");
  // Mutation: every kept pair of the pruned program is needed (the channel tile given: the policy
  // spreads bands over cores, each kind's code on its own cores, whose pairs between kinds are
  // never needed dynamically).
  check_mutants_of("resnet50.tsl", "conv_bn_relu", "N=4,H=6,W=6,C=64,K=48,R=3,S=3", "k=16");
}

TEST_CASE("i8 x i8 -> i32 GEMM verifies exactly (the cube's i8 shape, i32 accumulation), tails included") {
  check_verifies("gemm_fused.tsl", "matmul_i8", "M=7,N=5,K=9");
  check_verifies("gemm_fused.tsl", "matmul_i8", "M=64,N=48,K=96");
  check_verifies("gemm_fused.tsl", "matmul_i8", "M=40,N=33,K=1000");
}

TEST_CASE("GEMM tails (sizes not multiples of 16) verify") {
  check_verifies("matmul.tsl", "matmul", "M=7,N=5,K=9");
  check_verifies("matmul.tsl", "matmul", "M=37,N=20,K=50");
  check_verifies("matmul.tsl", "matmul", "M=100,N=36,K=70", "m=64/32,n=32/16,k=32/16");
}

TEST_CASE("GEMM with a fused epilogue on UB (bias broadcast, relu, GELU, cast) verifies, tails included") {
  check_verifies("gemm_fused.tsl", "matmul_bias_relu", "M=7,N=5,K=9");
  check_verifies("gemm_fused.tsl", "matmul_bias_relu", "M=64,N=48,K=80");
  check_verifies("bert.tsl", "matmul_bias_gelu", "M=7,N=5,K=9");
  check_verifies("bert.tsl", "matmul_bias_gelu", "M=128,N=96,K=64", "m=64/32,n=32/32,k=32/16");
}

TEST_CASE("pruned GEMM keeps only needed syncs: removing any kept pair lets the race detector fire") {
  check_mutants_of("matmul.tsl", "matmul", "M=64,N=32,K=128", "m=32/32,n=32/16,k=32/16");  // one tile per core
  check_mutants_of("matmul.tsl", "matmul", "M=128,N=128,K=32", "m=16/16,n=16/16,k=16/16");  // two tiles per core: syncs carried across tiles
}

TEST_CASE("pruned convolution keeps only needed syncs (mutation)") {
  auto c = compile_case("conv_seed.tsl", "conv2d_nhwc", "N=3,H=7,W=7,C=48,K=32,R=3,S=3");
  const Run pruned = run(*c, npu_sync::SyncMode::Pruned);
  REQUIRE(pruned.sim.record.races.empty());
  for (int k = 0; k < pruned.sync.pairs; ++k) {
    CAPTURE(k);
    const Run mutant = run(*c, npu_sync::SyncMode::Pruned, k);
    CHECK((!mutant.sim.record.races.empty() || mutant.sim.record.deadlock));
  }
}

TEST_CASE("pruned GEMM with a fused epilogue keeps only needed syncs (mutation)") {
  auto c = compile_case("gemm_fused.tsl", "matmul_bias_relu", "M=64,N=48,K=80");
  const Run pruned = run(*c, npu_sync::SyncMode::Pruned);
  REQUIRE(pruned.sim.record.races.empty());
  for (int k = 0; k < pruned.sync.pairs; ++k) {
    CAPTURE(k);
    const Run mutant = run(*c, npu_sync::SyncMode::Pruned, k);
    CHECK((!mutant.sim.record.races.empty() || mutant.sim.record.deadlock));
  }
}

TEST_CASE("pruned keeps at most half of the naive syncs on a tiled GEMM") {
  auto c = compile_case("matmul.tsl", "matmul", "M=128,N=128,K=256", "m=64/32,n=64/32,k=64/32");
  const auto naive = npu_sync::insert_syncs(c->kernel.program, c->compilation->hierarchy, {npu_sync::SyncMode::Naive, -1});
  const auto pruned = npu_sync::insert_syncs(c->kernel.program, c->compilation->hierarchy, {npu_sync::SyncMode::Pruned, -1});
  CHECK(2 * pruned.sync_instructions <= naive.sync_instructions);
}

TEST_CASE("element-wise workloads verify on the simulator, race-free naive and pruned (tails included)") {
  check_verifies("relu.tsl", "relu", "N=2,C=3,H=4,W=5");
  check_verifies("add.tsl", "add", "N=2,C=3,H=4,W=5");
  check_verifies("add.tsl", "add", "N=3,C=5,H=40,W=50");  // several chunks over several cores and a tail
  check_verifies("cast.tsl", "cast_f32_to_f16", "M=6,N=7");
  check_verifies("cast.tsl", "cast_f16_to_f32", "M=6,N=7");
  check_verifies("cast.tsl", "cast_f32_to_i32", "M=6,N=7");  // truncation toward zero, exact
  check_verifies("cast.tsl", "cast_f32_to_i32", "M=70,N=300");
  check_verifies("fmod.tsl", "fmod_f32", "M=37,N=129");  // `%` on vmod, exact (fmod)
  check_verifies("fmod.tsl", "fmod_f16_chain", "M=5,N=7");
  check_verifies("fmod.tsl", "fmod_scalar", "M=3,N=300");
}

TEST_CASE("pruned element-wise program keeps only needed syncs (mutation)") {
  auto c = compile_case("add.tsl", "add", "N=3,C=5,H=40,W=50");
  const Run pruned = run(*c, npu_sync::SyncMode::Pruned);
  REQUIRE(pruned.sim.record.races.empty());
  for (int k = 0; k < pruned.sync.pairs; ++k) {
    CAPTURE(k);
    const Run mutant = run(*c, npu_sync::SyncMode::Pruned, k);
    CHECK((!mutant.sim.record.races.empty() || mutant.sim.record.deadlock));
  }
}

TEST_CASE("a kernel the emitter cannot map is a UserError naming the kernel and the reason, never a wrong program") {
  // one output row's window exceeds L1: with the user's tile (for the cube) nothing else may take it
  CHECK_THROWS_WITH_AS(compile_case("conv_seed.tsl", "conv2d_nhwc", "N=1,H=4,W=40000,C=16,K=16,R=3,S=3", "n=1,p=1,q=128/64,k=16,r=1,s=1,c=16", false),
                       doctest::Contains("kernel conv2d_nhwc: tile n=1/1,p=1/1,q=128/64,k=16/16,r=1/1,s=1/1,c=16/16 does not fit: level L1"), UserError);
}

// The small suite (workloads/small.yaml): every workload maps, verifies and is race-free with naive
// and pruned syncs.
TEST_CASE("every small-suite workload verifies on the simulator, race-free naive and pruned") {
  const frontend::Suite suite = frontend::load_suite(kRoot + "/workloads/small.yaml");
  int mapped = 0;
  for (const auto& e : suite.entries) {
    CAPTURE(e.name);
    std::string shape;
    for (const auto& [k, v] : e.shape) shape += (shape.empty() ? "" : ",") + k + "=" + std::to_string(v);
    const std::string file = e.file.substr(e.file.rfind('/') + 1);
    std::unique_ptr<Case> c;
    try {
      c = compile_case(file, e.def, shape);
    } catch (const UserError& err) {
      FAIL_CHECK("unmapped: " << std::string(err.what()));
      continue;
    }
    ++mapped;
    for (auto mode : {npu_sync::SyncMode::Naive, npu_sync::SyncMode::Pruned}) {
      const Run r = run(*c, mode);
      CHECK(r.verification.verified);
      CHECK(r.sim.record.races.empty());
      CHECK_FALSE(r.sim.record.deadlock);
    }
  }
  CHECK(mapped == static_cast<int>(suite.entries.size()));
  MESSAGE(mapped << " of " << suite.entries.size() << " small-suite workloads mapped and verified");
}
