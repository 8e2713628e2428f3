// Shared by the NPU emitter tests: compile a workload for davinci-910, insert syncs, simulate and
// compare every output with the reference interpreter.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "compiler/emit_c/run_c.h"
#include "compiler/emit_npu/emit_npu.h"
#include "compiler/frontend/frontend.h"
#include "compiler/interp/interpreter.h"
#include "compiler/npu_sync/sync_insertion.h"
#include "compiler/pipeline.h"
#include "npu_sim/simulator.h"

namespace tessel::npu_test {

inline const std::string kRoot = TESSEL_SOURCE_DIR;
inline const std::string kTarget = kRoot + "/isa/targets/davinci-910.yaml";
inline const std::string kTarget310 = kRoot + "/isa/targets/davinci-310.yaml";

struct Case {
  frontend::Module module;
  std::unique_ptr<Compilation> compilation;
  emit_npu::NpuKernel kernel;
  interp::Tensors inputs, expected;
  double f32_tolerance = 0;  // emit_c::reassociated_sum_tolerance of the function
};

// Compiles workloads/FILE's DEF at SHAPE (optionally with a tile spec) and emits the NPU program;
// with `evaluate`, random inputs and the interpreter's outputs for them. `target`: another
// description than davinci-910.
inline std::unique_ptr<Case> compile_case(const std::string& file, const std::string& def, const std::string& shape,
                                          const std::string& tile = "", bool evaluate = true,
                                          const std::string& target = kTarget) {
  auto c = std::make_unique<Case>();
  c->module = frontend::load_module(kRoot + "/workloads/" + file);
  const ir::Function& f = frontend::select_function(c->module, def);
  CompileOptions o;
  o.target = target;
  o.sizes = parse_shape(shape);
  if (!tile.empty()) o.tile = tile;
  c->compilation = compile(f, o);
  c->kernel = emit_npu::emit_npu(c->compilation->kernel, c->compilation->hierarchy);
  if (evaluate) {
    c->inputs = interp::random_inputs(f, o.sizes, 3);
    c->expected = interp::evaluate(f, o.sizes, c->inputs);
    c->f32_tolerance = emit_c::reassociated_sum_tolerance(f, o.sizes);
  }
  return c;
}

// The first def of a source text (an imported ONNX model's program) compiled for `target` (its
// sizes all fixed) and its NPU program; inputs and expected outputs are the caller's.
inline std::unique_ptr<Case> source_case(const std::string& source, const std::string& target) {
  auto c = std::make_unique<Case>();
  c->module = frontend::parse_module(source, "imported.tsl");
  CompileOptions o;
  o.target = target;
  c->compilation = compile(c->module.functions.at(0), o);
  c->kernel = emit_npu::emit_npu(c->compilation->kernel, c->compilation->hierarchy);
  return c;
}

struct Run {
  npu_sync::SyncResult sync;
  npu_sim::SimResult sim;
  emit_c::Verification verification;
};

// Syncs (OMIT: drop that kept pair, for mutation tests), simulation, comparison.
inline Run run(const Case& c, npu_sync::SyncMode mode, int omit = -1) {
  Run r;
  const auto& hierarchy = c.compilation->hierarchy;
  r.sync = npu_sync::insert_syncs(c.kernel.program, hierarchy, {mode, omit});
  std::map<std::string, NpyArray> bound;
  for (const auto& t : r.sync.program.tensors)
    if (t.role == npu::TensorRole::In) bound[t.name] = c.inputs.at(t.name);
  r.sim = npu_sim::simulate(r.sync.program, hierarchy, bound);
  interp::Tensors outputs;
  for (const auto& t : r.sync.program.tensors)
    if (t.role == npu::TensorRole::Out) outputs[t.name] = r.sim.tensor(r.sync.program, t.name);
  r.verification = emit_c::verify(c.expected, outputs, c.f32_tolerance);
  return r;
}

// run, with a 0-d output (bound in GM as one element) compared in its own shape.
inline Run run_any(const Case& c, npu_sync::SyncMode mode) {
  Run r = run(c, mode);
  interp::Tensors outputs;
  for (const auto& t : r.sync.program.tensors) {
    if (t.role != npu::TensorRole::Out) continue;
    NpyArray a = r.sim.tensor(r.sync.program, t.name);
    if (c.expected.count(t.name) && c.expected.at(t.name).shape.empty()) a.shape.clear();
    outputs[t.name] = std::move(a);
  }
  r.verification = emit_c::verify(c.expected, outputs, c.f32_tolerance);
  return r;
}

// Naive and pruned: exact, race-free, no deadlock; pruning keeps no more syncs and (unless
// `pruned_no_slower` is false: cores sharing GM can meet sooner DMAs) is no slower.
inline void verify(const Case& c, const std::string& def, const std::string& shape, bool pruned_no_slower = true) {
  const Run naive = run(c, npu_sync::SyncMode::Naive);
  const Run pruned = run(c, npu_sync::SyncMode::Pruned);
  MESSAGE(def << " " << shape << " (" << c.compilation->tile_spec.to_string() << ", " << c.kernel.program.cores
              << " cores): syncs " << naive.sync.sync_instructions << " -> " << pruned.sync.sync_instructions << ", cycles "
              << naive.sim.record.total_cycles << " -> " << pruned.sim.record.total_cycles);
  for (const Run* r : {&naive, &pruned}) {
    CHECK(r->verification.verified);
    CHECK(r->verification.max_abs_err == 0);
    CHECK(r->sim.record.races.empty());
    CHECK_FALSE(r->sim.record.deadlock);
  }
  CHECK(pruned.sync.sync_instructions <= naive.sync.sync_instructions);
  if (pruned_no_slower) CHECK(pruned.sim.record.total_cycles <= naive.sim.record.total_cycles);
}

// Naive and pruned (each run by `runner`, `run` by default): verified, exactly when `exact`,
// race-free, no deadlock, and with `pruned_no_slower` the pruned program no slower; returns the
// pruned cycles.
inline uint64_t verified_cycles(const Case& c, bool exact, bool pruned_no_slower = false,
                                const std::function<Run(const Case&, npu_sync::SyncMode)>& runner = {}) {
  auto one = [&](npu_sync::SyncMode m) { return runner ? runner(c, m) : run(c, m); };
  const Run naive = one(npu_sync::SyncMode::Naive);
  const Run pruned = one(npu_sync::SyncMode::Pruned);
  for (const Run* r : {&naive, &pruned}) {
    CHECK(r->verification.verified);
    if (exact) CHECK(r->verification.max_abs_err == 0);
    CHECK(r->sim.record.races.empty());
    CHECK_FALSE(r->sim.record.deadlock);
  }
  if (pruned_no_slower) CHECK(pruned.sim.record.total_cycles <= naive.sim.record.total_cycles);
  return pruned.sim.record.total_cycles;
}

// Whether one of the kernel's notes (the lowering's decisions) contains `text`.
inline bool notes_contain(const emit_npu::NpuKernel& k, const std::string& text) {
  return std::any_of(k.notes.begin(), k.notes.end(), [&](const std::string& n) { return n.find(text) != std::string::npos; });
}

// The kernel's notes (the lowering's decisions), one a line.
inline std::string kernel_notes(const Case& c) {
  std::string s;
  for (const auto& n : c.kernel.notes) s += n + "\n";
  return s;
}

inline void check_verifies(const std::string& file, const std::string& def, const std::string& shape,
                           const std::string& tile = "", const std::string& target = kTarget) {
  CAPTURE(def);
  CAPTURE(shape);
  CAPTURE(tile);
  CAPTURE(target);
  verify(*compile_case(file, def, shape, tile, true, target), def, shape);
}

// Removing any kept pair of the pruned program lets the race detector fire (or deadlocks).
inline void check_mutants_of(const std::string& file, const std::string& def, const std::string& shape,
                             const std::string& tile = "") {
  CAPTURE(def);
  CAPTURE(shape);
  CAPTURE(tile);
  auto c = compile_case(file, def, shape, tile);
  const Run pruned = run(*c, npu_sync::SyncMode::Pruned);
  REQUIRE(pruned.sim.record.races.empty());
  REQUIRE(pruned.sync.pairs > 0);
  for (int k = 0; k < pruned.sync.pairs; ++k) {
    CAPTURE(k);
    const Run mutant = run(*c, npu_sync::SyncMode::Pruned, k);
    CHECK((!mutant.sim.record.races.empty() || mutant.sim.record.deadlock));
  }
}

}  // namespace tessel::npu_test
