// Lane vectors of the SIMT walk (compiler/emit_cuda/simt_lane_vector.cc) on the GPU: the programs
// of tests/emit_cuda/test_simt_lane_vector.cc at sizes that take a lane vector (aligned rows) and
// at sizes that keep the scalar split (odd rows, a transpose, a short column reduction), each
// output compared element by element with the reference interpreter. Skips with a message where no GPU is present (CI).
// Run from the repository root.
#include <doctest/doctest.h>

#include "compiler/cli/run_gpu.h"
#include "compiler/cli/run_gpu_internal.h"
#include "compiler/emit_c/run_c.h"
#include "compiler/emit_cuda/emit_cuda.h"
#include "compiler/frontend/frontend.h"
#include "compiler/interp/interpreter.h"
#include "compiler/pipeline.h"
#include "gpu_backend/device_query.h"

using namespace tessel;

namespace {

constexpr const char* kPrograms = "tests/emit_cuda/data/lane_vector.tsl";  // run from the repository root

void check_on_gpu(const std::string& def, const std::map<std::string, int64_t>& sizes, bool expect_vector) {
  CAPTURE(def);
  frontend::Module module = frontend::load_module(kPrograms);
  const ir::Function& f = frontend::select_function(module, def);
  CompileOptions o;
  o.target = "isa/targets/sm90.yaml";
  o.sizes = sizes;
  auto c = compile(f, o);
  emit_cuda::CudaOptions co;
  co.arch = cli::gpurun::device_arch();
  auto lp = cli::gpurun::load_program(c->kernel, co);
  const bool vector = lp.program.source.find("a lane vector") != std::string::npos;
  CHECK(vector == expect_vector);
  auto inputs = interp::random_inputs(f, sizes, 11);
  auto d = cli::gpurun::allocate(c->kernel, inputs, lp.program.scratch_bytes);
  gpu::Stream s;
  cli::gpurun::launch_all(lp, d, s);
  s.synchronize();
  auto v = emit_c::verify(interp::evaluate(f, sizes, inputs), cli::gpurun::download_outputs(c->kernel, d));
  CHECK_MESSAGE(v.verified, def << ": " << v.first_mismatch << " (" << v.mismatches << " mismatches)");
}

bool have_gpu() {
  std::string why;
  if (gpu::device_count(&why) > 0) return true;
  MESSAGE("skipped: no GPU (" << why << ")");
  return false;
}

}  // namespace

TEST_CASE("lane vectors verify on the GPU: depthwise NHWC, 3x3 average pool, element-wise") {
  if (!have_gpu()) return;
  check_on_gpu("depthwise_nhwc", {{"N", 4}, {"H", 56}, {"W", 56}, {"C", 128}, {"R", 3}, {"S", 3}}, true);
  check_on_gpu("avgpool_nhwc", {{"N", 4}, {"P", 56}, {"Q", 56}, {"C", 128}}, true);
  check_on_gpu("add_mul", {{"M", 1024}, {"N", 2048}}, true);
}

TEST_CASE("the scalar split still verifies where no width divides the rows, in a transpose and a short column reduction") {
  if (!have_gpu()) return;
  check_on_gpu("depthwise_nhwc", {{"N", 4}, {"H", 56}, {"W", 56}, {"C", 129}, {"R", 3}, {"S", 3}}, false);
  check_on_gpu("permute_021", {{"B", 32}, {"M", 256}, {"N", 192}}, false);
  check_on_gpu("max_middle", {{"A", 16}, {"B", 512}, {"C", 256}}, false);
  check_on_gpu("add_mul", {{"M", 33}, {"N", 45}}, false);
}
