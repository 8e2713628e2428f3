// Product reductions (`*=!`, `*=`) through the C emitter: rows, columns, every element to a 0-d
// output, i32 and i8 (wrapping), f16 (rounded after every step) and `*=` onto an earlier value, each
// with the default plan and a tile that does not divide the sizes, run on the CPU and compared with
// the reference interpreter element by element (workloads/reduction_product.tsl).
#include <doctest/doctest.h>

#include "compiler/emit_c/run_c.h"
#include "compiler/frontend/frontend.h"
#include "compiler/interp/interpreter.h"
#include "compiler/pipeline.h"

using namespace tessel;

namespace {

const std::string kFile = std::string(TESSEL_SOURCE_DIR) + "/workloads/reduction_product.tsl";

// The def at M x N, default plan and `tile`: verified, and equal to the interpreter exactly (the C
// loop nest multiplies in the interpreter's order: ascending reduced indices, tile by tile) unless
// the tile cuts two reduced indices (`tile_reorders`: m tiles around n tiles around m, n).
void check_def(const std::string& def, const std::map<std::string, int64_t>& sizes, const std::string& tile,
               bool tile_reorders = false) {
  frontend::Module m = frontend::load_module(kFile);
  const ir::Function& f = frontend::select_function(m, def);
  std::vector<std::unique_ptr<Compilation>> compiled;
  std::vector<const kernel::Kernel*> kernels;
  std::vector<emit_c::Tensors> inputs;
  for (const std::optional<std::string>& t : {std::optional<std::string>{}, std::optional<std::string>{tile}}) {
    CompileOptions o;
    o.sizes = sizes;
    o.tile = t;
    compiled.push_back(compile(f, o));
    kernels.push_back(&compiled.back()->kernel);
    inputs.push_back(interp::random_inputs(f, sizes, 5));
  }
  const auto runs = emit_c::run_c_batch(kernels, inputs);
  for (size_t i = 0; i < runs.size(); ++i) {
    const emit_c::Tensors expected = interp::evaluate(f, sizes, inputs[i]);
    const emit_c::Verification v = emit_c::verify(expected, runs[i].outputs);
    INFO(def << " tile " << compiled[i]->tile_spec.to_string() << ": " << v.first_mismatch);
    CHECK(v.verified);
    if (i == 0 || !tile_reorders) CHECK(v.max_abs_err == 0);
  }
}

}  // namespace

TEST_CASE("a row product and a column product equal the interpreter through the C emitter") {
  check_def("prod_rows", {{"M", 37}, {"N", 300}}, "m=10/5,n=64/16");
  check_def("prod_cols", {{"M", 300}, {"N", 37}}, "m=64/16,n=10/5");
}

TEST_CASE("a product of every element to a 0-d output equals the interpreter through the C emitter") {
  check_def("prod_all", {{"M", 9}, {"N", 70}}, "m=4/2,n=32/8", true);
}

TEST_CASE("i32 and i8 products wrap as the interpreter's through the C emitter") {
  check_def("prod_rows_i32", {{"M", 37}, {"N", 100}}, "m=10/5,n=33/11");
  check_def("prod_rows_i8", {{"M", 37}, {"N", 100}}, "m=10/5,n=33/11");
}

TEST_CASE("f16 products round after every step as the interpreter's through the C emitter") {
  check_def("prod_rows_f16", {{"M", 37}, {"N", 200}}, "m=10/5,n=64/16");
  check_def("prod_all_f16", {{"M", 5}, {"N", 60}}, "m=4/2,n=32/8", true);
}

TEST_CASE("*= multiplies into the value an earlier statement wrote, through the C emitter") {
  check_def("prod_accumulate", {{"M", 37}, {"N", 100}}, "m=10/5,n=33/11");
  check_def("prod_then_scale", {{"M", 37}, {"N", 100}}, "m=10/5,n=33/11");
}
