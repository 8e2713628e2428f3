#include "compiler/program/kernel_graph.h"

#include <algorithm>

#include "compiler/program/program.h"
#include "isa/base/error.h"

namespace tessel::program {

namespace {

bool overlap(const KernelAccess::Location& a, const KernelAccess::Location& b) {
  if (!a.tensor.empty() || !b.tensor.empty()) return a.tensor == b.tensor;
  return a.begin < b.end && b.begin < a.end;
}

bool any_overlap(const std::vector<KernelAccess::Location>& x, const std::vector<KernelAccess::Location>& y) {
  for (const auto& a : x)
    for (const auto& b : y)
      if (overlap(a, b)) return true;
  return false;
}

bool conflict(const KernelAccess& i, const KernelAccess& j) {
  return any_overlap(i.writes, j.reads) || any_overlap(i.writes, j.writes) || any_overlap(i.reads, j.writes);
}

// Kernel j's stream: see the header's rule.
int place(KernelGraph& g, const std::vector<std::vector<bool>>& ancestor, std::vector<int>& last, int j, int max_streams) {
  for (int i : g.waits[j])
    if (last[size_t(g.stream[size_t(i)])] == i) return g.stream[size_t(i)];
  for (size_t s = 0; s < last.size(); ++s)
    if (ancestor[size_t(j)][size_t(last[s])]) return int(s);
  if (int(last.size()) < max_streams) {
    last.push_back(-1);
    return int(last.size()) - 1;
  }
  return int(std::min_element(last.begin(), last.end()) - last.begin());
}

}  // namespace

std::vector<int> KernelGraph::last_on_stream() const {
  std::vector<int> last(size_t(streams), -1);
  for (size_t k = 0; k < stream.size(); ++k) last[size_t(stream[k])] = int(k);
  return last;
}

std::string KernelGraph::to_string() const {
  std::string s;
  for (size_t j = 0; j < waits.size(); ++j) {
    if (!s.empty()) s += "; ";
    s += "k" + std::to_string(j) + " on stream " + std::to_string(stream[j]);
    if (!waits[j].empty()) {
      s += " after";
      for (size_t n = 0; n < waits[j].size(); ++n) s += (n ? ", k" : " k") + std::to_string(waits[j][n]);
    }
  }
  return s;
}

KernelGraph kernel_graph(const std::vector<KernelAccess>& kernels, int max_streams) {
  TESSEL_CHECK(max_streams >= 1, "kernel_graph: at least one stream");
  const size_t n = kernels.size();
  KernelGraph g;
  g.waits.resize(n);
  g.cross_waits.resize(n);
  g.stream.assign(n, 0);
  g.signals.assign(n, false);
  std::vector<std::vector<bool>> ancestor(n, std::vector<bool>(n, false));
  std::vector<int> last;  // per stream: its last kernel so far
  for (size_t j = 0; j < n; ++j) {
    std::vector<int> direct;
    for (size_t i = 0; i < j; ++i)
      if (conflict(kernels[i], kernels[j])) direct.push_back(int(i));
    for (int i : direct) {
      ancestor[j][size_t(i)] = true;
      for (size_t a = 0; a < n; ++a)
        if (ancestor[size_t(i)][a]) ancestor[j][a] = true;
    }
    for (int i : direct) {  // reduced: no other direct dependence already follows i
      const bool implied = std::any_of(direct.begin(), direct.end(), [&](int o) { return o != i && ancestor[size_t(o)][size_t(i)]; });
      if (!implied) g.waits[j].push_back(i);
    }
    const int s = j == 0 ? (last.push_back(-1), 0) : place(g, ancestor, last, int(j), max_streams);
    g.stream[j] = s;
    // a stream reused past kernels j does not depend on orders j after them: record that order
    if (last[size_t(s)] >= 0 && !ancestor[j][size_t(last[size_t(s)])])
      for (size_t a = 0; a < n; ++a)
        if (a == size_t(last[size_t(s)]) || ancestor[size_t(last[size_t(s)])][a]) ancestor[j][a] = true;
    last[size_t(s)] = int(j);
    for (int i : g.waits[j])
      if (g.stream[size_t(i)] != s) {
        g.cross_waits[j].push_back(i);
        g.signals[size_t(i)] = true;
      }
  }
  g.streams = std::max<int>(1, int(last.size()));
  return g;
}

KernelGraph kernel_graph(const ProgramCompilation& p, int max_streams) {
  std::vector<KernelAccess> access;
  for (const auto& c : p.kernels) {
    KernelAccess a;
    for (const auto& t : c->kernel.tensors) {
      if (t.temporary) continue;  // the kernel's own
      KernelAccess::Location l;
      if (const ArenaSlot* slot = p.memory.find(t.name)) {
        l.begin = slot->offset;
        l.end = slot->offset + slot->bytes;
      } else {
        l.tensor = t.name;
      }
      (t.kind == ir::TensorKind::Input ? a.reads : a.writes).push_back(l);
    }
    access.push_back(std::move(a));
  }
  return kernel_graph(access, max_streams);
}

}  // namespace tessel::program
