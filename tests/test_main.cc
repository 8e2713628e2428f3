// The doctest main of every test executable. Tests are hermetic: before any case runs, HOME and
// XDG_CACHE_HOME point into the build tree (TESSEL_TEST_HOME) and TESSEL_TUNE_DB is unset, so
// neither the tests nor the tessel processes they start read or write the user's tuning database
// or NVRTC cache. A case that needs its own database sets TESSEL_TUNE_DB or passes --db.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

int main(int argc, char** argv) {
  const std::string home = TESSEL_TEST_HOME;
  std::error_code ec;
  std::filesystem::create_directories(home + "/.cache", ec);
  ::setenv("HOME", home.c_str(), 1);
  ::setenv("XDG_CACHE_HOME", (home + "/.cache").c_str(), 1);
  ::unsetenv("TESSEL_TUNE_DB");
  doctest::Context context(argc, argv);
  return context.run();
}
