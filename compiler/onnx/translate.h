// The contract between the ONNX importer (importer.cc) and its operator translators
// (ops_*.cc, one file per family, listed in one table in ops_table.cc).
//
// The importer walks the graph in order; for each node it looks up the node's op type in the
// table and calls the translator with a Context. A translator either
//   - folds the node (every input it needs is a constant known at import time: Shape, Constant,
//     shape arithmetic) by setting its outputs' constant data with Context::set_constant, or
//   - emits one or more TSL statements (Context::emit) that write each of the node's outputs, whose
//     name, dtype and static shape Context::output gives (shapes come from ONNX's own shape
//     inference, run by the importer before translation),
// or it refuses with Context::unsupported(reason), which becomes
// `MODEL.onnx: node 'NAME' (OpType): unsupported: REASON` (exit 1). A translator never throws
// anything else for a well-formed model; a malformed attribute or input is a UserError through
// Context::malformed.
//
// Reading a tensor in an expression goes through Context::read, which turns the ONNX value into a
// TSL access: a graph input or an earlier node's output by its TSL name; a constant (initializer,
// Constant node, `--value`) of one element as a literal, a larger one as a def input backed by
// OUT_weights/NAME.npy. read() also records which indices stand alone in an access, so emit() adds a
// `where` range only where the front end could not infer it.
//
// Index names: output dimension k is index(k) ("i0", "i1", ...), reduction k is reduction(k)
// ("r0", ...); translators that need more families use extra(k) ("k0", ...).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "isa/base/dtype.h"

namespace tessel::onnx_import {

// One ONNX value (a graph input, initializer or node output) as the importer knows it.
struct Value {
  std::string onnx;                      // its ONNX name
  int elem_type = 0;                     // onnx::TensorProto::DataType
  std::vector<int64_t> shape;            // static shape
  bool has_shape = false;
  std::optional<std::vector<double>> data;  // known at import time (C order)
  bool initializer = false;              // written as OUT_weights/NAME.npy when read as data
  bool graph_input = false;
  std::string tsl;                       // its TSL tensor name once it exists in the program
};

// An index of a statement with its half-open range.
struct IndexRange {
  std::string name;
  int64_t lo = 0, hi = 1;
};

struct Statement {
  std::string target;              // TSL tensor written
  std::vector<std::string> lhs;    // index names, one per dimension of target
  std::string assign = "=";        // = +=! max=! min=!
  std::string rhs;
  std::vector<IndexRange> ranges;  // every index of the statement (lhs and reductions)
};

class Context {
 protected:
  DType double_dtype_ = DType::F32;

 public:
  virtual ~Context() = default;
  virtual const onnx::NodeProto& node() const = 0;
  virtual int opset() const = 0;

  // Inputs: i-th input present (ONNX allows empty names for omitted optional inputs).
  virtual bool has_input(int i) const = 0;
  virtual const Value& input(int i) const = 0;  // malformed() when absent
  // A constant input's values (shape, axes, pads, indices...): unsupported() when it is not known
  // at import time, naming `what`.
  virtual std::vector<double> constant(int i, const std::string& what) const = 0;
  std::vector<int64_t> constant_ints(int i, const std::string& what) const;

  // Outputs: whether output i is used (named), its Value (dtype and shape from shape inference;
  // unsupported() for a dynamic shape), and its TSL name (created on first call).
  virtual bool has_output(int i) const = 0;
  virtual const Value& output(int i) = 0;
  virtual std::string output_name(int i) = 0;
  // Output i's element type from shape inference, else input 0's (for folding, which needs no shape).
  virtual int output_type(int i) const = 0;
  virtual void set_constant(int i, std::vector<double> data, std::vector<int64_t> shape, int elem_type) = 0;
  // Output i is `v` itself (Identity, Dropout, a Cast to the same dtype): no statement, unless the
  // output is a graph output, which gets a copy. False when it must be written instead.
  virtual bool alias(int i, const Value& v) = 0;

  // The TSL dtype of a value (bool as i8, double as double_dtype()); unsupported() for others
  // (i64 data, strings).
  DType dtype(const Value& v) const;
  // The TSL dtype an ONNX element type is held in (dtype_of, double as double_dtype()), if any.
  std::optional<DType> held_dtype(int elem_type) const;
  // The dtype this model's double data is held in (importer.cc, double_holding): f32, or f64 where
  // a double value known at import is beyond f32's range.
  DType double_dtype() const { return double_dtype_; }
  std::string dtype_name(const Value& v) const;

  // "NAME(i0, 0, r1)" for the value, or a literal for a one-element constant; records plain uses.
  virtual std::string read(const Value& v, const std::vector<std::string>& idx) = 0;
  // The same with numpy broadcasting: v is aligned right against `out_shape`, whose indices are
  // index(0..); a dimension of size 1 reads index 0.
  std::string read_broadcast(const Value& v, const std::vector<int64_t>& out_shape);
  // A constant the translator computes (Resize's interpolation matrices): read as data it becomes a
  // def input backed by OUT_weights/NAME.npy, like an initializer; its name derives from the node's
  // first output and `suffix`.
  virtual Value table(const std::string& suffix, std::vector<double> data, std::vector<int64_t> shape, int elem_type) = 0;
  // A fresh local's TSL name derived from the node's first output.
  virtual std::string temp(const std::string& suffix) = 0;
  virtual void emit(const Statement& s) = 0;

  // Attributes.
  bool has_attr(const std::string& name) const;
  int64_t attr_int(const std::string& name, int64_t fallback) const;
  double attr_float(const std::string& name, double fallback) const;
  std::string attr_string(const std::string& name, const std::string& fallback) const;
  std::vector<int64_t> attr_ints(const std::string& name, const std::vector<int64_t>& fallback) const;
  const onnx::AttributeProto* attr(const std::string& name) const;

  [[noreturn]] virtual void unsupported(const std::string& reason) const = 0;
  [[noreturn]] virtual void malformed(const std::string& reason) const = 0;
  // True when the TSL front end accepts built-in `name` (erf, pow, ... land as the language grows).
  virtual bool has_builtin(const std::string& name) const = 0;
};

// Whether a node reading `v` may be folded at import time: its data is known and it is not a graph
// input given with --value (such an input read as data stays an input of the def, so a node
// computing on it is translated, not replaced by its result).
inline bool foldable(const Value& v) { return v.data && !v.graph_input; }

// Index names (never a reserved word of the language).
std::string index(int k);
std::string reduction(int k);
std::string extra(int k);
std::vector<std::string> indices(size_t rank);
std::vector<IndexRange> ranges_of(const std::vector<int64_t>& shape);  // index(k) in 0:shape[k]
// A literal for value x of dtype t ("f32(0.5)", "i32(3)").
std::string literal(double x, DType t);
// "a, b, c"
std::string join(const std::vector<std::string>& parts, const std::string& sep = ", ");
int64_t element_count(const std::vector<int64_t>& shape);
// Normalises a possibly negative axis against rank; unsupported() when out of range.
int64_t axis_of(const Context& c, int64_t axis, int64_t rank);

// A local (a tensor of the def's body) shaped `shape` with like's dtype and a fresh name.
Value local(Context& c, const Value& like, const std::vector<int64_t>& shape, const std::string& suffix);
// Output i with its TSL name set.
Value output_value(Context& c, int i);

using Translator = std::function<void(Context&)>;

// The op-type table (ops_table.cc); nullptr for an op type without a translator.
const Translator* find_translator(const std::string& op_type);
// Registration of each family (defined in its ops_*.cc).
void add_elementwise_ops(std::map<std::string, Translator>& table);
void add_shape_ops(std::map<std::string, Translator>& table);
void add_contraction_ops(std::map<std::string, Translator>& table);
void add_pool_norm_ops(std::map<std::string, Translator>& table);
void add_index_ops(std::map<std::string, Translator>& table);
void add_resize_ops(std::map<std::string, Translator>& table);
// Y (y.tsl, shaped and typed as y) = the numpy MatMul of a and b; the convolution of x by wt with
// the node's Conv attributes (pads, strides, dilations, group) plus input bias_input where present
// (ops_contraction.cc; the integer and quantized forms in ops_quantize.cc feed them zero-point
// shifted i32 locals).
void emit_matmul(Context& c, const Value& a, const Value& b, const Value& y);
void emit_conv(Context& c, const Value& x, const Value& wt, const Value& y, int bias_input);
void add_quantize_ops(std::map<std::string, Translator>& table);
void add_einsum_ops(std::map<std::string, Translator>& table);
void add_window_ops(std::map<std::string, Translator>& table);
void add_bitshift_ops(std::map<std::string, Translator>& table);
void add_topk_ops(std::map<std::string, Translator>& table);
void add_recurrent_ops(std::map<std::string, Translator>& table);
void add_det_ops(std::map<std::string, Translator>& table);
void add_optimizer_ops(std::map<std::string, Translator>& table);
void add_stft_ops(std::map<std::string, Translator>& table);
void add_nms_ops(std::map<std::string, Translator>& table);
// Gather whose indices are data (not known at import time): a one-hot sum over the gathered axis (ops_index.cc).
void translate_gather_one_hot(Context& c);

}  // namespace tessel::onnx_import
