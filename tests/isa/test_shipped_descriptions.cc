// Target names (isa/shipped_descriptions.h): `--target sm90` is the shipped isa/targets/sm90.yaml,
// "c" and paths pass unchanged, an unknown name is refused with the shipped names. Runs from the
// repository root (ctest's working directory).
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include <unistd.h>

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

TEST_CASE("the refusal names the flag given, and c only where c is a target") {
  CHECK_THROWS_WITH_AS(isa::resolve_target("sm91", "--run-on", false),
                       doctest::Contains("--run-on sm91: no such file and no shipped description of that name (shipped: davinci-310, "),
                       UserError);
  // "c" is no description to measure on: a name like any other
  CHECK_THROWS_WITH_AS(isa::resolve_target("c", "--run-on", false), doctest::Contains("--run-on c: no such file"), UserError);
}

TEST_CASE("a directory named like a shipped description does not hide it") {
  namespace fs = std::filesystem;
  const fs::path here = fs::current_path();
  const fs::path scratch = fs::temp_directory_path() / ("tessel_shipped_" + std::to_string(::getpid()));
  fs::create_directories(scratch / "davinci-910");
  fs::current_path(scratch);
  std::string got;
  CHECK_NOTHROW(got = isa::resolve_target("davinci-910"));
  fs::current_path(here);
  fs::remove_all(scratch);
  CHECK(got.ends_with("isa/targets/davinci-910.yaml"));
}
