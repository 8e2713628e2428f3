#include "compiler/emit_npu/held_dtypes.h"

#include <algorithm>

#include <fmt/format.h>

#include "isa/base/error.h"

namespace tessel::emit_npu {

namespace {

// Every dtype a unit of the description lists, in the order first listed.
std::vector<DType> listed_dtypes(const isa::Hierarchy& target) {
  std::vector<DType> out;
  auto add = [&](DType d) {
    if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
  };
  for (const isa::Unit& u : target.units) {
    for (DType d : u.dtypes) add(d);
    for (const isa::VectorConversion& c : u.conversions) add(c.from), add(c.to);
    for (const isa::MatrixShape& s : u.shapes) add(s.a), add(s.b), add(s.acc);
  }
  return out;
}

bool held(const std::vector<DType>& listed, DType t) {
  auto has = [&](DType d) { return std::find(listed.begin(), listed.end(), d) != listed.end(); };
  return has(t) || (t == DType::U8 && (has(DType::I8) || has(DType::I32)));
}

}  // namespace

void check_held_dtypes(const ir::Function& f, const isa::Hierarchy& target) {
  const std::vector<DType> listed = listed_dtypes(target);
  for (const ir::Tensor& t : f.tensors) {
    if (held(listed, t.dtype)) continue;
    std::string types;
    for (DType d : listed) types += (types.empty() ? "" : ", ") + std::string(dtype_name(d));
    const std::string place = t.loc.line ? fmt::format(" ({}:{}:{})", t.loc.file, t.loc.line, t.loc.col) : std::string();
    throw UserError(fmt::format("tensor '{}'{} is {}: no unit of the NPU description {} takes {} (its units take {}); "
                                "compile it for c or a GPU target",
                                t.name, place, dtype_name(t.dtype), target.name, dtype_name(t.dtype), types));
  }
}

}  // namespace tessel::emit_npu
