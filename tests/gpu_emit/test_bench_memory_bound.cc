// The half of `tessel bench gpu`'s memory-bound table that needs no GPU (compiler/cli/bench_gpu.h):
// the bytes each kernel must move, read from the kernel IR, and the table and JSON over given
// timings. No case here launches anything. Run from the repository root.
#include <doctest/doctest.h>

#include <algorithm>

#include <set>

#include "compiler/cli/bench_gpu.h"
#include "compiler/frontend/frontend.h"
#include "compiler/frontend/suite.h"
#include "compiler/pipeline.h"

using namespace tessel;

namespace {

uint64_t moved(const std::string& file, const std::string& def, const std::map<std::string, int64_t>& sizes) {
  frontend::Module m = frontend::load_module(file);
  CompileOptions o;
  o.target = "isa/targets/sm90.yaml";
  o.sizes = sizes;
  return cli::bytes_moved_once(compile(frontend::select_function(m, def), o)->kernel);
}

kernel::GlobalTensor tensor(const std::string& name, DType t, std::vector<int64_t> shape, ir::TensorKind kind, bool temporary = false) {
  return {.name = name, .dtype = t, .shape = std::move(shape), .kind = kind, .temporary = temporary};
}

// A copy of 1 MB in 1 us (2 TB/s, read + write), an L2 of 4 MiB, and three rows: one at 75 % of the
// copy, one that failed to compile, one whose output differs from the interpreter's.
cli::MemoryBoundTable made_up_table() {
  cli::MemoryBoundTable t;
  t.device = "Made-up GPU (sm_90, 1 SMs)";
  t.l2_cache_bytes = 4 << 20;
  t.copy = {.bytes = 1000000, .graph_us = 1.0};
  cli::MemoryBoundRow ok{.name = "softmax_4x8", .kernel = "softmax", .shape = {{"M", 4}, {"N", 8}}, .bytes_moved = 3000000,
                         .graph_us = 2.0, .verified = true, .launches = 1};
  cli::MemoryBoundRow failed{.name = "layer_norm_4x8", .kernel = "layer_norm", .shape = {{"M", 4}, {"N", 8}},
                             .bytes_moved = 8000000, .error = "refused: no mapping"};
  cli::MemoryBoundRow wrong{.name = "transpose_4x8", .kernel = "transpose2d", .shape = {{"M", 4}, {"N", 8}}, .bytes_moved = 128,
                            .graph_us = 4.0, .verified = false, .max_abs_err = 1.5, .mismatches = 7,
                            .first_mismatch = "Y[0, 1]: expected 1, got 2.5"};
  t.rows = {ok, failed, wrong};
  return t;
}

}  // namespace

TEST_CASE("memory-bound bytes: every input read once and every output written once, at hand-counted sizes") {
  // f16 X[4, 8] = 64 B; f32 vectors [8] = 32 B
  CHECK(moved("workloads/bert.tsl", "softmax", {{"M", 4}, {"N", 8}}) == 64 + 64);                  // X, Y
  CHECK(moved("workloads/bert.tsl", "layer_norm", {{"M", 4}, {"N", 8}}) == 64 + 32 + 32 + 64);     // X, gamma, beta, Y
  CHECK(moved("workloads/vector.tsl", "bias_gelu", {{"M", 4}, {"N", 8}}) == 64 + 32 + 64);         // X, bias, Y
  CHECK(moved("workloads/vector.tsl", "transpose2d", {{"M", 4}, {"N", 8}}) == 64 + 64);            // X, Y[8, 4]
  // BERT-base: softmax over 4096 x 768 f16 reads 6 MiB and writes 6 MiB, whatever the kernel keeps in between
  CHECK(moved("workloads/bert.tsl", "softmax", {{"M", 4096}, {"N", 768}}) == 2ull * 4096 * 768 * 2);
}

TEST_CASE("memory-bound bytes: temporaries and locals between fused groups are not counted") {
  kernel::Kernel k;
  k.tensors = {tensor("X", DType::F16, {4, 8}, ir::TensorKind::Input), tensor("Mx", DType::F32, {4}, ir::TensorKind::Output, true),
               tensor("E", DType::F32, {4, 8}, ir::TensorKind::Local), tensor("Y", DType::F32, {4, 8}, ir::TensorKind::Output)};
  CHECK(cli::bytes_moved_once(k) == 64 + 128);
  k.tensors.clear();
  CHECK(cli::bytes_moved_once(k) == 0);
}

TEST_CASE("memory-bound table: GB/s and the fraction of the copy from the given timings") {
  const cli::MemoryBoundTable t = made_up_table();
  CHECK(t.copy.bytes_per_second() == doctest::Approx(2e12));
  CHECK(t.rows[0].bytes_per_second() == doctest::Approx(1.5e12));
  CHECK(t.rows[0].fraction_of_copy(t.copy) == doctest::Approx(0.75));
  CHECK(t.rows[1].fraction_of_copy(t.copy) == 0);  // not timed

  const std::string text = cli::memory_bound_text(t);
  CHECK(text.find("Made-up GPU") != std::string::npos);
  CHECK(text.find("copy of 0 MiB: 1.00 us, 2000.0 GB/s") != std::string::npos);
  const std::string ok = cli::memory_bound_line(t, t.rows[0]);
  CHECK(ok.find("softmax_4x8") != std::string::npos);
  CHECK(ok.find("M=4,N=8") != std::string::npos);
  CHECK(ok.find("1500.0") != std::string::npos);
  CHECK(ok.find("75.0%") != std::string::npos);
  CHECK(ok.find("warm") != std::string::npos);  // 3 MB fit the 4 MiB L2
  CHECK(ok.find("verified") != std::string::npos);
  const std::string failed = cli::memory_bound_line(t, t.rows[1]);
  CHECK(failed.find("error: refused: no mapping") != std::string::npos);
  CHECK(failed.find("warm") == std::string::npos);  // 8 MB do not
  CHECK(failed.find('%') == std::string::npos);
  CHECK(cli::memory_bound_line(t, t.rows[2]).find("MISMATCH (7 elements)") != std::string::npos);
  CHECK(text == cli::memory_bound_header(t) + ok + failed + cli::memory_bound_line(t, t.rows[2]));
}

TEST_CASE("memory-bound JSON: the copy recorded once, each row with its bytes, time and fraction") {
  const nlohmann::json j = cli::memory_bound_json(made_up_table());
  CHECK(j["copy"]["bytes"] == 1000000);
  CHECK(j["copy"]["bytes_per_s"].get<double>() == doctest::Approx(2e12));
  CHECK(j["l2_cache_bytes"] == 4 << 20);
  REQUIRE(j["rows"].size() == 3);
  const auto& ok = j["rows"][0];
  CHECK(ok["name"] == "softmax_4x8");
  CHECK(ok["shape"]["N"] == 8);
  CHECK(ok["bytes_moved"] == 3000000);
  CHECK(ok["graph_us"].get<double>() == 2.0);
  CHECK(ok["fraction_of_copy"].get<double>() == doctest::Approx(0.75));
  CHECK(ok["verified"] == true);
  CHECK(ok["fits_l2"] == true);
  CHECK(!ok.contains("copy"));
  CHECK(!ok.contains("error"));
  const auto& failed = j["rows"][1];
  CHECK(failed["error"] == "refused: no mapping");
  CHECK(!failed.contains("graph_us"));
  CHECK(!failed.contains("fraction_of_copy"));
  CHECK(j["rows"][2]["first_mismatch"] == "Y[0, 1]: expected 1, got 2.5");
}

TEST_CASE("memory_bound.yaml: softmax, layer norm, bias+GELU and transpose at BERT-base sizes, small softmax and layer norm, long reductions") {
  const frontend::Suite s = frontend::load_suite("workloads/memory_bound.yaml");
  frontend::check_suite(s);
  CHECK(s.name == "memory_bound");
  std::map<std::string, std::set<std::string>> shapes;  // def -> "MxN"
  std::set<std::string> long_reductions;
  for (const auto& e : s.entries) {
    if (std::find(e.tags.begin(), e.tags.end(), "long_reduction") != e.tags.end()) {
      long_reductions.insert(e.def);
      continue;
    }
    shapes[e.def].insert(std::to_string(e.shape.at("M")) + "x" + std::to_string(e.shape.at("N")));
  }
  CHECK(long_reductions == std::set<std::string>{"total", "row_sum", "bn_reduce"});
  const std::set<std::string> bert = {"4096x768", "4096x3072"}, with_small = {"128x768", "4096x768", "4096x3072"};
  CHECK(shapes["softmax"] == with_small);
  CHECK(shapes["layer_norm"] == with_small);
  CHECK(shapes["bias_gelu"] == bert);
  CHECK(shapes["transpose2d"] == bert);
}
