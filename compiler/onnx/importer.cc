// The importer: ModelProto -> shape inference -> one Context per node -> TSL text and manifest.
// The Importer (model_importer.h) runs here: values collected and typed, graph inputs and outputs declared,
// each node translated through its Context, constants folded, the def and its manifest written;
// the node replacements (Loop / Scan / If / sequence / optional / GatherND) are importer_rewrites.cc.
#include "compiler/onnx/importer.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include "compiler/frontend/frontend.h"
#include "compiler/onnx/gather_rewrite.h"
#include "compiler/onnx/loop_unroll.h"
#include "compiler/onnx/model_importer.h"
#include "compiler/onnx/sequence_rewrite.h"
#include "compiler/onnx/tensor_proto.h"
#include "compiler/onnx/translate.h"
#include "compiler/onnx/value_file.h"
#include "isa/base/error.h"
#include "isa/base/f16.h"
#include "isa/base/file_io.h"

namespace tessel::onnx_import {
namespace {

// Every name the language reserves (dtypes, built-ins present and planned, keywords).
const std::set<std::string> kReserved = {
    "f16", "bf16", "f32", "f64", "i8", "u8", "i32", "def", "where", "in", "select", "min", "max", "abs", "exp", "log", "sqrt",
    "rsqrt", "tanh", "erf", "pow", "floor", "ceil", "round", "sign", "sin", "cos", "tan", "asin", "acos", "atan",
    "sinh", "cosh", "asinh", "acosh", "atanh", "sigmoid", "cast", "relu", "gelu"};

// A name of the form letter + digits could be an index of a statement (i0, r1, k2): never a tensor.
bool looks_like_index(const std::string& s) {
  if (s.size() < 2 || !std::islower(static_cast<unsigned char>(s[0]))) return false;
  for (size_t i = 1; i < s.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
  return true;
}

// ONNX double data is held in f32, as every target computes in it, unless a double value known at
// import (an initializer, a --value tensor, a Constant node's value) is finite and beyond f32's
// range: then in f64 (c and the GPU targets; an NPU description refuses f64 naming the tensor).
DType double_holding(const onnx::GraphProto& g) {
  auto beyond_f32 = [](const onnx::TensorProto& t) {
    if (t.data_type() != onnx::TensorProto::DOUBLE) return false;
    for (double x : values(t, "double data"))
      if (std::isfinite(x) && std::fabs(x) > double(std::numeric_limits<float>::max())) return true;
    return false;
  };
  for (const auto& t : g.initializer())
    if (beyond_f32(t)) return DType::F64;
  for (const auto& n : g.node())
    if (n.op_type() == "Constant")
      for (const auto& a : n.attribute())
        if (a.has_t() && beyond_f32(a.t())) return DType::F64;
  return DType::F32;
}

}  // namespace

std::string identifier(const std::string& onnx_name) {
  // a function body expanded into the graph prefixes each name with OP_GRAPH_function_: keep the body's name
  const size_t fn = onnx_name.rfind("_function_");
  const std::string onnx = fn != std::string::npos && fn + 10 < onnx_name.size() ? onnx_name.substr(fn + 10) : onnx_name;
  std::string s;
  for (char ch : onnx) s += std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' ? ch : '_';
  while (s.size() > 1 && s[0] == '_' && s[1] == '_') s.erase(0, 1);
  if (s.empty() || s == "_") s = "t";
  if (std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '_') s = "t" + s;
  if (kReserved.count(s) || looks_like_index(s)) s = "t_" + s;
  return s;
}

std::string Importer::unique(const std::string& base) {
  std::string n = base;
  for (int k = 1; names_.count(n); ++k) n = base + "_" + std::to_string(k);
  names_.insert(n);
  return n;
}

void Importer::record_type(const onnx::ValueInfoProto& vi) {
  if (!vi.type().has_tensor_type()) return;
  Value& v = values_[vi.name()];
  v.onnx = vi.name();
  const auto& tt = vi.type().tensor_type();
  if (tt.elem_type()) v.elem_type = tt.elem_type();
  if (v.has_shape || !tt.has_shape()) return;
  std::vector<int64_t> shape;
  for (const auto& d : tt.shape().dim()) {
    if (!d.has_dim_value() || d.dim_value() < 0) return;
    shape.push_back(d.dim_value());
  }
  v.shape = shape;
  v.has_shape = true;
}

// A graph input given with --value has the given tensor's shape: a declared shape with symbolic
// dimensions (dim_param "N") or none is made static, so ONNX's inference carries it to the nodes
// reading the input (an Identity of it, say). A declared rank that differs is left for the reader.
void fix_declared_shape(onnx::GraphProto& g, const std::string& name, const onnx::TensorProto& t) {
  for (auto& in : *g.mutable_input()) {
    if (in.name() != name || !in.type().has_tensor_type()) continue;
    auto* tt = in.mutable_type()->mutable_tensor_type();
    if (tt->has_shape() && tt->shape().dim_size() != t.dims_size()) return;
    auto* shape = tt->mutable_shape();
    shape->clear_dim();
    for (int64_t d : t.dims()) shape->add_dim()->set_dim_value(d);
  }
}

void Importer::prepare() {
  for (const auto& op : model_.opset_import())
    if (op.domain().empty() || op.domain() == "ai.onnx") opset_ = int(op.version());
  if (!model_.has_graph()) throw UserError(model_name_ + ": not an ONNX model (no graph)");
  auto* g = model_.mutable_graph();
  read_value_files();
  for (const auto& [name, t] : given_) {
    if (element_of_.count(name)) continue;  // a sequence's or optional's element: added by read_value_files
    bool is_input = false;
    for (const auto& in : g->input()) is_input |= in.name() == name;
    if (!is_input) throw UserError("--value: '" + name + "' is not an input of " + model_name_);
    auto* init = g->add_initializer();
    *init = t;
    init->set_name(name);
    fix_declared_shape(*g, name, t);
  }
  double_dtype_ = double_holding(*g);
  try {
    onnx::ShapeInferenceOptions options{false, 0, true};
    onnx::shape_inference::InferShapes(model_, onnx::OpSchemaRegistry::Instance(), options);
  } catch (const std::exception&) {
    // shapes ONNX cannot infer stay unknown; a node needing one is refused as dynamic
  }
}

// --value files read as their inputs' declared types (value_file.h): a tensor joins the tensors
// given; a sequence's elements and an optional's tensor become given tensors of their own (fresh
// names, initializers for shape inference), held in structured_ until declare_graph_io.
void Importer::read_value_files() {
  auto* g = model_.mutable_graph();
  std::set<std::string> taken;
  for (const auto& in : g->input()) taken.insert(in.name());
  for (const auto& out : g->output()) taken.insert(out.name());
  for (const auto& t : g->initializer()) taken.insert(t.name());
  for (const auto& n : g->node())
    for (const auto& o : n.output()) taken.insert(o);
  for (const auto& [name, path] : value_files_) {
    const onnx::ValueInfoProto* in = nullptr;
    for (const auto& i : g->input())
      if (i.name() == name) in = &i;
    if (!in) throw UserError("--value: '" + name + "' is not an input of " + model_name_);
    if (given_.count(name)) throw UserError("--value: '" + name + "' is given twice");
    GivenValue v = read_value_file(path, in->type(), "--value " + name);
    if (!v.optional && !v.sequence) {
      given_[name] = std::move(v.tensors.at(0));
      continue;
    }
    for (size_t j = 0; j < v.tensors.size(); ++j) {
      const std::string e = fresh_name(v.sequence ? name + "_" + std::to_string(j) : name + "_value", taken);
      onnx::TensorProto& t = v.tensors[j];
      t.set_name(e);
      given_[e] = t;
      *g->add_initializer() = t;
      element_of_[e] = {name, v.sequence ? int(j) : -1, v.optional};
    }
    structured_[name] = std::move(v);
  }
}

void Importer::collect_values() {
  const auto& g = model_.graph();
  for (const auto& t : g.initializer()) {
    Value& v = values_[t.name()];
    v.onnx = t.name();
    v.elem_type = t.data_type();
    v.shape = dims(t);
    v.has_shape = true;
    v.data = values(t, model_name_ + ": initializer '" + t.name() + "'");
    v.initializer = !given_.count(t.name());
  }
  for (const auto& in : g.input()) {
    const bool init = values_.count(in.name()) && values_[in.name()].initializer;
    record_type(in);
    if (!init) values_[in.name()].graph_input = true;
  }
  for (const auto& vi : g.value_info()) record_type(vi);
  for (const auto& out : g.output()) record_type(out);
}

void Importer::declare_graph_io() {
  const auto& g = model_.graph();
  for (const auto& in : g.input()) {
    Value& v = values_[in.name()];
    if (!v.graph_input) continue;
    v.tsl = unique(identifier(in.name()));
    if (given_.count(in.name()) || structured_.count(in.name())) continue;  // a def input only if read as data (materialize)
    if (in.type().has_sequence_type() || in.type().has_optional_type())
      throw UserError(model_name_ + ": input '" + in.name() + "': unsupported: a " + (in.type().has_sequence_type() ? "sequence" : "optional") +
                      " graph input without its value (its length and shapes are data: give it with --value " + in.name() + "=FILE.pb)");
    if (!v.has_shape) throw UserError(model_name_ + ": input '" + in.name() + "': unsupported: dynamic or unknown shape");
    if (dtype_of(v.elem_type)) def_inputs_.push_back(in.name());  // others (i64 shapes...): refused where read as data
  }
  hold_structured_inputs();
  for (const auto& out : g.output()) {
    if (out.type().has_sequence_type() || out.type().has_optional_type()) {
      structured_outputs_.push_back(out.name());  // its elements become outputs: write_structured_outputs
      continue;
    }
    Value& v = values_[out.name()];
    if (v.graph_input) throw UserError(model_name_ + ": output '" + out.name() + "': unsupported: an output that is a graph input");
    if (v.initializer) continue;  // a constant output: finish_outputs
    v.tsl = unique(identifier(out.name()));
    def_outputs_.push_back(out.name());
  }
}

const Value& Importer::input(int i) const {
  if (!has_input(i)) malformed("input " + std::to_string(i) + " is missing");
  const auto it = values_.find(node_->input(i));
  if (it == values_.end() || (it->second.tsl.empty() && !it->second.data))
    malformed("input '" + node_->input(i) + "' is not produced by any earlier node, graph input or initializer");
  return it->second;
}

std::vector<double> Importer::constant(int i, const std::string& what) const {
  const Value& v = input(i);
  if (v.data) return *v.data;
  // computed from --value inputs only (the expanded window functions' sizes): its value, the node still translated
  const auto known = const_cast<Importer*>(this)->evaluate(v.onnx, 0);
  if (!known) unsupported(what + " ('" + v.onnx + "') is not a constant (give its value with --value NAME=FILE.pb)");
  return *known;
}

// The value of `name` where every value it depends on is known at import time but it was not folded,
// because it reads a --value graph input (which stays an input of the def): its producer's
// translator runs once more, in a sandbox, with each input's value known (recursively) and no input
// marked a graph input, so it folds; everything that run wrote (statements, names, weights, the
// values it touched) is put back. nullopt where some producer does not fold (a translator that emits
// statements even for constants, a refusal) or the chain is deeper than 64 nodes.
std::optional<std::vector<double>> Importer::evaluate(const std::string& name, int depth) {
  if (const auto it = values_.find(name); it != values_.end() && it->second.data) return it->second.data;
  if (const auto it = evaluated_.find(name); it != evaluated_.end()) return it->second;
  const auto p = producer_.find(name);
  if (depth > 64 || p == producer_.end() || !find_translator(p->second->op_type())) return std::nullopt;
  const onnx::NodeProto& n = *p->second;
  std::map<std::string, std::vector<double>> known;
  for (const auto& in : n.input())
    if (!in.empty()) {
      auto d = evaluate(in, depth + 1);
      if (!d) return std::nullopt;
      known[in] = std::move(*d);
    }
  std::map<std::string, Value> touched;  // the node's inputs and outputs as they are
  for (const auto& s : n.input()) if (!s.empty() && values_.count(s)) touched[s] = values_[s];
  for (const auto& s : n.output()) if (!s.empty() && values_.count(s)) touched[s] = values_[s];
  std::set<std::string> keys;
  for (const auto& [k, v] : values_) keys.insert(k);
  const auto names = names_, written = written_, aliases = aliases_;
  const auto def_inputs = def_inputs_;
  const auto uses = uses_;
  const size_t body = body_.size();
  const ImportResult result = result_;
  const onnx::NodeProto* current = node_;
  for (auto& [in, d] : known) {
    Value& v = values_[in];
    v.data = d;
    v.graph_input = false;
  }
  node_ = &n;
  bool folded = true;
  try {
    (*find_translator(n.op_type()))(*this);
  } catch (const UserError&) {
    folded = false;
  }
  for (const auto& s : n.output())
    if (!s.empty()) {
      if (folded && values_[s].data) evaluated_[s] = *values_[s].data;
      else folded = false;
    }
  std::erase_if(values_, [&](const auto& e) { return !keys.count(e.first); });
  for (auto& [k, v] : touched) values_[k] = std::move(v);
  names_ = names, written_ = written, aliases_ = aliases, def_inputs_ = def_inputs, uses_ = uses;
  body_.resize(body);
  result_ = result;
  node_ = current;
  if (!folded) return std::nullopt;
  return evaluated_.at(name);
}

bool Importer::alias(int i, const Value& src) {
  if (!has_output(i) || src.tsl.empty() || src.data) return false;
  for (const auto& out : model_.graph().output())
    if (out.name() == node_->output(i)) return false;
  if (src.graph_input && given_.count(src.onnx) && std::find(def_inputs_.begin(), def_inputs_.end(), src.onnx) == def_inputs_.end()) {
    dtype(src);
    def_inputs_.push_back(src.onnx);  // a --value input read through the alias stays an input (unread ones are dropped at the end)
  }
  Value& v = values_[node_->output(i)];
  const int elem = v.elem_type ? v.elem_type : src.elem_type;
  v = src;
  v.onnx = node_->output(i);
  v.elem_type = elem;
  v.graph_input = false;
  v.initializer = false;
  aliases_.insert(v.onnx);
  body_.push_back("  #   " + v.onnx + " is " + v.tsl + " (no copy)");
  return true;
}

int Importer::output_type(int i) const {
  const auto it = has_output(i) ? values_.find(node_->output(i)) : values_.end();
  if (it != values_.end() && it->second.elem_type) return it->second.elem_type;
  return has_input(0) ? input(0).elem_type : 0;
}

// ONNX's shape inference once more, with every constant folded so far as an initializer: a shape
// computed by Shape/Gather/Concat chains becomes static where data propagation alone did not see it.
// Constants larger than this are left out of the second inference (weights, not shape arithmetic):
// copying them into the model copy would cost memory and no shape depends on their values.
constexpr size_t kMaxReinferredElements = size_t(1) << 16;

void Importer::reinfer() {
  onnx::ModelProto m = model_;
  auto* g = m.mutable_graph();
  // a value the first inference left symbolic (a Range of a --value input's size: 'unk__0') would keep its
  // symbol through the merge: inferred afresh
  auto* info = g->mutable_value_info();
  for (int k = info->size(); k-- > 0;) {
    const auto& tt = info->Get(k).type().tensor_type();
    bool fixed = tt.has_shape();
    for (const auto& d : tt.shape().dim()) fixed &= d.has_dim_value();
    if (!fixed) info->DeleteSubrange(k, 1);
  }
  std::set<std::string> have;
  for (const auto& t : g->initializer()) have.insert(t.name());
  for (const auto& [name, v] : values_) {
    if (!v.data || have.count(name) || v.data->size() > kMaxReinferredElements) continue;
    onnx::TensorProto t;
    t.set_name(name);
    t.set_data_type(v.elem_type);
    for (int64_t d : v.shape) t.add_dims(d);
    bool ok = true;
    for (double x : *v.data) switch (v.elem_type) {
        case onnx::TensorProto::INT64: t.add_int64_data(int64_t(x)); break;
        case onnx::TensorProto::FLOAT: t.add_float_data(float(x)); break;
        case onnx::TensorProto::DOUBLE: t.add_double_data(x); break;
        case onnx::TensorProto::INT32: case onnx::TensorProto::INT8: case onnx::TensorProto::UINT8:
        case onnx::TensorProto::BOOL: t.add_int32_data(int32_t(x)); break;
        default: ok = false;
      }
    if (ok) *g->add_initializer() = std::move(t);
  }
  try {
    onnx::ShapeInferenceOptions options{false, 0, true};
    onnx::shape_inference::InferShapes(m, onnx::OpSchemaRegistry::Instance(), options);
  } catch (const std::exception&) {
    return;
  }
  for (const auto& vi : m.graph().value_info()) record_type(vi);
  for (const auto& vi : m.graph().output()) record_type(vi);
}

const Value& Importer::output(int i) {
  if (!has_output(i)) malformed("output " + std::to_string(i) + " is missing");
  if (!values_[node_->output(i)].has_shape && reinferred_at_ != node_) {
    reinferred_at_ = node_;
    reinfer();
  }
  Value& v = values_[node_->output(i)];
  v.onnx = node_->output(i);
  if (!v.has_shape) unsupported("dynamic or unknown shape of '" + v.onnx + "' (ONNX shape inference gives no static shape)");
  for (int64_t d : v.shape)
    if (d == 0) unsupported("'" + v.onnx + "' is an empty tensor");
  return v;
}

std::string Importer::output_name(int i) {
  output(i);
  Value& v = values_[node_->output(i)];
  if (v.tsl.empty()) v.tsl = unique(identifier(v.onnx));
  return v.tsl;
}

void Importer::set_constant(int i, std::vector<double> data, std::vector<int64_t> shape, int elem_type) {
  if (!has_output(i)) return;
  Value& v = values_[node_->output(i)];
  v.onnx = node_->output(i);
  v.data = std::move(data);
  v.shape = std::move(shape);
  v.has_shape = true;
  v.elem_type = elem_type;
}

std::string Importer::materialize(Value& v) {
  const DType t = dtype(v);
  NpyArray a;
  a.dtype = t;
  a.shape = v.shape;
  a.data.resize(size_t(element_count(v.shape) * dtype_bytes(t)));
  for (size_t k = 0; k < v.data->size(); ++k) {
    const double x = (*v.data)[k];
    uint8_t* p = a.data.data() + k * dtype_bytes(t);
    switch (t) {
      case DType::F32: {
        const float f = v.elem_type == onnx::TensorProto::DOUBLE ? checked_f32(x, model_name_ + ": '" + v.onnx + "'", int64_t(k)) : float(x);
        std::memcpy(p, &f, 4);
        break;
      }
      case DType::F64: std::memcpy(p, &x, 8); break;
      case DType::I32: { const int32_t q = checked_i32(x, model_name_ + ": '" + v.onnx + "'", int64_t(k)); std::memcpy(p, &q, 4); break; }
      case DType::F16: { const uint16_t h = f32_to_f16_bits(float(x)); std::memcpy(p, &h, 2); break; }
      case DType::BF16: { const float f = float(x); uint32_t b; std::memcpy(&b, &f, 4); const uint16_t h = uint16_t((b + 0x7fff + ((b >> 16) & 1)) >> 16); std::memcpy(p, &h, 2); break; }
      case DType::I8: *p = uint8_t(int8_t(x)); break;
      case DType::U8: *p = uint8_t(x); break;
    }
  }
  v.tsl = unique(identifier(v.onnx));
  v.initializer = true;
  result_.weights[v.tsl] = std::move(a);
  def_inputs_.push_back(v.onnx);
  return v.tsl;
}

std::string Importer::read(const Value& cv, const std::vector<std::string>& idx) {
  TESSEL_CHECK(idx.size() == cv.shape.size(), "onnx import: an access of '" + cv.onnx + "' has " + std::to_string(idx.size()) +
                                                  " indices for rank " + std::to_string(cv.shape.size()));
  std::string name = cv.tsl;
  auto it = values_.find(cv.onnx);
  Value* v = it != values_.end() && it->second.tsl == cv.tsl ? &it->second : nullptr;
  if (v && v->graph_input && !given_.count(v->onnx)) {
    dtype(*v);  // an input tessel cannot hold (i64 data...) is refused by the node reading it
  } else if (v && v->graph_input && given_.count(v->onnx) &&
      std::find(def_inputs_.begin(), def_inputs_.end(), v->onnx) == def_inputs_.end()) {
    dtype(*v);
    def_inputs_.push_back(v->onnx);  // a --value input read as data stays an input
  } else if (v && name.empty() && v->data) {
    if (v->data->empty()) unsupported("'" + v->onnx + "' is an empty tensor");
    if (v->data->size() == 1) {
      if (dtype(*v) == DType::I32) checked_i32((*v->data)[0], model_name_ + ": '" + v->onnx + "'", 0);
      return literal((*v->data)[0], dtype(*v));
    }
    name = materialize(*v);
  }
  TESSEL_CHECK(!name.empty(), "onnx import: '" + cv.onnx + "' has no TSL tensor");
  for (size_t k = 0; k < idx.size(); ++k)
    if (!idx[k].empty() && std::isalpha(static_cast<unsigned char>(idx[k][0])) &&
        idx[k].find_first_of(" +-*/%()") == std::string::npos)
      uses_[idx[k]].push_back(cv.shape[k]);
  return name + "(" + join(idx) + ")";
}

Value Importer::table(const std::string& suffix, std::vector<double> data, std::vector<int64_t> shape, int elem_type) {
  const std::string base = (node_->output_size() && !node_->output(0).empty() ? node_->output(0) : "t") + "_" + suffix;
  std::string name = base;
  for (int k = 1; values_.count(name); ++k) name = base + "_" + std::to_string(k);
  Value& v = values_[name];
  v.onnx = name;
  v.elem_type = elem_type;
  v.shape = std::move(shape);
  v.has_shape = true;
  v.data = std::move(data);
  return v;
}

std::string Importer::temp(const std::string& suffix) {
  const std::string base = node_->output_size() && !node_->output(0).empty() ? identifier(node_->output(0)) : "t";
  return unique(base + "_" + suffix);
}

void Importer::emit(const Statement& s) {
  const Value* out = nullptr;
  for (const auto& name : def_outputs_)
    if (values_[name].tsl == s.target) out = &values_[name];
  std::vector<std::string> where;
  for (const IndexRange& r : s.ranges) {
    const auto& u = uses_[r.name];
    bool covered = r.lo == 0 && !u.empty();
    for (int64_t e : u) covered &= e == r.hi;
    if (out && r.lo == 0) {
      bool agrees = true;
      for (int64_t e : u) agrees &= e == r.hi;
      for (size_t k = 0; k < s.lhs.size(); ++k)
        if (s.lhs[k] == r.name && k < out->shape.size() && out->shape[k] == r.hi && agrees) covered = true;
    }
    if (!covered) where.push_back(r.name + " in " + std::to_string(r.lo) + ":" + std::to_string(r.hi));
  }
  uses_.clear();
  std::string line = "  " + s.target + "(" + join(s.lhs) + ") " + s.assign + " " + s.rhs;
  if (!where.empty()) line += "\n      where " + join(where);
  body_.push_back(line);
  written_.insert(s.target);
  ++result_.statements;
}

bool Importer::has_builtin(const std::string& name) const {
  auto it = builtins_.find(name);
  if (it != builtins_.end()) return it->second;
  bool ok = true;
  try {
    frontend::parse_module("def probe(f32[2] X) -> (f32[2] Y) {\n  Y(i) = " + name + "(X(i)" + (name == "pow" ? ", X(i)" : "") + ")\n}\n",
                           "probe.tsl");
  } catch (const UserError&) {
    ok = false;
  }
  return builtins_[name] = ok;
}

void Importer::translate_node(const onnx::NodeProto& n) {
  node_ = &n;
  const bool training = n.domain() == "ai.onnx.preview.training";  // its optimizers are keyed by domain
  if (!n.domain().empty() && n.domain() != "ai.onnx" && !training) unsupported("operator of domain '" + n.domain() + "'");
  const Translator* t = find_translator(training ? n.domain() + "." + n.op_type() : n.op_type());
  static const std::set<std::string> random = {"Bernoulli", "RandomUniform", "RandomUniformLike", "RandomNormal", "RandomNormalLike", "Multinomial"};
  if (!t && !training && random.count(n.op_type()))
    unsupported("random values: " + n.op_type() +
                " draws from a generator; ONNX's expected data came from numpy's, which its backend runner compares element by element and no "
                "other generator reproduces (tessel has no random source in the language)");
  if (!t) unsupported("no translation of " + n.op_type() + (training ? " (domain '" + n.domain() + "')" : std::string()) + " into the language");
  for (int i = 0; i < n.input_size(); ++i)
    if (has_input(i)) input(i);
  body_.push_back("  # node " + (n.name().empty() ? n.output_size() ? n.output(0) : std::string() : n.name()) + " (" + n.op_type() + ")");
  const size_t before = body_.size();
  try {
    (*t)(*this);
  } catch (const UserError&) {
    throw;
  } catch (const InternalError&) {
    throw;
  } catch (const std::exception& e) {
    malformed(std::string("cannot translate: ") + e.what());
  }
  if (body_.size() == before) body_.pop_back();  // folded: no statement
  for (int i = 0; i < n.output_size(); ++i) {
    if (!has_output(i)) continue;
    const Value& v = values_[n.output(i)];
    TESSEL_CHECK(v.data || written_.count(v.tsl) || aliases_.count(n.output(i)), "onnx import: the translator of " + n.op_type() + " wrote no value for output '" + n.output(i) + "'");
  }
  ++result_.nodes;
  node_ = nullptr;
}

// Graph outputs that no statement wrote (a constant, an initializer) are written from their values.
void Importer::finish_outputs() {
  for (const auto& out : model_.graph().output()) {
    Value& v = values_[out.name()];
    if (!v.data || (!v.tsl.empty() && written_.count(v.tsl))) continue;
    if (v.tsl.empty() || v.initializer) {
      v.tsl = unique(identifier(out.name()) + (v.initializer ? "_out" : ""));
      def_outputs_.push_back(out.name());
    }
    if (v.data->empty()) throw UserError(model_name_ + ": output '" + out.name() + "': unsupported: an empty tensor");
    const DType t = dtype(v);
    bool uniform = true;
    for (double x : *v.data) uniform &= x == v.data->front();
    Statement s{v.tsl, indices(v.shape.size()), "=", "", ranges_of(v.shape)};
    body_.push_back("  # constant output " + out.name());
    if (uniform) {
      if (t == DType::I32) checked_i32(v.data->front(), model_name_ + ": output '" + out.name() + "'", 0);
      s.rhs = literal(v.data->front(), t);
    } else {
      const std::string key = out.name() + "_value";
      Value& c = values_[key] = v;
      c.onnx = key;
      c.tsl.clear();
      c.initializer = false;
      materialize(c);
      s.rhs = read(c, s.lhs);
    }
    emit(s);
  }
}

std::string Importer::signature_entry(const Value& v) const {
  std::vector<std::string> d;
  for (int64_t x : v.shape) d.push_back(std::to_string(x));
  return dtype_name(v) + "[" + join(d) + "] " + v.tsl;
}

nlohmann::json Importer::manifest_entry(const Value& v, bool with_file) const {
  nlohmann::json j = {{"tsl", v.tsl}, {"onnx", v.onnx}, {"dtype", dtype_name(v)}, {"shape", v.shape}};
  const auto part = element_of_.find(v.onnx);
  if (part != element_of_.end()) {
    if (part->second.element >= 0) j["element"] = part->second.element;
    if (part->second.optional) j["optional"] = true;
  }
  if (v.graph_input) {  // its position among the graph's inputs that are not initializers (ONNX tests' input_K.pb)
    const std::string& input = part != element_of_.end() ? part->second.parent : v.onnx;
    int k = 0;
    for (const auto& in : model_.graph().input()) {
      if (in.name() == input) j["input_index"] = k;
      if (values_.at(in.name()).graph_input) ++k;
    }
  }
  if (with_file) j["file"] = v.tsl + ".npy";
  return j;
}

// Does a statement of the body read tensor `tsl` (the name followed by '(', not inside a longer name)?
bool Importer::read_in_body(const std::string& tsl) const {
  const std::string call = tsl + "(";
  for (const auto& line : body_)
    for (size_t at = line.find(call); at != std::string::npos; at = line.find(call, at + 1))
      if (at == 0 || !(std::isalnum(static_cast<unsigned char>(line[at - 1])) || line[at - 1] == '_')) return true;
  return false;
}

std::string Importer::program_text() const {
  std::vector<std::string> ins, outs;
  for (const auto& n : def_inputs_) ins.push_back(signature_entry(values_.at(n)));
  for (const auto& n : def_outputs_) outs.push_back(signature_entry(values_.at(n)));
  std::string text = "# imported from " + std::filesystem::path(model_name_).filename().string() + " by tessel import (ONNX opset " +
                     std::to_string(opset_) + ")\n";
  text += "def " + result_.def_name + "(\n    " + join(ins, ",\n    ") + ")\n  -> (" + join(outs, ",\n      ") + ") {\n";
  for (const auto& line : body_) text += line + "\n";
  return text + "}\n";
}

ImportResult Importer::run() {
  prepare();
  collect_values();
  declare_graph_io();
  if (def_outputs_.empty() && model_.graph().output_size() == 0) throw UserError(model_name_ + ": the graph has no outputs");
  for (const auto& n : model_.graph().node())
    for (const auto& out : n.output()) producer_[out] = &n;
  for (int k = 0; k < model_.graph().node_size(); ++k) {
    const onnx::NodeProto& n = model_.graph().node(k);
    const bool standard = n.domain().empty() || n.domain() == "ai.onnx";
    if (standard && n.op_type() == "Loop") {
      unroll(k--);  // node k is now the body's first iteration
      continue;
    }
    if (standard && n.op_type() == "Scan") {
      unroll_scan_node(k--);  // node k is now the first node of the first step
      continue;
    }
    if (standard && n.op_type() == "If") {
      inline_if(k--);  // node k is now the first node of the branch taken
      continue;
    }
    if (standard && n.op_type() == "Identity" && n.input_size() == 1 && n.output_size() == 1 &&
        (sequences_.count(n.input(0)) || optionals_.count(n.input(0)))) {
      if (sequences_.count(n.input(0))) sequences_[n.output(0)] = sequences_.at(n.input(0));  // an Identity of a sequence (a branch's output)
      if (optionals_.count(n.input(0))) optionals_[n.output(0)] = optionals_.at(n.input(0));
      continue;
    }
    if (standard && is_gather_rewrite_op(n.op_type())) {
      rewrite_gather(k--);  // node k is now the Reshape or Gather replacing it
      continue;
    }
    if (standard && is_optional_op(n.op_type())) {
      rewrite_optional(k--);  // node k is now the node replacing it, if any
      continue;
    }
    if (standard && is_sequence_op(n.op_type())) {
      rewrite_sequence(k--);  // node k is now the first tensor node replacing it
      continue;
    }
    translate_node(n);
  }
  finish_outputs();
  write_structured_outputs();
  if (def_outputs_.empty()) throw UserError(model_name_ + ": unsupported: no tensor to compute (every output is an empty sequence or an optional holding nothing)");
  // a graph input no statement reads (CastLike's target_type: only its type matters) is no def input
  std::erase_if(def_inputs_, [&](const std::string& n) { return !read_in_body(values_.at(n).tsl); });
  for (const auto& n : def_outputs_) {
    const Value& v = values_.at(n);
    if (sequences_.count(n)) throw UserError(model_name_ + ": output '" + n + "': unsupported: a sequence output (the def's outputs are tensors)");
    if (!written_.count(v.tsl)) throw UserError(model_name_ + ": output '" + n + "' is not produced by any node");
    if (v.elem_type == onnx::TensorProto::BOOL) {}  // held as i8 0/1
  }
  std::string def = identifier(model_.graph().name().empty() ? "model" : model_.graph().name());
  result_.def_name = def;
  for (const auto& n : def_inputs_) {
    const Value& v = values_.at(n);
    result_.inputs.push_back(manifest_entry(v, v.initializer));
  }
  for (const auto& n : def_outputs_) {
    nlohmann::json j = manifest_entry(values_.at(n), false);
    const auto part = element_of_.find(n);
    const std::string& output = part != element_of_.end() ? part->second.parent : n;
    for (int k = 0; k < model_.graph().output_size(); ++k)
      if (model_.graph().output(k).name() == output) j["output_index"] = k;
    result_.outputs.push_back(j);
  }
  if (result_.inputs.is_null()) result_.inputs = nlohmann::json::array();
  result_.tsl = program_text();
  return result_;
}

ImportResult import_model(onnx::ModelProto model, const std::string& model_name, const std::map<std::string, onnx::TensorProto>& values,
                          const std::map<std::string, std::string>& value_files) {
  Importer im(model, model_name, values, value_files);
  return im.run();
}

ImportResult import_file(const std::string& path, const std::map<std::string, onnx::TensorProto>& values,
                         const std::map<std::string, std::string>& value_files) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(path + ": cannot open the ONNX model");
  onnx::ModelProto m;
  if (!m.ParseFromIstream(&in)) throw UserError(path + ": not an ONNX model (the protobuf does not parse)");
  if (!m.has_graph() || (m.graph().node_size() == 0 && m.graph().output_size() == 0))
    throw UserError(path + ": not an ONNX model (no graph)");
  return import_model(std::move(m), path, values, value_files);
}

void write_import(const ImportResult& r, const std::string& out_tsl, const std::string& source) {
  namespace fs = std::filesystem;
  const fs::path tsl(out_tsl);
  const fs::path stem = tsl.parent_path() / tsl.stem();
  const std::string weights_dir = stem.filename().string() + "_weights";
  write_file(out_tsl, r.tsl, "-o");
  nlohmann::json inputs = r.inputs;
  for (auto& j : inputs)
    if (j.contains("file")) j["file"] = weights_dir + "/" + j["file"].get<std::string>();
  nlohmann::json m = {{"def", r.def_name}, {"source", source}, {"tsl", tsl.filename().string()}, {"inputs", inputs},
                      {"outputs", r.outputs}, {"initializers_dir", weights_dir}};
  if (!r.structured_outputs.empty()) m["structured_outputs"] = r.structured_outputs;
  write_file(stem.string() + ".json", m.dump(2) + "\n", "-o");
  std::error_code ec;
  const fs::path wd = tsl.parent_path() / weights_dir;
  fs::create_directories(wd, ec);
  if (ec) throw UserError("-o: cannot create " + wd.string() + " (" + ec.message() + ")");
  for (const auto& [name, a] : r.weights) write_npy((wd / (name + ".npy")).string(), a);
}

}  // namespace tessel::onnx_import
