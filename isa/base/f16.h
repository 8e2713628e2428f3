// IEEE 754 binary16 conversions with round-to-nearest-even, bit-exact on every host.
// GCC 12 has no _Float16 in C++, so the conversion is done on bit patterns.
#pragma once

#include <bit>
#include <cstdint>

namespace tessel {

constexpr uint16_t f32_to_f16_bits(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u)  // inf or NaN (NaN keeps a quiet payload bit)
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u | ((abs >> 13) & 0x3ffu) : 0u));
  if (abs >= 0x477ff000u)  // >= 65520 rounds past the largest finite half
    return static_cast<uint16_t>(sign | 0x7c00u);
  if (abs < 0x38800000u) {  // below 2^-14: subnormal half
    // 0.5f has an ulp of 2^-24, the half subnormal step: the FPU's own RNE addition does the rounding.
    const float sum = std::bit_cast<float>(abs) + 0.5f;
    return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(sum) - 0x3f000000u));
  }
  const uint32_t mant_odd = (abs >> 13) & 1u;
  abs += 0xc8000000u + 0xfffu + mant_odd;  // re-bias exponent 127 -> 15, round half to even
  return static_cast<uint16_t>(sign | (abs >> 13));
}

constexpr float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    const float mag = static_cast<float>(mant) * (1.0f / 16777216.0f);  // mant * 2^-24, exact
    return sign ? -mag : mag;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

// The value a float takes after a round trip through f16 (what `f16(x)` means in the language).
constexpr float round_to_f16(float value) { return f16_bits_to_f32(f32_to_f16_bits(value)); }

}  // namespace tessel
