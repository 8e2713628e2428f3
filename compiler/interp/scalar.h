// Scalar semantics of the reference interpreter: how each dtype rounds, wraps, converts and loads
// from / stores to tensor memory. Floating-point values travel as doubles holding a value exactly
// representable in their dtype; integers travel as int64 holding a value in their dtype's range.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "isa/base/dtype.h"
#include "isa/base/f16.h"

namespace tessel::interp {

constexpr float round_to_bf16(float v) {
  uint32_t b = std::bit_cast<uint32_t>(v);
  if ((b & 0x7fffffffu) > 0x7f800000u) return std::bit_cast<float>(b | 0x00400000u);  // quiet NaN
  b += 0x7fffu + ((b >> 16) & 1u);
  return std::bit_cast<float>(b & 0xffff0000u);
}

// Rounds a real value to floating-point dtype `t` (through f32: f16(x) is f16(f32(x)); f64 keeps it).
inline double round_float(DType t, double v) {
  if (t == DType::F64) return v;
  const float f = static_cast<float>(v);
  switch (t) {
    case DType::F16: return round_to_f16(f);
    case DType::BF16: return round_to_bf16(f);
    default: return f;
  }
}

// Two's-complement wrap-around into integer dtype `t`.
inline int64_t wrap_int(DType t, int64_t v) {
  switch (t) {
    case DType::I8: return static_cast<int8_t>(static_cast<uint64_t>(v));
    case DType::U8: return static_cast<uint8_t>(static_cast<uint64_t>(v));
    default: return static_cast<int32_t>(static_cast<uint64_t>(v));
  }
}

inline int64_t int_min(DType t) { return t == DType::I8 ? -128 : t == DType::U8 ? 0 : std::numeric_limits<int32_t>::min(); }
inline int64_t int_max(DType t) { return t == DType::I8 ? 127 : t == DType::U8 ? 255 : std::numeric_limits<int32_t>::max(); }

// Float -> integer: truncation toward zero, saturating at the type's range, NaN -> 0.
inline int64_t float_to_int(DType t, double v) {
  if (std::isnan(v)) return 0;
  if (v <= static_cast<double>(int_min(t))) return int_min(t);
  if (v >= static_cast<double>(int_max(t))) return int_max(t);
  return static_cast<int64_t>(std::trunc(v));
}

inline double load_float(DType t, const uint8_t* p) {
  switch (t) {
    case DType::F16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return f16_bits_to_f32(h);
    }
    case DType::BF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
    }
    case DType::F64: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    default: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
  }
}

inline void store_float(DType t, uint8_t* p, double v) {
  switch (t) {
    case DType::F16: {
      const uint16_t h = f32_to_f16_bits(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      return;
    }
    case DType::BF16: {
      const uint16_t h = static_cast<uint16_t>(std::bit_cast<uint32_t>(round_to_bf16(static_cast<float>(v))) >> 16);
      std::memcpy(p, &h, 2);
      return;
    }
    case DType::F64: std::memcpy(p, &v, 8); return;
    default: {
      const float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
    }
  }
}

inline int64_t load_int(DType t, const uint8_t* p) {
  switch (t) {
    case DType::I8: return static_cast<int8_t>(*p);
    case DType::U8: return *p;
    default: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
  }
}

inline void store_int(DType t, uint8_t* p, int64_t v) {
  switch (t) {
    case DType::I8:
    case DType::U8: *p = static_cast<uint8_t>(static_cast<uint64_t>(v)); return;
    default: {
      const int32_t x = static_cast<int32_t>(static_cast<uint64_t>(v));
      std::memcpy(p, &x, 4);
    }
  }
}

}  // namespace tessel::interp
