// The one definition of float min and max (compiler/README.md, "Semantics"): NaN-propagating, as
// IEEE 754-2019 maximum / minimum. If either operand is NaN the result is NaN; otherwise the larger
// (smaller) operand, the first one when they compare equal (so max(-0, +0) is -0, as a plain
// compare-and-select gives on every target). Used by the reference interpreter, the NPU simulator
// (vmax, vmaxs, vmin, vrelu as max(x, 0), vcmax) and the NPU emitter's constant folding; the C and
// CUDA emitters print the same expression (tessel_fmax / tessel_fmin).
#pragma once

#include <cmath>
#include <limits>

namespace tessel {

template <typename F>
inline F nan_max(F a, F b) {
  return std::isnan(a) || std::isnan(b) ? std::numeric_limits<F>::quiet_NaN() : (a < b ? b : a);
}

template <typename F>
inline F nan_min(F a, F b) {
  return std::isnan(a) || std::isnan(b) ? std::numeric_limits<F>::quiet_NaN() : (b < a ? b : a);
}

}  // namespace tessel
