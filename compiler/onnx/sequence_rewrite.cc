// Sequence operators as lists of tensor names and plain tensor nodes (contract in sequence_rewrite.h).
#include "compiler/onnx/sequence_rewrite.h"

#include "compiler/onnx/loop_unroll.h"

namespace tessel::onnx_import {
namespace {

const std::set<std::string> kSequenceOps = {"SequenceEmpty", "SequenceConstruct", "SequenceInsert",    "SequenceErase",
                                            "SequenceAt",    "SequenceLength",    "ConcatFromSequence", "SplitToSequence"};

// An element of size 0 (SplitToSequence's empty part): counted, skipped by a concatenation, refused where read.
const std::string kEmptyElement = "<empty>";

const std::vector<std::string>& sequence_input(const Context& c, const Sequences& seqs, int i) {
  if (!c.has_input(i)) c.malformed("input " + std::to_string(i) + " (a sequence) is missing");
  const auto it = seqs.find(c.node().input(i));
  if (it == seqs.end())
    c.unsupported("sequence '" + c.node().input(i) + "' is not made by an earlier node (a sequence graph input is not held)");
  return it->second;
}

// Position input i (default `fallback`), negative from the end, in 0..n (`insert`) or 0..n-1.
int64_t position(const Context& c, int i, int64_t n, int64_t fallback, bool insert) {
  if (!c.has_input(i)) return fallback;
  const std::vector<int64_t> p = c.constant_ints(i, "the position");
  if (p.size() != 1) c.malformed("the position is not one value");
  const int64_t at = p[0] < 0 ? p[0] + n : p[0];
  if (at < 0 || at > (insert ? n : n - 1))
    c.unsupported("position " + std::to_string(p[0]) + " outside the sequence of " + std::to_string(n) + " tensors");
  return at;
}

void set_output(Context& c, Sequences& seqs, std::vector<std::string> elements) {
  if (c.has_output(0)) seqs[c.node().output(0)] = std::move(elements);
}

std::vector<onnx::NodeProto> split_to_sequence(Context& c, Sequences& seqs, std::set<std::string>& taken, int opset) {
  const Value& x = c.input(0);
  if (!x.has_shape) c.unsupported("dynamic or unknown shape of '" + x.onnx + "'");
  const int64_t rank = int64_t(x.shape.size()), axis = axis_of(c, c.attr_int("axis", 0), rank), n = x.shape[size_t(axis)];
  std::vector<int64_t> sizes;
  const bool whole = !c.has_input(1);
  if (whole) {
    sizes.assign(size_t(n), 1);
  } else {
    const Value& s = c.input(1);
    const std::vector<int64_t> given = c.constant_ints(1, "split");
    if (s.shape.empty()) {
      if (given.size() != 1 || given[0] <= 0) c.malformed("a scalar split is not one positive size");
      for (int64_t at = 0; at < n; at += given[0]) sizes.push_back(std::min(given[0], n - at));
    } else {
      sizes = given;
      int64_t sum = 0;
      for (int64_t v : sizes) sum += v;
      if (sum != n) c.malformed("split sizes sum to " + std::to_string(sum) + ", not the axis' " + std::to_string(n));
    }
  }
  for (int64_t v : sizes)
    if (v < 0) c.malformed("a split of size " + std::to_string(v));
  const std::string base = c.has_output(0) ? c.node().output(0) : x.onnx;
  onnx::NodeProto split;
  split.set_op_type("Split");
  split.set_name(fresh_name(base + "_split", taken));
  split.add_input(x.onnx);
  std::vector<onnx::NodeProto> out;
  std::vector<int64_t> written = sizes;
  std::erase(written, 0);  // a part of size 0 is an element no node writes (kEmptyElement)
  if (opset >= 13) {
    const std::string s = fresh_name(base + "_sizes", taken);
    out.push_back(constant_node(s, onnx::TensorProto::INT64, {int64_t(written.size())}, written));
    split.add_input(s);
  } else {
    auto* a = split.add_attribute();
    a->set_name("split");
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t v : written) a->add_ints(v);
  }
  auto* a = split.add_attribute();
  a->set_name("axis");
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(axis);
  const bool squeeze = whole && c.attr_int("keepdims", 1) == 0;
  std::vector<std::string> parts, elements;
  for (size_t k = 0; k < sizes.size(); ++k) {
    parts.push_back(sizes[k] ? fresh_name(base + "_" + std::to_string(k), taken) : kEmptyElement);
    if (sizes[k]) split.add_output(parts.back());
  }
  if (written.empty()) out.clear();  // every part empty: no Split
  else out.push_back(std::move(split));
  for (const auto& p : parts) {
    if (!squeeze || p == kEmptyElement) {
      elements.push_back(p);
      continue;
    }
    elements.push_back(fresh_name(p + "_squeezed", taken));
    add_axes_node(out, "Squeeze", p, elements.back(), {axis}, opset, taken);
  }
  set_output(c, seqs, std::move(elements));
  return out;
}

}  // namespace

bool is_sequence_op(const std::string& op_type) { return kSequenceOps.count(op_type) != 0; }

std::vector<onnx::NodeProto> rewrite_sequence_op(Context& c, Sequences& seqs, std::set<std::string>& taken, int opset) {
  const std::string& op = c.node().op_type();
  if (op == "SequenceEmpty") {
    set_output(c, seqs, {});
    return {};
  }
  if (op == "SequenceConstruct") {
    std::vector<std::string> e;
    for (int i = 0; i < c.node().input_size(); ++i) e.push_back(c.input(i).onnx);
    set_output(c, seqs, std::move(e));
    return {};
  }
  if (op == "SplitToSequence") return split_to_sequence(c, seqs, taken, opset);
  std::vector<std::string> s = sequence_input(c, seqs, 0);
  const int64_t n = int64_t(s.size());
  if (op == "SequenceInsert") {
    const std::string t = c.input(1).onnx;
    s.insert(s.begin() + position(c, 2, n, n, true), t);
    set_output(c, seqs, std::move(s));
    return {};
  }
  if (op == "SequenceErase") {
    if (n == 0) c.unsupported("erasing from an empty sequence");
    s.erase(s.begin() + position(c, 1, n, n - 1, false));
    set_output(c, seqs, std::move(s));
    return {};
  }
  if (!c.has_output(0)) return {};
  const std::string y = c.node().output(0);
  if (op == "SequenceLength") return {constant_node(y, onnx::TensorProto::INT64, {}, {n})};
  if (op == "SequenceAt") {
    if (n == 0) c.unsupported("reading an empty sequence");
    const std::string& e = s[size_t(position(c, 1, n, 0, false))];
    if (e == kEmptyElement) c.unsupported("the element read is an empty tensor");
    return {simple_node("Identity", {e}, y)};
  }
  // ConcatFromSequence: new_axis inserts `axis` (negative: from the end of the output's rank) in each element first
  if (n == 0) c.unsupported("concatenating an empty sequence");
  const int64_t axis = c.attr_int("axis", 0);
  std::vector<onnx::NodeProto> out;
  std::vector<std::string> parts = s;
  std::erase(parts, kEmptyElement);
  if (parts.empty()) c.unsupported("concatenating empty tensors only");
  if (c.attr_int("new_axis", 0) != 0)
    for (auto& p : parts) {
      const std::string u = fresh_name(p + "_unsqueezed", taken);
      add_axes_node(out, "Unsqueeze", p, u, {axis}, opset, taken);
      p = u;
    }
  onnx::NodeProto cat = simple_node("Concat", parts, y);
  auto* a = cat.add_attribute();
  a->set_name("axis");
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(axis);
  out.push_back(std::move(cat));
  return out;
}

}  // namespace tessel::onnx_import
