// poly::compute_schedule stays bounded: the operation quota and the wall-clock deadline
// (SchedulerOptions::max_seconds) each end an isl call that would run away, maximal fusion is
// retried with incremental clustering, the last resort is the statement order, and the isl context
// stays usable after an abort. The program that ran away (tests/poly/data/loss_7d_mean_weight.tsl)
// compiles within the deadline and its kernel verifies against the interpreter.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>

#include "compiler/emit_c/run_c.h"
#include "compiler/interp/interpreter.h"
#include "compiler/poly/dependences.h"
#include "compiler/poly/schedule.h"
#include "compiler/poly/scop.h"
#include "tests/poly/poly_test_util.h"

using namespace tessel;

namespace {

const char* kLossPath = "tests/poly/data/loss_7d_mean_weight.tsl";

frontend::Module load_loss() {
  std::ifstream in(kLossPath);
  REQUIRE_MESSAGE(in, kLossPath << " not found (run from the repository root)");
  std::stringstream text;
  text << in.rdbuf();
  return frontend::parse_module(text.str(), kLossPath);
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Labels y(..) = element % classes (every class taken), weights w(c) = 1 + c / 2 (a positive sum).
void set_labels_and_weights(interp::Tensors& in) {
  const int64_t classes = in.at("w").element_count();
  std::vector<float> w(static_cast<size_t>(classes));
  for (int64_t c = 0; c < classes; ++c) w[size_t(c)] = 1.0f + float(c) / 2;
  std::memcpy(in.at("w").data.data(), w.data(), w.size() * sizeof(float));
  auto& y = in.at("y");
  for (int64_t e = 0; e < y.element_count(); ++e) {
    const int32_t label = int32_t(e % classes);
    std::memcpy(y.data.data() + e * sizeof(int32_t), &label, sizeof(int32_t));
  }
}

}  // namespace

TEST_CASE("schedule: a 7-d cross-entropy loss compiles within the scheduler deadline and verifies") {
  frontend::Module m = load_loss();
  const ir::Function& f = m.functions.at(0);
  CompileOptions o;
  const auto start = std::chrono::steady_clock::now();
  auto c = compile(f, o);
  const double compile_s = seconds_since(start);
  INFO("schedule warning: " << c->schedule.warning);
  // the scheduler's deadline (3 s) plus the rest of the pipeline, with slack for a loaded machine;
  // before the deadline this took minutes
  CHECK(compile_s < o.scheduler.max_seconds + 7.0);
  interp::Tensors in = interp::random_inputs(f, {}, 5);
  set_labels_and_weights(in);
  const auto expected = interp::evaluate(f, {}, in);
  const auto runs = emit_c::run_c_batch({&c->kernel}, {in});
  const auto v = emit_c::verify(expected, runs.at(0).outputs, emit_c::reassociated_sum_tolerance(f, {}));
  CHECK_MESSAGE(v.verified, v.first_mismatch);
}

TEST_CASE("schedule: the deadline ends every attempt and falls back to the statement order, the context stays usable") {
  frontend::Module m = load_loss();
  poly::IslContext isl;
  poly::Scop s = poly::build_scop(isl.ctx(), m.functions.at(0));
  poly::Dependences d = poly::compute_dependences(s);
  poly::SchedulerOptions o;
  o.max_operations = 0;   // the deadline alone
  o.max_seconds = 0.05;   // maximal fusion needs minutes here
  const auto start = std::chrono::steady_clock::now();
  poly::ScheduleResult r = poly::compute_schedule(s, d, o);
  CHECK(seconds_since(start) < 5.0);
  CHECK(r.fell_back);
  CHECK_FALSE(r.relaxed);
  CHECK(r.warning.find("time limit") != std::string::npos);
  CHECK(r.warning.find("statement order") != std::string::npos);
  CHECK(poly::respects(r.map, d.all()));
  // the same context schedules another program afterwards (the abort flag was cleared)
  frontend::Module mbr = frontend::parse_module(test::kMatmulBiasRelu, "mbr.tsl");
  poly::Scop s2 = poly::build_scop(isl.ctx(), mbr.functions.at(0));
  poly::Dependences d2 = poly::compute_dependences(s2);
  poly::ScheduleResult r2 = poly::compute_schedule(s2, d2, poly::SchedulerOptions{});
  CHECK_FALSE(r2.fell_back);
  CHECK(r2.warning.empty());
}

TEST_CASE("schedule: without a deadline or a quota nothing is retried on a program isl schedules at once") {
  frontend::Module mbr = frontend::parse_module(test::kMatmulBiasRelu, "mbr.tsl");
  poly::IslContext isl;
  poly::Scop s = poly::build_scop(isl.ctx(), mbr.functions.at(0));
  poly::Dependences d = poly::compute_dependences(s);
  poly::SchedulerOptions o;
  o.max_operations = 0;
  o.max_seconds = 0;
  poly::ScheduleResult r = poly::compute_schedule(s, d, o);
  CHECK_FALSE(r.fell_back);
  CHECK_FALSE(r.relaxed);
  CHECK(poly::respects(r.map, d.all()));
}

TEST_CASE("schedule: a quota maximal fusion exceeds is retried with incremental clustering before the statement order") {
  frontend::Module m = load_loss();
  poly::IslContext isl;
  poly::Scop s = poly::build_scop(isl.ctx(), m.functions.at(0));
  poly::Dependences d = poly::compute_dependences(s);
  poly::SchedulerOptions o;
  o.max_operations = 5000;
  o.max_seconds = 0;
  poly::ScheduleResult r = poly::compute_schedule(s, d, o);
  // both attempts named, in order
  const size_t max_at = r.warning.find("maximal fusion");
  const size_t inc_at = r.warning.find("incremental clustering");
  CHECK(max_at != std::string::npos);
  CHECK(inc_at != std::string::npos);
  CHECK(max_at < inc_at);
  CHECK(r.fell_back != r.relaxed);
  CHECK(poly::respects(r.map, d.all()));
}
