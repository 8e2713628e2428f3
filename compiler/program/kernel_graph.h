// Kernel dependence graph of a program (analysis, after the memory plan): which earlier kernels
// each kernel must follow, and a placement of the kernels on streams so that kernels with no path
// between them may run at the same time (on a GPU: parallel branches of the program's CUDA graph,
// e.g. the Q, K and V projections of an attention layer, or a bottleneck's projection shortcut
// beside its three convolutions).
//
// Two kernels conflict when they touch the same bytes and at least one of them writes them: a
// tensor a kernel reads (kind Input) against one another writes (kind Output), or two writes.
// Where a tensor lives decides "the same bytes": an intermediate's arena slot (memory_plan.h;
// slots whose byte ranges overlap conflict, so the arena's reuse by liveness orders a reader of
// the old tensor before the writer of the new one), else the def's tensor of that name (inputs,
// outputs). A kernel's temporaries and scratch are its own and never conflict. `waits[j]` is the
// transitive reduction of kernel j's conflicts with earlier kernels (an edge implied by a path
// is left out); program order is kept wherever it matters, so any execution that respects
// `waits` computes what the sequence computes.
//
// Streams: kernel j goes on the stream of one of the kernels it waits for whose stream has not
// moved on (its last kernel is that one), else on a stream whose last kernel is an ancestor of j,
// else on a new stream while there are fewer than `max_streams`, else on the stream whose last
// kernel is oldest (an ordering the graph does not need, never a missing one). Stream 0 is the
// caller's and holds kernel 0. `cross_waits[j]` are the waits of j on kernels of other streams
// (the events a runner records and waits for); a wait on the same stream is implied by order.
#pragma once

#include <string>
#include <vector>

namespace tessel::program {

struct ProgramCompilation;

struct KernelGraph {
  std::vector<std::vector<int>> waits;        // per kernel: the earlier kernels it must follow (reduced)
  std::vector<int> stream;                    // per kernel: its stream, 0 = the caller's
  std::vector<std::vector<int>> cross_waits;  // per kernel: the kernels of `waits` on other streams
  int streams = 1;
  std::vector<bool> signals;  // per kernel: some later kernel on another stream waits for it
  std::vector<int> last_on_stream() const;  // per stream: its last kernel (the runner's join)
  std::string to_string() const;  // "k1 || k0; k2 after k0, k1; ..." one line
};

// What a kernel touches: the locations it reads and writes, each a tensor of the def (by name)
// or an arena byte range.
struct KernelAccess {
  struct Location {
    std::string tensor;         // the def's tensor, when not in the arena
    int64_t begin = 0, end = 0;  // arena bytes [begin, end) when `tensor` is empty
  };
  std::vector<Location> reads, writes;
};

// The graph of accesses given per kernel in program order (the core of kernel_graph; testable
// without a compilation).
KernelGraph kernel_graph(const std::vector<KernelAccess>& kernels, int max_streams);
// A program's graph from its kernels' tensors and memory plan.
KernelGraph kernel_graph(const ProgramCompilation& p, int max_streams);

}  // namespace tessel::program
