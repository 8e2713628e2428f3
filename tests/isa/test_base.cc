// Shared base: exact f16 rounding, dtype table, .npy round trips and malformed .npy files.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "isa/base/dtype.h"
#include "isa/base/error.h"
#include "isa/base/f16.h"
#include "isa/base/npy.h"

using namespace tessel;

TEST_CASE("every finite f16 survives f16 -> f32 -> f16") {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const uint16_t h = static_cast<uint16_t>(bits);
    const float f = f16_bits_to_f32(h);
    if (std::isnan(f)) continue;
    REQUIRE(f32_to_f16_bits(f) == h);
  }
}

TEST_CASE("f32 -> f16 rounds to nearest, ties to even") {
  CHECK(round_to_f16(1.0f + 1.0f / 2048) == 1.0f);                 // tie between 1 and 1+2^-10: even is 1
  CHECK(round_to_f16(1.0f + 3.0f / 2048) == 1.0f + 2.0f / 1024);   // tie: even mantissa is 2
  CHECK(round_to_f16(1.0f + 1.0f / 2048 + 1e-6f) == 1.0f + 1.0f / 1024);  // just above the tie
  CHECK(f32_to_f16_bits(65504.0f) == 0x7bff);                      // largest finite half
  CHECK(f32_to_f16_bits(65519.0f) == 0x7bff);                      // below the overflow tie
  CHECK(f32_to_f16_bits(65520.0f) == 0x7c00);                      // the tie rounds to even = inf
  CHECK(f32_to_f16_bits(std::ldexp(1.0f, -24)) == 0x0001);         // smallest subnormal
  CHECK(f32_to_f16_bits(std::ldexp(1.0f, -25)) == 0x0000);         // tie to even: 0
  CHECK(f32_to_f16_bits(std::ldexp(3.0f, -25)) == 0x0002);         // tie to even: 2
  CHECK(f32_to_f16_bits(-0.0f) == 0x8000);
  CHECK(std::isnan(f16_bits_to_f32(f32_to_f16_bits(NAN))));
}

TEST_CASE("dtype table") {
  CHECK(dtype_bytes(DType::F16) == 2);
  CHECK(dtype_bytes(DType::I32) == 4);
  CHECK(parse_dtype("bf16") == DType::BF16);
  CHECK(parse_dtype("s8") == DType::I8);
  CHECK(parse_dtype("f64") == DType::F64);
  CHECK(dtype_bytes(DType::F64) == 8);
  CHECK_FALSE(parse_dtype("f128").has_value());
  CHECK(dtype_from_npy_descr("<f2") == DType::F16);
  CHECK(dtype_from_npy_descr("<f8") == DType::F64);
}

TEST_CASE(".npy round trip keeps dtype, shape and bytes") {
  const std::string path = (std::filesystem::temp_directory_path() / ("tessel_test_roundtrip_" + std::to_string(::getpid()) + ".npy")).string();
  NpyArray a;
  a.dtype = DType::F16;
  a.shape = {3, 5};
  a.data.resize(30);
  for (size_t i = 0; i < a.data.size(); ++i) a.data[i] = static_cast<uint8_t>(i * 7);
  write_npy(path, a);
  const NpyArray b = read_npy(path);
  CHECK(b.dtype == DType::F16);
  CHECK(b.shape == a.shape);
  CHECK(b.data == a.data);
  std::ifstream in(path, std::ios::binary);
  char header[10];
  in.read(header, 10);
  CHECK(std::memcmp(header, "\x93NUMPY\x01\x00", 8) == 0);
  const int header_len = static_cast<unsigned char>(header[8]) | (static_cast<unsigned char>(header[9]) << 8);
  CHECK((10 + header_len) % 64 == 0);  // NumPy aligns the data to 64 bytes
}

TEST_CASE(".npy: writing bf16 (no NumPy type) is a user error naming the file, not an internal error") {
  NpyArray a;
  a.dtype = DType::BF16;
  a.shape = {2};
  a.data.resize(4);
  CHECK_THROWS_WITH_AS(write_npy("/tmp/tessel_bf16_out.npy", a), "/tmp/tessel_bf16_out.npy: bf16 data has no NumPy type to write as .npy",
                       UserError);
}

TEST_CASE("malformed .npy files are user errors naming the file") {
  const std::string path = (std::filesystem::temp_directory_path() / ("tessel_test_bad_" + std::to_string(::getpid()) + ".npy")).string();
  {
    std::ofstream out(path, std::ios::binary);
    out << "not numpy at all";
  }
  CHECK_THROWS_WITH_AS(read_npy(path), doctest::Contains("not a .npy file (bad magic string)"), UserError);
  NpyArray a;
  a.dtype = DType::F32;
  a.shape = {4};
  a.data.resize(16);
  write_npy(path, a);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 4);
  CHECK_THROWS_WITH_AS(read_npy(path), doctest::Contains("truncated .npy data: expected 16 bytes for shape [4]"), UserError);
}

TEST_CASE(".npy: bytes after the data and characters after the header's dictionary are errors (issue 17 item 13)") {
  const std::string path = (std::filesystem::temp_directory_path() / ("tessel_test_npy_" + std::to_string(::getpid()) + ".npy")).string();
  NpyArray a;
  a.dtype = DType::F32;
  a.shape = {2, 3};
  a.data.resize(24);
  write_npy(path, a);
  CHECK(read_npy(path).shape == std::vector<int64_t>{2, 3});  // the clean file reads
  {
    std::ofstream out(path, std::ios::binary | std::ios::app);
    out << "xtra";
  }
  CHECK_THROWS_WITH_AS(read_npy(path), doctest::Contains("4 bytes after the data of shape [2, 3] (24 bytes)"), UserError);
  write_npy(path, a);
  {
    std::fstream io(path, std::ios::binary | std::ios::in | std::ios::out);
    std::string bytes((std::istreambuf_iterator<char>(io)), {});
    const size_t brace = bytes.find('}');
    io.seekp(static_cast<std::streamoff>(brace + 1));
    io << "zz";  // over the padding: the header length stays right
  }
  CHECK_THROWS_WITH_AS(read_npy(path), doctest::Contains(".npy header is not a dictionary ({...}) padded with spaces: 'zz' follows the closing brace"),
                       UserError);
  std::filesystem::remove(path);
}
