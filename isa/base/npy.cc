#include "isa/base/npy.h"
#include "isa/base/file_io.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "isa/base/error.h"

namespace tessel {

int64_t NpyArray::element_count() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string NpyArray::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {

std::string dict_value(const std::string& header, const std::string& key, const std::string& path) {
  const std::string quoted = "'" + key + "'";
  size_t at = header.find(quoted);
  if (at == std::string::npos) throw UserError(path + ": .npy header has no '" + key + "' entry");
  at = header.find(':', at + quoted.size());
  if (at == std::string::npos) throw UserError(path + ": .npy header entry '" + key + "' has no value");
  return header.substr(at + 1);
}

}  // namespace

NpyArray read_npy(const std::string& path, const std::function<void(const NpyArray&)>& check_header) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(path + ": cannot open .npy file");
  char magic[8] = {};
  in.read(magic, 8);
  if (in.gcount() != 8 || std::memcmp(magic, "\x93NUMPY", 6) != 0)
    throw UserError(path + ": not a .npy file (bad magic string)");
  const int major = static_cast<unsigned char>(magic[6]);
  uint32_t header_len = 0;
  if (major == 1) {
    unsigned char b[2] = {};
    in.read(reinterpret_cast<char*>(b), 2);
    header_len = b[0] | (b[1] << 8);
  } else if (major == 2 || major == 3) {
    unsigned char b[4] = {};
    in.read(reinterpret_cast<char*>(b), 4);
    header_len = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
  } else {
    throw UserError(path + ": unsupported .npy format version " + std::to_string(major));
  }
  if (!in || header_len > (1u << 20)) throw UserError(path + ": truncated or oversized .npy header");
  std::string header(header_len, '\0');
  in.read(header.data(), header_len);
  if (static_cast<uint32_t>(in.gcount()) != header_len) throw UserError(path + ": truncated .npy header");

  // The header is one Python dict literal padded with spaces and a newline: nothing else around it.
  const size_t first = header.find_first_not_of(' '), last = header.find_last_not_of(" \n");
  if (first == std::string::npos || header[first] != '{' || header[last] != '}')
    throw UserError(path + ": .npy header is not a dictionary ({...}) padded with spaces" +
                    (last != std::string::npos && header.rfind('}') != std::string::npos && header.rfind('}') < last
                         ? ": '" + header.substr(header.rfind('}') + 1, std::min<size_t>(20, last - header.rfind('}'))) +
                               "' follows the closing brace"
                         : std::string()));

  NpyArray array;
  std::smatch m;
  const std::string descr_part = dict_value(header, "descr", path);
  static const std::regex descr_re("^\\s*'([^']*)'");
  if (!std::regex_search(descr_part, m, descr_re)) throw UserError(path + ": .npy 'descr' is not a string");
  auto dtype = dtype_from_npy_descr(m[1].str());
  if (!dtype)
    throw UserError(path + ": .npy dtype '" + m[1].str() +
                    "' is not supported (expected one of <f2 <f4 |i1 |u1 <i4)");
  array.dtype = *dtype;
  const std::string order = dict_value(header, "fortran_order", path);
  if (order.find("True") < order.find(','))
    throw UserError(path + ": Fortran-order .npy arrays are not supported; save with C order");
  const std::string shape_part = dict_value(header, "shape", path);
  const size_t open = shape_part.find('('), close = shape_part.find(')');
  if (open == std::string::npos || close == std::string::npos || close < open)
    throw UserError(path + ": .npy 'shape' is not a tuple");
  std::stringstream dims(shape_part.substr(open + 1, close - open - 1));
  std::string dim;
  while (std::getline(dims, dim, ',')) {
    if (dim.find_first_not_of(" \t") == std::string::npos) continue;
    try {
      const long long v = std::stoll(dim);
      if (v < 0) throw UserError(path + ": negative dimension in .npy shape");
      array.shape.push_back(v);
    } catch (const std::logic_error&) {
      throw UserError(path + ": bad dimension '" + dim + "' in .npy shape");
    }
  }
  int64_t bytes = dtype_bytes(array.dtype);
  for (int64_t d : array.shape)
    if (__builtin_mul_overflow(bytes, d, &bytes) || bytes > (int64_t{1} << 36))
      throw UserError(path + ": .npy array of shape " + array.shape_string() + " is too large (over 2^36 bytes)");
  if (check_header) check_header(array);
  // A regular file's size is known: the data must be there before it is allocated.
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  const int64_t data_start = static_cast<int64_t>(in.tellg());
  if (!ec && std::filesystem::is_regular_file(status)) {
    const uintmax_t size = std::filesystem::file_size(path, ec);
    if (!ec && data_start >= 0 && static_cast<uintmax_t>(data_start) + static_cast<uintmax_t>(bytes) > size)
      throw UserError(path + ": truncated .npy data: expected " + std::to_string(bytes) + " bytes for shape " +
                      array.shape_string() + ", the file holds " + std::to_string(size - std::min<uintmax_t>(size, data_start)) +
                      " after its header");
  }
  // Otherwise (a pipe) the data is read in pieces, so memory follows what actually arrives.
  constexpr int64_t kPiece = int64_t(1) << 24;
  for (int64_t done = 0; done < bytes;) {
    const int64_t n = std::min(kPiece, bytes - done);
    array.data.resize(static_cast<size_t>(done + n));
    in.read(reinterpret_cast<char*>(array.data.data() + done), n);
    done += in.gcount();
    if (in.gcount() != n)
      throw UserError(path + ": truncated .npy data: expected " + std::to_string(bytes) + " bytes for shape " +
                      array.shape_string() + ", got " + std::to_string(done));
  }
  if (in.peek() != std::char_traits<char>::eof()) {
    const std::streamoff at = in.tellg();
    in.seekg(0, std::ios::end);
    throw UserError(path + ": " + std::to_string(static_cast<int64_t>(in.tellg() - at)) +
                    " bytes after the data of shape " + array.shape_string() + " (" + std::to_string(bytes) +
                    " bytes); the file holds more than its header says");
  }
  return array;
}

void write_npy(const std::string& path, const NpyArray& array) {
  if (dtype_npy_descr(array.dtype).empty())
    throw UserError(path + ": " + std::string(dtype_name(array.dtype)) + " data has no NumPy type to write as .npy");
  TESSEL_CHECK(static_cast<int64_t>(array.data.size()) == array.element_count() * dtype_bytes(array.dtype),
               "NpyArray data size does not match its shape");
  std::string shape = "(";
  for (int64_t d : array.shape) shape += std::to_string(d) + ",";
  if (array.shape.size() > 1) shape.pop_back();
  shape += ")";
  std::string header = "{'descr': '" + std::string(dtype_npy_descr(array.dtype)) +
                       "', 'fortran_order': False, 'shape': " + shape + ", }";
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::string bytes("\x93NUMPY\x01\x00", 8);
  const uint16_t len = static_cast<uint16_t>(header.size());
  bytes += static_cast<char>(len & 0xff);
  bytes += static_cast<char>(len >> 8);
  bytes += header;
  bytes.append(reinterpret_cast<const char*>(array.data.data()), array.data.size());
  write_file(path, bytes);
}

}  // namespace tessel
