// The general NPU vector lowering's split over cores (nest_lowering.h, nest.h): which parallel loops
// of the statement-by-statement lowering go to cores. Input: the statement plans as nest_plan.cc
// modelled them (before coalescing) and the machine model's core count; output: each plan's
// partition dimension and core axes (Plan::partition, Plan::core_dims), the shares per core
// (range_, core_block_) and cores_; at emission, each core's first index along every axis.
//
// Candidates are the leading output positions 0, 1, ... that every statement writes with one plain
// index of one extent (a divided index by its quotient) and at which every statement reads the
// kernel's own results with that same index: a core's outputs then depend on its inputs only, and
// every reduction stays inside a core (a core axis is never a reduction). For a grid, a position of
// the first statement may also be followed through the results to other positions of the later
// statements (tracked_indices: group norm over X[N, I, G, E] writes g at position 1 of its
// statistics and 2 of its element-wise results). Two ways to split them:
//   rows: the leading position alone in contiguous ranges, the last core's range possibly shorter
//         (else the last position, a vector repeat of it per core);
//   grid: several leading positions, each cut into equal parts (a divisor of its extent), core c
//         taking part (c / stride_j) % parts_j along axis j (axis 0 outermost).
// A grid scores its cores times the share of vector lanes it keeps (an axis that cuts a statement's
// lane dimension below whole repeats wastes lanes: weighted by the statement's elements), and is
// taken when that beats the rows' cores: operators whose leading output index is short (group
// norm's batch, a pooled or upsampled image's batch, a batched product's batch) then use the whole
// chip. Among grids of one score, outer axes get the most parts, so a core's data are the longest
// contiguous GM runs. Padded copies are shared: each core zero-fills and fills its chunks of them
// between two sync_all barriers (nest.cc, emit_pads); without the barrier in the description they keep one core.
#include "compiler/emit_npu/nest_lowering.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "compiler/emit_npu/operands.h"
#include "isa/base/error.h"

namespace tessel::emit_npu::nest {

namespace {

std::vector<int64_t> divisors(int64_t n, int64_t most) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= std::min(n, most); ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

// The parts per axis with the best score (cores x lane efficiency), then the fewest cores, then the
// most parts on outer axes.
std::vector<int64_t> grid_parts(const std::vector<int64_t>& extents, int64_t cores,
                                const std::function<double(const std::vector<int64_t>&)>& score) {
  std::vector<int64_t> best(extents.size(), 1), cur(extents.size(), 1);
  double best_score = score(best);
  int64_t best_n = 1;
  std::function<void(size_t, int64_t)> search = [&](size_t j, int64_t used) {
    if (j == extents.size()) {
      const double s = score(cur);
      const bool tie = s >= best_score * (1 - 1e-9) && s <= best_score * (1 + 1e-9);
      if (s > best_score * (1 + 1e-9) || (tie && (used < best_n || (used == best_n && cur > best))))
        best = cur, best_score = s, best_n = used;
      return;
    }
    for (int64_t d : divisors(extents[j], cores / used)) {
      cur[j] = d;
      search(j + 1, used * d);
    }
    cur[j] = 1;
  };
  search(0, 1);
  return best;
}

}  // namespace

// The index writing dimension `pos` of every statement's output (0: the leading one, -1: the
// last), when each statement reads the kernel's own results only at that index in that dimension
// (then a core's share depends on its share only). Empty when there is none.
std::vector<std::string> Nest::partition_indices(int pos, int64_t& extent, size_t first) const {
  std::set<std::string> written;
  std::vector<std::string> chosen;
  extent = -1;
  auto at = [&](const std::vector<ir::AffineExpr>& idx) -> const ir::AffineExpr* {
    if (idx.empty() || (pos >= 0 && static_cast<size_t>(pos) >= idx.size())) return nullptr;
    return &idx[pos >= 0 ? static_cast<size_t>(pos) : idx.size() - 1];
  };
  for (size_t i = first; i < plans_.size(); ++i) {
    const ir::Statement& s = *plans_[i].s;
    const ir::AffineExpr* e = at(s.out_indices);
    if (!e || e->index_coeffs.size() != 1 || !e->param_coeffs.empty() || e->constant != 0 || e->has_div() ||
        e->index_coeffs.begin()->second != 1)
      return {};
    const std::string d = e->index_coeffs.begin()->first;
    const ir::IndexVar* iv = s.find_index(d);
    const int64_t n = iv->hi.evaluate({}, k_.sizes) - iv->lo.evaluate({}, k_.sizes);
    if (iv->lo.evaluate({}, k_.sizes) != 0 || (extent >= 0 && n != extent)) return {};
    extent = n;
    bool ok = true;
    std::function<void(const ir::Expr&)> check = [&](const ir::Expr& x) {
      if (x.kind == ir::ExprKind::Access && written.count(x.name)) {
        const ir::AffineExpr* r = at(x.indices);
        if (!r || !(*r == ir::AffineExpr::index(d))) ok = false;
      }
      for (const auto& a : x.args) check(*a);
    };
    check(*s.rhs);
    if (!ok) return {};
    written.insert(s.output);
    chosen.push_back(d);
  }
  return chosen;
}

// The index of every statement along one parallel axis that starts at output position `pos` of
// the first statement, followed through the kernel's own tensors: a statement that reads a result
// takes the index at the position where that result's writer had the axis (every such read must
// agree), else the first statement's index name; it must write that index plainly at some position
// of its output, which becomes its result's axis position (group norm: Sum(n, g) has g at 1,
// D(n, i, g, e) at 2). Each index plain, from 0, of one extent. Empty when there is none.
std::vector<std::string> Nest::tracked_indices(int pos, int64_t& extent) const {
  std::map<std::string, size_t> axis_at;  // a result -> the output position of its axis
  std::vector<std::string> chosen;
  extent = -1;
  auto plain = [](const ir::AffineExpr& e) -> std::string {
    if (e.index_coeffs.size() != 1 || !e.param_coeffs.empty() || e.constant != 0 || e.has_div() ||
        e.index_coeffs.begin()->second != 1)
      return "";
    return e.index_coeffs.begin()->first;
  };
  for (size_t i = 0; i < plans_.size(); ++i) {
    const ir::Statement& s = *plans_[i].s;
    std::string d;
    bool ok = true;
    std::function<void(const ir::Expr&)> check = [&](const ir::Expr& x) {
      if (x.kind == ir::ExprKind::Access && axis_at.count(x.name)) {
        const size_t q = axis_at.at(x.name);
        const std::string r = q < x.indices.size() ? plain(x.indices[q]) : "";
        if (r.empty() || (!d.empty() && r != d)) ok = false;
        else d = r;
      }
      for (const auto& a : x.args) check(*a);
    };
    check(*s.rhs);
    if (!ok) return {};
    if (i == 0) {
      if (pos < 0 || static_cast<size_t>(pos) >= s.out_indices.size()) return {};
      d = plain(s.out_indices[pos]);
    } else if (d.empty()) {
      d = chosen.front();
    }
    if (d.empty()) return {};
    size_t q = s.out_indices.size();
    for (size_t j = 0; j < s.out_indices.size(); ++j)
      if (plain(s.out_indices[j]) == d) q = j;
    const ir::IndexVar* iv = s.find_index(d);
    if (q == s.out_indices.size() || !iv || iv->lo.evaluate({}, k_.sizes) != 0) return {};
    const int64_t n = iv->hi.evaluate({}, k_.sizes);
    if ((extent >= 0 && n != extent) || (axis_at.count(s.output) && axis_at.at(s.output) != q)) return {};
    extent = n;
    axis_at[s.output] = q;
    chosen.push_back(d);
  }
  return chosen;
}

// The core axes a grid may use: per leading output position of the first statement, each plan's
// dimension along it (tracked_indices: its name; a divided index's quotient) and the common extent.
// Stops at the first position that does not qualify.
std::vector<Nest::CoreAxis> Nest::grid_axes() const {
  std::vector<CoreAxis> axes;
  std::vector<std::set<std::string>> used(plans_.size());
  for (int pos = 0; pos < kMaxCoreAxes; ++pos) {
    int64_t extent = -1;
    std::vector<std::string> names = partition_indices(pos, extent);
    if (names.empty()) names = tracked_indices(pos, extent);
    if (names.empty()) break;
    CoreAxis axis;
    axis.extent = -1;
    for (size_t i = 0; i < plans_.size(); ++i) {
      const Plan& p = plans_[i];
      std::string name = names[i];
      int64_t n = extent;
      if (auto sp = p.splits.find(name); sp != p.splits.end()) name = p.dims[sp->second.hi].name, n = p.dims[sp->second.hi].extent;
      if (used[i].count(name) || (axis.extent >= 0 && n != axis.extent)) return axes;
      axis.extent = n;
      axis.names.push_back(name);
    }
    for (size_t i = 0; i < plans_.size(); ++i) used[i].insert(axis.names[i]);
    axes.push_back(axis);
  }
  return axes;
}

// The cores the rows split occupies (choose_partition's first way).
int64_t Nest::rows_cores(int64_t extent, bool lanes) const {
  if (extent <= 1) return 1;
  const int64_t want = std::min<int64_t>(m_.cores, lanes ? std::max<int64_t>(1, extent / m_.vector_lanes(DType::F32)) : extent);
  const int64_t range = (extent + want - 1) / want;
  return (extent + range - 1) / range;
}

void Nest::choose_partition() {
  core_block_.clear();
  core_parts_.clear();
  int64_t extent = -1;
  std::vector<std::string> dim0 = partition_indices(0, extent);
  bool lanes = false;  // split along the last dimension: keep a vector repeat of it per core
  if (dim0.empty() || extent <= 1) dim0 = partition_indices(-1, extent), lanes = true;
  // padded copies: written by the cores together between two cross-core barriers (emit_pads), so
  // only on a description that has one
  const bool pads_shared = pads_.empty() || m_.cross_core_barrier_cycles > 0;
  if (pads_shared && rows_cores(dim0.empty() ? 1 : extent, lanes) < m_.cores && choose_grid(dim0.empty() ? 1 : rows_cores(extent, lanes)))
    return;
  const bool ok = !dim0.empty();
  for (size_t i = 0; i < plans_.size(); ++i) coalesce(plans_[i], {ok ? dim0[i] : ""});
  if (!ok || extent <= 1 || !pads_shared) {
    cores_ = 1;
    return;
  }
  cores_ = static_cast<int>(rows_cores(extent, lanes));
  range_ = (extent + cores_ - 1) / cores_;
  cores_ = static_cast<int>((extent + range_ - 1) / range_);
  partition_extent_ = extent;
  for (size_t i = 0; i < plans_.size(); ++i) {
    Plan& p = plans_[i];
    for (size_t d = 0; d < p.dims.size(); ++d)
      if (p.dims[d].name == dim0[i]) p.partition = static_cast<int>(d);
  }
  if (std::any_of(plans_.begin(), plans_.end(), [](const Plan& p) { return p.partition < 0; })) {  // split by a division
    for (Plan& p : plans_) p.partition = -1;
    cores_ = 1;
    range_ = 1;
    return;
  }
  if (cores_ == 1) range_ = extent;
}

// The grid over the leading output positions when it occupies more than `rows` cores; true when taken.
bool Nest::choose_grid(int64_t rows) {
  const std::vector<CoreAxis> axes = grid_axes();
  if (axes.size() < 2) return false;
  std::vector<int64_t> extents;
  for (const CoreAxis& a : axes) extents.push_back(a.extent);
  auto score = [&](const std::vector<int64_t>& parts) {
    double n = 1;
    for (int64_t q : parts) n *= double(q);
    return n * lane_efficiency(axes, parts);
  };
  std::vector<int64_t> parts = grid_parts(extents, m_.cores, score);
  while (parts.size() > 1 && parts.back() == 1) parts.pop_back();
  int64_t n = 1;
  for (int64_t q : parts) n *= q;
  if (score(parts) <= double(rows)) return false;
  for (size_t i = 0; i < plans_.size(); ++i) {
    std::set<std::string> keep;
    for (size_t j = 0; j < parts.size(); ++j) keep.insert(axes[j].names[i]);
    coalesce(plans_[i], keep);
  }
  for (size_t i = 0; i < plans_.size(); ++i) {
    Plan& p = plans_[i];
    p.core_dims.clear();
    for (size_t j = 0; j < parts.size(); ++j) {
      const auto it = std::find_if(p.dims.begin(), p.dims.end(), [&](const Dim& d) { return d.name == axes[j].names[i]; });
      TESSEL_CHECK(it != p.dims.end() && it->extent == axes[j].extent, "nest: a core axis lost by coalescing");
      p.core_dims.push_back(static_cast<int>(it - p.dims.begin()));
    }
    p.partition = p.core_dims[0];
  }
  for (size_t j = 0; j < parts.size(); ++j) {
    core_parts_.push_back(parts[j]);
    core_block_.push_back(axes[j].extent / parts[j]);
  }
  cores_ = static_cast<int>(n);
  range_ = core_block_[0];
  partition_extent_ = axes[0].extent;
  return true;
}

// The share of the vector lanes a grid keeps, weighted by each plan's elements: an axis that cuts a
// plan's lane dimension leaves each core ceil(block / lanes) repeats for block lanes (1: no loss).
double Nest::lane_efficiency(const std::vector<CoreAxis>& axes, const std::vector<int64_t>& parts) const {
  double kept = 0, total = 0;
  for (size_t i = 0; i < plans_.size(); ++i) {
    const Plan& p = plans_[i];
    double work = 1;
    for (const Dim& d : p.dims) work *= double(d.extent);
    int bytes = dtype_bytes(p.out.type);
    for (const Access& a : p.reads) bytes = std::min(bytes, dtype_bytes(a.type));
    const int64_t lanes = m_.vector_lanes(bytes);
    auto fill = [&](int64_t e) { return double(e) / double((e + lanes - 1) / lanes * lanes); };
    double eff = 1;
    const int v = lane_dim(p);
    for (size_t j = 0; j < parts.size() && v >= 0; ++j)
      if (parts[j] > 1 && axes[j].names[i] == p.dims[v].name) eff *= fill(axes[j].extent / parts[j]) / fill(axes[j].extent);
    kept += work * eff;
    total += work;
  }
  return total > 0 ? kept / total : 1;
}

int64_t Nest::share(const Plan& p, int d) const {
  if (d < 0) return 1;
  if (d == p.partition) return range_;
  for (size_t j = 1; j < p.core_dims.size() && j < core_block_.size(); ++j)
    if (p.core_dims[j] == d) return core_block_[j];
  return p.dims[d].extent;
}

int64_t Nest::extent_of(const Plan& p, int d) const {
  if (d == p.partition) return range_now_;
  return share(p, d);
}

// Each core's first index along every grid axis j: ((core_id / stride_j) % parts_j) * block_j in
// kBase + j (stride_j: the parts of the axes inside j).
void Nest::core_bases() {
  int64_t stride = 1;
  for (size_t j = core_parts_.size(); j-- > 0;) {
    const uint8_t base = static_cast<uint8_t>(kBase + j);
    op(Opcode::Div, {reg(kTmp), reg(npu::kRegCoreId), imm(stride)});
    op(Opcode::Div, {reg(kAddr), reg(kTmp), imm(core_parts_[j])});
    op(Opcode::Mul, {reg(kAddr), reg(kAddr), imm(core_parts_[j])});
    op(Opcode::Sub, {reg(kTmp), reg(kTmp), reg(kAddr)});
    op(Opcode::Mul, {reg(base), reg(kTmp), imm(core_block_[j])});
    stride *= core_parts_[j];
  }
}

std::string Nest::cores_note() const {
  if (cores_ <= 1) return "";
  if (core_parts_.empty()) return fmt::format(", {} rows each", range_);
  std::string grid;
  const Plan& p = plans_.front();
  for (size_t j = 0; j < core_parts_.size(); ++j)
    grid += fmt::format("{}{} {} x {}", j ? ", " : "", p.dims[p.core_dims[j]].name, core_parts_[j], core_block_[j]);
  return ", core grid " + grid + " (parts x per core)";
}

}  // namespace tessel::emit_npu::nest
