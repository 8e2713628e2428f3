#include "compiler/tile/tile_spec.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "compiler/tile/npu_gemm_plan.h"
#include "isa/base/error.h"

namespace tessel::tile {

const AxisTile* TileSpec::find(const std::string& axis) const {
  for (const auto& a : axes)
    if (a.axis == axis) return &a;
  return nullptr;
}

void TileSpec::set(const std::string& axis, int64_t outer, int64_t inner) {
  for (auto& a : axes)
    if (a.axis == axis) {
      a.outer = outer;
      a.inner = inner;
      return;
    }
  axes.push_back({axis, outer, inner});
}

std::string TileSpec::to_string() const {
  std::string s;
  for (const auto& a : axes) {
    if (!s.empty()) s += ",";
    s += a.axis + "=" + std::to_string(a.outer) + "/" + std::to_string(a.inner);
  }
  return s;
}

namespace {

int64_t parse_size(const std::string& text, const std::string& entry) {
  if (text.empty() || !std::all_of(text.begin(), text.end(), [](char c) { return std::isdigit((unsigned char)c); }))
    throw UserError("--tile: '" + entry + "': expected a positive integer size, got '" + text +
                    "' (form: axis=outer/inner, e.g. m=128/64)");
  if (text.size() > 12) throw UserError("--tile: '" + entry + "': size " + text + " is too large");
  int64_t v = std::stoll(text);
  if (v == 0) throw UserError("--tile: '" + entry + "': tile sizes must be at least 1, got 0");
  return v;
}

}  // namespace

TileSpec parse_tile_spec(const std::string& text) {
  TileSpec spec;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string entry = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? text.size() + 1 : comma + 1;
    if (entry.empty()) throw UserError("--tile '" + text + "': empty entry (form: m=128/64,n=128/32,k=64/16)");
    size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0)
      throw UserError("--tile: '" + entry + "': expected axis=outer/inner, e.g. m=128/64");
    std::string axis = entry.substr(0, eq);
    if (!(std::isalpha((unsigned char)axis[0]) || axis[0] == '_') ||
        !std::all_of(axis.begin(), axis.end(), [](char c) { return std::isalnum((unsigned char)c) || c == '_'; }))
      throw UserError("--tile: '" + entry + "': '" + axis + "' is not an index name");
    std::string sizes = entry.substr(eq + 1);
    size_t slash = sizes.find('/');
    int64_t outer = parse_size(sizes.substr(0, slash), entry);
    int64_t inner = slash == std::string::npos ? outer : parse_size(sizes.substr(slash + 1), entry);
    if (inner > outer)
      throw UserError("--tile: '" + entry + "': the inner (operand-level) size " + std::to_string(inner) +
                      " is larger than the outer (stage-level) size " + std::to_string(outer) +
                      "; inner tiles must fit in outer ones");
    if (spec.find(axis)) throw UserError("--tile: axis '" + axis + "' is given twice");
    spec.axes.push_back({axis, outer, inner});
  }
  return spec;
}

void check_tile_spec(const TileSpec& spec, const ir::Function& f) {
  std::set<std::string> names;
  for (const auto& s : f.statements)
    for (const auto& v : s.domain) names.insert(v.name);
  for (const auto& a : spec.axes)
    if (!names.count(a.axis)) {
      std::string known;
      for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
      throw UserError("--tile: unknown axis '" + a.axis + "': " + f.name + " has the index names " + known);
    }
}

namespace {

// NPU targets, a contraction with one reduction axis (a GEMM, batched or with an epilogue): the
// block tile (bm, bn) and its K stage tk from a small time model over bm, bn in {u, 2u, 4u, 8u,
// 16u} (u = the matrix unit's m / n; the extent when smaller) and tk in {8u, 16u, 32u} (u = its k;
// at most K, both stage tiles double-buffered within the stage level). A core runs
// ceil(tiles / cores) tiles one after the other, each the longer of its matrix-unit time
// (bm*bn*K MACs at the unit's rate) and its K chunks' global->stage copies ((bm + bn) * tk
// elements at the core's share of the bandwidth; a chunk's copy waits for the one two back, so
// it takes at least half the read latency plus its transfer), after the first chunk's latency;
// all tiles' copies share the global level's bandwidth. Least time, then the larger tile, then
// the squarer one, then the shallower K stage. Every number comes from the description. On
// davinci-910 ResNet-50's 16x512x2048 layers take 16x16 tiles with K stages of 512 on 32 cores
// (f16 -> f32: 3,763 -> 2,597 cycles); 1024^3 keeps the tuner's 256x128.
// `dividing`: M, N and K are multiples of the unit, so the cube's plan (plan_gemm) takes the
// largest tiles within the boxes that divide M, N and K; the model weighs those tiles, not the
// boxes (ResNet-50's M = 28 x 28 = 784: a box of 64 runs as 16 rows, 98 tiles re-reading the
// weights: 6,365 cycles on davinci-910; the box of 128 runs as 112, 14 tiles: 2,841).
// not hardware: the fraction the model's time grows by per doubling of the K stage past 8 units
// (the seed GEMM 512x64x512: 32x32 tiles 256 deep modelled 17 % faster than 128, ran 2 % slower)
constexpr double kDeeperKStage = 0.25;
struct NpuGemmTile {
  int64_t bm = 0, bn = 0, tk = 0;
};
NpuGemmTile npu_gemm_tile(int64_t M, int64_t N, int64_t K, int64_t outer_tiles, int64_t eb, const isa::Hierarchy& h,
                          const isa::MatrixShape& unit, bool dividing) {
  const isa::Level& global = h.level(isa::Role::Global);
  const isa::Level& stage = h.level(isa::Role::Stage);
  const isa::TransferPath* path = h.find_path(global.name, stage.name);
  const double core_bw = path && path->bandwidth_bytes_per_cycle > 0 ? path->bandwidth_bytes_per_cycle : 1.0;
  const double latency = path ? double(path->latency_cycles) : 0.0;
  const double chip_bw = global.shared_bandwidth_bytes_per_cycle > 0 ? global.shared_bandwidth_bytes_per_cycle : core_bw * h.cores;
  const double macs_per_cycle = double(unit.macs()) / std::max<uint32_t>(1, unit.cycles);
  const int64_t cores = std::max<int64_t>(1, h.cores), Kp = (std::max<int64_t>(K, 1) + unit.k - 1) / unit.k * unit.k;
  double best_t = 0;
  NpuGemmTile best;
  // not hardware: the block tile and K stage in multiples of the unit the model weighs
  for (int64_t fm : {1, 2, 4, 8, 16})
    for (int64_t fn : {1, 2, 4, 8, 16})    // not hardware: as above
      for (int64_t fk : {8, 16, 32}) {     // not hardware: as above
        int64_t bm = std::min<int64_t>(fm * unit.m, M), bn = std::min<int64_t>(fn * unit.n, N);
        int64_t tk = std::min<int64_t>(fk * unit.k, Kp);
        if (fk > 8 && tk < fk * unit.k) continue;  // K's one stage: the shallowest candidate has it
        if (dividing) bm = dividing_tile(M, bm, unit.m), bn = dividing_tile(N, bn, unit.n), tk = dividing_tile(K, tk, unit.k);
        if (fk > 8 && 2 * (bm + bn) * tk * eb > int64_t(stage.capacity_bytes)) continue;
        const int64_t tiles = outer_tiles * ((M + bm - 1) / bm) * ((N + bn - 1) / bn), used = std::min(tiles, cores);
        const double in_bw = std::min(core_bw, chip_bw / double(used)), chunks = double((Kp + tk - 1) / tk);
        const double chunk_in = double((bm + bn) * tk * eb) / in_bw;
        const double loads = latency + chunks * std::max(chunk_in, (chunk_in + latency) / 2);
        const double per_tile = std::max(double(bm * bn * Kp) / macs_per_cycle, loads);
        // a deeper K stage weighed as plan_gemm_tails does (kDeeperKStage: the model's error on its fill)
        const double deeper = 1 + kDeeperKStage * std::max(0.0, std::log2(double(tk) / double(8 * unit.k)));
        const double t = deeper * std::max(double((tiles + cores - 1) / cores) * per_tile, double(tiles * (bm + bn) * Kp * eb) / chip_bw);
        // ties (equal time): the larger tile, then the squarer, then the taller, then the shallower
        auto key = [](const NpuGemmTile& b) { return std::make_tuple(-b.bm * b.bn, std::max(b.bm, b.bn) / std::min(b.bm, b.bn), -b.bm, b.tk); };
        const NpuGemmTile c{bm, bn, fk == 8 ? fk * unit.k : tk};  // (the box of 8u as before where K is shorter)
        const bool tie = best.bm && std::abs(t - best_t) <= 1e-9 * best_t;
        if (!best.bm || (!tie && t < best_t) || (tie && key(c) < key(best))) best_t = t, best = c;
      }
  return best;
}

}  // namespace

namespace {

// Does `e` read a tensor at an index that uses `index`?
bool reads_index(const ir::Expr& e, const std::string& index) {
  if (e.kind == ir::ExprKind::Access)
    for (const auto& ix : e.indices)
      if (ix.index_coeffs.count(index)) return true;
  for (const auto& a : e.args)
    if (reads_index(*a, index)) return true;
  return false;
}

}  // namespace

namespace {

// A GPU kernel without a contraction runs a block per stage tile (the SIMT code): halve the stage
// tiles of the parallel axes, outermost first, until there are as many tiles as SMs (softmax over
// 128 rows: 128 blocks of one row rather than 16 of eight) or every such tile is one point.
// Outputs per block of a column reduction on a GPU: one per thread of the SIMT emitter's block.
constexpr int64_t kColumnOutputs = 256;
// A column reduction of at most kShortColumnPoints reduced points per output (a pooling window, a
// depthwise filter) takes kShortColumnSplit times as many where that still leaves a block for
// every SM: its index arithmetic outweighs its few loads, and the SIMT emitter gives each thread
// that many outputs (column_split) to share it.
constexpr int64_t kShortColumnPoints = 64;
constexpr int64_t kShortColumnSplit = 4;
// Bytes of the widest tensor an element-wise GPU tile covers (256 threads, 16 bytes each).
constexpr int64_t kGpuElementwiseTileBytes = 4096;
// the shortest innermost tile that rule takes (a warp's worth of elements)
constexpr int64_t kGpuElementwiseMinRow = 32;
// Reduced points of a GPU reduction (not a contraction) whose reduced axes all stay whole.
constexpr int64_t kGpuReducedPoints = 16384;

// An index's extent under `sizes` (at least 1).
int64_t extent_of(const ir::IndexVar& v, const std::map<std::string, int64_t>& sizes) {
  return std::max<int64_t>(1, (v.hi - v.lo).evaluate({}, sizes));
}

void spread_over_cores(const ir::Function& f, const std::map<std::string, int64_t>& sizes, uint32_t cores, TileSpec& spec) {
  // divided indices: a halved tile may cut a quotient's box (promotion needs a fixed box hull)
  if (!ir::division_use(f).empty()) return;
  std::map<std::string, int64_t> extent;
  std::set<std::string> reduced;
  for (const auto& s : f.statements) {
    // a product of two different tensors reduced: a contraction, for the TensorCore tile policy
    if (s.reduction != ir::Reduction::None && s.rhs && s.rhs->kind == ir::ExprKind::Apply && s.rhs->op == ir::Op::Mul) {
      std::set<std::string> left, right;
      std::function<void(const ir::Expr&, std::set<std::string>&)> reads = [&](const ir::Expr& e, std::set<std::string>& out) {
        if (e.kind == ir::ExprKind::Access) out.insert(e.name);
        for (const auto& a : e.args) reads(*a, out);
      };
      reads(*s.rhs->args[0], left);
      reads(*s.rhs->args[1], right);
      if (left != right) return;
    }
    for (const auto& v : s.domain) {
      extent[v.name] = extent_of(v, sizes);
      if (v.is_reduction) reduced.insert(v.name);
    }
  }
  // a column reduction's output axes keep their block of kColumnOutputs (one output per thread)
  std::set<std::string> pinned;
  for (const auto& s : f.statements)
    if (ir::is_column_reduction(s))
      for (const auto& v : s.domain)
        if (!v.is_reduction) pinned.insert(v.name);
  auto tiles = [&] {
    int64_t t = 1;
    for (const auto& a : spec.axes)
      if (!reduced.count(a.axis) && extent.count(a.axis)) t *= (extent[a.axis] + a.outer - 1) / a.outer;
    return t;
  };
  while (tiles() < int64_t(cores)) {
    AxisTile* widest = nullptr;
    for (auto& a : spec.axes)
      if (!reduced.count(a.axis) && !pinned.count(a.axis) && a.outer > 1) {
        widest = &a;
        break;
      }
    if (!widest) break;
    widest->outer = std::max<int64_t>(1, widest->outer / 2);
    widest->inner = std::min(widest->inner, widest->outer);
  }
  // The tiles counted above include element-wise statements' axes; a reduction's own group has only
  // the tiles of its output axes (a group norm's statistics: 2 of (n, g) while the normalisation has
  // 2048 of (n, i)). Each reduction's output axes are halved too, outermost first, until it has as
  // many tiles as SMs; its reduced axes stay whole (the block's threads share them).
  for (const auto& s : f.statements) {
    if (s.reduction == ir::Reduction::None || ir::is_column_reduction(s)) continue;
    std::vector<AxisTile*> axes;
    for (const auto& v : s.domain)
      if (!v.is_reduction && !reduced.count(v.name) && !pinned.count(v.name))
        for (auto& a : spec.axes)
          if (a.axis == v.name) axes.push_back(&a);
    auto own_tiles = [&] {
      int64_t t = 1;
      for (const AxisTile* a : axes) t *= (extent[a->axis] + a->outer - 1) / a->outer;
      return t;
    };
    while (own_tiles() < int64_t(cores)) {
      auto it = std::find_if(axes.begin(), axes.end(), [](const AxisTile* a) { return a->outer > 1; });
      if (it == axes.end()) break;
      (*it)->outer = std::max<int64_t>(1, (*it)->outer / 2);
      (*it)->inner = std::min((*it)->inner, (*it)->outer);
    }
  }
}

// On a GPU (a block of the SIMT code per tile) an element-wise statement of one axis (often a
// collapsed whole tensor) takes kGpuElementwiseTileBytes of its widest tensor per tile, and an
// innermost axis that `block` would leave a tail of is cut at its largest divisor within twice
// that budget (whole where it fits), with the axes outward filling the budget. Only where every
// tensor the innermost axis moves along is contiguous along it. H200,
// docs/results/gpu_default_tiles_h200.txt: NCHW per-channel batch norm 8x128x784 f32,
// c=32 x h_w=128 tiles 7.5 us, c=1 x h_w=784 3.2 us; add of two 1M f16 tensors, tiles of 128
// 3.4 us, 2048 2.0 us. Empty: the general rule applies.
std::vector<std::pair<const ir::IndexVar*, int64_t>> gpu_elementwise_tiles(const ir::Function& f, const ir::Statement& s,
                                                                            const std::map<std::string, int64_t>& sizes,
                                                                            int64_t block, const TileSpec& spec) {
  std::vector<std::pair<const ir::IndexVar*, int64_t>> out;
  if (s.reduction != ir::Reduction::None || s.domain.empty() || !s.rhs) return out;
  const ir::Tensor* written = f.find_tensor(s.output);
  int widest = written ? dtype_bytes(written->dtype) : 4;
  ir::for_each_access(*s.rhs, [&](const ir::Expr& e) {
    if (const ir::Tensor* t = f.find_tensor(e.name)) widest = std::max(widest, dtype_bytes(t->dtype));
  });
  const int64_t budget = std::max<int64_t>(1, kGpuElementwiseTileBytes / widest);
  const ir::IndexVar& inner = s.domain.back();
  // only where every tensor that the innermost axis moves along is contiguous along it (a
  // transposition keeps its two-axis tiles)
  auto last_only = [&](const std::vector<ir::AffineExpr>& indices) {
    for (size_t i = 0; i < indices.size(); ++i) {
      std::map<std::string, int64_t> idx, params;
      indices[i].collect_names(&idx, &params);
      if (idx.count(inner.name) && i + 1 != indices.size()) return false;
    }
    return true;
  };
  bool contiguous = last_only(s.out_indices);
  ir::for_each_access(*s.rhs, [&](const ir::Expr& x) { contiguous = contiguous && last_only(x.indices); });
  if (!contiguous) return out;
  const int64_t e = extent_of(inner, sizes);
  if (s.domain.size() == 1) {
    out.push_back({&inner, std::min(e, budget)});
  } else if (e % block != 0) {
    // the largest divisor of the extent within twice the budget (no tail tile, constant trip
    // counts), unless a reduction tiled the axis already
    int64_t t = std::min(e, 2 * budget);
    if (const AxisTile* a = spec.find(inner.name)) {
      t = a->outer;
    } else {
      while (t >= kGpuElementwiseMinRow && e % t != 0) --t;
      if (t < kGpuElementwiseMinRow) return out;
      out.push_back({&inner, t});
    }
    // the axes outward fill the rest of the budget, each at a divisor of its extent (an axis a
    // reduction already tiled keeps its tile: a group norm's (n, g))
    int64_t room = std::max<int64_t>(1, budget / t);
    for (size_t i = s.domain.size() - 1; i-- > 0;) {
      const ir::IndexVar& v = s.domain[i];
      if (const AxisTile* a = spec.find(v.name)) {
        room = std::max<int64_t>(1, room / a->outer);
        continue;
      }
      const int64_t x = extent_of(v, sizes);
      int64_t d = std::min(x, room);
      while (d > 1 && x % d != 0) --d;
      out.push_back({&v, d});
      room = std::max<int64_t>(1, room / d);
    }
  }
  return out;
}

}  // namespace

namespace {

// A GPU column reduction (ir::is_column_reduction): a block of kColumnOutputs outputs (more for a
// short one), the innermost (contiguous) axis whole up to that, the next ones filling the rest;
// the reduced axes point by point but the innermost, so each thread walks its column.
template <typename Extent, typename Add>
void column_reduction_tiles(const ir::Statement& s, std::vector<const ir::IndexVar*> par, const std::vector<const ir::IndexVar*>& red,
                            uint32_t cores, const Extent& extent, const Add& add) {
  std::set<std::string> contiguous;  // output indices in the reads' last index
  ir::for_each_access(*s.rhs, [&](const ir::Expr& e) {
    if (e.indices.empty()) return;
    std::map<std::string, int64_t> idx, params;
    e.indices.back().collect_names(&idx, &params);
    for (const auto& [n, c] : idx) contiguous.insert(n);
  });
  std::stable_partition(par.begin(), par.end(), [&](const ir::IndexVar* v) { return !contiguous.count(v->name); });
  int64_t points = 1, outputs = 1;
  for (const ir::IndexVar* v : red) points *= extent(*v);
  for (const ir::IndexVar* v : par) outputs *= extent(*v);
  // the tiles within `room` outputs, the contiguous axes first, then inward out; with `dividing`
  // each at a divisor of its extent (no tail: the SIMT emitter splits only exact counts)
  auto tiles = [&](int64_t room, bool dividing) {
    std::vector<int64_t> t(par.size());
    for (size_t i = par.size(); i-- > 0;) {
      t[i] = std::max<int64_t>(1, std::min(room, extent(*par[i])));
      while (dividing && extent(*par[i]) % t[i] != 0) --t[i];
      room = std::max<int64_t>(1, room / t[i]);
    }
    return t;
  };
  std::vector<int64_t> t = tiles(kColumnOutputs, false);
  if (points <= kShortColumnPoints && outputs >= kColumnOutputs * kShortColumnSplit * int64_t(cores)) {
    const std::vector<int64_t> wide = tiles(kColumnOutputs * kShortColumnSplit, true);
    int64_t n = 1;
    for (int64_t x : wide) n *= x;
    if (n >= 2 * kColumnOutputs) t = wide;  // (two or more outputs per thread)
  }
  for (size_t i = par.size(); i-- > 0;) add(*par[i], t[i], t[i]);
  for (size_t i = 0; i + 1 < red.size(); ++i) add(*red[i], 1, 1);
}

}  // namespace

TileSpec default_tile_spec(const ir::Function& f, const std::map<std::string, int64_t>& sizes,
                           const isa::Hierarchy& h) {
  const isa::MatrixShape* matrix = nullptr;
  for (const auto* u : h.units_of_kind(isa::UnitKind::Matrix))
    if (!u->shapes.empty()) {
      matrix = &u->shapes[0];
      break;
    }
  TESSEL_CHECK(matrix, "tile: description " + h.name + " has no matrix unit shape (validate_hierarchy requires one)");
  const int um = matrix->m, un = matrix->n, uk = matrix->k;
  TileSpec spec;
  auto extent = [&](const ir::IndexVar& v) { return extent_of(v, sizes); };
  auto add = [&](const ir::IndexVar& v, int64_t outer, int64_t inner) {
    if (spec.find(v.name)) return;
    outer = std::min(outer, extent(v));
    spec.axes.push_back({v.name, outer, std::min(inner, outer)});
  };
  // Reductions first: they anchor the fused groups. The innermost two parallel axes and the
  // innermost reduction axis of a contraction play m, n, k; outer axes get point tiles (1) so a
  // tile stays a GEMM-shaped block. Other reductions keep their innermost reduction axis whole
  // (softmax / layer-norm rows in one tile).
  for (const auto& s : f.statements) {
    if (s.reduction == ir::Reduction::None) continue;
    const bool contraction = s.rhs && s.rhs->kind == ir::ExprKind::Apply && s.rhs->op == ir::Op::Mul;
    std::vector<const ir::IndexVar*> par, red;
    for (const auto& v : s.domain) (v.is_reduction ? red : par).push_back(&v);
    // A contraction's batch axes (read by both factors) get point tiles wherever they are in the
    // output (C[m, b, n]): they go first, so that the innermost two are its m and n.
    if (contraction)
      std::stable_partition(par.begin(), par.end(), [&](const ir::IndexVar* v) {
        return reads_index(*s.rhs->args[0], v->name) && reads_index(*s.rhs->args[1], v->name);
      });
    // f16 operands (the path the model was checked on), bf16 ones on a bf16 -> f32 shape (the same
    // 16-bit data path) and i8 ones on the description's i8 shape (the NPU's cube_i8: the same model
    // with 1-byte elements and that shape's MACs per cycle)
    std::optional<DType> operand;
    bool uniform = true;
    std::function<void(const ir::Expr&)> operands = [&](const ir::Expr& e) {
      if (e.kind == ir::ExprKind::Access) {
        const ir::Tensor* t = f.find_tensor(e.name);
        if (!t || (operand && *operand != t->dtype)) uniform = false;
        else operand = t->dtype;
      }
      for (const auto& a : e.args) operands(*a);
    };
    if (contraction) operands(*s.rhs);
    const isa::MatrixShape* shape = nullptr;
    if (uniform && operand && (*operand == DType::F16 || *operand == DType::BF16 || *operand == DType::I8))
      for (const auto* u : h.units_of_kind(isa::UnitKind::Matrix))
        for (const auto& sh : u->shapes)
          if (!shape && sh.a == *operand &&
              (*operand == DType::F16 || sh.acc == (*operand == DType::I8 ? DType::I32 : DType::F32)))
            shape = &sh;
    if (contraction && shape && h.kind == isa::TargetKind::Npu && red.size() == 1 && par.size() >= 2) {
      int64_t outer_tiles = 1;
      for (size_t i = 0; i + 2 < par.size(); ++i) outer_tiles *= extent(*par[i]);
      const int64_t M = extent(*par[par.size() - 2]), N = extent(*par.back()), K = extent(*red[0]);
      const bool dividing = whole_units(M, N, K, shape->m, shape->n, shape->k);
      const auto [bm, bn, tk] = npu_gemm_tile(M, N, K, outer_tiles, dtype_bytes(*operand), h, *shape, dividing);
      for (size_t i = 0; i + 2 < par.size(); ++i) add(*par[i], 1, 1);
      add(*par[par.size() - 2], bm, std::min<int64_t>(bm, 8 * shape->m));
      add(*par.back(), bn, std::min<int64_t>(bn, 4 * shape->n));
      add(*red[0], tk, std::min<int64_t>(tk, 4 * shape->k));
      continue;
    }
    if (h.kind == isa::TargetKind::Gpu && ir::is_column_reduction(s)) {
      column_reduction_tiles(s, par, red, h.cores, extent, add);
      continue;
    }
    for (size_t i = 0; i < par.size(); ++i) {
      const bool inner_two = i + 2 >= par.size();
      if (!inner_two) add(*par[i], 1, 1);
      else if (contraction) add(*par[i], 8 * std::max(um, un), 4 * std::max(um, un));
      else add(*par[i], 8 * std::max(um, un), 8 * std::max(um, un));
    }
    // On a GPU a reduction over two or more axes that is not a contraction keeps them all whole
    // (outer and inner tile alike) where they hold at most kGpuReducedPoints points: the SIMT
    // reduction nest flattens them over a thread group's lanes. Otherwise the outer ones got point
    // tiles and an element-wise statement's inner tile split the innermost, so a group norm's split
    // (i_in, e) ran as sequential loops around 16 lanes of which 4 were busy (H200, group norm
    // [2,1024,8,32] f32: its squared-deviation partials 58 us). One reduced axis stays whole by
    // being left out.
    int64_t reduced_points = 1;
    for (const auto* v : red) reduced_points *= extent(*v);
    const bool whole = h.kind == isa::TargetKind::Gpu && !contraction && red.size() > 1 && reduced_points <= kGpuReducedPoints;
    for (size_t i = 0; i < red.size(); ++i) {
      const bool innermost = i + 1 == red.size();
      if (whole) add(*red[i], extent(*red[i]), extent(*red[i]));
      else if (!innermost) add(*red[i], 1, 1);
      else if (contraction) add(*red[i], 4 * uk, uk);
    }
  }
  // Element-wise statements: the innermost two axes in blocks, outer axes point by point (on a
  // GPU first gpu_elementwise_tiles).
  // (not with divided indices: their tiles stay whole-box, as spread_over_cores leaves them; a
  // nearest 2x upsample of 56x56 planes in 16-row tiles took 2.94 us against 2.26)
  if (h.kind == isa::TargetKind::Gpu && ir::division_use(f).empty())
    for (const auto& s : f.statements)
      for (const auto& [v, t] : gpu_elementwise_tiles(f, s, sizes, 8 * std::max(um, un), spec)) add(*v, t, t);
  for (const auto& s : f.statements) {
    if (s.reduction != ir::Reduction::None) continue;
    for (size_t i = 0; i < s.domain.size(); ++i) {
      const bool inner_two = i + 2 >= s.domain.size();
      add(s.domain[i], inner_two ? 8 * std::max(um, un) : 1, inner_two ? 8 * std::max(um, un) : 1);
    }
  }
  if (h.kind == isa::TargetKind::Gpu) spread_over_cores(f, sizes, h.cores, spec);
  return spec;
}

}  // namespace tessel::tile
