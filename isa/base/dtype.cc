#include "isa/base/dtype.h"

#include <array>

namespace tessel {
namespace {

struct DTypeInfo {
  std::string_view name;
  int bytes;
  bool is_float;
  bool is_signed;
  std::string_view npy;
};

constexpr std::array kInfo = {
#define TESSEL_X(e, name, bytes, is_float, is_signed, npy) DTypeInfo{name, bytes, is_float, is_signed, npy},
    TESSEL_DTYPES(TESSEL_X)
#undef TESSEL_X
};

const DTypeInfo& info(DType t) { return kInfo[static_cast<size_t>(t)]; }

}  // namespace

std::string_view dtype_name(DType t) { return info(t).name; }
int dtype_bytes(DType t) { return info(t).bytes; }
bool dtype_is_float(DType t) { return info(t).is_float; }
bool dtype_is_signed(DType t) { return info(t).is_signed; }
std::string_view dtype_npy_descr(DType t) { return info(t).npy; }

std::optional<DType> parse_dtype(std::string_view name) {
  for (size_t i = 0; i < kInfo.size(); ++i)
    if (kInfo[i].name == name) return static_cast<DType>(i);
  if (name == "s8") return DType::I8;  // CUDA spells signed 8-bit "s8"
  if (name == "s32") return DType::I32;
  return std::nullopt;
}

std::optional<DType> dtype_from_npy_descr(std::string_view descr) {
  if (descr == "|i1" || descr == "<i1") return DType::I8;
  if (descr == "|u1" || descr == "<u1") return DType::U8;
  for (size_t i = 0; i < kInfo.size(); ++i)
    if (!kInfo[i].npy.empty() && kInfo[i].npy == descr) return static_cast<DType>(i);
  return std::nullopt;
}

}  // namespace tessel
