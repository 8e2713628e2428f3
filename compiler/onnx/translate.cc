// Shared helpers of the translators (translate.h): index names, literals, attributes, broadcasting.
#include "compiler/onnx/translate.h"

#include <cmath>
#include <cstdio>

#include "compiler/onnx/tensor_proto.h"

namespace tessel::onnx_import {

namespace {
// dtype names that look like index names (i8, i32) are reserved in the language.
std::string indexed(char family, int k) {
  std::string n = family + std::to_string(k);
  if (n == "i8" || n == "i32") n = std::string(1, char(family + 1)) + std::to_string(k);
  return n;
}
}  // namespace

std::string index(int k) { return indexed('i', k); }
std::string reduction(int k) { return indexed('r', k); }
std::string extra(int k) { return indexed('k', k); }

std::vector<std::string> indices(size_t rank) {
  std::vector<std::string> v;
  for (size_t k = 0; k < rank; ++k) v.push_back(index(int(k)));
  return v;
}

std::vector<IndexRange> ranges_of(const std::vector<int64_t>& shape) {
  std::vector<IndexRange> r;
  for (size_t k = 0; k < shape.size(); ++k) r.push_back({index(int(k)), 0, shape[k]});
  return r;
}

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? sep : "") + parts[i];
  return s;
}

int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string literal(double x, DType t) {
  const std::string dt(tessel::dtype_name(t));
  if (!dtype_is_float(t)) return dt + "(" + std::to_string(int64_t(x)) + ")";
  if (std::isnan(x)) return dt + "(0.0 / 0.0)";
  if (std::isinf(x)) return dt + (x > 0 ? "(1.0 / 0.0)" : "(-1.0 / 0.0)");
  char buf[64];
  std::snprintf(buf, sizeof buf, t == DType::F64 ? "%.17g" : "%.9g", x);
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  if (s.find("e") != std::string::npos && s.find('.') == std::string::npos) s.insert(s.find('e'), ".0");
  return dt + "(" + s + ")";
}

int64_t axis_of(const Context& c, int64_t axis, int64_t rank) {
  const int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= std::max<int64_t>(rank, 1)) c.malformed("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return a;
}

Value local(Context& c, const Value& like, const std::vector<int64_t>& shape, const std::string& suffix) {
  Value v = like;
  v.data.reset();
  v.initializer = v.graph_input = false;
  v.shape = shape;
  v.tsl = c.temp(suffix);
  v.onnx = v.tsl;
  return v;
}

Value output_value(Context& c, int i) {
  Value v = c.output(i);
  v.tsl = c.output_name(i);
  return v;
}

std::vector<int64_t> Context::constant_ints(int i, const std::string& what) const {
  std::vector<int64_t> v;
  for (double d : constant(i, what)) v.push_back(int64_t(d));
  return v;
}

std::optional<DType> Context::held_dtype(int elem_type) const {
  if (elem_type == onnx::TensorProto::DOUBLE) return double_dtype_;
  return dtype_of(elem_type);
}

DType Context::dtype(const Value& v) const {
  const auto t = held_dtype(v.elem_type);
  if (!t) unsupported("tensor '" + v.onnx + "' is " + elem_type_name(v.elem_type) + " data (" + held_types_note() + ")");
  return *t;
}

std::string Context::dtype_name(const Value& v) const { return std::string(tessel::dtype_name(dtype(v))); }

std::string Context::read_broadcast(const Value& v, const std::vector<int64_t>& out_shape) {
  std::vector<std::string> idx;
  const size_t off = out_shape.size() - v.shape.size();
  for (size_t k = 0; k < v.shape.size(); ++k) idx.push_back(v.shape[k] == 1 && out_shape[off + k] != 1 ? "0" : index(int(off + k)));
  return read(v, idx);
}

const onnx::AttributeProto* Context::attr(const std::string& name) const {
  for (const auto& a : node().attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

bool Context::has_attr(const std::string& name) const { return attr(name) != nullptr; }

int64_t Context::attr_int(const std::string& name, int64_t fallback) const {
  const auto* a = attr(name);
  return a ? a->i() : fallback;
}

double Context::attr_float(const std::string& name, double fallback) const {
  const auto* a = attr(name);
  return a ? a->f() : fallback;
}

std::string Context::attr_string(const std::string& name, const std::string& fallback) const {
  const auto* a = attr(name);
  return a ? a->s() : fallback;
}

std::vector<int64_t> Context::attr_ints(const std::string& name, const std::vector<int64_t>& fallback) const {
  const auto* a = attr(name);
  if (!a) return fallback;
  return {a->ints().begin(), a->ints().end()};
}

}  // namespace tessel::onnx_import
