#include "compiler/npu_sync/sync_insertion.h"

#include <algorithm>
#include <boost/dynamic_bitset.hpp>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/topological_sort.hpp>
#include <deque>
#include <iterator>
#include <map>

#include "compiler/npu_sync/footprint.h"
#include "isa/base/error.h"

namespace tessel::npu_sync {
namespace {

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
    find_dependences();
  }

  SyncResult run(const SyncOptions& options) {
    std::vector<Pair> pairs = naive_pairs();
    if (options.mode == SyncMode::Pruned) {
      pairs = merge_adjacent(pairs);
      pairs = drop_implied(pairs);
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

  void find_dependences() {
    const int n = static_cast<int>(p_.code.size());
    for (int x = 0; x < n; ++x) {
      if (fp_.accesses[x].empty()) continue;
      for (int y = x + 1; y < n; ++y) {
        if (fp_.accesses[y].empty()) continue;
        if (npu::executing_pipe(p_.code[x]) == npu::executing_pipe(p_.code[y])) continue;
        if (conflict(fp_.accesses[x], fp_.accesses[y])) deps_.push_back({x, y});
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

  // True when a node (instruction or loop) issues work on `pipe`.
  bool node_uses_pipe(int node, Pipe pipe) const {
    if (p_.code[node].opcode != Opcode::Loop) return !fp_.accesses[node].empty() && npu::executing_pipe(p_.code[node]) == pipe;
    for (int pc = node + 1; pc < s_.partner[node]; ++pc)
      if (!fp_.accesses[pc].empty() && npu::executing_pipe(p_.code[pc]) == pipe) return true;
    return false;
  }
  // Whether a node of `body` strictly between positions a and b issues work on `pipe`.
  bool pipe_between(int body, int a, int b, Pipe pipe) const {
    if (a > b) std::swap(a, b);
    const int begin = body == -1 ? 0 : body + 1, end = body == -1 ? static_cast<int>(p_.code.size()) : s_.partner[body];
    for (int pc = begin; pc < end; ++pc) {
      if (s_.parent[pc] != body || p_.code[pc].opcode == Opcode::EndLoop) continue;
      if (s_.position[pc] > a && s_.position[pc] < b && node_uses_pipe(pc, pipe)) return true;
    }
    return false;
  }

  // Merges pairs of one body, direction and pipe pair that share one end and whose other ends are
  // adjacent on their pipe: one set after the later source, one wait before the earlier sink. Such a
  // merge delays no instruction (the shared set or wait was already waited for).
  std::vector<Pair> merge_adjacent(const std::vector<Pair>& in) const {
    std::vector<Pair> out;
    for (const Pair& p : in) {
      bool merged = false;
      for (Pair& q : out) {
        if (q.body != p.body || q.carried != p.carried || q.src != p.src || q.dst != p.dst) continue;
        const int set_a = s_.position[q.set_after], set_b = s_.position[p.set_after];
        const int wait_a = s_.position[q.wait_before], wait_b = s_.position[p.wait_before];
        // Only merges that delay nothing: one end shared, the other ends adjacent on their pipe.
        if (q.set_after != p.set_after && q.wait_before != p.wait_before) continue;
        if (pipe_between(p.body, set_a, set_b, p.src) || pipe_between(p.body, wait_a, wait_b, p.dst)) continue;
        const int set_after = set_a >= set_b ? q.set_after : p.set_after;
        const int wait_before = wait_a <= wait_b ? q.wait_before : p.wait_before;
        if (!p.carried && s_.position[set_after] >= s_.position[wait_before]) continue;
        q.set_after = set_after;
        q.wait_before = wait_before;
        merged = true;
        break;
      }
      if (!merged) out.push_back(p);
    }
    return out;
  }

  struct Linear {
    npu::Program program;
    std::vector<int> origin;  // per instruction: pc in p_ (-1 for inserted syncs)
    std::vector<int> pair;    // per instruction: the pair it belongs to (-1: none)
    std::vector<int> first, last;  // per pair: linear positions of its first and last instruction
  };

  Linear materialize(const std::vector<Pair>& pairs, int omit = -1) const {
    const int n = static_cast<int>(p_.code.size());
    std::vector<std::vector<int>> before(n), after(n);  // pair indices; negative codes below
    // Encoding in the lists: 4 * pair + kind (0 set, 1 wait, 2 pre-set, 3 drain).
    for (int i = 0; i < static_cast<int>(pairs.size()); ++i) {
      if (i == omit || pairs[i].dropped) continue;
      const Pair& pr = pairs[i];
      if (pr.barrier) {
        before[pr.wait_before].push_back(4 * i + 1);
        continue;
      }
      after[pr.set_after].push_back(4 * i + 0);
      before[pr.wait_before].push_back(4 * i + 1);
      if (pr.carried) {
        before[pr.body].push_back(4 * i + 2);
        after[pr.body].push_back(4 * i + 3);
      }
    }
    Linear l;
    l.program.source_name = p_.source_name;
    l.program.cores = p_.cores;
    l.program.tensors = p_.tensors;
    l.first.assign(pairs.size(), -1);
    l.last.assign(pairs.size(), -1);
    auto emit_syncs = [&](std::vector<int> codes) {
      // sets (and pre-sets) first, then waits (and drains)
      std::stable_sort(codes.begin(), codes.end(), [](int a, int b) { return (a % 4 == 1 || a % 4 == 3) < (b % 4 == 1 || b % 4 == 3); });
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
      if (!end) emit_syncs(before[node]);
      l.program.code.push_back(p_.code[pc]);
      l.origin.push_back(pc);
      l.pair.push_back(-1);
      if (end || p_.code[pc].opcode != Opcode::Loop) emit_syncs(after[node]);
    }
    l.program.code.push_back(p_.code.back());
    l.origin.push_back(n - 1);
    l.pair.push_back(-1);
    return l;
  }

  // The happens-before graph of a linear program with every loop run (at most) twice: vertices are
  // dynamic instances of non-scalar instructions in program order, edges are same-pipe order,
  // set -> matching wait (first in, first out per pair) and pipe_barrier ALL.
  struct Unrolled {
    boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS> graph;
    std::vector<std::vector<int>> instances;  // per pc of p_: vertices in order
    std::vector<int> vertex_order;            // vertex -> sequence index (== vertex)
  };

  Unrolled unroll(const Linear& l) const {
    Unrolled u;
    u.instances.resize(p_.code.size());
    std::vector<int> last(npu::kPipeCount, -1);
    std::map<int, std::deque<int>> pending;  // pair -> set vertices not yet consumed
    const auto partner = npu::match_loops(l.program);
    int vertices = 0;
    auto add_vertex = [&]() { boost::add_vertex(u.graph); return vertices++; };
    std::function<void(int, int)> walk = [&](int begin, int end) {
      for (int pc = begin; pc < end; ++pc) {
        const npu::Instruction& in = l.program.code[pc];
        if (in.opcode == Opcode::Loop) {
          const int origin = l.origin[pc];
          const auto& trip = fp_.trip_count[origin];
          const int64_t times = trip ? std::min<int64_t>(*trip, 2) : 2;
          for (int64_t t = 0; t < times; ++t) walk(pc + 1, partner[pc]);
          pc = partner[pc];
          continue;
        }
        const bool barrier_all = in.opcode == Opcode::PipeBarrier && in.operands[0].pipe == Pipe::All;
        const bool access = l.origin[pc] >= 0 && !fp_.accesses[l.origin[pc]].empty();
        if (!barrier_all && !access && in.opcode != Opcode::SetFlag && in.opcode != Opcode::WaitFlag) continue;
        const int v = add_vertex();
        if (barrier_all) {
          for (int q = 0; q < npu::kPipeCount; ++q)
            if (last[q] >= 0) boost::add_edge(last[q], v, u.graph);
          for (int q = 0; q < npu::kPipeCount; ++q) last[q] = v;
          continue;
        }
        const int pipe = static_cast<int>(npu::executing_pipe(in));
        if (last[pipe] >= 0) boost::add_edge(last[pipe], v, u.graph);
        last[pipe] = v;
        if (access) u.instances[l.origin[pc]].push_back(v);
        if (in.opcode == Opcode::SetFlag) pending[l.pair[pc]].push_back(v);
        if (in.opcode == Opcode::WaitFlag) {
          auto& q = pending[l.pair[pc]];
          TESSEL_CHECK(!q.empty(), "sync pass: a wait_flag precedes its set_flag (pair placement)");
          boost::add_edge(q.front(), v, u.graph);
          q.pop_front();
        }
      }
    };
    walk(0, static_cast<int>(l.program.code.size()));
    return u;
  }

  // Whether every dependence is ordered: each instance of one end is reached from the most recent
  // earlier instance of the other end.
  bool all_ordered(const Linear& l) const {
    Unrolled u = unroll(l);
    const int n = static_cast<int>(boost::num_vertices(u.graph));
    std::vector<boost::dynamic_bitset<>> reach(n, boost::dynamic_bitset<>(n));
    for (int v = n - 1; v >= 0; --v) {
      reach[v].set(v);
      for (auto [e, e_end] = boost::out_edges(v, u.graph); e != e_end; ++e) {
        const int w = static_cast<int>(boost::target(*e, u.graph));
        TESSEL_CHECK(w > v, "sync pass: happens-before edge against program order");
        reach[v] |= reach[w];
      }
    }
    auto ordered = [&](const std::vector<int>& from, const std::vector<int>& to) {
      size_t i = 0;
      for (int t : to) {
        while (i < from.size() && from[i] < t) ++i;
        if (i > 0 && !reach[from[i - 1]].test(t)) return false;
      }
      return true;
    };
    for (const auto& d : deps_) {
      const auto& a = u.instances[d.first];
      const auto& b = u.instances[d.second];
      if (!ordered(a, b) || !ordered(b, a)) return false;
    }
    return true;
  }

  int depth(int body) const { return body == -1 ? 0 : static_cast<int>(s_.chain[body].size()) + 1; }

  // Drops every pair whose orderings the remaining pairs imply, innermost and carried pairs first.
  std::vector<Pair> drop_implied(std::vector<Pair> pairs) const {
    TESSEL_CHECK(all_ordered(materialize(pairs)), "sync pass: the merged pairs do not order every dependence");
    std::vector<int> order(pairs.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      if (depth(pairs[a].body) != depth(pairs[b].body)) return depth(pairs[a].body) > depth(pairs[b].body);
      return pairs[a].carried > pairs[b].carried;
    });
    std::vector<bool> removed(pairs.size(), false);
    for (int cand : order) {
      removed[cand] = true;
      std::vector<Pair> trial;
      for (size_t i = 0; i < pairs.size(); ++i)
        if (!removed[i]) trial.push_back(pairs[i]);
      if (!all_ordered(materialize(trial))) removed[cand] = false;
    }
    std::vector<Pair> kept;
    for (size_t i = 0; i < pairs.size(); ++i)
      if (!removed[i]) kept.push_back(pairs[i]);
    return kept;
  }

  std::vector<Pair> merge_carried(const std::vector<Pair>& in) const {
    std::vector<Pair> out;
    for (Pair p : in) {
      if (p.dropped) continue;
      p.barrier = false;
      p.id = 0;
      bool merged = false;
      for (Pair& q : out)
        if (p.carried && q.carried && q.body == p.body && q.src == p.src && q.dst == p.dst) {
          if (s_.position[p.set_after] > s_.position[q.set_after]) q.set_after = p.set_after;
          if (s_.position[p.wait_before] < s_.position[q.wait_before]) q.wait_before = p.wait_before;
          merged = true;
          break;
        }
      if (!merged) out.push_back(p);
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
    for (int i : order) {
      Pair& pr = pairs[i];
      auto& ids = colours[{pr.src, pr.dst}];
      ids.resize(ids_per_pair_);
      int chosen = -1;
      for (int id = 0; id < ids_per_pair_ && chosen < 0; ++id) {
        bool ok = true;
        for (int j : ids[id]) {
          if (l.last[j] < l.first[i]) continue;  // no longer live
          const Pair& q = pairs[j];
          const bool fifo = !q.carried && !pr.carried && q.body == pr.body && l.first[j] < l.first[i] && l.last[j] < l.last[i];
          if (!fifo) ok = false;
        }
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
    }
  }

  npu::Program p_;
  const isa::Hierarchy& target_;
  Structure s_;
  StaticFootprints fp_;
  std::vector<Dependence> deps_;
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
