// Sequence operators as lists of tensor names and plain tensor nodes (contract in sequence_rewrite.h).
#include "compiler/onnx/sequence_rewrite.h"

#include "compiler/onnx/loop_unroll.h"

namespace tessel::onnx_import {
namespace {

const std::set<std::string> kSequenceOps = {"SequenceEmpty", "SequenceConstruct",  "SequenceInsert",  "SequenceErase", "SequenceAt",
                                            "SequenceLength", "ConcatFromSequence", "SplitToSequence", "SequenceMap"};
const std::set<std::string> kOptionalOps = {"Optional", "OptionalHasElement", "OptionalGetElement"};

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

const onnx::GraphProto& map_body(const Context& c) {
  const onnx::GraphProto* body = nullptr;
  for (const auto& a : c.node().attribute())
    if (a.name() == "body" && a.has_g() && !body) body = &a.g();
  if (!body) c.malformed("no body graph");
  return *body;
}

// SequenceMap: the body's nodes once per element of the first input's sequence.
std::vector<onnx::NodeProto> sequence_map(Context& c, Sequences& seqs, std::set<std::string>& taken) {
  const onnx::NodeProto& node = c.node();
  const onnx::GraphProto& body = map_body(c);
  if (body.input_size() != node.input_size() || body.output_size() < node.output_size())
    c.malformed("the body's inputs and outputs do not match the node's");
  for (const auto& n : body.node())
    for (const auto& a : n.attribute())
      if (a.has_g() || a.graphs_size()) c.unsupported("body node '" + n.name() + "' (" + n.op_type() + ") holds a subgraph");
  const size_t n = sequence_input(c, seqs, 0).size();
  std::vector<const std::vector<std::string>*> inputs;  // per input: its sequence, or nullptr for a tensor
  for (int i = 0; i < node.input_size(); ++i) {
    const auto it = i == 0 || seqs.count(node.input(i)) ? seqs.find(node.input(i)) : seqs.end();
    if (it != seqs.end() && it->second.size() != n)
      c.unsupported("sequences of " + std::to_string(n) + " and " + std::to_string(it->second.size()) + " tensors mapped together");
    inputs.push_back(it != seqs.end() ? &it->second : nullptr);
  }
  std::vector<onnx::NodeProto> out;
  std::vector<std::vector<std::string>> results(size_t(node.output_size()));
  for (size_t j = 0; j < n; ++j) {
    const std::string tag = "_map" + std::to_string(j);
    std::map<std::string, std::string> rename;
    for (int i = 0; i < node.input_size(); ++i) {
      const std::string& e = inputs[size_t(i)] ? (*inputs[size_t(i)])[j] : node.input(i);
      if (e == kEmptyElement) c.unsupported("element " + std::to_string(j) + " of '" + node.input(i) + "' is an empty tensor");
      rename[body.input(i).name()] = e;
    }
    for (const auto& b : body.node()) {
      onnx::NodeProto copy = b;
      copy.set_name((b.name().empty() ? (b.output_size() ? b.output(0) : std::string("node")) : b.name()) + tag);
      for (int i = 0; i < copy.input_size(); ++i)
        if (const auto r = rename.find(copy.input(i)); r != rename.end()) copy.set_input(i, r->second);
      for (int o = 0; o < copy.output_size(); ++o)
        if (!copy.output(o).empty()) copy.set_output(o, rename[b.output(o)] = fresh_name(b.output(o) + tag, taken));
      out.push_back(std::move(copy));
    }
    for (int o = 0; o < node.output_size(); ++o) {
      const auto r = rename.find(body.output(o).name());
      results[size_t(o)].push_back(r != rename.end() ? r->second : body.output(o).name());  // an outer value read as it is
    }
  }
  for (int o = 0; o < node.output_size(); ++o)
    if (!node.output(o).empty()) seqs[node.output(o)] = std::move(results[size_t(o)]);
  return out;
}

}  // namespace

bool is_optional_op(const std::string& op_type) { return kOptionalOps.count(op_type) != 0; }

std::vector<onnx::NodeProto> rewrite_optional_op(Context& c, Sequences& seqs, Optionals& opts) {
  const onnx::NodeProto& node = c.node();
  const std::string& op = node.op_type();
  const std::string x = node.input_size() ? node.input(0) : "";
  const std::string y = node.output_size() ? node.output(0) : "";
  if (op == "Optional") {
    HeldOptional h;
    if (!x.empty()) h = seqs.count(x) ? HeldOptional{true, true, ""} : HeldOptional{true, false, x};
    if (h.sequence && !y.empty()) seqs[y] = seqs.at(x);
    if (!y.empty()) opts[y] = h;
    return {};
  }
  const auto held = opts.find(x);
  if (op == "OptionalHasElement") {
    const bool present = x.empty() ? false : held != opts.end() ? held->second.present : true;  // a plain tensor or sequence: true
    if (y.empty()) return {};
    return {constant_node(y, onnx::TensorProto::BOOL, {}, {present ? 1 : 0})};
  }
  // OptionalGetElement
  if (x.empty()) c.malformed("input 0 (an optional) is missing");
  if (held != opts.end() && !held->second.present) c.unsupported("reading an optional that holds nothing ('" + x + "')");
  if (y.empty()) return {};
  if (held != opts.end() && held->second.sequence) {
    seqs[y] = seqs.at(x);
    return {};
  }
  if (held == opts.end() && seqs.count(x)) {
    seqs[y] = seqs.at(x);
    return {};
  }
  return {simple_node("Identity", {held != opts.end() ? held->second.tensor : x}, y)};
}

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
  if (op == "SequenceMap") return sequence_map(c, seqs, taken);
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
