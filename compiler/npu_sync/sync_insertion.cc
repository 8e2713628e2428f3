#include "compiler/npu_sync/sync_insertion.h"

#include <algorithm>
#include <array>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <queue>
#include <set>
#include <tuple>

#include "compiler/npu_sync/footprint.h"
#include <fmt/format.h>

#include "isa/base/error.h"

namespace tessel::npu_sync {
namespace {

constexpr size_t kMaxDependences = 20'000'000;

using npu::Opcode;
using npu::Operand;
using npu::Pipe;

bool is_sync(Opcode op) { return op == Opcode::SetFlag || op == Opcode::WaitFlag || op == Opcode::PipeBarrier; }

// One sync pair. Its ends are nodes (an instruction or a whole loop, named by pc) of one loop body
// (`body`: the loop's pc, -1 for the top level): set_flag after `set_after`, wait_flag before
// `wait_before`. A carried pair orders iteration t's `set_after` before iteration t+1's
// `wait_before`; it is pre-set before the loop and drained after it.
struct Pair {
  Pipe src = Pipe::S, dst = Pipe::S;
  int body = -1;
  int set_after = -1, wait_before = -1;
  bool carried = false;
  int id = 0;
  bool barrier = false;
  bool dropped = false;  // merged into another pair when event ids ran out
};

struct Dependence {
  int first = -1, second = -1;  // pcs, first < second
};

// The loop tree of the (sync-free) program.
struct Structure {
  std::vector<int> parent;    // per pc: enclosing loop pc, -1 at top level
  std::vector<int> position;  // per pc: index among its parent's direct nodes
  std::vector<int> partner;   // match_loops
  std::vector<std::vector<int>> chain;  // per pc: enclosing loops, outermost first
};

Structure structure(const npu::Program& p) {
  Structure s;
  const int n = static_cast<int>(p.code.size());
  s.partner = npu::match_loops(p);
  s.parent.assign(n, -1);
  s.position.assign(n, 0);
  s.chain.resize(n);
  std::vector<int> open;
  std::map<int, int> next_position;  // body -> next index
  for (int pc = 0; pc < n; ++pc) {
    const Opcode op = p.code[pc].opcode;
    if (op == Opcode::EndLoop) {
      open.pop_back();
      continue;
    }
    s.parent[pc] = open.empty() ? -1 : open.back();
    s.position[pc] = next_position[s.parent[pc]]++;
    s.chain[pc] = open;
    if (op == Opcode::Loop) open.push_back(pc);
  }
  return s;
}

// The node of `body` (a loop pc or -1) that holds pc.
int anchor_in(const Structure& s, int body, int pc) {
  if (body == -1) return s.chain[pc].empty() ? pc : s.chain[pc].front();
  const auto& c = s.chain[pc];
  auto it = std::find(c.begin(), c.end(), body);
  TESSEL_CHECK(it != c.end(), "anchor_in: pc is not inside the body");
  return std::next(it) == c.end() ? pc : *std::next(it);
}

class SyncPass {
 public:
  SyncPass(const npu::Program& program, const isa::Hierarchy& target)
      : p_(strip_syncs(program)), target_(target), s_(structure(p_)), fp_(analyse_footprints(p_, target)) {
    const auto& sync = target.sync;
    if (!sync) throw UserError(target.source_file + ": the description has no sync section (not an NPU target)");
    ids_per_pair_ = static_cast<int>(sync->event_ids_per_pipe_pair);
    const int n = static_cast<int>(p_.code.size());
    pipe_.assign(n, -1);
    times_.assign(n, 0);
    least_.assign(n, 0);
    for (int pc = 0; pc < n; ++pc) {
      if (!fp_.accesses[pc].empty()) pipe_[pc] = static_cast<int>(npu::executing_pipe(p_.code[pc]));
      if (p_.code[pc].opcode == Opcode::Loop) {
        const auto& trip = fp_.trip_count[pc];
        times_[pc] = static_cast<int>(trip ? std::min<int64_t>(*trip, 2) : 2);
        least_[pc] = static_cast<int>(std::min<int64_t>(fp_.min_trip_count[pc], times_[pc]));
      }
    }
    build_pipe_prefix();
    find_dependences();
  }

  SyncResult run(const SyncOptions& options) {
    std::vector<Pair> pairs = naive_pairs();
    if (options.mode == SyncMode::Pruned) {
      pairs = merge_adjacent(pairs);
      pairs = drop_implied(pairs, options, note_);
    }
    allocate_ids(pairs);
    if (std::any_of(pairs.begin(), pairs.end(), [](const Pair& p) { return p.barrier && !p.dropped; })) {
      // Too few ids: carried pairs of one loop and pipe pair become one (each holds an id for the
      // whole loop), then allocate again; keep whichever needs fewer barriers.
      std::vector<Pair> merged = merge_carried(pairs);
      allocate_ids(merged);
      auto barriers = [](const std::vector<Pair>& v) {
        return std::count_if(v.begin(), v.end(), [](const Pair& p) { return p.barrier && !p.dropped; });
      };
      if (barriers(merged) < barriers(pairs)) pairs = std::move(merged);
    }
    SyncResult r;
    r.note = note_;
    r.check_events = check_events_;
    r.dependences = static_cast<int>(deps_.size());
    for (const auto& pr : pairs) {
      r.pairs += !pr.dropped;
      r.barriers += pr.barrier && !pr.dropped;
    }
    int omit = -1;  // the omit_pair-th kept pair
    for (int i = 0, kept = 0; i < static_cast<int>(pairs.size()) && options.omit_pair >= 0; ++i)
      if (!pairs[i].dropped && kept++ == options.omit_pair) omit = i;
    r.program = materialize(pairs, omit).program;
    for (size_t i = 0; i + 1 < r.program.code.size(); ++i) r.sync_instructions += is_sync(r.program.code[i].opcode);
    npu::validate_program(r.program);
    return r;
  }

 private:
  bool trip_at_least_two(int loop) const {
    const auto& t = fp_.trip_count[loop];
    return !t || *t >= 2;
  }

  // Per pc: how many sync_all of the top level (outside every loop) precede it. Each drains every
  // pipe of the core and orders everything before it on any core before everything after it, so two
  // instructions it separates need no pair in either direction (no loop holds both). A sync_all
  // inside a loop orders nothing here: pairs across it are kept (redundant, never wrong).
  std::vector<int> top_level_segments() const {
    std::vector<int> segment(p_.code.size(), 0);
    int current = 0;
    for (size_t pc = 0; pc < p_.code.size(); ++pc) {
      segment[pc] = current;
      if (p_.code[pc].opcode == Opcode::SyncAll && s_.chain[pc].empty()) ++current;
    }
    return segment;
  }

  void find_dependences() {
    const int n = static_cast<int>(p_.code.size());
    const std::vector<int> segment = top_level_segments();
    for (int x = 0; x < n; ++x) {
      if (fp_.accesses[x].empty()) continue;
      for (int y = x + 1; y < n; ++y) {
        if (fp_.accesses[y].empty()) continue;
        if (segment[x] != segment[y]) break;  // y and all after it lie beyond a sync_all
        if (npu::executing_pipe(p_.code[x]) == npu::executing_pipe(p_.code[y])) continue;
        if (!conflict(fp_.accesses[x], fp_.accesses[y])) continue;
        deps_.push_back({x, y});
        // each dependence becomes up to two pairs and their placements: past this many the pass
        // would need tens of gigabytes (a 1024^3 GEMM in 16x16 operand tiles: killed at 24 GB)
        if (deps_.size() > kMaxDependences)
          throw UserError(fmt::format(
              "{}: {} static instructions with more than {} conflicting pairs across pipes: too many for sync "
              "insertion (its memory grows with them); use larger operand tiles (the inner sizes of --tile) or "
              "fewer tiles per core",
              p_.source_name, n, kMaxDependences));
      }
    }
  }

  int common_loop(int x, int y) const {
    const auto& a = s_.chain[x];
    const auto& b = s_.chain[y];
    int common = -1;
    for (size_t i = 0; i < std::min(a.size(), b.size()) && a[i] == b[i]; ++i) common = a[i];
    return common;
  }

  std::vector<Pair> naive_pairs() const {
    std::vector<Pair> pairs;
    for (const auto& d : deps_) {
      const Pipe px = npu::executing_pipe(p_.code[d.first]), py = npu::executing_pipe(p_.code[d.second]);
      const int body = common_loop(d.first, d.second);
      pairs.push_back({px, py, body, anchor_in(s_, body, d.first), anchor_in(s_, body, d.second), false});
      // Carried over the innermost common loop that runs more than once.
      int carrier = body;
      while (carrier != -1 && !trip_at_least_two(carrier)) carrier = s_.parent[carrier];
      if (carrier != -1)
        pairs.push_back({py, px, carrier, anchor_in(s_, carrier, d.second), anchor_in(s_, carrier, d.first), true});
    }
    return pairs;
  }

  // Whether a node of `body` strictly between positions a and b issues work on `pipe` (a loop
  // node: any instruction inside it): prefix counts per body and pipe, built once.
  bool pipe_between(int body, int a, int b, Pipe pipe) const {
    if (a > b) std::swap(a, b);
    if (b - a < 2) return false;
    const auto& prefix = pipe_prefix_[body + 1];  // prefix[i][q]: nodes at positions < i using pipe q
    const int q = static_cast<int>(pipe);
    return prefix[b][q] - prefix[a + 1][q] > 0;
  }

  void build_pipe_prefix() {
    const int n = static_cast<int>(p_.code.size());
    std::vector<unsigned> mask(n, 0);  // pipes a node issues work on
    std::vector<int> open;
    for (int pc = 0; pc < n; ++pc) {
      const Opcode op = p_.code[pc].opcode;
      if (op == Opcode::EndLoop) {
        open.pop_back();
        continue;
      }
      if (!fp_.accesses[pc].empty()) {
        const unsigned bit = 1u << static_cast<int>(npu::executing_pipe(p_.code[pc]));
        mask[pc] |= bit;
        for (int l : open) mask[l] |= bit;
      }
      if (op == Opcode::Loop) open.push_back(pc);
    }
    pipe_prefix_.assign(n + 1, {});
    for (int pc = 0; pc < n; ++pc) {
      if (p_.code[pc].opcode == Opcode::EndLoop) continue;
      auto& prefix = pipe_prefix_[s_.parent[pc] + 1];
      if (prefix.empty()) prefix.push_back({});
      TESSEL_CHECK(static_cast<int>(prefix.size()) == s_.position[pc] + 1, "sync pass: node positions out of order");
      std::array<int, npu::kPipeCount> next = prefix.back();
      for (int q = 0; q < npu::kPipeCount; ++q) next[q] += (mask[pc] >> q) & 1u;
      prefix.push_back(next);
    }
  }

  // Where a node sits among the nodes of its body that issue work on `pipe`: `gap` counts those
  // before it; `on` says whether it is one. Two positions are adjacent on the pipe (pipe_between
  // false) exactly when their classes meet: two others in one gap, a pipe node and the gaps on
  // either side, or two neighbouring pipe nodes.
  struct PipeClass {
    int on = 0, gap = 0;
    auto operator<=>(const PipeClass&) const = default;
  };
  PipeClass pipe_class(int body, int position, Pipe pipe) const {
    const auto& prefix = pipe_prefix_[body + 1];
    const int q = static_cast<int>(pipe);
    return {prefix[position + 1][q] - prefix[position][q], prefix[position][q]};
  }
  static std::vector<PipeClass> adjacent_classes(PipeClass c) {
    if (c.on) return {{0, c.gap}, {0, c.gap + 1}, {1, c.gap - 1}, {1, c.gap}, {1, c.gap + 1}};
    return {{0, c.gap}, {1, c.gap - 1}, {1, c.gap}};
  }

  // Merges pairs of one body, direction and pipe pair that share one end and whose other ends are
  // adjacent on their pipe: one set after the later source, one wait before the earlier sink. Such a
  // merge delays no instruction (the shared set or wait was already waited for).
  std::vector<Pair> merge_adjacent(const std::vector<Pair>& in) const {
    // Candidates share an end and have the other end adjacent: indexed by (body, carried, pipes,
    // shared node, class of the other end), each an ordered set of positions in `out`, so a pair
    // meets only those (first one wins, as in a scan of `out` in order); kept in step when a merge
    // moves an end.
    using Key = std::tuple<int, bool, int, int, int, PipeClass>;
    std::map<Key, std::set<int>> by_set, by_wait;
    auto set_key = [&](const Pair& p, PipeClass wait) { return Key{p.body, p.carried, int(p.src), int(p.dst), p.set_after, wait}; };
    auto wait_key = [&](const Pair& p, PipeClass set) { return Key{p.body, p.carried, int(p.src), int(p.dst), p.wait_before, set}; };
    auto wait_class = [&](const Pair& p) { return pipe_class(p.body, s_.position[p.wait_before], p.dst); };
    auto set_class = [&](const Pair& p) { return pipe_class(p.body, s_.position[p.set_after], p.src); };
    auto index = [&](const Pair& p, int qi, bool add) {
      auto& a = by_set[set_key(p, wait_class(p))];
      auto& b = by_wait[wait_key(p, set_class(p))];
      if (add) {
        a.insert(qi);
        b.insert(qi);
      } else {
        a.erase(qi);
        b.erase(qi);
      }
    };
    std::vector<Pair> out;
    for (const Pair& p : in) {
      // Every candidate set, read in increasing order all at once (the first match ends the scan).
      std::vector<std::pair<std::set<int>::const_iterator, std::set<int>::const_iterator>> sources;
      for (PipeClass c : adjacent_classes(wait_class(p)))
        if (auto it = by_set.find(set_key(p, c)); it != by_set.end()) sources.push_back({it->second.begin(), it->second.end()});
      for (PipeClass c : adjacent_classes(set_class(p)))
        if (auto it = by_wait.find(wait_key(p, c)); it != by_wait.end()) sources.push_back({it->second.begin(), it->second.end()});
      int merged = -1;
      for (int previous = -1;;) {
        int qi = std::numeric_limits<int>::max();
        for (auto& [it, end] : sources) {
          while (it != end && *it <= previous) ++it;
          if (it != end) qi = std::min(qi, *it);
        }
        if (qi == std::numeric_limits<int>::max()) break;
        previous = qi;
        Pair& q = out[qi];
        const int set_a = s_.position[q.set_after], set_b = s_.position[p.set_after];
        const int wait_a = s_.position[q.wait_before], wait_b = s_.position[p.wait_before];
        // Only merges that delay nothing: one end shared, the other ends adjacent on their pipe.
        if (pipe_between(p.body, set_a, set_b, p.src) || pipe_between(p.body, wait_a, wait_b, p.dst)) continue;
        const int set_after = set_a >= set_b ? q.set_after : p.set_after;
        const int wait_before = wait_a <= wait_b ? q.wait_before : p.wait_before;
        if (!p.carried && s_.position[set_after] >= s_.position[wait_before]) continue;
        index(q, qi, false);
        q.set_after = set_after;
        q.wait_before = wait_before;
        index(q, qi, true);
        merged = qi;
        break;
      }
      if (merged >= 0) continue;
      const int qi = static_cast<int>(out.size());
      out.push_back(p);
      index(p, qi, true);
    }
    return out;
  }

  struct Linear {
    npu::Program program;
    std::vector<int> origin;  // per instruction: pc in p_ (-1 for inserted syncs)
    std::vector<int> pair;    // per instruction: the pair it belongs to (-1: none)
    std::vector<int> first, last;  // per pair: linear positions of its first and last instruction
  };

  // Where the pairs' instructions go: per pc of p_, codes 4 * pair + kind (0 set, 1 wait, 2 pre-set,
  // 3 drain) to place before and after it (for a loop: before its `loop`, after its `end_loop`),
  // sets (and pre-sets) first, then waits (and drains). Pairs with `skip` set are left out.
  struct Placement {
    std::vector<std::vector<int>> before, after;
  };
  Placement place(const std::vector<Pair>& pairs, const std::vector<char>& skip) const {
    const int n = static_cast<int>(p_.code.size());
    Placement pl;
    pl.before.resize(n);
    pl.after.resize(n);
    for (int i = 0; i < static_cast<int>(pairs.size()); ++i) {
      if (skip[i] || pairs[i].dropped) continue;
      const Pair& pr = pairs[i];
      if (pr.barrier) {
        pl.before[pr.wait_before].push_back(4 * i + 1);
        continue;
      }
      pl.after[pr.set_after].push_back(4 * i + 0);
      pl.before[pr.wait_before].push_back(4 * i + 1);
      if (pr.carried) {
        pl.before[pr.body].push_back(4 * i + 2);
        pl.after[pr.body].push_back(4 * i + 3);
      }
    }
    auto is_wait = [](int code) { return code % 4 == 1 || code % 4 == 3; };
    for (auto* lists : {&pl.before, &pl.after})
      for (auto& codes : *lists)
        if (codes.size() > 1)
          std::stable_sort(codes.begin(), codes.end(), [&](int x, int y) { return is_wait(x) < is_wait(y); });
    return pl;
  }

  Linear materialize(const std::vector<Pair>& pairs, int omit = -1) const {
    const int n = static_cast<int>(p_.code.size());
    std::vector<char> skip(pairs.size(), 0);
    if (omit >= 0) skip[omit] = 1;
    const Placement pl = place(pairs, skip);
    Linear l;
    l.program.source_name = p_.source_name;
    l.program.cores = p_.cores;
    l.program.tensors = p_.tensors;
    l.first.assign(pairs.size(), -1);
    l.last.assign(pairs.size(), -1);
    auto emit_syncs = [&](const std::vector<int>& codes) {
      for (int code : codes) {
        const int i = code / 4, kind = code % 4;
        const Pair& pr = pairs[i];
        const int pos = static_cast<int>(l.program.code.size());
        if (pr.barrier) {
          l.program.add(Opcode::PipeBarrier, {Operand::pipe_(Pipe::All)});
        } else {
          const bool set = kind == 0 || kind == 2;
          l.program.add(set ? Opcode::SetFlag : Opcode::WaitFlag,
                        {Operand::pipe_(pr.src), Operand::pipe_(pr.dst), Operand::imm_(pr.id)});
        }
        l.origin.push_back(-1);
        l.pair.push_back(i);
        if (l.first[i] < 0 || pos < l.first[i]) l.first[i] = pos;
        l.last[i] = std::max(l.last[i], pos);
      }
    };
    for (int pc = 0; pc + 1 < n; ++pc) {  // the final pipe_barrier ALL goes last
      const bool end = p_.code[pc].opcode == Opcode::EndLoop;
      const int node = end ? s_.partner[pc] : pc;
      if (!end) emit_syncs(pl.before[node]);
      l.program.code.push_back(p_.code[pc]);
      l.origin.push_back(pc);
      l.pair.push_back(-1);
      if (end || p_.code[pc].opcode != Opcode::Loop) emit_syncs(pl.after[node]);
    }
    l.program.code.push_back(p_.code.back());
    l.origin.push_back(n - 1);
    l.pair.push_back(-1);
    return l;
  }

  // The happens-before relation of the program with the pairs placed and every loop run (at most)
  // twice: events are dynamic instances of non-scalar instructions in program order, ordered by
  // same-pipe order, set -> matching wait (first in, first out per pair) and pipe_barrier ALL. Every
  // pipe is a chain, so reachability is a vector clock per event: clock[q] = the sequence number of
  // the latest event of pipe q that happens before (or is) the event, and e happens before f iff
  // seq(e) <= clock(f)[pipe(e)]. Linear in the events times the pipe count (no closure over all
  // pairs of events), and walked straight from the placement (no program is built).
  using Clock = std::array<int, npu::kPipeCount>;
  static void join(Clock& a, const Clock& b) {
    for (int q = 0; q < npu::kPipeCount; ++q) a[q] = std::max(a[q], b[q]);
  }

  // Checks whether every dependence stays ordered when a run of pairs is taken out of those still
  // placed. The happens-before relation of the placed pairs (loops unrolled as above) is laid out
  // once as a trace of events (instruction instances and sync instances, a fixed sequence number
  // each: its index), and the vector clock after every event of the committed placement is kept.
  // Leaving pairs out changes clocks only from their first event on, and only until the clocks
  // agree with the committed ones again (every pipe's latest clock equal, and no set whose clock
  // changed still waiting for its wait): a check walks from the last instruction before the run's
  // first event (whose pipe clocks are kept as a snapshot), jumps over the stretches where it
  // agrees, and stops at the first instance of an instruction that is no longer reached from the
  // latest earlier instance of an instruction it conflicts with. Same answers as walking the whole
  // program per check, at a cost near the stretch the run disturbs.
  class Checker {
   public:
    // `times`: per loop pc, the iterations traced; `deps`: the dependences this trace checks.
    Checker(const SyncPass& pass, const std::vector<Pair>& pairs, std::vector<int> times,
            const std::vector<Dependence>& deps)
        : pass_(pass), pairs_(pairs), pl_(pass.place(pairs, std::vector<char>(pairs.size(), 0))),
          times_(std::move(times)), events_of_(pairs.size()), skip_(pairs.size(), 0),
          latest_(pass.p_.code.size(), -1), partners_(pass.p_.code.size()), open_(pairs.size()),
          open_head_(pairs.size(), 0) {
      for (const auto& d : deps) {
        partners_[d.first].push_back(d.second);
        partners_[d.second].push_back(d.first);
      }
      // The final pipe_barrier ALL orders nothing after it: not traced.
      trace(0, static_cast<int>(pass_.p_.code.size()) - 1);
      const int n = static_cast<int>(events_.size());
      Clock unknown;
      unknown.fill(std::numeric_limits<int>::min());  // differs from every clock: the first walk visits all
      base_.assign(n, unknown);
      overlay_.assign(n, unknown);
      changed_.assign(n, 0);
      snapshots_.resize(anchors_.size());
    }

    int64_t events() const { return static_cast<int64_t>(events_.size()); }
    // Steps of every walk so far: the checks' work, which SyncOptions::max_check_events bounds (the
    // walks are 77 % of a 512^3 GEMM's compile in 16x16x16 operand tiles; 256^3 so walks 2.8e8
    // steps in under a second, 512^3 2.6e9 in about 200 s, its trace past the caches).
    int64_t walked() const { return walked_; }
    // Whether the placement, every pair in place: the first walk, which also records the clocks.
    bool all_ordered() {
      ++epoch_;
      return walk({}, true, true);
    }

    // Whether the placed pairs without `run` order every dependence.
    bool removable(const std::vector<int>& run) {
      ++epoch_;
      for (int i : run) skip_[i] = epoch_;
      return walk(starts(run), false, false);
    }

    // Takes `run` out for good (a run that `removable` accepted); the kept clocks follow.
    void commit(const std::vector<int>& run) {
      ++epoch_;
      for (int i : run) skip_[i] = epoch_;
      TESSEL_CHECK(walk(starts(run), true, false), "sync pass: a removal the check accepted breaks an ordering");
      for (int i : run) {
        skip_[i] = kGone;
        events_of_[i].clear();
      }
    }

   private:
    enum Kind : uint8_t { Instr, Set, Wait };
    struct Event {
      Kind kind = Instr;
      int8_t pipe = 0;
      int pair = -1;    // syncs: the pair
      int match = -1;   // waits: the set event it waits for (first in, first out per pair)
      int anchor = -1;  // instructions: index in anchors_
      Clock need{};     // instructions: per pipe, the latest earlier instance of a conflicting instruction (-1: none)
    };
    static constexpr int kGone = -1;  // skip_ of a committed removal

    void add_syncs(const std::vector<int>& codes) {
      for (int code : codes) {
        const int i = code / 4, kind = code % 4;
        const Pair& pr = pairs_[i];
        TESSEL_CHECK(!pr.barrier, "sync pass: barriers are placed after pruning");
        const bool set = kind == 0 || kind == 2;
        Event ev;
        ev.kind = set ? Set : Wait;
        ev.pipe = static_cast<int8_t>(set ? pr.src : pr.dst);
        ev.pair = i;
        const int index = static_cast<int>(events_.size());
        if (set) {
          open_[i].push_back(index);
        } else {
          TESSEL_CHECK(open_head_[i] < open_[i].size(), "sync pass: a wait_flag precedes its set_flag (pair placement)");
          ev.match = open_[i][open_head_[i]++];
        }
        events_of_[i].push_back(index);
        events_.push_back(ev);
      }
    }

    void trace(int begin, int end) {
      for (int pc = begin; pc < end; ++pc) {
        if (pass_.p_.code[pc].opcode == Opcode::Loop) {
          const int loop = pc;
          add_syncs(pl_.before[loop]);
          for (int t = 0; t < times_[loop]; ++t) trace(loop + 1, pass_.s_.partner[loop]);
          add_syncs(pl_.after[loop]);
          pc = pass_.s_.partner[loop];
          continue;
        }
        add_syncs(pl_.before[pc]);
        if (const int pipe = pass_.pipe_[pc]; pipe >= 0) {
          Event ev;
          ev.pipe = static_cast<int8_t>(pipe);
          ev.need.fill(-1);
          for (int other : partners_[pc]) {
            int& need = ev.need[pass_.pipe_[other]];
            need = std::max(need, latest_[other]);
          }
          const int index = static_cast<int>(events_.size());
          ev.anchor = static_cast<int>(anchors_.size());
          anchors_.push_back(index);
          latest_[pc] = index;
          events_.push_back(ev);
        }
        add_syncs(pl_.after[pc]);
      }
    }

    std::vector<int> starts(const std::vector<int>& run) const {
      std::vector<int> s;
      for (int i : run) s.insert(s.end(), events_of_[i].begin(), events_of_[i].end());
      std::sort(s.begin(), s.end());
      return s;
    }

    // Walks the trace with the pairs marked in skip_ for this epoch left out, from the start
    // (`full`) or around `starts`; `commit`: the walked clocks become the kept ones.
    bool walk(const std::vector<int>& starts, bool commit, bool full) {
      const int n = static_cast<int>(events_.size());
      std::array<Clock, npu::kPipeCount> last;
      Clock none;
      none.fill(-1);
      last.fill(none);
      std::array<bool, npu::kPipeCount> diff{};
      int dirty = 0;  // sets whose clock changed and whose wait is still ahead
      size_t next = 0;
      int e = full ? 0 : -1;
      int resume = -1;  // the last instruction event at or before starts[next] (-1: none)
      size_t resume_for = starts.size();
      while (e < n) {
        ++walked_;
        if (!full && dirty == 0 && std::none_of(diff.begin(), diff.end(), [](bool d) { return d; })) {
          while (next < starts.size() && starts[next] < e) ++next;
          if (next == starts.size()) return true;  // agrees with the kept clocks from here on
          if (resume_for != next) {
            auto it = std::upper_bound(anchors_.begin(), anchors_.end(), starts[next]);
            resume = it == anchors_.begin() ? -1 : *std::prev(it);
            resume_for = next;
          }
          if (resume > e) {
            e = resume;
            last = snapshots_[events_[resume].anchor];
          }
          if (e < 0) e = 0;  // no instruction before: from the start, every clock -1
        }
        const Event& ev = events_[e];
        const int index = e++;
        if (ev.anchor >= 0 && commit) snapshots_[ev.anchor] = last;
        if (ev.pair >= 0 && skip_[ev.pair] != 0) {
          if (skip_[ev.pair] == epoch_) diff[ev.pipe] = true;  // left out now: the kept clock had it
          if (skip_[ev.pair] == epoch_ || skip_[ev.pair] == kGone) continue;
        }
        Clock c = last[ev.pipe];
        if (ev.kind == Wait) {
          if (changed_[ev.match] == epoch_) {
            join(c, overlay_[ev.match]);
            --dirty;
          } else {
            join(c, base_[ev.match]);
          }
        }
        c[ev.pipe] = index;
        if (ev.kind == Instr)
          for (int q = 0; q < npu::kPipeCount; ++q)
            if (c[q] < ev.need[q]) return false;
        const bool differs = c != base_[index];
        diff[ev.pipe] = differs;
        if (ev.kind == Set && differs) {
          changed_[index] = epoch_;
          overlay_[index] = c;
          ++dirty;
        }
        if (commit) base_[index] = c;
        last[ev.pipe] = c;
      }
      return true;
    }

    const SyncPass& pass_;
    const std::vector<Pair>& pairs_;
    Placement pl_;
    std::vector<int> times_;  // per loop pc: iterations traced
    std::vector<Event> events_;
    std::vector<std::vector<int>> events_of_;  // per pair: its events
    std::vector<int> anchors_;                 // events of instructions, in order
    std::vector<std::array<Clock, npu::kPipeCount>> snapshots_;  // per anchor: every pipe's kept clock before it
    std::vector<Clock> base_;     // per event: the kept clock after it
    std::vector<Clock> overlay_;  // per set event: its clock in the walk of this epoch, where it changed
    std::vector<int> changed_;    // per set event: the epoch whose walk changed its clock
    std::vector<int> skip_;       // per pair: epoch that leaves it out, or kGone
    int epoch_ = 0;
    int64_t walked_ = 0;
    // Only while tracing:
    std::vector<int> latest_;                  // per pc: its latest instance so far, -1: none yet
    std::vector<std::vector<int>> partners_;   // per pc: the pcs it has a dependence with
    std::vector<std::vector<int>> open_;       // per pair: its set events
    std::vector<size_t> open_head_;            // per pair: sets already matched by a wait
  };

  int depth(int body) const { return body == -1 ? 0 : static_cast<int>(s_.chain[body].size()) + 1; }

  // Drops every pair whose orderings the remaining pairs imply, innermost and carried pairs first.
  // The traces that judge a removal. Orderings only grow with iterations (a wait then matches a
  // later set of the same pipe), so a dependence is checked where the fewest iterations run that
  // still hold both its ends: the loops around either end as `times_` unrolls them, every other loop
  // its least trip count (`least_`: 0 for a loop whose end the registers do not fix, as in a loop of
  // `slt core_id, 1` iterations). One trace per distinct set of such loops; a program whose loops
  // all run a known count has one, with every loop as `times_` unrolls it.
  // Nothing when the traces together would hold more than `max_events` events (their memory: about
  // 100 bytes an event).
  std::optional<std::vector<Checker>> scenario_checkers(const std::vector<Pair>& pairs, int64_t max_events,
                                                        std::string& why) const {
    std::vector<int> uncertain;  // loops traced more times than they surely run
    for (size_t pc = 0; pc < least_.size(); ++pc)
      if (p_.code[pc].opcode == Opcode::Loop && least_[pc] < times_[pc]) uncertain.push_back(static_cast<int>(pc));
    std::map<std::vector<int>, std::vector<Dependence>> by_scenario;  // uncertain loops around an end -> deps
    for (const auto& d : deps_) {
      std::vector<int> around;
      for (int loop : uncertain) {
        const auto holds = [&](int pc) {
          const auto& c = s_.chain[pc];
          return std::find(c.begin(), c.end(), loop) != c.end();
        };
        if (holds(d.first) || holds(d.second)) around.push_back(loop);
      }
      by_scenario[around].push_back(d);
    }
    std::vector<Checker> checkers;
    checkers.reserve(by_scenario.size());
    int64_t events = 0;
    for (const auto& [around, deps] : by_scenario) {
      std::vector<int> times = times_;
      for (int loop : uncertain)
        if (!std::binary_search(around.begin(), around.end(), loop)) times[loop] = least_[loop];
      events += checkers.emplace_back(*this, pairs, std::move(times), deps).events();
      if (events > max_events) {
        why = fmt::format("implied pairs kept: the happens-before traces of {} loop-count scenarios ({} loops whose count the "
                          "registers do not fix) pass {} events after {} of them",
                          by_scenario.size(), uncertain.size(), max_events, checkers.size());
        return std::nullopt;
      }
    }
    return checkers;
  }

  std::vector<Pair> drop_implied(std::vector<Pair> pairs, const SyncOptions& options, std::string& note) {
    const SyncProgress& progress = options.progress;
    std::optional<std::vector<Checker>> traced = scenario_checkers(pairs, options.max_trace_events, note);
    if (!traced) return pairs;  // every merged pair stays: correct, not pruned
    std::vector<Checker>& checkers = *traced;
    std::vector<char> removed(pairs.size(), 0);
    for (auto& checker : checkers)
      TESSEL_CHECK(checker.all_ordered(), "sync pass: the merged pairs do not order every dependence");
    std::vector<int> order(pairs.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      if (depth(pairs[a].body) != depth(pairs[b].body)) return depth(pairs[a].body) > depth(pairs[b].body);
      return pairs[a].carried > pairs[b].carried;
    });
    // Greedy in `order`: a pair goes when the pairs still there order every dependence without it.
    // Removing pairs only removes happens-before edges, so "the first L candidates from here can
    // all go" is monotone in L: instead of one check per candidate, each step finds the longest
    // such run by galloping then bisection (the same decisions as candidate by candidate, with
    // O(log run) checks per run; most candidates go in long runs).
    const int n = static_cast<int>(order.size());
    // The checks' work so far (steps walked over every trace). Past options.max_check_events no
    // further check starts: a run not yet shown removable stays, and so does every candidate after
    // it. Each removal already made was checked against the pairs then placed, all of which that
    // stop keeps or had removed by an earlier check, so the program stays ordered.
    auto walked = [&] {
      int64_t w = 0;
      for (const auto& c : checkers) w += c.walked();
      return w;
    };
    bool exhausted = false;
    auto run = [&](int from, int len) { return std::vector<int>(order.begin() + from, order.begin() + from + len); };
    auto run_goes = [&](int from, int len) {
      if (walked() > options.max_check_events) {
        exhausted = true;
        return false;
      }
      const std::vector<int> r = run(from, len);
      return std::all_of(checkers.begin(), checkers.end(), [&](Checker& c) { return c.removable(r); });
    };
    int decided = 0;
    for (int i = 0; i < n && !exhausted;) {
      if (progress) progress(i, n);
      int good = 0, bad = n - i + 1;  // run lengths known to pass / to fail (n - i + 1: past the end)
      for (int len = 1; len <= n - i; len *= 2) {
        if (run_goes(i, len)) {
          good = len;
        } else {
          bad = len;
          break;
        }
      }
      while (bad - good > 1 && !exhausted) {
        const int mid = good + (bad - good) / 2;
        if (run_goes(i, mid)) good = mid; else bad = mid;
      }
      for (int j = i; j < i + good; ++j) removed[order[j]] = 1;
      if (exhausted) {
        decided = i + good;
        break;
      }
      if (good > 0)
        for (auto& checker : checkers) checker.commit(run(i, good));
      // the candidate after the run stays (with the run gone, removing it too fails)
      i += good + (i + good < n ? 1 : 0);
      decided = i;
    }
    check_events_ = walked();
    if (exhausted)
      note = fmt::format("implied pairs kept past {} of {} candidates: the checks walked {} trace events, past the "
                         "work budget of {}; the {} undecided pairs stay (ordered, slower)",
                         decided, n, check_events_, options.max_check_events, n - decided);
    if (progress) progress(n, n);
    std::vector<Pair> kept;
    for (size_t i = 0; i < pairs.size(); ++i)
      if (!removed[i]) kept.push_back(pairs[i]);
    return kept;
  }

  std::vector<Pair> merge_carried(const std::vector<Pair>& in) const {
    std::vector<Pair> out;
    std::map<std::tuple<int, Pipe, Pipe>, size_t> first_carried;  // (loop, pipes) -> its carried pair in `out`
    for (Pair p : in) {
      if (p.dropped) continue;
      p.barrier = false;
      p.id = 0;
      if (p.carried) {
        const auto [it, fresh] = first_carried.try_emplace({p.body, p.src, p.dst}, out.size());
        if (!fresh) {
          Pair& q = out[it->second];
          if (s_.position[p.set_after] > s_.position[q.set_after]) q.set_after = p.set_after;
          if (s_.position[p.wait_before] < s_.position[q.wait_before]) q.wait_before = p.wait_before;
          continue;
        }
      }
      out.push_back(p);
    }
    return out;
  }

  // Event ids per pipe pair by liveness: a pair is live from its first to its last instruction. Two
  // live pairs may share an id only when both are forward pairs of one body in first-in first-out
  // order. A pair that finds no id becomes a pipe_barrier ALL before its wait.
  void allocate_ids(std::vector<Pair>& pairs) const {
    Linear l = materialize(pairs);
    std::vector<int> order(pairs.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return l.first[a] < l.first[b]; });
    std::map<std::pair<Pipe, Pipe>, std::vector<std::vector<int>>> colours;  // per pipe pair: per id: pairs
    // What the live pairs of each id have in common, kept as pairs come and go: `first` only grows
    // along `order`, so a pair no longer live stays so (expired from a heap by `last`).
    struct LiveSet {
      std::priority_queue<std::pair<int, int>, std::vector<std::pair<int, int>>, std::greater<>> by_last;  // (last, pair)
      int carried = 0;
      std::map<int, int> bodies;  // body -> live pairs
      std::multiset<int> lasts;
    };
    std::map<std::pair<Pipe, Pipe>, std::vector<LiveSet>> live;
    for (int i : order) {
      Pair& pr = pairs[i];
      auto& ids = colours[{pr.src, pr.dst}];
      ids.resize(ids_per_pair_);
      auto& live_ids = live[{pr.src, pr.dst}];
      live_ids.resize(ids_per_pair_);
      int chosen = -1;
      for (int id = 0; id < ids_per_pair_ && chosen < 0; ++id) {
        LiveSet& ls = live_ids[id];
        while (!ls.by_last.empty() && ls.by_last.top().first < l.first[i]) {  // no longer live
          const int j = ls.by_last.top().second;
          ls.by_last.pop();
          ls.carried -= pairs[j].carried;
          if (--ls.bodies[pairs[j].body] == 0) ls.bodies.erase(pairs[j].body);
          ls.lasts.erase(ls.lasts.find(l.last[j]));
        }
        // Every live pair must be a forward pair of this body set and waited before this one's.
        const bool ok = ls.by_last.empty() ||
                        (!pr.carried && ls.carried == 0 && ls.bodies.size() == 1 && ls.bodies.begin()->first == pr.body &&
                         *ls.lasts.rbegin() < l.last[i]);
        if (ok) chosen = id;
      }
      if (chosen < 0 && pr.carried) {
        // Out of ids: a carried pair of the same loop and pipes takes this one over (set after the
        // later source, wait before the earlier sink: later but still correct), else a barrier.
        for (int id = 0; id < ids_per_pair_ && chosen < 0; ++id)
          for (int j : ids[id]) {
            Pair& q = pairs[j];
            if (!q.carried || q.body != pr.body) continue;
            if (s_.position[pr.set_after] > s_.position[q.set_after]) q.set_after = pr.set_after;
            if (s_.position[pr.wait_before] < s_.position[q.wait_before]) q.wait_before = pr.wait_before;
            pr.dropped = true;
            chosen = id;
            break;
          }
        if (pr.dropped) continue;
      }
      if (chosen < 0) {
        pr.barrier = true;
        continue;
      }
      pr.id = chosen;
      ids[chosen].push_back(i);
      LiveSet& ls = live_ids[chosen];
      ls.by_last.push({l.last[i], i});
      ls.carried += pr.carried;
      ++ls.bodies[pr.body];
      ls.lasts.insert(l.last[i]);
    }
  }

  npu::Program p_;
  const isa::Hierarchy& target_;
  Structure s_;
  StaticFootprints fp_;
  std::vector<Dependence> deps_;
  std::vector<int> pipe_;   // per pc: executing pipe of an accessing instruction, -1 otherwise
  std::vector<int> times_;  // per loop pc: iterations the happens-before check unrolls (at most 2)
  std::vector<int> least_;  // per loop pc: iterations it surely runs, at most times_ (0: maybe none)
  std::string note_;        // why pruning stopped short (SyncResult::note)
  int64_t check_events_ = 0;  // steps the pruning checks walked (SyncResult::check_events)
  std::vector<std::vector<std::array<int, npu::kPipeCount>>> pipe_prefix_;  // per body + 1: see pipe_between
  int ids_per_pair_ = 1;
};

}  // namespace

SyncMode parse_sync_mode(const std::string& text) {
  if (text == "naive") return SyncMode::Naive;
  if (text == "pruned") return SyncMode::Pruned;
  throw UserError("--sync: '" + text + "' is not one of naive, pruned");
}

const char* sync_mode_name(SyncMode m) { return m == SyncMode::Naive ? "naive" : "pruned"; }

npu::Program strip_syncs(const npu::Program& program) {
  npu::Program out = program;
  out.code.clear();
  for (size_t i = 0; i + 1 < program.code.size(); ++i)
    if (!is_sync(program.code[i].opcode)) out.code.push_back(program.code[i]);
  out.code.push_back({Opcode::PipeBarrier, {Operand::pipe_(Pipe::All)}, {}});
  return out;
}

SyncResult insert_syncs(const npu::Program& program, const isa::Hierarchy& target, const SyncOptions& options) {
  return SyncPass(program, target).run(options);
}

}  // namespace tessel::npu_sync
