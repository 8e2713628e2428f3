// Loop's body repeated M times as outer-graph nodes (contract in loop_unroll.h).
#include "compiler/onnx/loop_unroll.h"

#include <algorithm>
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

// Every name node `n` reads, its subgraphs' reads included (a superset of the captured names).
void add_reads(const onnx::NodeProto& n, std::set<std::string>& names) {
  for (const auto& i : n.input()) names.insert(i);
  for (const auto& a : n.attribute()) {
    if (a.has_g())
      for (const auto& m : a.g().node()) add_reads(m, names);
    for (const auto& g : a.graphs())
      for (const auto& m : g.node()) add_reads(m, names);
    if (a.has_g())
      for (const auto& o : a.g().output()) names.insert(o.name());
  }
}

// The nodes of `nodes` some output of which `needed` or a later kept node reads, in order.
std::vector<onnx::NodeProto> live(std::vector<onnx::NodeProto> nodes, std::set<std::string> needed) {
  std::vector<bool> keep(nodes.size(), false);
  for (size_t k = nodes.size(); k-- > 0;) {
    for (const auto& o : nodes[k].output()) keep[k] = keep[k] || (!o.empty() && needed.count(o));
    if (keep[k]) add_reads(nodes[k], needed);
  }
  std::vector<onnx::NodeProto> out;
  for (size_t k = 0; k < nodes.size(); ++k)
    if (keep[k]) out.push_back(std::move(nodes[k]));
  return out;
}

// The names `g` (and the graphs inside it) read from its enclosing scope renamed by `rename`: a
// name the graph defines (its inputs, its nodes' outputs) first shadows the outer one.
void rename_captured(onnx::GraphProto& g, const std::map<std::string, std::string>& rename) {
  std::map<std::string, std::string> inner = rename;
  for (const auto& in : g.input()) inner.erase(in.name());
  for (const auto& t : g.initializer()) inner.erase(t.name());
  for (auto& n : *g.mutable_node()) {
    for (int i = 0; i < n.input_size(); ++i)
      if (const auto r = inner.find(n.input(i)); r != inner.end()) n.set_input(i, r->second);
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) rename_captured(*a.mutable_g(), inner);
      for (auto& sub : *a.mutable_graphs()) rename_captured(sub, inner);
    }
    for (const auto& o : n.output()) inner.erase(o);
  }
  for (auto& o : *g.mutable_output())
    if (const auto r = inner.find(o.name()); r != inner.end()) o.set_name(r->second);
}

// The body's nodes once more, each name it defines suffixed `tag` (fresh), each name in `rename`
// (the body's inputs, then its outputs as defined) replaced; an If's branches read the renamed values.
void append_body(const onnx::GraphProto& body, std::map<std::string, std::string>& rename, const std::string& tag,
                 std::set<std::string>& taken, std::vector<onnx::NodeProto>& out) {
  for (const auto& n : body.node()) {
    onnx::NodeProto c = n;
    c.set_name((n.name().empty() ? (n.output_size() ? n.output(0) : std::string("node")) : n.name()) + tag);
    for (int i = 0; i < c.input_size(); ++i)
      if (const auto r = rename.find(c.input(i)); r != rename.end()) c.set_input(i, r->second);
    for (auto& a : *c.mutable_attribute())
      if (a.has_g()) rename_captured(*a.mutable_g(), rename);
    for (int o = 0; o < c.output_size(); ++o)
      if (!c.output(o).empty()) c.set_output(o, rename[n.output(o)] = fresh_name(n.output(o) + tag, taken));
    out.push_back(std::move(c));
  }
}

void refuse_subgraphs(const onnx::GraphProto& body, const std::string& what) {
  for (const auto& n : body.node())
    for (const auto& a : n.attribute())
      if ((a.has_g() || a.graphs_size()) && n.op_type() != "If")
        throw UnrollRefusal{what + " node '" + n.name() + "' (" + n.op_type() + ") holds a subgraph (an If is inlined where its condition is known)"};
}

std::vector<int64_t> ints_attr(const onnx::NodeProto& n, const std::string& name, size_t count, int64_t fallback) {
  std::vector<int64_t> v(count, fallback);
  for (const auto& a : n.attribute())
    if (a.name() == name) {
      if (size_t(a.ints_size()) != count) throw UnrollRefusal{name + " has " + std::to_string(a.ints_size()) + " values, not " + std::to_string(count)};
      v.assign(a.ints().begin(), a.ints().end());
    }
  return v;
}

onnx::NodeProto axis_node(const std::string& op, const std::vector<std::string>& in, const std::string& out, int64_t axis) {
  onnx::NodeProto n = simple_node(op, in, out);
  auto* a = n.add_attribute();
  a->set_name("axis");
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(axis);
  return n;
}

// Position `at` of `x` along `axis` (the axis dropped): Gather of a Constant scalar.
std::string take(std::vector<onnx::NodeProto>& out, const std::string& x, int64_t at, int64_t axis, const std::string& tag,
                 std::set<std::string>& taken) {
  const std::string pos = fresh_name(x + tag + "_at", taken), y = fresh_name(x + tag, taken);
  out.push_back(constant_node(pos, onnx::TensorProto::INT64, {}, {at}));
  out.push_back(axis_node("Gather", {x, pos}, y, axis));
  return y;
}

// `parts` stacked along a new axis `axis` into `y`.
void stack(std::vector<onnx::NodeProto>& out, const std::vector<std::string>& parts, const std::string& y, int64_t axis, int opset,
           std::set<std::string>& taken) {
  std::vector<std::string> rows;
  for (const auto& v : parts) {
    rows.push_back(fresh_name(v + "_row", taken));
    add_axes_node(out, "Unsqueeze", v, rows.back(), {axis}, opset, taken);
  }
  out.push_back(axis_node("Concat", rows, y, axis));
}

// One Scan (opset 9 form) over `states` and `scans` (their scan axes), the body once per step;
// the final states' and the stacked scan outputs' names.
struct ScanResult {
  std::vector<std::string> states;
  std::vector<std::vector<std::string>> scanned;  // per scan output, in iteration order
};
ScanResult scan_steps(const onnx::GraphProto& body, std::vector<std::string> states, const std::vector<std::string>& scans,
                      const std::vector<int64_t>& axes, const std::vector<int64_t>& reversed, int64_t steps, const std::string& tag,
                      std::set<std::string>& taken, std::vector<onnx::NodeProto>& out) {
  const size_t n = states.size(), m = scans.size(), k = size_t(body.output_size()) - n;
  ScanResult r;
  r.scanned.resize(k);
  for (int64_t t = 0; t < steps; ++t) {
    const std::string it = tag + "_sc" + std::to_string(t);
    std::map<std::string, std::string> rename;
    for (size_t v = 0; v < n; ++v) rename[body.input(int(v)).name()] = states[v];
    for (size_t j = 0; j < m; ++j)
      rename[body.input(int(n + j)).name()] = take(out, scans[j], reversed[j] ? steps - 1 - t : t, axes[j], it, taken);
    append_body(body, rename, it, taken, out);
    auto resolved = [&](const std::string& name) {
      const auto f = rename.find(name);
      return f != rename.end() ? f->second : name;
    };
    for (size_t v = 0; v < n; ++v) states[v] = resolved(body.output(int(v)).name());
    for (size_t s = 0; s < k; ++s) r.scanned[s].push_back(resolved(body.output(int(n + s)).name()));
  }
  r.states = std::move(states);
  return r;
}

}  // namespace

std::vector<onnx::NodeProto> unroll_scan(const onnx::NodeProto& scan, const std::vector<std::vector<int64_t>>& input_shapes, int opset,
                                         std::set<std::string>& taken) {
  const onnx::GraphProto* body = body_of(scan);
  if (!body) throw UnrollRefusal{"no body graph"};
  refuse_subgraphs(*body, "body");
  const bool batched = opset < 9;  // Scan-8: input 0 sequence_lens, axis 0 a batch, the scan axis 1
  const int first = batched ? 1 : 0;
  if (batched && scan.input_size() > 0 && !scan.input(0).empty()) throw UnrollRefusal{"sequence_lens given (every sequence its full length is unrolled)"};
  int64_t m = -1;
  for (const auto& a : scan.attribute())
    if (a.name() == "num_scan_inputs") m = a.i();
  const int64_t total = scan.input_size() - first, n = total - m;
  if (m < 1 || n < 0 || body->input_size() != total || body->output_size() < n)
    throw UnrollRefusal{"the body's inputs and outputs do not match the Scan's (N states + M scan inputs)"};
  const int64_t k = body->output_size() - n;
  if (scan.output_size() > n + k) throw UnrollRefusal{"more outputs than the body's N + K"};
  std::vector<int64_t> axes = batched ? std::vector<int64_t>(size_t(m), 1) : ints_attr(scan, "scan_input_axes", size_t(m), 0);
  const std::vector<int64_t> reversed = ints_attr(scan, batched ? "directions" : "scan_input_directions", size_t(m), 0);
  const std::vector<int64_t> out_axes = batched ? std::vector<int64_t>(size_t(k), 0) : ints_attr(scan, "scan_output_axes", size_t(k), 0);
  const std::vector<int64_t> out_reversed = batched ? std::vector<int64_t>(size_t(k), 0) : ints_attr(scan, "scan_output_directions", size_t(k), 0);
  int64_t steps = -1, batch = 1;
  for (int64_t j = 0; j < m; ++j) {
    const auto& shape = input_shapes.at(size_t(first + n + j));
    int64_t& axis = axes[size_t(j)];
    if (axis < 0) axis += int64_t(shape.size());
    if (axis < 0 || axis >= int64_t(shape.size())) throw UnrollRefusal{"scan axis out of range for '" + scan.input(int(first + n + j)) + "'"};
    if (steps >= 0 && shape[size_t(axis)] != steps) throw UnrollRefusal{"scan inputs of different lengths"};
    steps = shape[size_t(axis)];
    if (batched) batch = shape[0];
  }
  if (steps < 1) throw UnrollRefusal{"no step (a scan input of length 0)"};
  if (steps * batch > kMaxLoopIterations)
    throw UnrollRefusal{std::to_string(steps * batch) + " steps beyond the " + std::to_string(kMaxLoopIterations) + " unrolled"};
  std::vector<onnx::NodeProto> out;
  std::vector<ScanResult> results;
  for (int64_t b = 0; b < batch; ++b) {
    const std::string tag = batched ? "_b" + std::to_string(b) : "";
    std::vector<std::string> states, scans;
    for (int64_t v = 0; v < n; ++v) {
      const std::string& s = scan.input(int(first + v));
      states.push_back(batched ? take(out, s, b, 0, tag, taken) : s);
    }
    std::vector<int64_t> step_axes = axes;
    for (int64_t j = 0; j < m; ++j) {
      const std::string& x = scan.input(int(first + n + j));
      scans.push_back(batched ? take(out, x, b, 0, tag, taken) : x);
      if (batched) step_axes[size_t(j)] = 0;  // the batch axis taken, the scan axis is 0
    }
    results.push_back(scan_steps(*body, states, scans, step_axes, reversed, steps, tag, taken, out));
  }
  auto output = [&](int64_t o) { return o < scan.output_size() ? scan.output(int(o)) : std::string(); };
  for (int64_t v = 0; v < n; ++v) {
    if (output(v).empty()) continue;
    if (!batched) {
      out.push_back(simple_node("Identity", {results[0].states[size_t(v)]}, output(v)));
      continue;
    }
    std::vector<std::string> per_batch;
    for (const auto& r : results) per_batch.push_back(r.states[size_t(v)]);
    stack(out, per_batch, output(v), 0, opset, taken);
  }
  for (int64_t s = 0; s < k; ++s) {
    const std::string y = output(n + s);
    if (y.empty()) continue;
    if (!batched) {
      std::vector<std::string> parts = results[0].scanned[size_t(s)];
      if (out_reversed[size_t(s)]) std::reverse(parts.begin(), parts.end());
      stack(out, parts, y, out_axes[size_t(s)], opset, taken);
      continue;
    }
    std::vector<std::string> per_batch;
    for (const auto& r : results) {
      per_batch.push_back(fresh_name(y + "_stacked", taken));
      stack(out, r.scanned[size_t(s)], per_batch.back(), 0, opset, taken);
    }
    stack(out, per_batch, y, 0, opset, taken);
  }
  return out;
}

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
  refuse_subgraphs(*body, "body");
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
    append_body(*body, rename, tag, taken, out);
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
