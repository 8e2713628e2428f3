// Element types shared by the language, the hierarchy descriptions, the NPU ISA and the .npy files.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tessel {

// X(enumerator, name, bytes, is_float, is_signed, npy descr)
#define TESSEL_DTYPES(X)              \
  X(F16, "f16", 2, true, true, "<f2") \
  X(BF16, "bf16", 2, true, true, "")  \
  X(F32, "f32", 4, true, true, "<f4") \
  X(F64, "f64", 8, true, true, "<f8") \
  X(I8, "i8", 1, false, true, "|i1")  \
  X(U8, "u8", 1, false, false, "|u1") \
  X(I32, "i32", 4, false, true, "<i4")

enum class DType : uint8_t {
#define TESSEL_X(e, name, bytes, is_float, is_signed, npy) e,
  TESSEL_DTYPES(TESSEL_X)
#undef TESSEL_X
};

std::string_view dtype_name(DType t);
int dtype_bytes(DType t);
bool dtype_is_float(DType t);
bool dtype_is_signed(DType t);
// NumPy array-interface type string ("<f2"); empty where NumPy has no such type (bf16).
std::string_view dtype_npy_descr(DType t);
std::optional<DType> parse_dtype(std::string_view name);
std::optional<DType> dtype_from_npy_descr(std::string_view descr);

}  // namespace tessel
