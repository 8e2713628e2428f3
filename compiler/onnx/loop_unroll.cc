// Loop's body repeated M times as outer-graph nodes (contract in loop_unroll.h).
#include "compiler/onnx/loop_unroll.h"

#include <map>

namespace tessel::onnx_import {
namespace {

const onnx::GraphProto* body_of(const onnx::NodeProto& loop) {
  for (const auto& a : loop.attribute())
    if (a.name() == "body" && a.has_g()) return &a.g();
  return nullptr;
}

std::string fresh(const std::string& base, std::set<std::string>& taken) { return fresh_name(base, taken); }

// Whether the body's condition output is its condition input passed through (or a Constant true).
bool condition_passes_through(const onnx::GraphProto& body) {
  std::map<std::string, const onnx::NodeProto*> producer;
  for (const auto& n : body.node())
    for (const auto& o : n.output()) producer[o] = &n;
  std::string name = body.output(0).name();
  for (int depth = 0; depth < 64; ++depth) {
    if (name == body.input(1).name()) return true;
    const auto p = producer.find(name);
    if (p == producer.end()) return false;
    const onnx::NodeProto& n = *p->second;
    if (n.op_type() == "Identity" && n.input_size() == 1) {
      name = n.input(0);
      continue;
    }
    if (n.op_type() == "Constant" && n.attribute_size() == 1 && n.attribute(0).name() == "value") {
      const auto& t = n.attribute(0).t();
      const bool one = (t.int32_data_size() == 1 && t.int32_data(0) != 0) ||
                       (t.raw_data().size() == 1 && t.raw_data()[0] != 0);
      return t.data_type() == onnx::TensorProto::BOOL && one;
    }
    return false;
  }
  return false;
}

// The nodes of `nodes` some output of which `needed` or a later kept node reads, in order.
std::vector<onnx::NodeProto> live(std::vector<onnx::NodeProto> nodes, std::set<std::string> needed) {
  std::vector<bool> keep(nodes.size(), false);
  for (size_t k = nodes.size(); k-- > 0;) {
    for (const auto& o : nodes[k].output()) keep[k] = keep[k] || (!o.empty() && needed.count(o));
    if (keep[k])
      for (const auto& i : nodes[k].input()) needed.insert(i);
  }
  std::vector<onnx::NodeProto> out;
  for (size_t k = 0; k < nodes.size(); ++k)
    if (keep[k]) out.push_back(std::move(nodes[k]));
  return out;
}

}  // namespace

std::string fresh_name(const std::string& base, std::set<std::string>& taken) {
  std::string n = base;
  for (int k = 1; taken.count(n); ++k) n = base + "_" + std::to_string(k);
  taken.insert(n);
  return n;
}

onnx::NodeProto constant_node(const std::string& out, int elem_type, const std::vector<int64_t>& dims, const std::vector<int64_t>& values) {
  onnx::NodeProto n;
  n.set_op_type("Constant");
  n.set_name(out);
  n.add_output(out);
  auto* a = n.add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  auto* t = a->mutable_t();
  t->set_data_type(elem_type);
  for (int64_t d : dims) t->add_dims(d);
  for (int64_t v : values) {
    if (elem_type == onnx::TensorProto::INT64) t->add_int64_data(v);
    else t->add_int32_data(int32_t(v));  // BOOL
  }
  return n;
}

onnx::NodeProto simple_node(const std::string& op, const std::vector<std::string>& in, const std::string& out) {
  onnx::NodeProto n;
  n.set_op_type(op);
  n.set_name(out);
  for (const auto& s : in) n.add_input(s);
  n.add_output(out);
  return n;
}

void add_axes_node(std::vector<onnx::NodeProto>& nodes, const std::string& op, const std::string& in, const std::string& out,
                   const std::vector<int64_t>& axes, int opset, std::set<std::string>& taken) {
  if (opset >= 13) {
    const std::string a = fresh_name(out + "_axes", taken);
    nodes.push_back(constant_node(a, onnx::TensorProto::INT64, {int64_t(axes.size())}, axes));
    nodes.push_back(simple_node(op, {in, a}, out));
    return;
  }
  onnx::NodeProto n = simple_node(op, {in}, out);
  auto* at = n.add_attribute();
  at->set_name("axes");
  at->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : axes) at->add_ints(x);
  nodes.push_back(std::move(n));
}

std::vector<onnx::NodeProto> inline_branch(const onnx::NodeProto& node, bool take_then, std::set<std::string>& taken) {
  const onnx::GraphProto* g = nullptr;
  for (const auto& a : node.attribute())
    if (a.name() == (take_then ? "then_branch" : "else_branch") && a.has_g()) g = &a.g();
  if (!g) throw UnrollRefusal{std::string("no ") + (take_then ? "then_branch" : "else_branch") + " graph"};
  if (g->output_size() < node.output_size()) throw UnrollRefusal{"the branch has fewer outputs than the If"};
  std::map<std::string, std::string> rename;
  std::vector<onnx::NodeProto> out;
  for (const auto& n : g->node()) {
    for (const auto& a : n.attribute())
      if (a.has_g() || a.graphs_size()) throw UnrollRefusal{"branch node '" + n.name() + "' (" + n.op_type() + ") holds a subgraph"};
    onnx::NodeProto c = n;
    for (int i = 0; i < c.input_size(); ++i)
      if (const auto r = rename.find(c.input(i)); r != rename.end()) c.set_input(i, r->second);
    for (int o = 0; o < c.output_size(); ++o)
      if (!c.output(o).empty()) c.set_output(o, rename[n.output(o)] = fresh_name(n.output(o), taken));
    out.push_back(std::move(c));
  }
  for (int o = 0; o < node.output_size(); ++o) {
    if (node.output(o).empty()) continue;
    const auto r = rename.find(g->output(o).name());
    out.push_back(simple_node("Identity", {r != rename.end() ? r->second : g->output(o).name()}, node.output(o)));
  }
  return out;
}

std::vector<onnx::NodeProto> unroll_loop(const onnx::NodeProto& loop, int64_t trips, int opset, std::set<std::string>& taken,
                                         const std::set<std::string>& needed) {
  const onnx::GraphProto* body = body_of(loop);
  if (!body) throw UnrollRefusal{"no body graph"};
  const int carried = loop.input_size() - 2;
  if (carried < 0 || body->input_size() != carried + 2 || body->output_size() < carried + 1)
    throw UnrollRefusal{"the body's inputs and outputs do not match the Loop's (2 + N inputs, 1 + N + K outputs)"};
  const int scans = body->output_size() - 1 - carried;
  if (loop.output_size() > carried + scans) throw UnrollRefusal{"more outputs than the body's N + K"};
  if (trips > kMaxLoopIterations)
    throw UnrollRefusal{"trip count " + std::to_string(trips) + " beyond the " + std::to_string(kMaxLoopIterations) + " iterations unrolled"};
  if (!condition_passes_through(*body))
    throw UnrollRefusal{"a condition the body computes (the loop would end at a time known only when it runs); unrolled: a body whose condition output passes its condition input through"};
  for (const auto& n : body->node())
    for (const auto& a : n.attribute())
      if (a.has_g() || a.graphs_size()) throw UnrollRefusal{"body node '" + n.name() + "' (" + n.op_type() + ") holds a subgraph"};
  if (trips == 0 && scans > 0) {
    for (int s = 0; s < scans; ++s)
      if (carried + s < loop.output_size() && !loop.output(carried + s).empty())
        throw UnrollRefusal{"no iteration (trip count 0): scan output '" + loop.output(carried + s) + "' is an empty tensor"};
  }

  std::vector<onnx::NodeProto> out;
  std::vector<std::string> state;  // the carried values' current outer names
  for (int v = 0; v < carried; ++v) state.push_back(loop.input(2 + v));
  std::string cond = loop.input_size() > 1 ? loop.input(1) : "";
  if (cond.empty() && trips > 0) {
    cond = fresh((loop.output_size() ? loop.output(0) : std::string("loop")) + "_cond", taken);
    out.push_back(constant_node(cond, onnx::TensorProto::BOOL, {}, {1}));
  }
  std::vector<std::vector<std::string>> scanned(static_cast<size_t>(scans));
  for (int64_t k = 0; k < trips; ++k) {
    const std::string tag = "_it" + std::to_string(k);
    std::map<std::string, std::string> rename;
    const std::string iter = fresh(body->input(0).name() + tag, taken);
    out.push_back(constant_node(iter, onnx::TensorProto::INT64, {}, {k}));
    rename[body->input(0).name()] = iter;
    rename[body->input(1).name()] = cond;
    for (int v = 0; v < carried; ++v) rename[body->input(2 + v).name()] = state[size_t(v)];
    for (const auto& n : body->node()) {
      onnx::NodeProto c = n;
      c.set_name((n.name().empty() ? (n.output_size() ? n.output(0) : std::string("node")) : n.name()) + tag);
      for (int i = 0; i < c.input_size(); ++i)
        if (const auto r = rename.find(c.input(i)); r != rename.end()) c.set_input(i, r->second);
      for (int o = 0; o < c.output_size(); ++o)
        if (!c.output(o).empty()) c.set_output(o, rename[n.output(o)] = fresh(n.output(o) + tag, taken));
      out.push_back(std::move(c));
    }
    auto resolved = [&](const std::string& name) {
      const auto r = rename.find(name);
      return r != rename.end() ? r->second : name;  // a body output may be an outer value
    };
    for (int v = 0; v < carried; ++v) state[size_t(v)] = resolved(body->output(1 + v).name());
    for (int s = 0; s < scans; ++s) scanned[size_t(s)].push_back(resolved(body->output(1 + carried + s).name()));
  }
  for (int v = 0; v < carried && v < loop.output_size(); ++v)
    if (!loop.output(v).empty()) out.push_back(simple_node("Identity", {state[size_t(v)]}, loop.output(v)));
  for (int s = 0; s < scans && carried + s < loop.output_size(); ++s) {
    const std::string& y = loop.output(carried + s);
    if (y.empty()) continue;
    std::vector<std::string> parts;
    for (const auto& v : scanned[size_t(s)]) {
      parts.push_back(fresh(v + "_row", taken));
      add_axes_node(out, "Unsqueeze", v, parts.back(), {0}, opset, taken);
    }
    onnx::NodeProto cat = simple_node("Concat", parts, y);
    auto* a = cat.add_attribute();
    a->set_name("axis");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(0);
    out.push_back(std::move(cat));
  }
  return live(std::move(out), needed);
}

}  // namespace tessel::onnx_import
