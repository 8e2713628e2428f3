// GatherND and Compress as Reshape + Gather of constant indices (contract in gather_rewrite.h).
#include "compiler/onnx/gather_rewrite.h"

#include <algorithm>

#include "compiler/onnx/loop_unroll.h"
#include "compiler/onnx/sample_rewrite.h"

namespace tessel::onnx_import {

using TP = onnx::TensorProto;

namespace {

int64_t product(const std::vector<int64_t>& v, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t k = from; k < to; ++k) p *= v[k];
  return p;
}

}  // namespace

std::string add_reshape(std::vector<onnx::NodeProto>& nodes, const std::string& x, const std::vector<int64_t>& shape, const std::string& base,
                    std::set<std::string>& taken, int opset) {
  const std::string out = fresh_name(base + "_flat", taken);
  if (opset >= 5) {
    const std::string s = fresh_name(base + "_flat_shape", taken);
    nodes.push_back(constant_node(s, TP::INT64, {int64_t(shape.size())}, shape));
    nodes.push_back(simple_node("Reshape", {x, s}, out));
  } else {
    onnx::NodeProto n = simple_node("Reshape", {x}, out);
    auto* a = n.add_attribute();
    a->set_name("shape");
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t d : shape) a->add_ints(d);
    nodes.push_back(std::move(n));
  }
  return out;
}

void add_gather(std::vector<onnx::NodeProto>& nodes, const std::string& x, const std::vector<int64_t>& positions,
            const std::vector<int64_t>& dims, int64_t axis, const std::string& y, std::set<std::string>& taken) {
  const std::string ind = fresh_name(y + "_positions", taken);
  nodes.push_back(constant_node(ind, TP::INT64, dims, positions));
  onnx::NodeProto g = simple_node("Gather", {x, ind}, y);
  auto* a = g.add_attribute();
  a->set_name("axis");
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(axis);
  nodes.push_back(std::move(g));
}

namespace {

const Value& shaped_input(const Context& c, int i) {
  const Value& v = c.input(i);
  if (!v.has_shape) c.unsupported("dynamic or unknown shape of '" + v.onnx + "'");
  return v;
}

std::vector<onnx::NodeProto> gather_nd(Context& c, std::set<std::string>& taken, int opset) {
  const Value &x = shaped_input(c, 0), &iv = shaped_input(c, 1);
  const std::vector<int64_t> ind = c.constant_ints(1, "GatherND's indices");
  const size_t r = x.shape.size(), q = iv.shape.size();
  const int64_t b = c.attr_int("batch_dims", 0);
  if (q < 1 || b < 0 || size_t(b) >= q || size_t(b) >= r) c.malformed("batch_dims " + std::to_string(b) + " for ranks " + std::to_string(r) + " and " + std::to_string(q));
  const int64_t k = iv.shape[q - 1];
  if (k < 1 || size_t(b + k) > r) c.malformed("indices of " + std::to_string(k) + " components for data of rank " + std::to_string(r));
  for (int64_t d = 0; d < b; ++d)
    if (iv.shape[size_t(d)] != x.shape[size_t(d)]) c.malformed("the batch dimensions of data and indices differ");
  const int64_t m = product(x.shape, size_t(b), size_t(b + k));
  const int64_t tuples = product(iv.shape, 0, q - 1), per_batch = product(iv.shape, size_t(b), q - 1);
  std::vector<int64_t> positions;
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t lin = 0;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t d = x.shape[size_t(b + j)];
      int64_t v = ind[size_t(t * k + j)];
      if (v < 0) v += d;
      if (v < 0 || v >= d) c.malformed("index " + std::to_string(ind[size_t(t * k + j)]) + " is out of range for dimension " + std::to_string(d));
      lin = lin * d + v;
    }
    positions.push_back(t / per_batch * m + lin);
  }
  std::vector<int64_t> flat = {product(x.shape, 0, size_t(b)) * m};
  for (size_t d = size_t(b + k); d < r; ++d) flat.push_back(x.shape[d]);
  const std::string y = c.node().output(0);
  std::vector<onnx::NodeProto> nodes;
  const std::string xf = add_reshape(nodes, x.onnx, flat, y, taken, opset);
  add_gather(nodes, xf, positions, std::vector<int64_t>(iv.shape.begin(), iv.shape.end() - 1), 0, y, taken);
  return nodes;
}

std::vector<onnx::NodeProto> compress(Context& c, std::set<std::string>& taken, int opset) {
  const Value& x = shaped_input(c, 0);
  const std::vector<int64_t> cond = c.constant_ints(1, "Compress's condition");
  const bool flatten = !c.has_attr("axis");
  const int64_t axis = flatten ? 0 : axis_of(c, c.attr_int("axis", 0), int64_t(x.shape.size()));
  const int64_t d = flatten ? element_count(x.shape) : x.shape[size_t(axis)];
  if (int64_t(cond.size()) > d) c.malformed("a condition of " + std::to_string(cond.size()) + " values for a dimension of " + std::to_string(d));
  std::vector<int64_t> positions;
  for (size_t p = 0; p < cond.size(); ++p)
    if (cond[p] != 0) positions.push_back(int64_t(p));
  if (positions.empty()) c.unsupported("the condition selects nothing (an empty tensor)");
  const std::string y = c.node().output(0);
  std::vector<onnx::NodeProto> nodes;
  const std::string src = flatten ? add_reshape(nodes, x.onnx, {d}, y, taken, opset) : x.onnx;
  add_gather(nodes, src, positions, {int64_t(positions.size())}, axis, y, taken);
  return nodes;
}

}  // namespace

void add_gather_positions(std::vector<onnx::NodeProto>& nodes, const Value& x, std::vector<int64_t> positions,
                          const std::vector<int64_t>& out_shape, const std::string& y, std::set<std::string>& taken, int opset) {
  const int64_t n = element_count(x.shape);
  std::string src = add_reshape(nodes, x.onnx, {n}, y, taken, opset);
  if (std::find(positions.begin(), positions.end(), -1) != positions.end()) {
    const std::string zero = fresh_name(y + "_zero", taken), padded = fresh_name(y + "_with_zero", taken);
    onnx::NodeProto z = constant_node(zero, TP::INT64, {1}, {0});
    auto* t = z.mutable_attribute(0)->mutable_t();
    t->set_data_type(x.elem_type);
    t->clear_int64_data();
    if (x.elem_type == TP::FLOAT) t->add_float_data(0);
    else if (x.elem_type == TP::DOUBLE) t->add_double_data(0);
    else if (x.elem_type == TP::INT64) t->add_int64_data(0);
    else if (x.elem_type == TP::UINT64 || x.elem_type == TP::UINT32) t->add_uint64_data(0);
    else t->add_int32_data(0);  // int32, int16, int8, uint16, uint8, bool, float16 / bfloat16 bits
    nodes.push_back(std::move(z));
    onnx::NodeProto cat = simple_node("Concat", {src, zero}, padded);
    auto* a = cat.add_attribute();
    a->set_name("axis");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(0);
    nodes.push_back(std::move(cat));
    src = padded;
    for (auto& p : positions)
      if (p < 0) p = n;
  }
  add_gather(nodes, src, positions, out_shape, 0, y, taken);
}

namespace {

// Strides of a row-major shape.
std::vector<int64_t> strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t k = shape.size(); k-- > 1;) s[k - 1] = s[k] * shape[k];
  return s;
}

std::vector<onnx::NodeProto> reverse_sequence(Context& c, std::set<std::string>& taken, int opset) {
  const Value& x = shaped_input(c, 0);
  const std::vector<int64_t> lens = c.constant_ints(1, "ReverseSequence's sequence_lens");
  const int64_t rank = int64_t(x.shape.size());
  if (rank < 2) c.malformed("the input's rank is below 2");
  const int64_t b_axis = axis_of(c, c.attr_int("batch_axis", 1), rank), t_axis = axis_of(c, c.attr_int("time_axis", 0), rank);
  if (b_axis == t_axis || (b_axis > 1 || t_axis > 1)) c.malformed("batch_axis and time_axis must be 0 and 1 in some order");
  const int64_t batch = x.shape[size_t(b_axis)], time = x.shape[size_t(t_axis)];
  if (int64_t(lens.size()) != batch) c.malformed("sequence_lens has " + std::to_string(lens.size()) + " values for a batch of " + std::to_string(batch));
  for (int64_t l : lens)
    if (l < 1 || l > time) c.malformed("a sequence length " + std::to_string(l) + " outside 1.." + std::to_string(time));
  const auto st = strides(x.shape);
  std::vector<int64_t> positions;
  for (int64_t e = 0; e < element_count(x.shape); ++e) {
    const int64_t b = e / st[size_t(b_axis)] % batch, t = e / st[size_t(t_axis)] % time;
    const int64_t from = t < lens[size_t(b)] ? lens[size_t(b)] - 1 - t : t;
    positions.push_back(e + (from - t) * st[size_t(t_axis)]);
  }
  std::vector<onnx::NodeProto> nodes;
  add_gather_positions(nodes, x, positions, x.shape, c.node().output(0), taken, opset);
  return nodes;
}

// MaxUnpool: Y's element at the coordinates of I[i] is X's element i (indices flat over the whole
// unpooled tensor, as MaxPool gives them), every other element 0.
std::vector<onnx::NodeProto> max_unpool(Context& c, std::set<std::string>& taken, int opset) {
  const Value& x = shaped_input(c, 0);
  const std::vector<int64_t> ind = c.constant_ints(1, "MaxUnpool's indices");
  const std::vector<int64_t> out_shape = c.output(0).shape;
  const int64_t total = element_count(out_shape);
  if (int64_t(ind.size()) != element_count(x.shape)) c.malformed("the indices and X differ in size");
  // the indices are flat over the default unpooled shape ((in - 1) stride + kernel - pads); an
  // output_shape larger than it places each element at the same coordinates
  const size_t spatial = x.shape.size() - 2;
  const std::vector<int64_t> kernel = c.attr_ints("kernel_shape", {}), strides_attr = c.attr_ints("strides", std::vector<int64_t>(spatial, 1)),
                             pads = c.attr_ints("pads", std::vector<int64_t>(2 * spatial, 0));
  if (kernel.size() != spatial || strides_attr.size() != spatial || pads.size() != 2 * spatial || out_shape.size() != x.shape.size())
    c.malformed("kernel_shape, strides or pads do not match the input's " + std::to_string(spatial) + " spatial dimensions");
  std::vector<int64_t> unpooled = {x.shape[0], x.shape[1]};
  for (size_t d = 0; d < spatial; ++d) unpooled.push_back((x.shape[2 + d] - 1) * strides_attr[d] + kernel[d] - pads[d] - pads[spatial + d]);
  const auto from = strides(unpooled), to = strides(out_shape);
  std::vector<int64_t> positions(size_t(total), -1);
  for (size_t i = 0; i < ind.size(); ++i) {
    if (ind[i] < 0 || ind[i] >= element_count(unpooled))
      c.malformed("index " + std::to_string(ind[i]) + " is outside the unpooled input's " + std::to_string(element_count(unpooled)) + " elements");
    int64_t at = 0;
    for (size_t d = 0; d < unpooled.size(); ++d) {
      const int64_t coord = ind[i] / from[d] % unpooled[d];
      if (coord >= out_shape[d]) c.malformed("index " + std::to_string(ind[i]) + " falls outside output_shape");
      at += coord * to[d];
    }
    positions[size_t(at)] = int64_t(i);
  }
  std::vector<onnx::NodeProto> nodes;
  add_gather_positions(nodes, x, positions, out_shape, c.node().output(0), taken, opset);
  return nodes;
}

}  // namespace

bool is_gather_rewrite_op(const std::string& op_type) {
  return is_sample_rewrite_op(op_type) || op_type == "GatherND" || op_type == "Compress" || op_type == "ReverseSequence" || op_type == "MaxUnpool";
}

std::vector<onnx::NodeProto> rewrite_gather_op(Context& c, std::set<std::string>& taken, int opset) {
  const std::string& op = c.node().op_type();
  if (is_sample_rewrite_op(op)) return rewrite_sample_op(c, taken, opset);  // Unique: any of its outputs
  if (!c.has_output(0)) return {};
  if (op == "GatherND") return gather_nd(c, taken, opset);
  if (op == "Compress") return compress(c, taken, opset);
  if (op == "ReverseSequence") return reverse_sequence(c, taken, opset);
  return max_unpool(c, taken, opset);
}

}  // namespace tessel::onnx_import
