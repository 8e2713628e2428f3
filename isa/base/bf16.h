// bf16 <-> f32 bit conversions (what a vconv to and from bf16 does): round to nearest even on the
// bits, NaN quieted, the same rounding as the reference interpreter's round_to_bf16
// (compiler/interp/scalar.h), so a value rounded on the NPU is the interpreter's bit for bit.
#pragma once

#include <bit>
#include <cstdint>

namespace tessel {

constexpr uint16_t f32_to_bf16_bits(float v) {
  uint32_t b = std::bit_cast<uint32_t>(v);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b | 0x00400000u) >> 16);  // quiet NaN
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}

constexpr float bf16_bits_to_f32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

}  // namespace tessel
