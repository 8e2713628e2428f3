#include "compiler/program/memory_plan.h"

#include <algorithm>

#include <fmt/format.h>

#include "isa/base/error.h"

namespace tessel::program {

namespace {

int64_t tensor_bytes(const ir::Tensor& t, const std::map<std::string, int64_t>& sizes) {
  int64_t n = 1;
  for (const auto& d : t.shape) n *= d.evaluate({}, sizes);
  return n * dtype_bytes(t.dtype);
}

int64_t round_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

bool lifetimes_meet(const ArenaSlot& a, const ArenaSlot& b) { return a.first <= b.last && b.first <= a.last; }

}  // namespace

const ArenaSlot* MemoryPlan::find(const std::string& tensor) const {
  for (const auto& s : slots)
    if (s.tensor == tensor) return &s;
  return nullptr;
}

MemoryPlan plan_memory(const ir::Function& f, const poly::ProgramPartition& p, const std::map<std::string, int64_t>& sizes,
                       int64_t alignment_bytes) {
  if (alignment_bytes < 1) throw InternalError("plan_memory: alignment must be positive");
  MemoryPlan plan;
  plan.alignment_bytes = alignment_bytes;
  const auto uses = poly::tensor_uses(f, p);
  std::vector<ArenaSlot> pending;
  for (const auto& t : f.tensors) {
    if (t.kind != ir::TensorKind::Local) continue;
    const poly::TensorUse& u = uses.at(t.name);
    if (u.producer < 0 || u.last_reader <= u.producer) continue;  // stays inside its kernel
    pending.push_back(ArenaSlot{t.name, tensor_bytes(t, sizes), 0, u.producer, u.last_reader});
    plan.total_bytes += pending.back().bytes;
  }
  std::stable_sort(pending.begin(), pending.end(), [](const ArenaSlot& a, const ArenaSlot& b) { return a.bytes > b.bytes; });
  for (ArenaSlot s : pending) {
    std::vector<std::pair<int64_t, int64_t>> busy;  // [start, end) of placed slots alive with s
    for (const auto& o : plan.slots)
      if (lifetimes_meet(o, s)) busy.emplace_back(o.offset, o.offset + o.bytes);
    std::sort(busy.begin(), busy.end());
    int64_t at = 0;
    for (const auto& [b, e] : busy) {
      if (at + s.bytes <= b) break;
      at = std::max(at, round_up(e, alignment_bytes));
    }
    s.offset = at;
    plan.arena_bytes = std::max(plan.arena_bytes, at + s.bytes);
    plan.slots.push_back(s);
  }
  for (size_t g = 0; g < p.groups.size(); ++g) {
    int64_t live = 0;
    for (const auto& s : plan.slots)
      if (s.first <= int(g) && int(g) <= s.last) live += s.bytes;
    plan.peak_live_bytes = std::max(plan.peak_live_bytes, live);
  }
  std::sort(plan.slots.begin(), plan.slots.end(), [](const ArenaSlot& a, const ArenaSlot& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.first < b.first;
  });
  return plan;
}

std::string MemoryPlan::to_string() const {
  std::string r = fmt::format("memory plan: arena {} bytes for {} intermediate(s) ({} bytes without reuse); largest live set {} bytes ({:.2f}x)\n",
                              arena_bytes, slots.size(), total_bytes, peak_live_bytes,
                              peak_live_bytes ? double(arena_bytes) / double(peak_live_bytes) : 1.0);
  for (const auto& s : slots)
    r += fmt::format("  {:>12} +{:<10} {:>10} bytes  kernels {}..{}\n", s.tensor, s.offset, s.bytes, s.first, s.last);
  return r;
}

}  // namespace tessel::program
