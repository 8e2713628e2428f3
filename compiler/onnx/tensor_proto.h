// ONNX TensorProto values as tessel tensors: the `.pb` files of ONNX's backend tests
// (`test_data_set_0/input_0.pb`) for `tessel run --input/--expect` and `tessel import --value`, and
// initializers / Constant attributes inside a model.
//
// to_npy keeps the element bytes of the dtypes tessel has (f32 f16 bf16 i8 u8 i32; ONNX bool becomes
// i8 0/1); int64 data is held as i32 (the language's widest integer), each value checked: one that
// does not fit is a UserError naming the tensor, the value and its element. Any other dtype (f64,
// strings, ...) is a UserError naming `where` and the dtype.
// values() reads any numeric dtype (i64 and f64 included) as doubles: what the importer folds
// (shapes, axes, pads, indices). Both read raw_data or the typed repeated fields, as ONNX allows.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "isa/base/npy.h"

namespace tessel::onnx_import {

// ONNX's name for an element type ("float", "int64", ...).
std::string elem_type_name(int elem_type);
// The tessel dtype that holds an ONNX element type (bool -> i8; int16, uint16, uint32, int64 and
// uint64 -> i32, each value checked; double -> f32), if any.
std::optional<DType> dtype_of(int elem_type);
// The note an "unsupported element type" error ends with: the types tessel holds and how.
const char* held_types_note();

// v as i32, or a UserError "TENSOR: unsupported: ELEM_TYPE value V (element E) does not fit in i32...".
int32_t checked_i32(double v, const std::string& tensor, int64_t element, const std::string& elem_type = "int64");
// v rounded to f32 (NaN and infinities kept), or a UserError "TENSOR: unsupported: double value V
// (element E) is beyond f32..." for a finite value beyond f32's range.
float checked_f32(double v, const std::string& tensor, int64_t element);

// `sixteen_bits_as` F16 or BF16: a uint16 tensor's elements are taken as that type's bit patterns
// (ONNX's older test data stores bfloat16 tensors as uint16); F64: a double tensor is read as f64
// (the declared dtype of the tensor it is given for), not held in f32.
NpyArray to_npy(const onnx::TensorProto& t, const std::string& where, std::optional<DType> sixteen_bits_as = std::nullopt);
std::vector<double> values(const onnx::TensorProto& t, const std::string& where);
std::vector<int64_t> dims(const onnx::TensorProto& t);

// Reads a serialized TensorProto (UserError naming the path when unreadable or malformed).
onnx::TensorProto read_tensor_proto(const std::string& path);
// read_tensor_proto + to_npy.
NpyArray read_tensor_file(const std::string& path, std::optional<DType> sixteen_bits_as = std::nullopt);

}  // namespace tessel::onnx_import
