// ONNX Loop unrolled at import (issue 34): the language has no loop whose trip count is data, so a
// Loop whose trip count M is known at import time (a constant, an initializer, a `--value` input or
// a value computed from those alone, as Range's expanded form computes it) becomes its body M times
// in the outer graph, as RNN/GRU/LSTM are unrolled over their sequence. The importer
// (importer.cc) replaces the Loop node by these nodes, runs ONNX's shape inference once more, and
// translates them like any other node.
//
// Per iteration k (0 <= k < M), every name the body defines (its inputs, its nodes' outputs) gets a
// fresh outer name ending in `_itK`; a name the body reads from the outer scope is kept:
//   iter_count  -> a Constant node, int64 scalar k
//   cond_in     -> the Loop's cond (or a Constant true where the Loop has none)
//   carried v_in -> the Loop's initial value (k = 0) or iteration k - 1's v_out
// After the last iteration the Loop's carried outputs are Identity of its v_out (the initial values
// for M = 0) and each scan output is Concat(axis 0) of Unsqueeze(axis 0) of every iteration's value.
//
// The body's condition output must pass its condition input through (directly, through Identity,
// or a Constant true): a condition the body computes from data would end the loop at a time only
// known when it runs. Refused (UnrollRefusal's reason, which the importer reports naming the Loop):
// such a condition, a body node holding a subgraph other than an If (a nested Loop/Scan; an If's
// branches read the iteration's renamed values and it is inlined later where its condition is
// known), more than
// kMaxLoopIterations iterations, and a scan output of a Loop that runs no iteration (empty).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

namespace tessel::onnx_import {

constexpr int64_t kMaxLoopIterations = 1024;

struct UnrollRefusal {
  std::string reason;
};

// `taken`: every name the outer graph uses (fresh names avoid them and are added). `opset`: the
// model's, for Unsqueeze's axes (an attribute before 13, an input from 13). `needed`: the names the
// rest of the graph reads (later nodes, graph outputs): a repeated node none of whose outputs is
// read by a later one or named there is left out (the condition's Identity chain, say). Throws
// UnrollRefusal.
std::vector<onnx::NodeProto> unroll_loop(const onnx::NodeProto& loop, int64_t trips, int opset, std::set<std::string>& taken,
                                         const std::set<std::string>& needed);

// Scan unrolled the same way (its step count the static length of its scan inputs, given as
// `input_shapes`, one per Scan input): per step t, each scan input's position t (from the end where
// its direction is 1) taken along its scan axis by a Gather, the body repeated (names suffixed
// _scT), the states chained; the final states Identity into the outputs, each scan output the
// steps' values stacked (Unsqueeze + Concat) along its scan_output_axes, reversed where its
// direction is 1. Scan-8 (opset < 9): axis 0 is a batch, each batch element scanned along axis 1
// on its own and the results stacked; its sequence_lens refused. Refused: a body node holding a
// subgraph other than an If, more than kMaxLoopIterations steps, no step.
std::vector<onnx::NodeProto> unroll_scan(const onnx::NodeProto& scan, const std::vector<std::vector<int64_t>>& input_shapes, int opset,
                                         std::set<std::string>& taken);

// If whose condition is known at import: the nodes of the branch taken (`then_branch` when `take_then`),
// each name it defines renamed where the outer graph has it, then Identity of each branch output
// into the If's output. Throws UnrollRefusal for a branch node holding a subgraph.
std::vector<onnx::NodeProto> inline_branch(const onnx::NodeProto& node, bool take_then, std::set<std::string>& taken);

// Node builders shared with sequence_rewrite.cc: a name not in `taken` from `base` (added to it);
// a Constant of int64 / bool data (one value repeated over `dims`, [] a scalar); a node of one
// output named after it.
std::string fresh_name(const std::string& base, std::set<std::string>& taken);
onnx::NodeProto constant_node(const std::string& out, int elem_type, const std::vector<int64_t>& dims, const std::vector<int64_t>& values);
onnx::NodeProto simple_node(const std::string& op, const std::vector<std::string>& in, const std::string& out);
// Unsqueeze / Squeeze of `in` at `axes` into `out`: the axes an attribute before opset 13, else a
// Constant input (appended to `nodes` first).
void add_axes_node(std::vector<onnx::NodeProto>& nodes, const std::string& op, const std::string& in, const std::string& out,
                   const std::vector<int64_t>& axes, int opset, std::set<std::string>& taken);

}  // namespace tessel::onnx_import
