// Search spaces: the spec syntax, domination removal, and that the space holds exactly the
// configurations promotion accepts (compiler/tune/space.h).
#include <doctest/doctest.h>

#include "compiler/tune/fit_check.h"
#include "compiler/tune/space.h"
#include "isa/base/error.h"
#include "tune_test_util.h"

using namespace tessel;
using namespace tessel::tune;
using testing::SmallGemm;

TEST_CASE("space spec: lists, ranges, pow2 and multiple-of modifiers, tied inner sizes") {
  const SpaceSpec s = parse_space_spec("m=16-128:pow2/16|32,n=48-96:x16,k=64");
  REQUIRE(s.axes.size() == 3);
  CHECK(s.axes[0].outer.values(1000) == std::vector<int64_t>{16, 32, 64, 128});
  CHECK(s.axes[0].inner.values(1000) == std::vector<int64_t>{16, 32});
  CHECK(s.axes[1].outer.values(1000) == std::vector<int64_t>{48, 64, 80, 96});
  CHECK(s.axes[1].inner_tied);
  CHECK(s.axes[2].outer.values(1000) == std::vector<int64_t>{64});
  CHECK(s.axes[0].outer.values(40) == std::vector<int64_t>{16, 32, 40});  // clamped to the extent
  CHECK(parse_space_spec(s.to_string()).to_string() == s.to_string());
}

TEST_CASE("space spec: user errors name the entry and the fix") {
  CHECK_THROWS_WITH_AS(parse_space_spec("m=128-64"), doctest::Contains("'m=128-64': the range 128-64 is empty"), UserError);
  CHECK_THROWS_WITH_AS(parse_space_spec("m=16-64:odd"), doctest::Contains("unknown modifier ':odd'"), UserError);
  CHECK_THROWS_WITH_AS(parse_space_spec("m=16,m=32"), doctest::Contains("axis 'm' is given twice"), UserError);
  CHECK_THROWS_WITH_AS(parse_space_spec("m"), doctest::Contains("expected axis=OUTER[/INNER]"), UserError);
  CHECK_THROWS_WITH_AS(parse_space_spec("m=a|b"), doctest::Contains("expected a positive integer"), UserError);
  CHECK_THROWS_WITH_AS(axis_candidates(parse_space_spec("z=16"), {{"m", 64}}), doctest::Contains("unknown axis 'z'"),
                       UserError);
}

TEST_CASE("space: a size with the same tile count as a smaller one is dominated and removed") {
  SpaceStats st;
  // extent 100: 50 and 64 both give two tiles (64 only pads more); 100 and 128 both give one
  const auto c = axis_candidates(parse_space_spec("m=50|64|100|128"), {{"m", 100}}, &st);
  REQUIRE(c.size() == 1);
  CHECK(c[0] == std::vector<std::pair<int64_t, int64_t>>{{50, 50}, {100, 100}});
  CHECK(st.dominated == 1);  // 64 (128 clamps to 100 and merges with it)
  // must not fire: distinct tile counts are all kept, inner sizes must divide outer ones
  const auto d = axis_candidates(parse_space_spec("m=32|64|128/16|32|48"), {{"m", 128}});
  CHECK(d[0] == std::vector<std::pair<int64_t, int64_t>>{{32, 16}, {32, 32}, {64, 16}, {64, 32}, {128, 16}, {128, 32}});
}

TEST_CASE("space: holds exactly the configurations promotion accepts (every enumerated one checked)") {
  SmallGemm g(128);
  FitChecker fit(g.f, g.options);
  const SpaceSpec spec = parse_space_spec("m=16-128:pow2/16|32,n=16-128:pow2/16|32,k=16-128:pow2/16|32");
  const Space space = build_space(spec, fit);
  CHECK(space.stats.not_fitting > 0);
  CHECK(space.configs.size() > 10);
  // an independent checker (no inference from smaller tiles) over the whole product
  FitChecker direct(g.f, g.options);
  const auto per_axis = axis_candidates(spec, direct.problem().extents);
  size_t fitting = 0, enumerated = 0;
  for (const auto& m : per_axis[0])
    for (const auto& n : per_axis[1])
      for (const auto& k : per_axis[2]) {
        tile::TileSpec t;
        t.axes = {{"m", m.first, m.second}, {"n", n.first, n.second}, {"k", k.first, k.second}};
        const bool fits = direct.check(t).has_value();
        CHECK_MESSAGE((space.index_of(config_key(t)) >= 0) == fits, config_key(t));
        fitting += fits;
        ++enumerated;
      }
  CHECK(fitting == space.configs.size());
  CHECK(enumerated == space.stats.enumerated);
}

TEST_CASE("space: a sample of included and excluded configurations agrees with the full pipeline") {
  SmallGemm g(128);
  FitChecker fit(g.f, g.options);
  const Space space = build_space(parse_space_spec("m=32-128:pow2/32,n=32-128:pow2/32,k=32-128:pow2/16|32"), fit);
  REQUIRE(!space.stats.examples_not_fitting.empty());
  auto compiles = [&](const std::string& tile) {
    CompileOptions o = g.options;
    o.tile = tile;
    try {
      compile(g.f, o);
      return true;
    } catch (const UserError& e) {
      CHECK_MESSAGE(std::string(e.what()).find("tile does not fit") != std::string::npos, e.what());
      return false;
    }
  };
  for (size_t i = 0; i < space.configs.size(); i += std::max<size_t>(1, space.configs.size() / 4))
    CHECK_MESSAGE(compiles(config_key(space.configs[i])), config_key(space.configs[i]));
  for (size_t i = 0; i < space.stats.examples_not_fitting.size(); i += 2)
    CHECK_MESSAGE(!compiles(space.stats.examples_not_fitting[i]), space.stats.examples_not_fitting[i]);
}

TEST_CASE("space: footprints count double-buffered buffers twice against their level") {
  SmallGemm g(128);
  FitChecker fit(g.f, g.options);
  const auto info = fit.check(tile::parse_tile_spec("m=32/32,n=32/32,k=32/16"));
  REQUIRE(info.has_value());
  uint64_t l0a = 0;
  for (const auto& b : info->buffers)
    if (b.role == isa::Role::OperandA) l0a += uint64_t(b.bytes) * (b.double_buffered ? 2 : 1);
  CHECK(l0a == 32 * 16 * 2 * 2);  // f16 32x16 operand tile, double-buffered
  CHECK(info->level_bytes.at("L0A") == l0a);
  std::string why;
  CHECK(!fit.check(tile::parse_tile_spec("m=128/128,n=128/128,k=128/128"), &why));
  CHECK(why.find("tile does not fit") != std::string::npos);
}
