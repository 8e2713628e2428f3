#include "npu_sim/race_detector.h"

#include <algorithm>
#include <iterator>

namespace tessel::npu_sim {
namespace {

constexpr size_t kMinPruneThreshold = 64;  // not hardware: bookkeeping thresholds of the detector
constexpr size_t kCoverSearch = 16;        // not hardware: as above

// The first overlapping byte range of two sorted interval lists, or an empty range.
Interval first_overlap(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const uint64_t lo = std::max(a[i].begin, b[j].begin), hi = std::min(a[i].end, b[j].end);
    if (lo < hi) return {lo, hi};
    if (a[i].end <= b[j].end) ++i;
    else ++j;
  }
  return {0, 0};
}

// The first overlapping byte range of a long sorted, disjoint list and a short one: a binary search
// per range of the short one.
Interval first_overlap_searched(const std::vector<Interval>& many, const std::vector<Interval>& few) {
  for (const Interval& r : few) {
    auto it = std::upper_bound(many.begin(), many.end(), r.begin, [](uint64_t v, const Interval& m) { return v < m.end; });
    if (it != many.end() && it->begin < r.end) return {std::max(it->begin, r.begin), std::min(it->end, r.end)};
  }
  return {0, 0};
}

// The union of two sorted, disjoint interval lists (adjacent ranges merged).
std::vector<Interval> interval_union(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  std::vector<Interval> out;
  out.reserve(a.size() + b.size());
  size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    const Interval next = j == b.size() || (i < a.size() && a[i].begin <= b[j].begin) ? a[i++] : b[j++];
    if (!out.empty() && next.begin <= out.back().end) out.back().end = std::max(out.back().end, next.end);
    else out.push_back(next);
  }
  return out;
}

// Whether one interval of the sorted, disjoint `outer` contains [lo, hi).
bool covers(const std::vector<Interval>& outer, uint64_t lo, uint64_t hi) {
  if (outer.empty() || lo < outer.front().begin || hi > outer.back().end) return false;
  auto it = std::upper_bound(outer.begin(), outer.end(), lo, [](uint64_t v, const Interval& r) { return v < r.begin; });
  return it != outer.begin() && hi <= std::prev(it)->end;
}

}  // namespace

RaceDetector::RaceDetector(int cores, SimRecord& record)
    : cores_(cores),
      record_(record),
      clocks_(cores * npu::kPipeCount, Clock(cores * npu::kPipeCount, 0)),
      histories_(1 + cores * npu::kBufferCount),
      published_(cores * npu::kPipeCount) {
  for (int c = 0; c < cores; ++c)
    for (int b = 0; b < npu::kBufferCount; ++b) histories_[1 + c * npu::kBufferCount + b].core = c;
}

RaceDetector::History& RaceDetector::history(int core, npu::Buffer b) {
  if (b == npu::Buffer::GM) return histories_[0];
  return histories_[1 + core * npu::kBufferCount + static_cast<int>(b)];
}

void RaceDetector::report(const Earlier& earlier, int pipe_index, int pc, bool write, npu::Buffer buffer,
                          int buffer_core, uint64_t begin, uint64_t end) {
  const auto key = std::make_tuple(earlier.pc, pc, static_cast<int>(buffer), buffer_core);
  if (auto it = race_index_.find(key); it != race_index_.end()) {
    ++record_.races[it->second].occurrences;
    return;
  }
  auto access = [&](int pipe_idx, int at_pc, bool is_write) {
    RaceAccess a;
    a.core = pipe_idx / npu::kPipeCount;
    a.pipe = static_cast<npu::Pipe>(pipe_idx % npu::kPipeCount);
    a.pc = at_pc;
    a.text = record_.instruction_text[at_pc];
    a.write = is_write;
    a.begin = begin;
    a.end = end;
    return a;
  };
  Race r;
  r.buffer = buffer;
  r.buffer_core = buffer_core;
  r.first = access(earlier.pipe_index, earlier.pc, earlier.write);
  r.second = access(pipe_index, pc, write);
  race_index_[key] = record_.races.size();
  record_.races.push_back(std::move(r));
}

void RaceDetector::on_accesses(int core, npu::Pipe pipe, int pc, std::vector<Access>& accesses) {
  const int me = index(core, pipe);
  Clock& mine = clocks_[me];
  const uint32_t epoch = ++mine[me];
  for (Access& a : accesses) {
    if (a.ranges.empty()) continue;
    History& h = history(core, a.buffer);
    const int buffer_core = a.buffer == npu::Buffer::GM ? -1 : core;
    auto check = [&](int p, const Entries& earlier, bool write) {
      // A summary holds what p's core has all seen: another pipe of that core has seen it whole; a
      // pipe of another core has seen all of it or none (no sync_all published an epoch inside).
      if (p / npu::kPipeCount != core)
        for (const Summary& s : earlier.summaries) {
          if (s.max_epoch <= mine[p] || s.hi <= a.lo || a.hi <= s.lo) continue;
          for (const auto& [at, ranges] : s.by_pc) {
            const Interval o = first_overlap_searched(ranges, a.ranges);
            if (o.begin < o.end) report({p, at, write}, me, pc, a.write, a.buffer, buffer_core, o.begin, o.end);
          }
        }
      if (earlier.list.empty() || earlier.hi <= a.lo || a.hi <= earlier.lo) return;
      // Entries up to the checker's clock of pipe p are ordered before it: start after them.
      auto from = std::partition_point(earlier.list.begin(), earlier.list.end(),
                                       [&](const Entry& e) { return e.epoch <= mine[p]; });
      for (auto it = from; it != earlier.list.end(); ++it) {
        const Entry& e = *it;
        if (e.hi <= a.lo || a.hi <= e.lo) continue;
        const Interval o = first_overlap(e.ranges, a.ranges);
        if (o.begin < o.end) report({e.pipe_index, e.pc, e.write}, me, pc, a.write, a.buffer, buffer_core, o.begin, o.end);
      }
    };
    for (const auto& [p, ph] : h.pipes) {
      if (p == me) continue;
      check(p, ph.writes, true);  // reads race only with writes; writes with both
      if (a.write) check(p, ph.reads, false);
    }
    // A recent access of this pipe that the new one covers can only race with what also races with
    // the new one: drop it to keep histories short (only the tail is searched: bounded cost).
    PipeHistory& own = h.pipes[me];
    auto drop_covered = [&](Entries& es) {
      std::vector<Entry>& list = es.list;
      const size_t from = list.size() > kCoverSearch ? list.size() - kCoverSearch : 0, before = list.size();
      list.erase(std::remove_if(list.begin() + from, list.end(), [&](const Entry& e) { return covers(a.ranges, e.lo, e.hi); }),
                 list.end());
      h.size -= before - list.size();
    };
    drop_covered(own.reads);
    if (a.write) drop_covered(own.writes);
    Entries& es = a.write ? own.writes : own.reads;
    es.lo = std::min(es.lo, a.lo);
    es.hi = std::max(es.hi, a.hi);
    es.list.push_back({me, epoch, pc, a.write, std::move(a.ranges), a.lo, a.hi});  // spent
    if (++h.size > h.prune_limit) {
      prune_ordered(h);
      h.prune_limit = std::max(kMinPruneThreshold, 2 * h.size);  // amortised
    }
  }
}

bool RaceDetector::seen_by(int core, int pipe_index, uint32_t epoch) const {
  const size_t from = core < 0 ? 0 : size_t(core) * npu::kPipeCount;
  const size_t to = core < 0 ? clocks_.size() : from + npu::kPipeCount;
  for (size_t i = from; i < to; ++i)
    if (i % npu::kPipeCount != static_cast<size_t>(npu::Pipe::S) && clocks_[i][pipe_index] < epoch) return false;
  return true;
}

// Moves `e` (seen by every pipe of its core) into the pipe's newest summary, or a new one when a
// sync_all arrival published an epoch between that summary's first access and `e`.
void RaceDetector::summarise(int pipe_index, Entries& es, Entry& e) {
  const std::vector<uint32_t>& pub = published_[pipe_index];
  if (es.summaries.empty() ||
      std::lower_bound(pub.begin(), pub.end(), es.summaries.back().min_epoch) != std::lower_bound(pub.begin(), pub.end(), e.epoch))
    es.summaries.push_back({e.epoch, e.epoch, {}, UINT64_MAX, 0});
  Summary& s = es.summaries.back();
  s.max_epoch = e.epoch;
  s.lo = std::min(s.lo, e.lo), s.hi = std::max(s.hi, e.hi);
  std::vector<Interval>& ranges = s.by_pc[e.pc];
  ranges = ranges.empty() ? std::move(e.ranges) : interval_union(ranges, e.ranges);
}

// Drops entries that every pipe able to reach the buffer (all but S) has already seen: no later
// access can race with them. In GM, an entry that only its own core has all seen goes to a summary.
void RaceDetector::prune_ordered(History& h) {
  h.size = 0;
  for (auto& [pipe_index, ph] : h.pipes)
    for (Entries* es : {&ph.reads, &ph.writes}) {
      const int p = pipe_index;  // (a structured binding is not captured by a lambda before C++20 in clang)
      std::erase_if(es->summaries, [&](const Summary& s) { return seen_by(h.core, p, s.max_epoch); });
      const int own_core = p / npu::kPipeCount;
      size_t kept = 0;
      for (Entry& e : es->list) {
        if (seen_by(h.core, p, e.epoch)) continue;
        if (h.core < 0 && seen_by(own_core, p, e.epoch)) {
          summarise(p, *es, e);
          continue;
        }
        if (&es->list[kept] != &e) es->list[kept] = std::move(e);
        ++kept;
      }
      es->list.resize(kept);
      es->lo = UINT64_MAX, es->hi = 0;
      for (const Entry& e : es->list) es->lo = std::min(es->lo, e.lo), es->hi = std::max(es->hi, e.hi);
      h.size += es->list.size();
    }
}

size_t RaceDetector::retained() const {
  size_t n = 0;
  for (const History& h : histories_)
    for (const auto& [p, ph] : h.pipes)
      for (const Entries* es : {&ph.reads, &ph.writes}) {
        n += es->list.size();
        for (const Summary& s : es->summaries)
          for (const auto& [pc, ranges] : s.by_pc) n += ranges.size();
      }
  return n;
}

void RaceDetector::join(int core, npu::Pipe pipe, const Clock& other) {
  Clock& c = clocks_[index(core, pipe)];
  for (size_t i = 0; i < c.size(); ++i) c[i] = std::max(c[i], other[i]);
}

void RaceDetector::barrier_all(int core) {
  Clock joined(clocks_.size(), 0);
  for (int p = 0; p < npu::kPipeCount; ++p) {
    const Clock& c = clocks_[index(core, static_cast<npu::Pipe>(p))];
    for (size_t i = 0; i < c.size(); ++i) joined[i] = std::max(joined[i], c[i]);
  }
  for (int p = 0; p < npu::kPipeCount; ++p) clocks_[index(core, static_cast<npu::Pipe>(p))] = joined;
  for (int b = 0; b < npu::kBufferCount; ++b) prune_ordered(history(core, static_cast<npu::Buffer>(b)));
}

void RaceDetector::arrive_all(int core, Clock& joined) {
  const Clock& c = clocks_[index(core, npu::Pipe::S)];  // barrier_all made every pipe of the core equal
  for (int p = 0; p < npu::kPipeCount; ++p) published_[index(core, static_cast<npu::Pipe>(p))].push_back(c[index(core, static_cast<npu::Pipe>(p))]);
  if (joined.size() < c.size()) joined.resize(c.size(), 0);
  for (size_t i = 0; i < c.size(); ++i) joined[i] = std::max(joined[i], c[i]);
}

void RaceDetector::join_all(int core, const Clock& joined) {
  for (int p = 0; p < npu::kPipeCount; ++p) join(core, static_cast<npu::Pipe>(p), joined);
  for (int b = 0; b < npu::kBufferCount; ++b) prune_ordered(history(core, static_cast<npu::Buffer>(b)));
}

}  // namespace tessel::npu_sim
