// End to end through the C emitter: every workload of workloads/small.yaml, compiled with at
// least three tile specs (one not dividing the sizes, one equal to the whole problem, the default
// from the hierarchy), run on the CPU and compared with the reference interpreter. Each workload's
// kernels share one host-compiler run.
#include <doctest/doctest.h>

#include <algorithm>

#include "compiler/emit_c/run_c.h"
#include "compiler/frontend/frontend.h"
#include "compiler/frontend/suite.h"
#include "compiler/interp/interpreter.h"
#include "compiler/pipeline.h"

using namespace tessel;

namespace {

struct Case {
  std::string label;
  std::optional<std::string> tile;
  std::map<std::string, int64_t> sizes;
};

std::map<std::string, int64_t> axis_extents(const ir::Function& f, const std::map<std::string, int64_t>& sizes) {
  std::map<std::string, int64_t> e;
  for (const auto& s : f.statements)
    for (const auto& v : s.domain) e[v.name] = std::max<int64_t>(1, (v.hi - v.lo).evaluate({}, sizes));
  return e;
}

std::string spec_for(const std::map<std::string, int64_t>& extents, bool whole) {
  std::string s;
  for (const auto& [axis, e] : extents) {
    int64_t outer = whole ? e : (e > 2 ? e / 2 + 1 : e);  // e/2+1 does not divide e for e > 2
    int64_t inner = whole ? e : std::max<int64_t>(1, outer / 2);
    s += (s.empty() ? "" : ",") + axis + "=" + std::to_string(outer) + "/" + std::to_string(inner);
  }
  return s;
}

void check_cases(const ir::Function& f, const std::vector<Case>& cases) {
  std::vector<std::unique_ptr<Compilation>> compiled;
  std::vector<const kernel::Kernel*> kernels;
  std::vector<emit_c::Tensors> inputs;
  for (const auto& c : cases) {
    CompileOptions o;
    o.sizes = c.sizes;
    o.tile = c.tile;
    INFO(f.name << " " << c.label << " tile " << c.tile.value_or("default"));
    REQUIRE_NOTHROW(compiled.push_back(compile(f, o)));
    kernels.push_back(&compiled.back()->kernel);
    inputs.push_back(interp::random_inputs(f, c.sizes, 7));
  }
  auto runs = emit_c::run_c_batch(kernels, inputs);
  for (size_t i = 0; i < cases.size(); ++i) {
    auto expected = interp::evaluate(f, cases[i].sizes, inputs[i]);
    auto v = emit_c::verify(expected, runs[i].outputs);
    INFO(f.name << " " << cases[i].label << " tile " << compiled[i]->tile_spec.to_string() << ": "
                << v.first_mismatch);
    CHECK(v.verified);
  }
}

}  // namespace

TEST_CASE("every workload of the small suite equals the reference through the C emitter (3 tile specs each)") {
  frontend::Suite suite = frontend::load_suite("workloads/small.yaml");
  REQUIRE(suite.entries.size() >= 10);
  for (const auto& e : suite.entries) {
    frontend::Module m = frontend::load_module(e.file);
    const ir::Function& f = frontend::select_function(m, e.def);
    auto ext = axis_extents(f, e.shape);
    check_cases(f, {{"non-dividing", spec_for(ext, false), e.shape},
                    {"whole problem", spec_for(ext, true), e.shape},
                    {"default", std::nullopt, e.shape}});
  }
}

TEST_CASE("the quasi-affine workloads (workloads/quasi.yaml, sizes inferred) equal the reference through the C emitter") {
  frontend::Suite suite = frontend::load_suite("workloads/quasi.yaml");
  REQUIRE(suite.entries.size() >= 3);
  for (const auto& e : suite.entries) {
    frontend::Module m = frontend::load_module(e.file);
    const ir::Function& f = frontend::select_function(m, e.def);
    auto ext = axis_extents(f, ir::bind_sizes(f, e.shape));
    check_cases(f, {{"non-dividing", spec_for(ext, false), e.shape},
                    {"whole problem", spec_for(ext, true), e.shape},
                    {"default", std::nullopt, e.shape}});
  }
}

TEST_CASE("GEMMs with sizes that do not divide the tiles (M=67, N=45, K=33)") {
  frontend::Module m = frontend::load_module("workloads/gemm_fused.tsl");
  frontend::Module mm = frontend::load_module("workloads/matmul.tsl");
  const std::map<std::string, int64_t> sizes = {{"M", 67}, {"N", 45}, {"K", 33}};
  const std::vector<Case> cases = {{"stage 32/16", "m=32/16,n=32/16,k=16/16", sizes},
                                   {"128/64 tile", "m=128/64,n=128/64,k=64/16", sizes},
                                   {"inner not dividing outer", "m=48/32,n=40/16,k=20/16", sizes},
                                   {"whole problem", "m=67/67,n=45/45,k=33/33", sizes},
                                   {"default", std::nullopt, sizes}};
  check_cases(frontend::select_function(mm, "matmul"), cases);
  check_cases(frontend::select_function(m, "matmul_bias_relu"), cases);
  check_cases(frontend::select_function(m, "matmul_i8"), cases);
}
