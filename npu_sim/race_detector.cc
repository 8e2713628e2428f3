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
      histories_(1 + cores * npu::kBufferCount) {}

RaceDetector::History& RaceDetector::history(int core, npu::Buffer b) {
  if (b == npu::Buffer::GM) return histories_[0];
  return histories_[1 + core * npu::kBufferCount + static_cast<int>(b)];
}

void RaceDetector::report(const Entry& earlier, int pipe_index, int pc, bool write, npu::Buffer buffer,
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
    auto check = [&](int p, const Entries& earlier) {
      if (earlier.list.empty() || earlier.hi <= a.lo || a.hi <= earlier.lo) return;
      // Entries up to the checker's clock of pipe p are ordered before it: start after them.
      auto from = std::partition_point(earlier.list.begin(), earlier.list.end(),
                                       [&](const Entry& e) { return e.epoch <= mine[p]; });
      for (auto it = from; it != earlier.list.end(); ++it) {
        const Entry& e = *it;
        if (e.hi <= a.lo || a.hi <= e.lo) continue;
        const Interval o = first_overlap(e.ranges, a.ranges);
        if (o.begin < o.end) report(e, me, pc, a.write, a.buffer, buffer_core, o.begin, o.end);
      }
    };
    for (const auto& [p, ph] : h.pipes) {
      if (p == me) continue;
      check(p, ph.writes);  // reads race only with writes; writes with both
      if (a.write) check(p, ph.reads);
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

// Drops entries that every pipe that accesses memory (all but S) has already seen: no later access
// can race with them.
void RaceDetector::prune_ordered(History& h) {
  auto seen_by_all = [&](const Entry& e) {
    for (size_t i = 0; i < clocks_.size(); ++i)
      if (i % npu::kPipeCount != static_cast<size_t>(npu::Pipe::S) && clocks_[i][e.pipe_index] < e.epoch) return false;
    return true;
  };
  h.size = 0;
  for (auto& [p, ph] : h.pipes)
    for (Entries* es : {&ph.reads, &ph.writes}) {
      std::erase_if(es->list, seen_by_all);
      es->lo = UINT64_MAX, es->hi = 0;
      for (const Entry& e : es->list) es->lo = std::min(es->lo, e.lo), es->hi = std::max(es->hi, e.hi);
      h.size += es->list.size();
    }
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

void RaceDetector::arrive_all(int core, Clock& joined) const {
  const Clock& c = clocks_[index(core, npu::Pipe::S)];  // barrier_all made every pipe of the core equal
  if (joined.size() < c.size()) joined.resize(c.size(), 0);
  for (size_t i = 0; i < c.size(); ++i) joined[i] = std::max(joined[i], c[i]);
}

void RaceDetector::join_all(int core, const Clock& joined) {
  for (int p = 0; p < npu::kPipeCount; ++p) join(core, static_cast<npu::Pipe>(p), joined);
  for (int b = 0; b < npu::kBufferCount; ++b) prune_ordered(history(core, static_cast<npu::Buffer>(b)));
}

}  // namespace tessel::npu_sim
