// The tile policy's shortlist (emit_cuda::tc_shortlist): what `tessel bench gpu` times without
// --exhaustive. Rule: the ranked head, then each other plan family's best-ranked variant, at most n,
// never two plans of one family after the head, always a sublist of the ranking in its order.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <tuple>

#include "compiler/emit_cuda/tile_policy.h"
#include "compiler/frontend/frontend.h"
#include "compiler/pipeline.h"

using namespace tessel;

namespace {

std::vector<emit_cuda::TcConfig> ranked(int64_t m, int64_t n, int64_t k) {
  frontend::Module module = frontend::load_module("workloads/matmul.tsl");
  CompileOptions o;
  o.target = "isa/targets/sm90-h200.yaml";
  o.sizes = {{"M", m}, {"N", n}, {"K", k}};
  auto c = compile(frontend::select_function(module, "matmul"), o);
  REQUIRE(c->kernel.contraction);
  return emit_cuda::tc_candidates(*c->kernel.contraction, isa::GpuMachine::from(c->hierarchy));
}

std::vector<std::string> texts(const std::vector<emit_cuda::TcConfig>& v) {
  std::vector<std::string> out;
  for (const auto& g : v) out.push_back(g.to_string());
  return out;
}

}  // namespace

TEST_CASE("tile shortlist: every plan family's best variant, in rank order, the head kept") {
  const auto all = ranked(4096, 768, 768);  // BERT QKV: 128x192 and ping-pong 128x128 measured fastest
  REQUIRE(all.size() > 20);
  const auto short_list = emit_cuda::tc_shortlist(all, 10, 2);
  const auto s = texts(short_list), a = texts(all);
  CHECK(s.size() == 10);
  CHECK(s[0] == a[0]);
  CHECK(s[1] == a[1]);
  // a sublist of the ranking, in its order
  size_t at = 0;
  for (const auto& t : s) {
    auto it = std::find(a.begin() + long(at), a.end(), t);
    REQUIRE(it != a.end());
    at = size_t(it - a.begin()) + 1;
  }
  // the families the H100 / H200 measurements crown on the BERT and 1024^3 rows are all there
  CHECK(std::find(s.begin(), s.end(), "128x192x64/64x192/ks1/st4/ws/ts") != s.end());
  CHECK(std::find(s.begin(), s.end(), "128x128x64/128x128/ks1/st5/ws/pp/ts") != s.end());
  CHECK(std::find(s.begin(), s.end(), "128x64x64/64x64/ks1/st8/ws/ts") != s.end());
  // after the head, one plan per family
  std::set<std::tuple<int, int, int, int, bool, bool>> families;
  for (size_t i = 2; i < short_list.size(); ++i) {
    const auto& g = short_list[i];
    CHECK(families.insert({g.bm, g.bn, g.wm, g.tma_ws() ? 3 : int(g.mma), g.schedule == emit_cuda::WsSchedule::pingpong, g.k_blocks > 1}).second);
  }
}

TEST_CASE("tile shortlist: a list shorter than n is kept whole, n bounds it") {
  const auto all = ranked(4096, 768, 768);
  CHECK(emit_cuda::tc_shortlist(all, 1, 2).size() == 1);
  const std::vector<emit_cuda::TcConfig> two(all.begin(), all.begin() + 2);
  CHECK(texts(emit_cuda::tc_shortlist(two, 10, 2)) == texts(two));
  CHECK(emit_cuda::tc_shortlist({}, 10, 2).empty());
}
