// Sync insertion and pruning: a separate pass over an emitted NPU program (DESIGN.md "Data flow":
// npu emitter -> NPU program -> sync insertion + pruning -> simulator).
//
// Takes an npu::Program without synchronisation (any set_flag / wait_flag / pipe_barrier it holds
// is stripped first; the final `pipe_barrier ALL` is kept) and gives the same program with the
// set_flag / wait_flag pairs (and, as the last resort, pipe_barrier ALL) that order every pair of
// instructions on different pipes that may touch the same bytes with one of them writing
// (compiler/npu_sync/footprint.h), loop-carried dependences included. A `sync_all` outside every
// loop (the cross-core barrier) drains the core and orders everything before it against everything
// after it on every core: no pair crosses it, and none is needed across it.
//
//   naive:  one sync pair per dependence (per pair of conflicting instructions and direction),
//           placed at the innermost loop body holding both ends; loop-carried dependences are
//           pre-set before their loop and drained after it.
//   pruned: the naive pairs, then (1) pairs of the same pipe pair whose ends are adjacent on their
//           pipes are merged into one, (2) every pair whose ordering is already implied by other
//           pairs, same-pipe order or barriers is dropped (reachability in the happens-before order
//           of the program with every loop unrolled twice — each dependence judged with every loop
//           that does not hold one of its ends run its least trip count instead, so syncs inside a
//           loop that may run no iterations (an end the registers do not fix) never stand in for a
//           pair around it; every pipe is a chain, so one vector clock
//           per dynamic instance answers it, no transitive closure over all pairs; the clocks of the
//           kept pairs are stored, so a check walks only the stretch a removal disturbs, until the
//           clocks agree again; greedily in a fixed order, runs of removable pairs found by
//           galloping + bisection since removal is monotone). Merge candidates are indexed by the
//           shared end and the other end's place among its pipe's nodes, so each pair meets only
//           adjacent ones: 256^3 GEMM in 16x16x16 operand tiles (~180k naive pairs) in ~3 s.
//           Its work is bounded twice, in counts rather than seconds (the same program on any
//           machine): the traces' events (SyncOptions::max_trace_events; past it no pair is
//           dropped) and the events its checks walk (max_check_events; past it the pairs not yet
//           shown implied stay); either way the pairs kept order every dependence and
//           SyncResult::note says where pruning stopped.
// Both then allocate event ids per pipe pair within `sync.event_ids_per_pipe_pair` of the
// description by liveness (interval colouring; pairs may share an id when their sets and waits are
// in the same first-in first-out order), turning a pair that finds no id into a pipe_barrier ALL.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "isa/hierarchy.h"
#include "isa/npu_program.h"

namespace tessel::npu_sync {

enum class SyncMode { Naive, Pruned };
SyncMode parse_sync_mode(const std::string& text);  // "naive" | "pruned"; UserError otherwise
const char* sync_mode_name(SyncMode m);

// Called now and then while pruning: (candidate pairs decided, candidate pairs in all).
using SyncProgress = std::function<void(int decided, int total)>;

struct SyncOptions {
  SyncMode mode = SyncMode::Pruned;
  int omit_pair = -1;  // >= 0: leave out that pair (mutation tests: the race detector must fire)
  SyncProgress progress = nullptr;
  // Pruning checks each removal on traces of the program (loops unrolled up to twice, one trace per
  // set of loops whose count the registers do not fix); when the traces together would pass this
  // many events (about 100 bytes each), no implied pair is dropped (the merged pairs stay, correct
  // and slower) and SyncResult::note says so, instead of exhausting memory.
  int64_t max_trace_events = int64_t(16) << 20;
  // The checks' work: past this many trace events walked (over every check and trace), no further
  // pair is checked; the pairs not yet shown implied stay (correct, slower) and SyncResult::note
  // says how far pruning got. Counted in events, not seconds, so a program prunes the same on any
  // machine.
  int64_t max_check_events = int64_t(1) << 30;
};

struct SyncResult {
  npu::Program program;
  int dependences = 0;       // conflicting instruction pairs (each direction counted)
  int pairs = 0;             // sync pairs kept (set/wait with its pre-set and drain, or a barrier)
  int barriers = 0;          // pairs that found no event id and became pipe_barrier ALL
  int sync_instructions = 0; // set_flag + wait_flag + pipe_barrier inserted (static count)
  std::string note;          // non-empty: pruning stopped short, and why
  int64_t check_events = 0;  // trace events the pruning checks walked (SyncOptions::max_check_events)
};

// The program without set_flag / wait_flag / pipe_barrier (but its final pipe_barrier ALL).
npu::Program strip_syncs(const npu::Program& program);

// Inserts (and for Pruned, prunes) the syncs. The result passes npu::validate_program.
SyncResult insert_syncs(const npu::Program& program, const isa::Hierarchy& target, const SyncOptions& options = {});

}  // namespace tessel::npu_sync
