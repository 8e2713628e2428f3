#include "compiler/onnx/tensor_proto.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <fstream>
#include <sstream>

#include "isa/base/error.h"
#include "isa/base/f16.h"

namespace tessel::onnx_import {

using TP = onnx::TensorProto;

std::string elem_type_name(int e) {
  switch (e) {
    case TP::FLOAT: return "float";
    case TP::UINT8: return "uint8";
    case TP::INT8: return "int8";
    case TP::UINT16: return "uint16";
    case TP::INT16: return "int16";
    case TP::INT32: return "int32";
    case TP::INT64: return "int64";
    case TP::STRING: return "string";
    case TP::BOOL: return "bool";
    case TP::FLOAT16: return "float16";
    case TP::DOUBLE: return "double";
    case TP::UINT32: return "uint32";
    case TP::UINT64: return "uint64";
    case TP::COMPLEX64: return "complex64";
    case TP::COMPLEX128: return "complex128";
    case TP::BFLOAT16: return "bfloat16";
    default: return "element type " + std::to_string(e);
  }
}

std::optional<DType> dtype_of(int e) {
  switch (e) {
    case TP::FLOAT: return DType::F32;
    case TP::FLOAT16: return DType::F16;
    case TP::BFLOAT16: return DType::BF16;
    case TP::INT8: return DType::I8;
    case TP::UINT8: return DType::U8;
    case TP::BOOL: return DType::I8;
    case TP::INT32: return DType::I32;
    case TP::INT64: case TP::UINT32: case TP::UINT64:  // held as i32: checked_i32 refuses a value that does not fit
    case TP::INT16: case TP::UINT16: return DType::I32;  // held as i32 exactly
    case TP::DOUBLE: return DType::F32;  // held as f32: each value rounded, one beyond f32's range refused
    default: return std::nullopt;
  }
}

const char* held_types_note() {
  return "tessel holds f32 f64 f16 bf16 i8 u8 i32, bool as i8, int16 uint16 uint32 int64 uint64 as i32, double as f32 (f64 where a value is beyond f32)";
}

std::vector<int64_t> dims(const TP& t) { return {t.dims().begin(), t.dims().end()}; }

namespace {

int64_t element_count(const TP& t, const std::string& where) {
  int64_t n = 1;
  for (int64_t d : t.dims()) {
    if (d < 0 || (d > 0 && n > (int64_t(1) << 40) / d)) throw UserError(where + ": tensor dimension " + std::to_string(d) + " is out of range");
    n *= d;
  }
  return n;
}

// The integer types tessel holds as i32 although they are stored in another width.
bool held_widened_or_narrowed(int e) {
  return e == TP::INT64 || e == TP::UINT64 || e == TP::UINT32 || e == TP::INT16 || e == TP::UINT16;
}

int raw_bytes(int e) {
  switch (e) {
    case TP::FLOAT: case TP::INT32: case TP::UINT32: return 4;
    case TP::UINT8: case TP::INT8: case TP::BOOL: return 1;
    case TP::UINT16: case TP::INT16: case TP::FLOAT16: case TP::BFLOAT16: return 2;
    case TP::INT64: case TP::DOUBLE: case TP::UINT64: return 8;
    default: return 0;
  }
}

template <class T>
double load(const std::string& raw, int64_t i) {
  T v;
  std::memcpy(&v, raw.data() + i * sizeof(T), sizeof(T));
  return double(v);
}

double raw_value(const std::string& raw, int e, int64_t i) {
  switch (e) {
    case TP::FLOAT: return load<float>(raw, i);
    case TP::INT32: return load<int32_t>(raw, i);
    case TP::UINT32: return load<uint32_t>(raw, i);
    case TP::UINT8: return load<uint8_t>(raw, i);
    case TP::BOOL: return load<uint8_t>(raw, i) != 0;
    case TP::INT8: return load<int8_t>(raw, i);
    case TP::UINT16: return load<uint16_t>(raw, i);
    case TP::INT16: return load<int16_t>(raw, i);
    case TP::INT64: return double(load<int64_t>(raw, i));
    case TP::UINT64: return double(load<uint64_t>(raw, i));
    case TP::DOUBLE: return load<double>(raw, i);
    case TP::FLOAT16: return double(f16_bits_to_f32(uint16_t(load<uint16_t>(raw, i))));
    case TP::BFLOAT16: {
      uint32_t bits = uint32_t(load<uint16_t>(raw, i)) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    default: return 0;
  }
}

// The typed field's element i, as ONNX stores each dtype (f16/bf16/i8/u8/bool/i16 in int32_data as bits or values).
double field_value(const TP& t, int64_t i) {
  switch (t.data_type()) {
    case TP::FLOAT: return t.float_data(int(i));
    case TP::DOUBLE: return t.double_data(int(i));
    case TP::INT64: return double(t.int64_data(int(i)));
    case TP::UINT32: case TP::UINT64: return double(t.uint64_data(int(i)));
    case TP::FLOAT16: return f16_bits_to_f32(uint16_t(t.int32_data(int(i))));
    case TP::BFLOAT16: {
      uint32_t bits = uint32_t(t.int32_data(int(i))) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case TP::BOOL: return t.int32_data(int(i)) != 0;
    default: return t.int32_data(int(i));
  }
}

int64_t field_size(const TP& t) {
  switch (t.data_type()) {
    case TP::FLOAT: return t.float_data_size();
    case TP::DOUBLE: return t.double_data_size();
    case TP::INT64: return t.int64_data_size();
    case TP::UINT32: case TP::UINT64: return t.uint64_data_size();
    default: return t.int32_data_size();
  }
}

void check_storage(const TP& t, const std::string& where, int64_t n) {
  if (t.data_location() == TP::EXTERNAL) throw UserError(where + ": unsupported: tensor data stored in an external file");
  const int b = raw_bytes(t.data_type());
  if (b == 0) throw UserError(where + ": unsupported: tensor of " + elem_type_name(t.data_type()));
  if (t.has_raw_data()) {
    if (int64_t(t.raw_data().size()) != n * b)
      throw UserError(where + ": raw_data holds " + std::to_string(t.raw_data().size()) + " bytes but the shape needs " +
                      std::to_string(n * b));
  } else if (field_size(t) != n) {
    throw UserError(where + ": holds " + std::to_string(field_size(t)) + " values but its shape has " + std::to_string(n));
  }
}

}  // namespace

int32_t checked_i32(double v, const std::string& tensor, int64_t element, const std::string& elem_type) {
  if (v >= -2147483648.0 && v <= 2147483647.0) return int32_t(v);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0f", v);
  throw UserError(tensor + ": unsupported: " + elem_type + " value " + buf + " (element " + std::to_string(element) +
                  ") does not fit in i32, the type tessel holds " + elem_type + " data in");
}

float checked_f32(double v, const std::string& tensor, int64_t element) {
  if (!std::isfinite(v) || std::fabs(v) <= double(std::numeric_limits<float>::max())) return float(v);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  throw UserError(tensor + ": unsupported: double value " + buf + " (element " + std::to_string(element) +
                  ") is beyond f32, the type tessel holds double data in");
}

std::vector<double> values(const TP& t, const std::string& where) {
  const int64_t n = element_count(t, where);
  check_storage(t, where, n);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = t.has_raw_data() ? raw_value(t.raw_data(), t.data_type(), i) : field_value(t, i);
  return v;
}

NpyArray to_npy(const TP& t, const std::string& where, std::optional<DType> sixteen_bits_as) {
  if (t.data_type() == TP::UINT16 && (sixteen_bits_as == DType::F16 || sixteen_bits_as == DType::BF16)) {
    TP bits = t;
    bits.set_data_type(*sixteen_bits_as == DType::F16 ? TP::FLOAT16 : TP::BFLOAT16);
    return to_npy(bits, where);
  }
  const std::optional<DType> dt = dtype_of(t.data_type());
  if (!dt) throw UserError(where + ": unsupported: tensor of " + elem_type_name(t.data_type()) + " (" + held_types_note() + ")");
  const int64_t n = element_count(t, where);
  check_storage(t, where, n);
  NpyArray a;
  // int16..uint64 held as i32 and double held as f32: converted element by element, each value
  // checked (one beyond the holding type is refused naming the tensor and element)
  auto convert_each = [&](DType held, auto checked) {
    a.dtype = held;
    a.shape = dims(t);
    a.data.resize(size_t(n * 4));
    const std::string tensor = t.name().empty() ? where : where + " ('" + t.name() + "')";
    const std::vector<double> v = values(t, where);
    for (int64_t i = 0; i < n; ++i) {
      const auto q = checked(v[size_t(i)], tensor, i);
      std::memcpy(a.data.data() + i * 4, &q, 4);
    }
    return a;
  };
  if (held_widened_or_narrowed(t.data_type()))
    return convert_each(DType::I32, [&](double x, const std::string& tensor, int64_t i) {
      return checked_i32(x, tensor, i, elem_type_name(t.data_type()));
    });
  if (t.data_type() == TP::DOUBLE && sixteen_bits_as == DType::F64) {  // read as the f64 tensor it is declared as
    a.dtype = DType::F64;
    a.shape = dims(t);
    const std::vector<double> v = values(t, where);
    a.data.resize(v.size() * 8);
    std::memcpy(a.data.data(), v.data(), a.data.size());
    return a;
  }
  if (t.data_type() == TP::DOUBLE) return convert_each(DType::F32, checked_f32);
  a.dtype = *dt;
  a.shape = dims(t);
  const int b = dtype_bytes(*dt);
  a.data.resize(size_t(n * b));
  if (t.has_raw_data()) {
    std::memcpy(a.data.data(), t.raw_data().data(), a.data.size());
    if (t.data_type() == TP::BOOL)
      for (auto& x : a.data) x = x != 0;
    return a;
  }
  for (int64_t i = 0; i < n; ++i) {
    uint8_t* p = a.data.data() + i * b;
    switch (*dt) {
      case DType::F32: { float f = t.float_data(int(i)); std::memcpy(p, &f, 4); break; }
      case DType::F64: { double d = t.double_data(int(i)); std::memcpy(p, &d, 8); break; }  // DOUBLE returns above; complete
      case DType::I32: { int32_t v = t.int32_data(int(i)); std::memcpy(p, &v, 4); break; }
      case DType::F16: case DType::BF16: { uint16_t v = uint16_t(t.int32_data(int(i))); std::memcpy(p, &v, 2); break; }
      case DType::I8: case DType::U8: *p = uint8_t(t.data_type() == TP::BOOL ? t.int32_data(int(i)) != 0 : t.int32_data(int(i))); break;
    }
  }
  return a;
}

TP read_tensor_proto(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(path + ": cannot open the tensor file");
  TP t;
  if (!t.ParseFromIstream(&in)) throw UserError(path + ": not an ONNX TensorProto (the protobuf does not parse)");
  return t;
}

NpyArray read_tensor_file(const std::string& path, std::optional<DType> sixteen_bits_as) {
  return to_npy(read_tensor_proto(path), path, sixteen_bits_as);
}

}  // namespace tessel::onnx_import
