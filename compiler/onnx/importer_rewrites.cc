// The importer's node replacements and structured graph I/O (model_importer.h): a Loop or Scan unrolled
// (loop_unroll.h), an If inlined where its condition is known at import, sequence / optional operators held
// at import and GatherND / Compress rewritten (sequence_rewrite.h, gather_rewrite.h), each replacement
// spliced into the graph in place of node k and translated next; given sequence / optional inputs held as
// their elements, and sequence / optional outputs written as one def output per element.
#include <algorithm>

#include "compiler/onnx/gather_rewrite.h"
#include "compiler/onnx/loop_unroll.h"
#include "compiler/onnx/model_importer.h"

namespace tessel::onnx_import {

// Each given sequence / optional input held as its elements (def inputs where read as data).
void Importer::hold_structured_inputs() {
  for (const auto& [e, of] : element_of_) {
    Value& v = values_[e];
    v.graph_input = true;
    v.tsl = unique(identifier(e));
  }
  for (const auto& [name, given] : structured_) {
    std::vector<std::string> elements;
    for (const auto& t : given.tensors) elements.push_back(t.name());
    if (given.sequence) sequences_[name] = elements;
    if (given.optional) optionals_[name] = {given.present, given.sequence, given.sequence || elements.empty() ? "" : elements[0]};
  }
}

// Loop node k replaced by its body once per iteration (loop_unroll.h), its trip count M and
// condition known at import time (constant() finds a value computed from --value inputs); the
// producers are re-indexed and ONNX's shape inference runs once more over the unrolled graph.
void Importer::unroll(int k) {
  auto* nodes = model_.mutable_graph()->mutable_node();
  const onnx::NodeProto loop = nodes->Get(k);
  node_ = &loop;
  if (!has_input(0)) unsupported("a Loop without a trip count M (its length would be data)");
  const std::vector<double> m = constant(0, "the trip count M");
  if (m.size() != 1) malformed("the trip count M is not one value");
  int64_t trips = std::max<int64_t>(0, int64_t(m[0]));
  if (has_input(1)) {
    const std::vector<double> cond = constant(1, "the condition");
    if (cond.size() != 1) malformed("the condition is not one value");
    if (cond[0] == 0) trips = 0;
  }
  std::set<std::string> taken = graph_names(), needed;
  for (int j = k + 1; j < nodes->size(); ++j)
    for (const auto& i : nodes->Get(j).input()) needed.insert(i);
  for (const auto& o : model_.graph().output()) needed.insert(o.name());
  std::vector<onnx::NodeProto> body;
  try {
    body = unroll_loop(loop, trips, opset_, taken, needed);
  } catch (const UnrollRefusal& r) {
    unsupported(r.reason);
  }
  body_.push_back("  # node " + (loop.name().empty() ? loop.output_size() ? loop.output(0) : std::string() : loop.name()) +
                  " (Loop): unrolled, " + std::to_string(trips) + " iterations");
  splice(k, std::move(body));
  reinfer();
}

// Scan node k replaced by its body once per step (loop_unroll.h), its step count its scan inputs'
// static length.
void Importer::unroll_scan_node(int k) {
  const onnx::NodeProto scan = model_.graph().node(k);
  node_ = &scan;
  std::vector<std::vector<int64_t>> shapes;
  for (int i = 0; i < scan.input_size(); ++i) {
    if (!has_input(i)) {
      shapes.emplace_back();
      continue;
    }
    const Value& v = input(i);
    if (!v.has_shape) unsupported("dynamic or unknown shape of '" + v.onnx + "'");
    shapes.push_back(v.shape);
  }
  std::set<std::string> taken = graph_names();
  std::vector<onnx::NodeProto> body;
  try {
    body = unroll_scan(scan, shapes, opset_, taken);
  } catch (const UnrollRefusal& r) {
    unsupported(r.reason);
  }
  body_.push_back("  # node " + (scan.name().empty() ? scan.output_size() ? scan.output(0) : std::string() : scan.name()) +
                  " (Scan): unrolled");
  splice(k, std::move(body));
  reinfer();
}

std::set<std::string> Importer::graph_names() const {
  std::set<std::string> taken;
  for (const auto& [name, v] : values_) taken.insert(name);
  for (const auto& n : model_.graph().node())
    for (const auto& o : n.output()) taken.insert(o);
  return taken;
}

// Node k of the graph replaced by `nodes` (translated next); the producers re-indexed.
void Importer::splice(int k, std::vector<onnx::NodeProto> nodes) {
  auto* all = model_.mutable_graph()->mutable_node();
  google::protobuf::RepeatedPtrField<onnx::NodeProto> next;
  for (int j = 0; j < all->size(); ++j) {
    if (j != k) {
      next.Add()->Swap(all->Mutable(j));
      continue;
    }
    for (auto& n : nodes) next.Add()->Swap(&n);
  }
  all->Swap(&next);
  producer_.clear();
  for (const auto& n : model_.graph().node())
    for (const auto& out : n.output()) producer_[out] = &n;
  node_ = nullptr;
  reinferred_at_ = nullptr;
  ++result_.nodes;
}

// If whose condition is known at import time: the branch taken replaces it (loop_unroll.h).
void Importer::inline_if(int k) {
  const onnx::NodeProto n = model_.graph().node(k);
  node_ = &n;
  const std::vector<double> cond = constant(0, "the condition");
  if (cond.size() != 1) malformed("the condition is not one value");
  std::set<std::string> taken = graph_names();
  std::vector<onnx::NodeProto> nodes;
  try {
    nodes = inline_branch(n, cond[0] != 0, taken);
  } catch (const UnrollRefusal& r) {
    unsupported(r.reason);
  }
  body_.push_back("  # node " + (n.name().empty() ? n.output_size() ? n.output(0) : std::string() : n.name()) + " (If): the " +
                  (cond[0] != 0 ? "then" : "else") + " branch, its condition known at import");
  splice(k, std::move(nodes));
  reinfer();
}

// A sequence operator (sequence_rewrite.h): the sequence held as its elements' names, the node
// replaced by the tensor nodes that read them (none where only the list changes).
void Importer::rewrite_sequence(int k) {
  const onnx::NodeProto n = model_.graph().node(k);
  node_ = &n;
  std::set<std::string> taken = graph_names();
  std::vector<onnx::NodeProto> nodes = rewrite_sequence_op(*this, sequences_, taken, opset_);
  const std::string name = n.name().empty() ? n.output_size() ? n.output(0) : std::string() : n.name();
  if (n.output_size() && sequences_.count(n.output(0)))
    body_.push_back("  # node " + name + " (" + n.op_type() + "): a sequence of " + std::to_string(sequences_.at(n.output(0)).size()) +
                    " tensors, held at import");
  splice(k, std::move(nodes));
}

// GatherND / Compress (gather_rewrite.h): replaced by a Reshape and a Gather of constant positions.
void Importer::rewrite_gather(int k) {
  const onnx::NodeProto n = model_.graph().node(k);
  node_ = &n;
  std::set<std::string> taken = graph_names();
  std::vector<onnx::NodeProto> nodes = rewrite_gather_op(*this, taken, opset_);
  body_.push_back("  # node " + (n.name().empty() ? n.output_size() ? n.output(0) : std::string() : n.name()) + " (" + n.op_type() +
                  "): a Gather of positions known at import");
  splice(k, std::move(nodes));
}

// An optional operator (sequence_rewrite.h): held at import, the node replaced by a Constant or an
// Identity of the tensor held (its shape that tensor's where inference has none).
void Importer::rewrite_optional(int k) {
  const onnx::NodeProto n = model_.graph().node(k);
  node_ = &n;
  std::vector<onnx::NodeProto> nodes = rewrite_optional_op(*this, sequences_, optionals_);
  for (const auto& r : nodes) {
    if (r.op_type() != "Identity" || !values_.count(r.input(0))) continue;
    const Value src = values_.at(r.input(0));
    Value& v = values_[r.output(0)];
    v.onnx = r.output(0);
    if (!v.elem_type) v.elem_type = src.elem_type;
    if (!v.has_shape && src.has_shape) v.shape = src.shape, v.has_shape = true;
  }
  const std::string name = n.name().empty() ? n.output_size() ? n.output(0) : std::string() : n.name();
  if (n.output_size() && optionals_.count(n.output(0)))
    body_.push_back("  # node " + name + " (" + n.op_type() + "): an optional " + (optionals_.at(n.output(0)).present ? "holding a value" : "holding nothing") +
                    ", held at import");
  splice(k, std::move(nodes));
}

// Each sequence / optional graph output's elements (known at import) copied into def outputs of
// their own, named OUTPUT_J; its structure (kind, present, length) recorded for the manifest.
void Importer::write_structured_outputs() {
  const auto& g = model_.graph();
  for (int k = 0; k < g.output_size(); ++k) {
    const std::string& name = g.output(k).name();
    if (std::find(structured_outputs_.begin(), structured_outputs_.end(), name) == structured_outputs_.end()) continue;
    const bool optional = g.output(k).type().has_optional_type();
    bool present = true, sequence = !optional;
    std::vector<std::string> elements;
    if (const auto o = optionals_.find(name); optional && o != optionals_.end()) {
      present = o->second.present;
      sequence = o->second.sequence;
      if (present && !sequence) elements = {o->second.tensor};
    } else if (optional) {  // a plain tensor or sequence flowing into an optional output
      sequence = sequences_.count(name) != 0;
      if (!sequence) elements = {name};
    }
    if (present && sequence) {
      const auto it = sequences_.find(name);
      if (it == sequences_.end()) throw UserError(model_name_ + ": output '" + name + "' (a sequence) is not produced by any node");
      elements = it->second;
    }
    result_.structured_outputs.push_back({{"onnx", name}, {"output_index", k}, {"kind", optional ? "optional" : "sequence"},
                                          {"present", present}, {"sequence", sequence}, {"length", elements.size()}});
    for (size_t j = 0; j < elements.size(); ++j) {
      if (elements[j] == kEmptyElement)
        throw UserError(model_name_ + ": output '" + name + "': unsupported: element " + std::to_string(j) + " is an empty tensor");
      const auto src = values_.find(elements[j]);
      if (src == values_.end() || (src->second.tsl.empty() && !src->second.data))
        throw UserError(model_name_ + ": output '" + name + "': element '" + elements[j] + "' is not produced by any node");
      if (!src->second.has_shape) throw UserError(model_name_ + ": output '" + name + "': unsupported: dynamic or unknown shape of '" + elements[j] + "'");
      for (int64_t d : src->second.shape)
        if (d == 0) throw UserError(model_name_ + ": output '" + name + "': unsupported: element '" + elements[j] + "' is an empty tensor");
      std::string key = name + (sequence ? "_" + std::to_string(j) : "_value");
      while (values_.count(key)) key += "_";
      Value& out = values_[key];
      out = src->second;
      out.onnx = key;
      out.data.reset();
      out.initializer = out.graph_input = false;
      out.tsl = unique(identifier(key));
      def_outputs_.push_back(key);
      element_of_[key] = {name, sequence ? int(j) : -1, optional};
      const Value copy = out;
      body_.push_back("  # output " + name + (sequence ? " element " + std::to_string(j) : std::string(" value")));
      Statement st{copy.tsl, indices(copy.shape.size()), "=", "", ranges_of(copy.shape)};
      st.rhs = read(values_.at(elements[j]), st.lhs);
      emit(st);
    }
  }
}

}  // namespace tessel::onnx_import
