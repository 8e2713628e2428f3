// Scop: the tensor IR as isl sets and maps (pass "scop"; first pass of the polyhedral core).
//
// Takes an ir::Function; gives, with the size parameters symbolic:
//   - one isl statement per tensor-IR statement ("S0", ...) and, for reductions that start from
//     the identity (`+=!`, `max=!`), an init statement over the output indices ("S0_init");
//   - iteration domains, tagged read/write access relations ([S0[..] -> S0_R1[]] -> A[..]) and
//     their untagged forms, the context (every size >= 1) and the program order as a schedule map.
#pragma once

#include <isl/cpp.h>

#include <string>
#include <vector>

#include "compiler/ir/tensor_ir.h"

namespace tessel::poly {

struct ScopStatement {
  std::string name;      // isl tuple name: "S0" or "S0_init"
  int statement = 0;     // index into Function::statements
  bool init = false;     // the reduction's identity assignment
  std::vector<std::string> indices;  // domain dimension names
  isl::set domain;
};

struct Scop {
  const ir::Function* function = nullptr;
  isl::set context;           // [params] -> { : params >= 1 }
  isl::union_set domain;
  isl::union_map reads, writes;                // untagged
  isl::union_map tagged_reads, tagged_writes;  // [S[..] -> ref[]] -> T[..]
  isl::union_map program_order;                // S[..] -> [position, indices..., 0...]
  std::vector<ScopStatement> statements;       // in program order

  const ScopStatement& find(const std::string& name) const;
};

Scop build_scop(isl::ctx ctx, const ir::Function& f);

// "[M, N] -> " for the function's size parameters.
std::string param_prefix(const ir::Function& f);

}  // namespace tessel::poly
