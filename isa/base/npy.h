// NumPy .npy files (format 1.0 to 3.0, C order, little endian): the tensor exchange format of
// `tessel sim`, `tessel eval` and `tessel run`.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "isa/base/dtype.h"

namespace tessel {

struct NpyArray {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // element bytes, C order

  int64_t element_count() const;
  std::string shape_string() const;  // "[2, 3]"
};

// Throws UserError naming the path and what is wrong (missing file, bad magic, Fortran order,
// unsupported dtype, truncated data). Sizes are checked before memory is spent: the header's shape
// against the file's size (a 640-byte file claiming 4 GiB fails at once), and, when `check_header` is
// given, by the caller against what it expects (it receives the array with dtype and shape set and no
// data, and throws to refuse) before the data is allocated and read.
NpyArray read_npy(const std::string& path, const std::function<void(const NpyArray&)>& check_header = {});
void write_npy(const std::string& path, const NpyArray& array);

}  // namespace tessel
