// Output files: a failed write is an error naming the path and the reason, never a success.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "isa/base/error.h"
#include "isa/base/file_io.h"
#include "isa/base/npy.h"

using namespace tessel;

namespace {

std::string scratch_dir() {
  const std::string d = std::filesystem::temp_directory_path() / ("tessel_file_io_" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d;
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("write_file: a full device fails with the path, the flag and the reason") {
  CHECK_THROWS_WITH_AS(write_file("/dev/full", "data", "-o"), "-o /dev/full: cannot write: No space left on device", UserError);
  NpyArray a;
  a.dtype = DType::F32;
  a.shape = {2};
  a.data.resize(8);
  CHECK_THROWS_AS(write_npy("/dev/full", a), UserError);  // .npy files go through the same helper
}

TEST_CASE("write_file: a folder that cannot exist (a file in its place) is a user error, not a crash") {
  const std::string d = scratch_dir();
  write_file(d + "/plain", "x");
  CHECK_THROWS_WITH_AS(make_parent_dirs(d + "/plain/log.jsonl", "--log"),
                       doctest::Contains(("--log " + d + "/plain/log.jsonl: cannot write: its folder").c_str()), UserError);
  CHECK_THROWS_AS(write_file(d + "/plain/x", "y"), UserError);
  std::filesystem::remove_all(d);
}

TEST_CASE("write_file replaces, append_record appends whole records, replace_file swaps the file") {
  const std::string d = scratch_dir(), f = d + "/f";
  write_file(f, "old");
  write_file(f, "new");
  CHECK(read(f) == "new");
  append_record(f, "+1\n");
  append_record(f, "+2\n");
  CHECK(read(f) == "new+1\n+2\n");
  replace_file(f, "whole");
  CHECK(read(f) == "whole");
  CHECK(!std::filesystem::exists(f + ".tmp"));
  std::filesystem::remove_all(d);
}
