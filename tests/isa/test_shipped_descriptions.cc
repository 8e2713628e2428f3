// Target names (isa/shipped_descriptions.h): `--target sm90` is the shipped isa/targets/sm90.yaml,
// "c" and paths pass unchanged, an unknown name is refused with the shipped names. Runs from the
// repository root (ctest's working directory).
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "isa/base/error.h"
#include "isa/hierarchy.h"
#include "isa/shipped_descriptions.h"

using namespace tessel;

TEST_CASE("a shipped description's name is its file, and the loader takes what it resolves to") {
  const std::string sm90 = isa::resolve_target("sm90");
  CHECK(sm90.ends_with("isa/targets/sm90.yaml"));
  CHECK(std::filesystem::equivalent(sm90, "isa/targets/sm90.yaml"));
  CHECK(isa::load_hierarchy(isa::resolve_target("davinci-910")).name == isa::load_hierarchy("isa/targets/davinci-910.yaml").name);
  const auto names = isa::shipped_description_names();
  for (const char* n : {"davinci-310", "davinci-910", "sm75", "sm90"})
    CHECK_MESSAGE(std::find(names.begin(), names.end(), n) != names.end(), n);
  CHECK(std::is_sorted(names.begin(), names.end()));
}

TEST_CASE("c, paths and file names pass unchanged, an unknown name is refused with the shipped ones") {
  CHECK(isa::resolve_target("c") == "c");
  CHECK(isa::resolve_target("isa/targets/davinci-310.yaml") == "isa/targets/davinci-310.yaml");
  CHECK(isa::resolve_target("/no/such/file.yaml") == "/no/such/file.yaml");  // the loader says it cannot open it
  CHECK(isa::resolve_target("mine.yaml") == "mine.yaml");
  CHECK_THROWS_WITH_AS(isa::resolve_target("davinci-911"),
                       doctest::Contains("--target davinci-911: no such file and no shipped description of that name (shipped: c, "),
                       UserError);
  CHECK_THROWS_WITH_AS(isa::resolve_target("davinci-911"), doctest::Contains("davinci-910"), UserError);
}
