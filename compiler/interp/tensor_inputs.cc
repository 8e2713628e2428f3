// Tensors of a function at given sizes (interpreter.h): their concrete shapes (tensor_shape) and
// deterministic inputs (random_inputs: each tensor's values depend only on the seed and the
// tensor's name, so every target and the reference see the same data).
#include <string>

#include "compiler/interp/interpreter.h"
#include "compiler/interp/scalar.h"
#include "isa/base/error.h"

namespace tessel::interp {

namespace {

constexpr int64_t kMaxElements = int64_t{1} << 33;

std::string loc_text(const ir::SourceLoc& l) {
  return l.file + ":" + std::to_string(l.line) + ":" + std::to_string(l.col);
}

uint64_t splitmix(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

std::vector<int64_t> tensor_shape(const ir::Tensor& t, const Sizes& sizes) {
  std::vector<int64_t> shape;
  int64_t count = 1;
  for (const ir::AffineExpr& d : t.shape) {
    std::map<std::string, int64_t> params;
    d.collect_names(nullptr, &params);
    for (const auto& [n, c] : params)
      if (!sizes.count(n))
        throw UserError("size parameter '" + n + "' (in the shape of '" + t.name + "', " + loc_text(t.loc) +
                        ") has no value; pass it with --shape " + n + "=...");
    const int64_t v = d.evaluate({}, sizes);
    if (v < 0)
      throw UserError("tensor '" + t.name + "' gets the negative dimension " + d.to_string() + " = " +
                      std::to_string(v) + " from the given sizes");
    if (v > 0 && count > kMaxElements / v)
      throw UserError("tensor '" + t.name + "' is too large for the reference interpreter (more than 2^33 elements)");
    count *= v;
    shape.push_back(v);
  }
  return shape;
}

Tensors random_inputs(const ir::Function& f, const Sizes& given, uint64_t seed) {
  const Sizes sizes = ir::bind_sizes(f, given);
  Tensors out;
  for (const ir::Tensor* t : f.inputs()) {
    NpyArray a;
    a.dtype = t->dtype;
    a.shape = tensor_shape(*t, sizes);
    const int64_t n = a.element_count();
    const int bytes = dtype_bytes(t->dtype);
    a.data.assign(static_cast<size_t>(n * bytes), 0);
    uint64_t state = seed * 0x2545f4914f6cdd1dull;
    for (char ch : t->name) state = (state ^ static_cast<unsigned char>(ch)) * 0x100000001b3ull;
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t r = splitmix(state);
      uint8_t* p = a.data.data() + i * bytes;
      switch (t->dtype) {
        case DType::I8:
        case DType::I32: store_int(t->dtype, p, static_cast<int64_t>(r % 17) - 8); break;
        case DType::U8: store_int(t->dtype, p, static_cast<int64_t>(r % 9)); break;
        default: store_float(t->dtype, p, (static_cast<double>(r % 257) - 128.0) / 64.0); break;
      }
    }
    out[t->name] = std::move(a);
  }
  return out;
}

void check_inputs(const ir::Function& f, const Sizes& sizes, const Tensors& inputs) {
  for (const std::string& p : f.params)
    if (!sizes.count(p)) {
      std::string all;
      for (const std::string& q : f.params) all += (all.empty() ? "" : ",") + q + "=...";
      throw UserError("size parameter '" + p + "' of '" + f.name + "' has no value; pass --shape " + all);
    }
  for (const auto& [name, a] : inputs) {
    const ir::Tensor* t = f.find_tensor(name);
    if (!t || t->kind != ir::TensorKind::Input) {
      std::string names;
      for (const ir::Tensor* i : f.inputs()) names += (names.empty() ? "" : ", ") + i->name;
      throw UserError("'" + name + "' is not an input of '" + f.name + "'; its inputs are " + names);
    }
  }
  for (const ir::Tensor* t : f.inputs()) {
    NpyArray want;
    want.shape = tensor_shape(*t, sizes);
    auto it = inputs.find(t->name);
    if (it == inputs.end())
      throw UserError("missing input '" + t->name + "' (" + std::string(dtype_name(t->dtype)) + want.shape_string() +
                      ") of '" + f.name + "'");
    if (it->second.dtype != t->dtype)
      throw UserError("input '" + t->name + "' has dtype " + std::string(dtype_name(it->second.dtype)) + " but '" +
                      f.name + "' declares " + std::string(dtype_name(t->dtype)));
    if (it->second.shape != want.shape)
      throw UserError("input '" + t->name + "' has shape " + it->second.shape_string() + " but '" + f.name +
                      "' expects " + want.shape_string() + " for the given sizes");
  }
}

}  // namespace tessel::interp
