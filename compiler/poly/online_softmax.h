// Online softmax (pass "online_softmax", before any isl work): finds a softmax whose result only
// feeds the contraction that consumes it — scores, optional element-wise steps (scale, mask,
// bias), row maximum, exponentials, their sum, the context, the division — and records it as one
// fused kernel (kernel::Attention, compiler/kernel/attention.h: the pattern, the one-pass
// algorithm and its rounding difference). Analysis only: nothing is rewritten here; the program
// partition keeps the matched statements in one kernel and compile() builds that kernel from the
// record instead of scheduling its statements with isl (no S x T tensor is ever placed).
//
// What must hold (each failure is a reason find_online_softmax reports):
//   - the scores are `S(..) +=! [cast] Q(..) * [cast] K(..)` accumulating in f32 over the head
//     indices, every output index a plain index; the key index j is the one the maximum reduces;
//     the query index i is the last other output index Q reads and K does not; the remaining ones
//     are batch indices (K or V may ignore some: multi-query attention);
//   - each step, the maximum, the exponentials and the sum read their input at exactly the
//     element they compute (a permutation of plain indices), the exponent is
//     `g(T) - Mx` with g the maximum's own expression of T, and the context is
//     `[cast] E * [cast] V` (or `[cast] P * [cast] V` with P = E / Z) summed over j;
//   - every intermediate (S, the steps, Mx, E, Z, P, O before its epilogue) is a local that no
//     other statement reads or writes; indices are affine (no `/`, `%`).
// A mask step `select(j <= i + c, x, m)` with m <= -1e30 (every masked logit underflows exp to
// exactly 0 against any unmasked one above -1e30 + 104) and c >= 0 (every row keeps key 0) is
// recognised as causal with offset c.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compiler/ir/tensor_ir.h"
#include "compiler/kernel/attention.h"

namespace tessel::poly {

struct OnlineSoftmaxMatch {
  std::vector<int> statements;  // program order
  int scores = -1;              // the score contraction
  std::string summary;          // "Sc -> Mx, E, Z -> O -> Out"
};

struct OnlineSoftmaxSearch {
  std::vector<OnlineSoftmaxMatch> matches;
  // per softmax-like statement (a max reduction) that did not match: "Mx (S2): why"
  std::vector<std::string> rejected;
};

// Every match in `f` (disjoint statement sets). Structural: sizes are not needed.
OnlineSoftmaxSearch find_online_softmax(const ir::Function& f);

// The record of match `m` at the given sizes (every parameter of `f` bound).
kernel::Attention build_attention(const ir::Function& f, const OnlineSoftmaxMatch& m,
                                  const std::map<std::string, int64_t>& sizes);

// When every statement of `f` belongs to one match: that match, else nullopt.
std::optional<OnlineSoftmaxMatch> whole_function_match(const ir::Function& f, std::string* why_not = nullptr);

}  // namespace tessel::poly
