// The analytic cost model: cycles per core of one configuration from the hierarchy description.
//
// Per fused group: stage tiles P (parallel axes), reduction chunks R per stage tile and operand
// tiles I per chunk follow from the tile sizes; stage tiles spread over the cores (ceil(P / cores)
// per core), one after the other. One stage tile costs
//   fill + R x (chunk + handoff) + drain (the drain once per core when double-buffered: the next
//   stage tile's fill overlaps it); handoff: the operand paths' latencies, exposed once per chunk
//   - chunk: per engine (the unit that moves the data on each path of the description), the bytes
//     of the chunk's buffers (stage buffers once, operand buffers I times) over the path bandwidth,
//     and the matrix unit's fragments (operand tiles padded to the unit's shape, times the shape's
//     cycles, over the unit count, plus its start-up); engines overlap (the busiest one counts)
//     when the inputs are double-buffered, otherwise they add up;
//   - fill: the first chunk's loads with their path latencies (and stage-tile inputs);
//   - drain: the output's way back to the global level (accumulator -> vector -> global) with
//     latencies.
// All stage tiles' global traffic also passes the global level's shared bandwidth; the result is
// the larger of the per-core time and that.
#include <algorithm>
#include <cmath>
#include <optional>

#include "compiler/tune/cost_model.h"
#include "isa/base/error.h"

namespace tessel::tune {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / std::max<int64_t>(1, b); }

struct Route {
  double bandwidth = 0;
  double latency = 0;
  std::string engine;
};

// The path from -> to, or through one intermediate level (e.g. accumulator -> vector -> global).
std::vector<Route> route(const isa::Hierarchy& h, const std::string& from, const std::string& to) {
  if (const auto* p = h.find_path(from, to)) return {{p->bandwidth_bytes_per_cycle, double(p->latency_cycles), p->engine}};
  for (const auto& p1 : h.paths)
    if (p1.from == from)
      if (const auto* p2 = h.find_path(p1.to, to))
        return {{p1.bandwidth_bytes_per_cycle, double(p1.latency_cycles), p1.engine},
                {p2->bandwidth_bytes_per_cycle, double(p2->latency_cycles), p2->engine}};
  return {};
}

uint32_t matrix_unit_count(const isa::Hierarchy& h) {
  for (const auto* u : h.units_of_kind(isa::UnitKind::Matrix)) return std::max<uint32_t>(1, u->count);
  return 1;
}

uint32_t matrix_startup(const isa::Hierarchy& h) {
  for (const auto* u : h.units_of_kind(isa::UnitKind::Matrix)) return u->startup_cycles;
  return 0;
}

// The NPU convolution mapping (compiler/emit_npu/conv.cc), which chooses its sizes itself
// (Problem::fixed_mapping): NHWC X[N, H, W, C], Wt[R, S, C, K] -> Y[N, OH, OW, K], channel counts
// multiples of the cube's k (else it runs through scratch copies on one core: not modelled here).
struct ConvShape {
  int64_t N = 0, H = 0, W = 0, C = 0, K = 0, R = 0, S = 0, OH = 0, OW = 0;
};

std::optional<ConvShape> nhwc_conv_shape(const Problem& p) {
  if (!p.npu_conv || !p.function) return std::nullopt;
  const auto in = p.function->inputs();
  const auto out = p.function->outputs();
  if (in.size() != 2 || out.size() != 1) return std::nullopt;
  auto dims = [&](const ir::Tensor* t) {
    std::vector<int64_t> d;
    for (const auto& e : t->shape) d.push_back(e.evaluate({}, p.sizes));
    return d;
  };
  const auto x = dims(in[0]), w = dims(in[1]), y = dims(out[0]);
  if (x.size() != 4 || w.size() != 4 || y.size() != 4) return std::nullopt;
  ConvShape c{x[0], x[1], x[2], x[3], w[3], w[0], w[1], y[1], y[2]};
  if (w[2] != c.C || y[0] != c.N || y[3] != c.K) return std::nullopt;
  return c;
}

// Per core: the weights of its output-channel tile (tn columns) GM -> L1 once, then per job (one
// image x one tile) the feature map GM -> L1 (MTE2), per 16-channel slice and kernel-position
// group the weights L1 -> L0B and per pixel block load3d (img2col) -> L0A (MTE1), the cube's
// fragments, and the accumulator's way back (L0C -> UB -> GM). Jobs are double-buffered (two
// images ping-pong), so a job costs its busiest engine; the first job's loads and the last one's
// write-back are exposed. tn, the image groups per core and the pixel blocks follow conv.cc's plan.
//
// With a tile spec the mapping reads it (conv.cc "the user's tile spec drives the plan"): outer k
// -> tn (rounded to the fractal, shrunk to divide K), inner p x q -> pixel block rows, inner r x s
// -> kernel positions per L0 step; `spec` null: conv.cc's own plan.
AnalyticBreakdown conv_breakdown(const Problem& problem, const ConvShape& cv, const tile::TileSpec* spec) {
  const isa::Hierarchy& h = problem.hierarchy;
  int64_t m0 = 16, k0 = 16, unit_cycles = 1;
  for (const isa::Unit* u : h.units_of_kind(isa::UnitKind::Matrix))
    for (const isa::MatrixShape& s : u->shapes)
      if (s.a == DType::F16 && s.acc == DType::F32) m0 = s.m, k0 = s.k, unit_cycles = s.cycles;
  auto cap = [&](isa::Role r) { return int64_t(h.level(r).capacity_bytes); };
  const std::string gm = h.level(isa::Role::Global).name, l1 = h.level(isa::Role::Stage).name;
  const std::string l0a = h.level(isa::Role::OperandA).name, l0b = h.level(isa::Role::OperandB).name;
  const std::string l0c = h.level(isa::Role::Accumulator).name;
  auto round_up = [](int64_t x, int64_t m) { return ceil_div(x, m) * m; };
  const int64_t P = cv.OH * cv.OW, Pp = round_up(P, m0), RS = cv.R * cv.S, C1 = ceil_div(cv.C, k0);
  const int64_t fm_bytes = round_up(cv.C * cv.H * cv.W * 2, 32);
  const bool scratch = cv.C % k0 || cv.K % k0;
  const int64_t cores_avail = scratch ? 1 : std::max<uint32_t>(1, h.cores);
  auto bw = [&](const std::string& from, const std::string& to) {
    const auto r = route(h, from, to);
    return r.empty() ? 1.0 : std::max(1.0, r.front().bandwidth);
  };
  // conv.cc's plan: the output-channel tile by its estimate (cube vs MTE1 per job), ties to more
  // cores then larger tiles
  struct Plan {
    int64_t tn = 0, k_tiles = 0, group = 1, cores = 1, jobs = 0;
    double cost = 0;
  };
  std::optional<Plan> plan;
  const int64_t K = round_up(cv.K, k0), C = round_up(cv.C, k0);
  // the tile's axes: Y(n, p, q, k) with the reduction over r, s, c, named as in the statement
  std::string ap, aq, ak, ar, as;
  if (spec && problem.function) {
    for (const auto& st : problem.function->statements) {
      if (st.reduction == ir::Reduction::None || st.out_indices.size() != 4) continue;
      auto name = [](const ir::AffineExpr& e) {
        return e.index_coeffs.size() == 1 ? e.index_coeffs.begin()->first : std::string();
      };
      ap = name(st.out_indices[1]), aq = name(st.out_indices[2]), ak = name(st.out_indices[3]);
      for (const auto& v : st.domain) {
        if (v.name == ap || v.name == aq || v.name == ak || v.name == name(st.out_indices[0])) continue;
        if (ar.empty()) ar = v.name; else if (as.empty()) as = v.name;
      }
    }
  }
  auto find = [&](const std::string& a) { return spec && !a.empty() ? spec->find(a) : nullptr; };
  const tile::AxisTile *t_k = find(ak), *t_p = find(ap), *t_q = find(aq), *t_r = find(ar), *t_s = find(as);
  auto dividing = [](int64_t n, int64_t limit, int64_t unit) {
    for (int64_t t = std::max(unit, limit / unit * unit); t >= unit; t -= unit)
      if (n % t == 0) return t;
    return unit;
  };
  const int64_t user_tn = t_k ? dividing(K, round_up(std::min(K, t_k->outer), k0), k0) : 0;
  const int64_t user_kc = t_r || t_s ? std::min(t_r ? t_r->inner : cv.R, cv.R) * std::min(t_s ? t_s->inner : cv.S, cv.S) : 0;
  const int64_t user_rows =
      t_p || t_q ? std::min(Pp, round_up(std::min(t_p ? t_p->inner : cv.OH, cv.OH) * std::min(t_q ? t_q->inner : cv.OW, cv.OW), m0))
                 : 0;
  for (int64_t t = user_tn ? user_tn : std::min<int64_t>(K, 128); t >= 16; t -= 16) {
    if (K % t) continue;
    Plan c;
    c.tn = t, c.k_tiles = K / t;
    if (!user_tn && (C * RS * t * 2 + fm_bytes > cap(isa::Role::Stage) || Pp * t * 4 > cap(isa::Role::Accumulator) ||
                     2 * k0 * t * 2 > cap(isa::Role::OperandB)))
      continue;
    if (c.k_tiles <= cores_avail) {
      const int64_t per = cores_avail / c.k_tiles;
      for (int64_t g = std::min(per, cv.N); g >= 1; --g)
        if (cv.N % g == 0) {
          c.group = g;
          break;
        }
      c.cores = c.k_tiles * c.group;
      c.jobs = cv.N / c.group;
    } else {
      c.cores = cores_avail;
      c.jobs = ceil_div(c.k_tiles, c.cores) * cv.N;
    }
    const double cube = double(Pp / m0) * (t / 16) * C1 * RS;
    const double mte1 = double(Pp) * C * RS * 2 / bw(l1, l0a) + double(C) * RS * t * 2 / bw(l1, l0b);
    c.cost = double(c.jobs) * std::max(cube, mte1);
    if (!plan || c.cost < plan->cost * 0.999) plan = c;
    if (user_tn) break;
  }
  AnalyticBreakdown out;
  if (!plan) return out;
  const int64_t tn = plan->tn;
  // kernel-position groups (two L0B halves) and pixel blocks (two L0A halves): mmad count per job
  int64_t kc = user_kc;
  if (!kc) {
    kc = std::max<int64_t>(1, std::min<int64_t>(RS, (cap(isa::Role::OperandB) / 2) / (k0 * tn * 2)));
    kc = ceil_div(RS, ceil_div(RS, kc));
  }
  const int64_t groups = ceil_div(RS, kc);
  const int64_t tm0 = user_rows ? user_rows
                                : std::max<int64_t>(m0, std::min<int64_t>(Pp, (cap(isa::Role::OperandA) / 2) / (kc * k0 * 2) / m0 * m0));
  const int64_t blocks = ceil_div(Pp, tm0);
  const double units = matrix_unit_count(h);
  const double cube = double(Pp / m0) * (tn / 16) * C1 * RS * unit_cycles / units + double(blocks * C1 * groups) * matrix_startup(h);
  std::map<std::string, double> job;  // engine -> cycles per job
  double exposed_latency = 0;
  auto move = [&](const std::string& from, const std::string& to, double bytes, std::map<std::string, double>& into, bool first) {
    for (const auto& step : route(h, from, to)) {
      if (step.bandwidth > 0) into[step.engine] += bytes / step.bandwidth;
      if (first) exposed_latency += step.latency;
    }
  };
  move(gm, l1, double(fm_bytes), job, true);                                // the feature map
  move(l1, l0a, double(Pp) * C * RS * 2, job, true);                        // load3d, every pixel block
  move(l1, l0b, double(C) * RS * tn * 2, job, true);                        // the weights' slices
  move(l0c, gm, double(Pp) * tn * 4, job, true);                            // accumulator -> UB -> GM
  std::map<std::string, double> once;
  move(gm, l1, double(C) * RS * tn * 2, once, true);                        // the tile's weights, once per core
  double busiest = cube;
  for (const auto& [e, c] : job) busiest = std::max(busiest, c);
  const double jobs = double(plan->jobs);
  double first = 0;  // the first job's loads before its cube starts, the last one's write-back after it
  for (const auto& [e, c] : once) first += c;
  first += double(fm_bytes) / bw(gm, l1);
  for (const auto& step : route(h, l0c, gm)) first += step.bandwidth > 0 ? double(Pp) * tn * 4 / step.bandwidth : 0;
  // Every step (pixel block x channel slice x kernel-position group) hands its L0A / L0B operands
  // to the cube through a flag: the load's latency shows once per step (as the GEMM model's
  // per-chunk handoff), so small pixel blocks and few kernel positions per step cost more.
  double handoff = 0;
  for (const auto& step : route(h, l1, l0a)) handoff += step.latency;
  const double steps = double(blocks * C1 * groups);
  const double core_time = first + exposed_latency + jobs * (busiest + steps * handoff);
  const isa::Level& g = h.level(isa::Role::Global);
  const double global_bytes = double(plan->cores) * (double(C) * RS * tn * 2 + jobs * fm_bytes) + double(cv.N) * P * K * 4;
  out.compute_cycles = jobs * cube;
  for (const auto& [e, c] : job) out.engine_cycles[e] += jobs * c;
  for (const auto& [e, c] : once) out.engine_cycles[e] += c;
  out.latency_cycles = exposed_latency;
  out.shared_global_cycles = g.shared_bandwidth_bytes_per_cycle > 0 ? global_bytes / g.shared_bandwidth_bytes_per_cycle : 0;
  out.tiles = cv.N * plan->k_tiles;
  out.cores_used = plan->cores;
  out.total = std::max(core_time, out.shared_global_cycles);
  return out;
}

}  // namespace

AnalyticBreakdown analytic_breakdown(const Problem& problem, const ConfigInfo& config) {
  if (const auto cv = nhwc_conv_shape(problem)) return conv_breakdown(problem, *cv, problem.fixed_mapping.empty() ? &config.spec : nullptr);
  const isa::Hierarchy& h = problem.hierarchy;
  const std::string global = h.level(isa::Role::Global).name;
  const isa::Level& g = h.level(isa::Role::Global);
  const int64_t cores = std::max<uint32_t>(1, h.cores);
  AnalyticBreakdown out;
  for (size_t gi = 0; gi < config.groups.size(); ++gi) {
    const GroupTiling& t = config.groups[gi];
    int64_t P = 1, R = 1, I = 1;
    std::map<std::string, int64_t> outer, inner;
    for (const auto& [axis, e] : t.extent) {
      const int64_t o = std::min(e, t.outer.count(axis) ? t.outer.at(axis) : e);
      const int64_t i = std::min(o, t.inner.count(axis) ? t.inner.at(axis) : o);
      outer[axis] = o;
      inner[axis] = i;
      const bool red = t.reduction.count(axis) && t.reduction.at(axis);
      (red ? R : P) *= ceil_div(e, o);
      I *= ceil_div(o, i);
    }
    const int64_t used = std::min(cores, P);
    const int64_t Pc = ceil_div(P, cores);
    out.tiles += P;
    out.cores_used = std::max(out.cores_used, used);
    double compute = 0;
    if (t.matched) {
      const int64_t frags = ceil_div(inner[t.m], t.unit_m) * ceil_div(inner[t.n], t.unit_n) * ceil_div(inner[t.k], t.unit_k);
      compute = double(Pc) * R * I * frags * t.unit_cycles / matrix_unit_count(h) + double(Pc) * R * I * matrix_startup(h);
    } else {
      double elems = 1;
      for (const auto& [axis, o] : outer) elems *= o;
      uint32_t bpr = 0, startup = 0;
      for (const auto* u : h.units_of_kind(isa::UnitKind::Vector)) bpr = u->bytes_per_repeat, startup = u->startup_cycles;
      if (bpr) compute = double(Pc) * R * (elems * 4 / bpr + startup);
    }
    // per reduction chunk (steady state), per stage tile (fill and drain)
    std::map<std::string, double> chunk;  // engine -> cycles of one reduction chunk
    double fill = 0, drain = 0, latency = 0, global_bytes = 0, handoff = 0;
    bool overlap = true;
    auto transfer = [&](const std::string& from, const std::string& to, double bytes) {
      double t = 0;
      for (const auto& step : route(h, from, to)) t += (step.bandwidth > 0 ? bytes / step.bandwidth : 0) + step.latency;
      return t;
    };
    auto lat = [&](const std::string& from, const std::string& to) {
      double l = 0;
      for (const auto& step : route(h, from, to)) l += step.latency;
      return l;
    };
    auto per_chunk = [&](const std::string& from, const std::string& to, double count, double bytes) {
      for (const auto& step : route(h, from, to))
        if (step.bandwidth > 0) chunk[step.engine] += count * bytes / step.bandwidth;
    };
    const std::string stage = h.level(isa::Role::Stage).name;
    for (const auto& b : config.buffers) {
      if (b.group != int(gi)) continue;
      const double bytes = double(b.bytes);
      if (b.copy_in) {
        const std::string src = b.tile_level == poly::TileLevel::I ? stage : global;
        if (b.tile_level == poly::TileLevel::P) {
          fill += transfer(src, b.level, bytes);  // once per stage tile, before its first chunk
        } else {
          per_chunk(src, b.level, b.tile_level == poly::TileLevel::I ? double(I) : 1.0, bytes);
          if (b.tile_level == poly::TileLevel::I) handoff += lat(src, b.level);
          fill += transfer(src, b.level, b.tile_level == poly::TileLevel::I ? bytes : bytes);  // the first chunk's load
          latency += lat(src, b.level);
        }
        if (!b.double_buffered && b.role != isa::Role::Accumulator) overlap = false;
        if (src == global) global_bytes += bytes * (b.tile_level == poly::TileLevel::P ? 1.0 : double(R));
      }
      if (b.copy_out || (b.role == isa::Role::Accumulator && !b.copy_out)) {
        drain += transfer(b.level, global, bytes);  // partial sums leave through the vector level
        latency += lat(b.level, global);
        global_bytes += bytes;
      }
    }
    const double chunk_compute = R > 0 ? compute / double(Pc * R) : 0;
    double busiest = chunk_compute, sum = chunk_compute;
    for (const auto& [e, c] : chunk) {
      out.engine_cycles[e] += c * double(Pc * R);
      busiest = std::max(busiest, c);
      sum += c;
    }
    // every chunk hands its operands over once (the operand paths' latency); double-buffered, a
    // core's next stage tile fills while the previous one drains, so the drain shows once per core
    const double steady = double(Pc) * double(R) * ((overlap ? busiest : sum) + handoff);
    const double core_time = double(Pc) * fill + steady + (overlap ? 1.0 : double(Pc)) * drain;
    const double shared = g.shared_bandwidth_bytes_per_cycle > 0 ? global_bytes * double(P) / g.shared_bandwidth_bytes_per_cycle : 0;
    out.compute_cycles += compute;
    out.latency_cycles += double(Pc) * latency;
    out.shared_global_cycles += shared;
    out.total += std::max(core_time, shared);
  }
  return out;
}

std::vector<double> config_features(const Problem& problem, const ConfigInfo& config) {
  std::vector<double> f;
  for (const auto& a : problem.default_spec.axes) {
    const auto* t = config.spec.find(a.axis);
    f.push_back(std::log2(double(t ? t->outer : a.outer)));
    f.push_back(std::log2(double(t ? t->inner : a.inner)));
  }
  for (const auto& l : problem.hierarchy.levels) {
    if (l.role == isa::Role::Global) continue;
    auto it = config.level_bytes.find(l.name);
    f.push_back(it == config.level_bytes.end() ? 0.0 : double(it->second) / double(l.capacity_bytes));
  }
  const AnalyticBreakdown b = analytic_breakdown(problem, config);
  f.push_back(std::log2(1 + b.total));
  f.push_back(std::log2(1 + b.compute_cycles));
  f.push_back(std::log2(1 + b.latency_cycles));
  f.push_back(std::log2(1 + b.shared_global_cycles));
  f.push_back(std::log2(1.0 + double(b.tiles)));
  f.push_back(double(b.cores_used) / std::max<uint32_t>(1, problem.hierarchy.cores));
  for (const auto* u : {"mte1", "mte2", "mte3", "vector"}) {
    // engines by name where the description has them; GPUs name theirs differently
    auto it = b.engine_cycles.find(u);
    f.push_back(std::log2(1 + (it == b.engine_cycles.end() ? 0.0 : it->second)));
  }
  return f;
}

namespace {

class AnalyticModel : public CostModel {
 public:
  std::string name() const override { return "analytic"; }
  double predict(const Problem& problem, const ConfigInfo& config) const override {
    return analytic_breakdown(problem, config).total;
  }
};

}  // namespace

std::unique_ptr<CostModel> make_analytic_model() { return std::make_unique<AnalyticModel>(); }

}  // namespace tessel::tune
