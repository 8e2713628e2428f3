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
//
// GPU descriptions (issue 19 item 2, compared with Nsight Compute's counters):
//   - the matrix rate is that of the problem's description (the machine the kernel runs on, which
//     `tessel tune --predict --run-on` may set apart from the one it was compiled for) and of the
//     kernel's tensor-core path (Problem::mma_path): WMMA and mma.sync at
//     gpu.warp_mma_f16_macs_per_cycle where the description gives it (Hopper), wgmma at the unit's;
//   - with gpu.l2_bandwidth_bytes_per_cycle, global loads and stores move at the L2's bandwidth
//     shared by the cores in use (at most the fastest path into the stage level), all cores'
//     global bytes over the L2's bandwidth and the DRAM bytes over the global level's bound the
//     whole kernel;
//   - stage bytes are those shared-memory instructions move: not wgmma's operand reads (matrix
//     descriptors), and every buffer of an unmatched group (the SIMT walk keeps them all in shared
//     memory), written and read once per copy;
//   - default_mapping_breakdown prices the register row kernel the emitter maps a row program to
//     when given no tile spec;
//   - with gpu.l2_partitions, the global bytes homed in another partition than the requesting SM's
//     cross the L2 fabric and are looked up twice (l2_fabric_bytes: what ncu's lts__t_bytes counts
//     beyond the SMs' requests); the time is unchanged: the L2 bandwidth is measured in the SMs'
//     request bytes (`check-hierarchy --measure`), fabric crossings included.
//
// Beside the time, a Ledger counts what the same moves and operations cost each pipe (busy cycles
// of the busiest core, for the per-pipe correlation with the simulator) and the whole run's energy:
// each move reads its source level, writes its destination and is priced per byte by its engine;
// each mmad (one per operand tile and reduction step) reads its L0A / L0B tiles, reads (after the
// first reduction step) and writes its L0C tile; each vector repeat reads and writes one repeat of
// the vector level; the scalar unit issues one instruction per modelled copy, mmad or vector
// instruction (loop and address arithmetic are not modelled: the simulator counts more).
#include <algorithm>
#include <cmath>
#include <optional>

#include "compiler/tile/npu_conv_plan.h"
#include "compiler/tune/cost_model.h"
#include "isa/npu_machine.h"
#include "isa/base/error.h"

namespace tessel::tune {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / std::max<int64_t>(1, b); }

struct Route {
  double bandwidth = 0;
  double latency = 0;
  std::string engine;
  std::string from, to;
};

Route step_of(const isa::TransferPath& p) {
  return {p.bandwidth_bytes_per_cycle, double(p.latency_cycles), p.engine, p.from, p.to};
}

// The path from -> to, or through one intermediate level (e.g. accumulator -> vector -> global).
std::vector<Route> route(const isa::Hierarchy& h, const std::string& from, const std::string& to) {
  if (const auto* p = h.find_path(from, to)) return {step_of(*p)};
  for (const auto& p1 : h.paths)
    if (p1.from == from)
      if (const auto* p2 = h.find_path(p1.to, to)) return {step_of(p1), step_of(*p2)};
  return {};
}

// Per-pipe busy cycles (busiest core) and energy (whole run) of the modelled moves and operations.
class Ledger {
 public:
  Ledger(const isa::Hierarchy& h, AnalyticBreakdown& out) : h_(h), out_(out) {}

  // `bytes` from -> to along its route: `per_core` times on the busiest core, `all` times in the run.
  void move(const std::string& from, const std::string& to, double bytes, double per_core, double all) {
    for (const Route& step : route(h_, from, to)) {
      const isa::Unit* engine = h_.find_unit(step.engine);
      if (step.bandwidth > 0) busy(engine, bytes * per_core / step.bandwidth);
      access(step.from, bytes * all, 0);
      access(step.to, 0, bytes * all);
      spend(engine, bytes * all * engine->energy_pj_per_byte.value_or(0));
    }
  }
  // Bytes the compute units read / write in a level (operands of mmads and vector instructions).
  void access(const std::string& level, double read, double written) {
    const isa::Level* l = h_.find_level(level);
    if (!l || (read == 0 && written == 0)) return;
    const double pj = read * l->read_energy_pj_per_byte.value_or(0) + written * l->write_energy_pj_per_byte.value_or(0);
    out_.level_energy_pj[l->name] += pj;
    out_.energy_pj += pj;
  }
  void matrix(double cycles_per_core, double macs, DType a, DType acc) {
    for (const isa::Unit* u : h_.units_of_kind(isa::UnitKind::Matrix)) {
      busy(u, cycles_per_core);
      for (const isa::MatrixShape& s : u->shapes)
        if (s.a == a && s.acc == acc) spend(u, macs * s.energy_pj_per_mac.value_or(0));
      break;
    }
    out_.macs += macs;
  }
  void vector(double repeats_per_core, double repeats) {
    for (const isa::Unit* u : h_.units_of_kind(isa::UnitKind::Vector)) {
      busy(u, repeats_per_core);
      spend(u, repeats * u->energy_pj_per_repeat.value_or(0));
      const double bytes = repeats * u->bytes_per_repeat;
      access(h_.level(isa::Role::Vector).name, bytes, bytes);
      break;
    }
  }
  // Each mmad's operands are handed over by flags: the operand pipe sets and waits one flag pair
  // per mmad, as does the cube (a set_flag / wait_flag holds its pipe set_flag_cycles), measured on
  // the simulator as about 2 set_flag_cycles per mmad on each of M and MTE1.
  void operand_handoffs(double mmads_per_core) {
    if (!h_.sync) return;
    const double cycles = 2.0 * h_.sync->set_flag_cycles * mmads_per_core;
    out_.pipe_busy_cycles["M"] += cycles;
    out_.pipe_busy_cycles["MTE1"] += cycles;
  }
  void instructions(double count) {
    for (const isa::Unit* u : h_.units_of_kind(isa::UnitKind::Scalar)) {
      spend(u, count * u->energy_pj_per_instruction.value_or(0));
      break;
    }
  }

 private:
  void busy(const isa::Unit* u, double cycles) {
    if (u && !u->pipe.empty()) out_.pipe_busy_cycles[u->pipe] += cycles;
  }
  void spend(const isa::Unit* u, double pj) {
    if (!u || pj == 0) return;
    out_.unit_energy_pj[u->name] += pj;
    out_.energy_pj += pj;
  }
  const isa::Hierarchy& h_;
  AnalyticBreakdown& out_;
};

uint32_t matrix_unit_count(const isa::Hierarchy& h) {
  for (const auto* u : h.units_of_kind(isa::UnitKind::Matrix)) return std::max<uint32_t>(1, u->count);
  return 1;
}

uint32_t matrix_startup(const isa::Hierarchy& h) {
  for (const auto* u : h.units_of_kind(isa::UnitKind::Matrix)) return u->startup_cycles;
  return 0;
}

// Per core: the weights of its output-channel tile (tn columns) GM -> L1 once, then per job (one
// image x one tile) the feature map GM -> L1 (MTE2), per channel slice and kernel-position group
// the weights L1 -> L0B and per pixel block load3d (img2col) -> L0A (MTE1), the cube's fragments,
// and the accumulator's way back (L0C -> UB -> GM). Jobs are double-buffered (two images
// ping-pong), so a job costs its busiest engine; the first job's loads and the last one's
// write-back are exposed. tn, the image groups per core, the kernel-position groups and the pixel
// blocks are the NPU convolution tile policy's (compiler/tile/npu_conv_plan.h), the same plan the
// emitter carries out; `spec` null: the policy's own choice.
AnalyticBreakdown conv_breakdown(const Problem& problem, const tile::ConvGeometry& cv, const tile::TileSpec* spec) {
  const isa::Hierarchy& h = problem.hierarchy;
  const isa::NpuMachine machine = isa::npu_machine(h);
  const tile::ConvPlanResult r = tile::plan_conv(cv, machine, spec);
  AnalyticBreakdown out;
  if (!r.plan) return out;
  Ledger ledger(h, out);
  const tile::ConvPlan& plan = *r.plan;
  const isa::CubeShape& shape = machine.cube_f16;
  const int64_t m0 = shape.m0, k0 = shape.k0, unit_cycles = shape.cycles;
  const std::string gm = h.level(isa::Role::Global).name, l1 = h.level(isa::Role::Stage).name;
  const std::string l0a = h.level(isa::Role::OperandA).name, l0b = h.level(isa::Role::OperandB).name;
  const std::string l0c = h.level(isa::Role::Accumulator).name;
  auto bw = [&](const std::string& from, const std::string& to) {
    const auto rt = route(h, from, to);
    return rt.empty() ? 1.0 : std::max(1.0, rt.front().bandwidth);
  };
  const int64_t P = cv.pixels(), Pp = plan.padded_pixels, RS = cv.kernel_positions(), C1 = cv.C / k0;
  const int64_t K = cv.K, C = cv.C, fm_bytes = plan.fm_bytes, tn = plan.tn;
  const int64_t in = dtype_bytes(shape.a), acc = dtype_bytes(shape.acc);
  const int64_t groups = static_cast<int64_t>(plan.kgroups.size()), blocks = static_cast<int64_t>(plan.blocks.size());
  const double units = matrix_unit_count(h);
  const double cube = double(Pp / m0) * (tn / shape.n0) * C1 * RS * unit_cycles / units + double(blocks * C1 * groups) * matrix_startup(h);
  std::map<std::string, double> job;  // engine -> cycles per job
  double exposed_latency = 0;
  auto move = [&](const std::string& from, const std::string& to, double bytes, std::map<std::string, double>& into, bool first) {
    for (const auto& step : route(h, from, to)) {
      if (step.bandwidth > 0) into[step.engine] += bytes / step.bandwidth;
      if (first) exposed_latency += step.latency;
    }
  };
  move(gm, l1, double(fm_bytes), job, true);                                // the feature map
  move(l1, l0a, double(Pp) * C * RS * in, job, true);                        // load3d, every pixel block
  move(l1, l0b, double(C) * RS * tn * in, job, true);                        // the weights' slices
  move(l0c, gm, double(Pp) * tn * acc, job, true);                            // accumulator -> UB -> GM
  std::map<std::string, double> once;
  move(gm, l1, double(C) * RS * tn * in, once, true);                        // the tile's weights, once per core
  double busiest = cube;
  for (const auto& [e, c] : job) busiest = std::max(busiest, c);
  const double jobs = double(plan.jobs_per_core);
  double first = 0;  // the first job's loads before its cube starts, the last one's write-back after it
  for (const auto& [e, c] : once) first += c;
  first += double(fm_bytes) / bw(gm, l1);
  for (const auto& step : route(h, l0c, gm)) first += step.bandwidth > 0 ? double(Pp) * tn * acc / step.bandwidth : 0;
  // Every step (pixel block x channel slice x kernel-position group) hands its L0A / L0B operands
  // to the cube through a flag: the load's latency shows once per step (as the GEMM model's
  // per-chunk handoff), so small pixel blocks and few kernel positions per step cost more.
  double handoff = 0;
  for (const auto& step : route(h, l1, l0a)) handoff += step.latency;
  const double steps = double(blocks * C1 * groups);
  const double core_time = first + exposed_latency + jobs * (busiest + steps * handoff);
  const isa::Level& g = h.level(isa::Role::Global);
  const double global_bytes = double(plan.cores) * (double(C) * RS * tn * in + jobs * fm_bytes) + double(cv.N) * P * K * acc;
  // The same moves for the per-pipe busy cycles and the energy: every job of the run (one image x
  // one output-channel tile), the weights once per core.
  const double all_jobs = double(cv.N) * double(plan.k_tiles);
  ledger.move(gm, l1, double(fm_bytes), jobs, all_jobs);
  ledger.move(l1, l0a, double(Pp) * C * RS * in, jobs, all_jobs);
  ledger.move(l1, l0b, double(C) * RS * tn * in, jobs, all_jobs);
  ledger.move(l0c, gm, double(Pp) * tn * acc, jobs, all_jobs);
  ledger.move(gm, l1, double(C) * RS * tn * in, 1, double(plan.cores));
  const double job_macs = double(Pp) * tn * C * RS;
  ledger.matrix(jobs * double(Pp / m0) * (tn / shape.n0) * C1 * RS * unit_cycles / units, all_jobs * job_macs, shape.a, shape.acc);
  // each step's mmad reads its pixel block's L0A operand and the group's weights, and accumulates
  // into its L0C block (read after the first step of the block)
  const double c_bytes = double(Pp) * tn * acc;
  ledger.access(l0a, all_jobs * double(Pp) * C * RS * in, 0);
  ledger.access(l0b, all_jobs * double(blocks) * C * RS * tn * in, 0);
  ledger.access(l0c, all_jobs * c_bytes * double(C1 * groups - 1), all_jobs * c_bytes * double(C1 * groups));
  ledger.instructions(all_jobs * (steps * 3 + 3) + double(plan.cores));
  ledger.operand_handoffs(jobs * double(blocks * C1 * RS));  // one mmad per pixel block, channel slice and kernel position
  out.compute_cycles = jobs * cube;
  for (const auto& [e, c] : job) out.engine_cycles[e] += jobs * c;
  for (const auto& [e, c] : once) out.engine_cycles[e] += c;
  out.latency_cycles = exposed_latency;
  out.shared_global_cycles = g.shared_bandwidth_bytes_per_cycle > 0 ? global_bytes / g.shared_bandwidth_bytes_per_cycle : 0;
  out.tiles = cv.N * plan.k_tiles;
  out.cores_used = plan.cores;
  out.total = std::max(core_time, out.shared_global_cycles);
  out.global_bytes = out.dram_bytes = global_bytes;
  out.stage_bytes = double(plan.cores) * (double(C) * RS * tn * in + jobs * fm_bytes) +
                    double(plan.cores) * jobs * (double(Pp) * C * RS * in + double(C) * RS * tn * in);
  return out;
}

// Every input read once and every output written once (the kernel's compulsory traffic).
// Bytes of the function's inputs and outputs, each counted once (0 when a size is unbound).
struct Compulsory {
  double inputs = 0, outputs = 0;
  double total() const { return inputs + outputs; }
};
Compulsory compulsory_bytes(const Problem& problem) {
  Compulsory c;
  if (!problem.function) return c;
  for (const auto& t : problem.function->tensors) {
    if (t.kind == ir::TensorKind::Local) continue;
    double n = 1;
    for (const auto& d : t.shape) {
      try {
        n *= double(d.evaluate({}, problem.sizes));
      } catch (const std::exception&) {
        return {};  // a size the problem does not bind: no estimate
      }
    }
    (t.kind == ir::TensorKind::Output ? c.outputs : c.inputs) += n * double(dtype_bytes(t.dtype));
  }
  return c;
}

// The DRAM traffic behind the L2 while the kernel runs (see AnalyticBreakdown::dram_bytes).
double dram_estimate(const Problem& problem, double global_bytes) {
  const isa::Hierarchy& h = problem.hierarchy;
  const Compulsory c = compulsory_bytes(problem);
  const double compulsory = c.total();
  if (!h.gpu || h.gpu->l2_cache_bytes == 0 || compulsory <= 0) return global_bytes;
  const double l2 = double(h.gpu->l2_cache_bytes);
  const double repeated = std::max(0.0, global_bytes - compulsory);
  const double miss = compulsory <= l2 ? 0.0 : 1.0 - l2 / compulsory;
  double dram = std::min(global_bytes, compulsory) + repeated * miss;
  // Outputs that fit the L2 with the inputs stay there, dirty, until after the kernel: their
  // write-back is not the kernel's traffic (ncu's dram__bytes_write of a 1024^3 GEMM or a softmax
  // whose data fits the L2 is ~0).
  if (compulsory <= l2) dram = std::max(0.0, dram - c.outputs);
  return dram;
}

// The global bytes looked up a second time in a partitioned L2 (AnalyticBreakdown::l2_fabric_bytes):
// an SM's access goes to the L2 slice of its own partition, and the (partitions - 1) / partitions of
// the accesses whose addresses are homed elsewhere cross the fabric to their home slice. Operands
// read by many blocks are no exception: the SM's partition keeps few of the far lines it served
// (the WMMA and mma.sync GEMMs of the recorded H100 sweeps, operands read by 8 to 64 blocks each,
// count 1.3-1.9x their requests in lts__t_bytes, as streaming kernels count 1.6x; the wgmma GEMMs'
// 0.9-1.1x is open, compiler/tune/README.md).
double l2_fabric_bytes(const isa::Hierarchy& h, double global_bytes) {
  if (!h.gpu || h.gpu->l2_partitions < 2) return 0;
  const double partitions = double(h.gpu->l2_partitions);
  return global_bytes * (partitions - 1) / partitions;
}

// Cycles one matched operand tile's fragments occupy the core's matrix units (all of them), on the
// machine the problem is priced on: the description's shape of the matched types (not the
// compile target's: `tessel tune --run-on` prices a kernel compiled for one description on
// another), or, for a warp-level path (WMMA, mma.sync) on a GPU whose warp-level MMA issues below
// the unit's peak (gpu.warp_mma_f16_macs_per_cycle: Hopper, where only wgmma reaches it), the
// fragments' multiply-accumulates at that rate.
double matched_fragment_cycles(const Problem& problem, const GroupTiling& t, int64_t frags) {
  const isa::Hierarchy& h = problem.hierarchy;
  const bool warp_level = problem.mma_path == MmaPath::Wmma || problem.mma_path == MmaPath::MmaSync;
  const bool f16 = t.in_type == DType::F16 || t.in_type == DType::BF16;
  if (warp_level && f16 && h.gpu && h.gpu->warp_mma_f16_macs_per_cycle > 0)
    return double(frags) * t.unit_m * t.unit_n * t.unit_k / h.gpu->warp_mma_f16_macs_per_cycle;
  uint32_t cycles = t.unit_cycles;
  for (const auto* u : h.units_of_kind(isa::UnitKind::Matrix))
    for (const auto& shape : u->shapes)
      if (shape.m == t.unit_m && shape.n == t.unit_n && shape.k == t.unit_k && shape.a == t.in_type) {
        cycles = std::max<uint32_t>(1, shape.cycles);
        return double(frags) * cycles / matrix_unit_count(h);
      }
  return double(frags) * cycles / matrix_unit_count(h);
}

// On a GPU whose description gives the L2's bandwidth, the global level's traffic is served by the
// L2: every load and store of a stage tile passes it, and only the DRAM traffic (dram_estimate)
// reaches the memory behind it. The description's global paths carry the DRAM's bandwidth split
// over every SM (e.g. 1830 B/cycle / 132 SMs on an H100): right for a kernel streaming compulsory
// data on all SMs, which the chip-wide DRAM bound below covers, but too slow for the repeated reads
// of a GEMM's operands that hit in the L2. So a step to or from the global level moves at the L2's
// bandwidth shared by the cores in use, at most what the core's stage level takes in (the fastest
// path into it); nullopt where the description has no L2 figure (NPU, older GPU descriptions).
std::optional<double> l2_share_per_core(const isa::Hierarchy& h, int64_t cores_used) {
  if (!h.gpu || h.gpu->l2_bandwidth_bytes_per_cycle <= 0 || cores_used <= 0) return std::nullopt;
  const std::string stage = h.level(isa::Role::Stage).name, global = h.level(isa::Role::Global).name;
  double stage_in = 0;
  for (const auto& p : h.paths)
    if (p.to == stage && p.from != global) stage_in = std::max(stage_in, p.bandwidth_bytes_per_cycle);
  const double share = h.gpu->l2_bandwidth_bytes_per_cycle / double(cores_used);
  return stage_in > 0 ? std::min(share, stage_in) : share;
}

// A group's tile counts: P stage tiles over the parallel axes, R reduction chunks, I operand tiles
// per stage tile; each axis's outer and inner tile and its operand tiles per stage tile (steps).
struct GroupCounts {
  int64_t P = 1, R = 1, I = 1;
  std::map<std::string, int64_t> outer, inner, steps;
};
GroupCounts group_counts(const GroupTiling& t) {
  GroupCounts n;
  for (const auto& [axis, e] : t.extent) {
    const int64_t o = std::min(e, t.outer.count(axis) ? t.outer.at(axis) : e);
    const int64_t i = std::min(o, t.inner.count(axis) ? t.inner.at(axis) : o);
    n.outer[axis] = o;
    n.inner[axis] = i;
    const bool red = t.reduction.count(axis) && t.reduction.at(axis);
    (red ? n.R : n.P) *= ceil_div(e, o);
    n.I *= ceil_div(o, i);
    n.steps[axis] = ceil_div(o, i);
  }
  return n;
}

// The compute cycles of one core's share (Pc stage tiles) of a group: matrix fragments where the
// group is matched, else the vector unit's passes; booked in the ledger, instructions counted.
// (`n` by value: an axis the match names that the tiling lacks reads as 0.)
double group_compute(const Problem& problem, const GroupTiling& t, GroupCounts n, int64_t Pc, Ledger& ledger,
                     double& instructions) {
  const isa::Hierarchy& h = problem.hierarchy;
  const int64_t P = n.P, R = n.R, I = n.I;
  double compute = 0;
  if (t.matched) {
    const int64_t frags = ceil_div(n.inner[t.m], t.unit_m) * ceil_div(n.inner[t.n], t.unit_n) * ceil_div(n.inner[t.k], t.unit_k);
    const double fragment_cycles = matched_fragment_cycles(problem, t, frags);
    compute = double(Pc) * R * I * fragment_cycles + double(Pc) * R * I * matrix_startup(h);
    const double mmads = double(P) * R * I, in = dtype_bytes(t.in_type), acc = dtype_bytes(t.acc_type);
    const double tile_a = double(n.inner[t.m]) * n.inner[t.k] * in, tile_b = double(n.inner[t.k]) * n.inner[t.n] * in;
    const double tile_c = double(n.inner[t.m]) * n.inner[t.n] * acc;
    const double first_steps = double(P) * n.steps[t.m] * n.steps[t.n];  // mmads that start an accumulation
    ledger.matrix(double(Pc) * R * I * fragment_cycles,
                  mmads * double(frags) * t.unit_m * t.unit_n * t.unit_k, t.in_type, t.acc_type);
    ledger.access(h.level(isa::Role::OperandA).name, mmads * tile_a, 0);
    ledger.access(h.level(isa::Role::OperandB).name, mmads * tile_b, 0);
    ledger.access(h.level(isa::Role::Accumulator).name, (mmads - first_steps) * tile_c, mmads * tile_c);
    instructions += mmads;
    ledger.operand_handoffs(double(Pc) * R * I);
  } else {
    double elems = 1;
    for (const auto& [axis, o] : n.outer) elems *= o;
    uint32_t bpr = 0, startup = 0, max_repeat = 1;
    for (const auto* u : h.units_of_kind(isa::UnitKind::Vector))
      bpr = u->bytes_per_repeat, startup = u->startup_cycles, max_repeat = std::max<uint32_t>(1, u->max_repeat);
    if (bpr) {
      compute = double(Pc) * R * (elems * 4 / bpr + startup);
      ledger.vector(double(Pc) * R * elems * 4 / bpr, double(P) * R * elems * 4 / bpr);
      instructions += double(P) * R * std::ceil(elems * 4 / bpr / max_repeat);
    }
  }
  return compute;
}

// A group's data movement per reduction chunk (steady state: cycles per engine) and per stage tile
// (fill and drain), the latencies it waits on, its global and stage-level bytes, and whether its
// copies overlap the compute (every operand buffer double-buffered).
struct GroupTraffic {
  std::map<std::string, double> chunk;  // engine -> cycles of one reduction chunk
  double fill = 0, drain = 0, latency = 0, global_bytes = 0, handoff = 0, stage_bytes = 0;
  bool overlap = true;
};
GroupTraffic group_traffic(const Problem& problem, const ConfigInfo& config, size_t gi, const GroupTiling& t, const GroupCounts& n,
                           int64_t Pc, const std::optional<double>& l2_share, Ledger& ledger, double& instructions) {
  const isa::Hierarchy& h = problem.hierarchy;
  const std::string global = h.level(isa::Role::Global).name;
  const int64_t P = n.P, R = n.R, I = n.I;
  GroupTraffic tr;
  auto steps_of = [&](const std::string& from, const std::string& to) {
    std::vector<Route> rt = route(h, from, to);
    if (l2_share)
      for (auto& step : rt)
        if (step.from == global || step.to == global) step.bandwidth = *l2_share;
    return rt;
  };
  auto transfer = [&](const std::string& from, const std::string& to, double bytes) {
    double t = 0;
    for (const auto& step : steps_of(from, to)) t += (step.bandwidth > 0 ? bytes / step.bandwidth : 0) + step.latency;
    return t;
  };
  auto lat = [&](const std::string& from, const std::string& to) {
    double l = 0;
    for (const auto& step : route(h, from, to)) l += step.latency;
    return l;
  };
  auto per_chunk = [&](const std::string& from, const std::string& to, double count, double bytes) {
    for (const auto& step : steps_of(from, to))
      if (step.bandwidth > 0) tr.chunk[step.engine] += count * bytes / step.bandwidth;
  };
  // wgmma reads its operands from the stage level through matrix descriptors: the tensor cores
  // fetch them, no load instruction moves them (ncu's smsp__sass_data_bytes_mem_shared, the
  // bytes of shared-memory instructions, does not see them)
  const bool operands_by_instructions = problem.mma_path != MmaPath::Wgmma;
  const std::string stage = h.level(isa::Role::Stage).name;
  // The GPU's SIMT walk (compiler/emit_cuda/emit_simt.h) keeps every buffer of a group in shared
  // memory, whatever level promotion placed it at: each copy writes it there and the compute
  // reads it back (an output buffer the other way round), all by shared-memory instructions.
  const bool simt_walk = h.gpu && !t.matched;
  for (const auto& b : config.buffers) {
    if (b.group != int(gi)) continue;
    const double bytes = double(b.bytes);
    if (simt_walk && b.level != stage)
      tr.stage_bytes += 2.0 * bytes * (b.tile_level == poly::TileLevel::P ? 1.0 : double(R) * (b.tile_level == poly::TileLevel::I ? double(I) : 1.0));
    if (b.copy_in) {
      const std::string src = b.tile_level == poly::TileLevel::I ? stage : global;
      const double uses = b.tile_level == poly::TileLevel::P ? 1.0 : double(R) * (b.tile_level == poly::TileLevel::I ? double(I) : 1.0);
      ledger.move(src, b.level, bytes, double(Pc) * uses, double(P) * uses);
      instructions += double(P) * uses;
      if (b.tile_level == poly::TileLevel::P) {
        tr.fill += transfer(src, b.level, bytes);  // once per stage tile, before its first chunk
      } else {
        per_chunk(src, b.level, b.tile_level == poly::TileLevel::I ? double(I) : 1.0, bytes);
        if (b.tile_level == poly::TileLevel::I) tr.handoff += lat(src, b.level);
        tr.fill += transfer(src, b.level, b.tile_level == poly::TileLevel::I ? bytes : bytes);  // the first chunk's load
        tr.latency += lat(src, b.level);
      }
      if (!b.double_buffered && b.role != isa::Role::Accumulator) tr.overlap = false;
      if (src == global) tr.global_bytes += bytes * (b.tile_level == poly::TileLevel::P ? 1.0 : double(R));
      // per stage tile: into the stage level once per copy, out of it I times per chunk
      if (b.level == stage) tr.stage_bytes += bytes * (b.tile_level == poly::TileLevel::P ? 1.0 : double(R));
      if (src == stage && (operands_by_instructions || !t.matched)) tr.stage_bytes += bytes * double(I) * double(R);
    }
    if (b.copy_out || (b.role == isa::Role::Accumulator && !b.copy_out)) {
      tr.drain += transfer(b.level, global, bytes);  // partial sums leave through the vector level
      ledger.move(b.level, global, bytes, double(Pc), double(P));
      instructions += double(P) * double(route(h, b.level, global).size());
      tr.latency += lat(b.level, global);
      tr.global_bytes += bytes;
    }
  }
  return tr;
}

}  // namespace

AnalyticBreakdown analytic_breakdown(const Problem& problem, const ConfigInfo& config) {
  if (problem.npu_conv) return conv_breakdown(problem, *problem.npu_conv, problem.fixed_mapping.empty() ? &config.spec : nullptr);
  const isa::Hierarchy& h = problem.hierarchy;
  const isa::Level& g = h.level(isa::Role::Global);
  const int64_t cores = std::max<uint32_t>(1, h.cores);
  AnalyticBreakdown out;
  Ledger ledger(h, out);
  double instructions = 0;  // issued copies, mmads and vector instructions (the scalar unit's work)
  for (size_t gi = 0; gi < config.groups.size(); ++gi) {
    const GroupTiling& t = config.groups[gi];
    const GroupCounts n = group_counts(t);
    const int64_t P = n.P, R = n.R;
    const int64_t used = std::min(cores, P);
    const int64_t Pc = ceil_div(P, cores);
    out.tiles += P;
    out.cores_used = std::max(out.cores_used, used);
    const double compute = group_compute(problem, t, n, Pc, ledger, instructions);
    const std::optional<double> l2_share = l2_share_per_core(h, used);
    const GroupTraffic tr = group_traffic(problem, config, gi, t, n, Pc, l2_share, ledger, instructions);
    const double chunk_compute = R > 0 ? compute / double(Pc * R) : 0;
    double busiest = chunk_compute, sum = chunk_compute;
    for (const auto& [e, c] : tr.chunk) {
      out.engine_cycles[e] += c * double(Pc * R);
      busiest = std::max(busiest, c);
      sum += c;
    }
    // every chunk hands its operands over once (the operand paths' latency); double-buffered, a
    // core's next stage tile fills while the previous one drains, so the drain shows once per core
    const double steady = double(Pc) * double(R) * ((tr.overlap ? busiest : sum) + tr.handoff);
    const double core_time = double(Pc) * tr.fill + steady + (tr.overlap ? 1.0 : double(Pc)) * tr.drain;
    // all cores' global traffic over the chip's shared bandwidth: the L2's where the description
    // gives it (the DRAM's part is bounded after the groups), otherwise the global level's
    const double chip_bandwidth = l2_share ? h.gpu->l2_bandwidth_bytes_per_cycle : g.shared_bandwidth_bytes_per_cycle;
    const double shared = chip_bandwidth > 0 ? tr.global_bytes * double(P) / chip_bandwidth : 0;
    out.compute_cycles += compute;
    out.latency_cycles += double(Pc) * tr.latency;
    out.shared_global_cycles += shared;
    out.total += std::max(core_time, shared);
    out.global_bytes += tr.global_bytes * double(P);
    out.stage_bytes += tr.stage_bytes * double(P);
  }
  ledger.instructions(instructions);
  out.dram_bytes = dram_estimate(problem, out.global_bytes);
  out.l2_fabric_bytes = l2_fabric_bytes(h, out.global_bytes);
  // with the L2 serving the global traffic, the DRAM's own share of it is a chip-wide bound too
  if (l2_share_per_core(h, std::max<int64_t>(1, out.cores_used)) && g.shared_bandwidth_bytes_per_cycle > 0) {
    const double dram_cycles = out.dram_bytes / g.shared_bandwidth_bytes_per_cycle;
    out.shared_global_cycles = std::max(out.shared_global_cycles, dram_cycles);
    out.total = std::max(out.total, dram_cycles);
  }
  return out;
}

// The register row kernel (compiler/emit_cuda/row_kernel.h): each input element read once and
// each output element written once, the rows spread over min(SMs, row blocks) cores. Per core its
// share of those bytes at the global path's bandwidth (the L2's share where the description gives
// it), behind one global read and one write latency, overlapped with the vector units' work (one
// 4-byte pass over the rows per statement, as the tiled model counts it); the chip-wide L2 and DRAM
// bounds as for tiled kernels. Its rows live in registers: no stage-level traffic counted (the
// cross-warp reductions' few bytes through shared memory are left out).
std::optional<AnalyticBreakdown> default_mapping_breakdown(const Problem& problem) {
  if (!problem.gpu_row_kernel) return std::nullopt;
  const emit_cuda::RowKernelPlan& plan = *problem.gpu_row_kernel;
  const isa::Hierarchy& h = problem.hierarchy;
  const isa::Level& g = h.level(isa::Role::Global);
  AnalyticBreakdown out;
  const Compulsory c = compulsory_bytes(problem);
  out.global_bytes = c.total();
  out.dram_bytes = dram_estimate(problem, out.global_bytes);
  out.l2_fabric_bytes = l2_fabric_bytes(h, out.global_bytes);
  const int64_t blocks = ceil_div(plan.rows, std::max(1, plan.rows_per_block));
  out.tiles = plan.rows;
  out.cores_used = std::max<int64_t>(1, std::min<int64_t>(std::max<uint32_t>(1, h.cores), blocks));
  const std::string vector = h.level(isa::Role::Vector).name;
  double bandwidth = 0;
  if (const auto share = l2_share_per_core(h, out.cores_used)) bandwidth = *share;
  else if (const auto* p = h.find_path(g.name, vector)) bandwidth = p->bandwidth_bytes_per_cycle;
  const double per_core_bytes = out.global_bytes / double(out.cores_used);
  const double memory = bandwidth > 0 ? per_core_bytes / bandwidth : 0;
  double statements = problem.function ? double(problem.function->statements.size()) : 1.0;
  for (const auto* u : h.units_of_kind(isa::UnitKind::Vector))
    if (u->bytes_per_repeat > 0)
      out.compute_cycles = double(plan.rows) * double(plan.cols) * 4.0 * statements / u->bytes_per_repeat / double(out.cores_used);
  out.latency_cycles = double(g.read_latency_cycles) + double(g.write_latency_cycles);
  if (const auto* p = h.find_path(g.name, vector)) out.engine_cycles[p->engine] = memory;
  const double l2 = h.gpu && h.gpu->l2_bandwidth_bytes_per_cycle > 0 ? out.global_bytes / h.gpu->l2_bandwidth_bytes_per_cycle : 0;
  const double dram = g.shared_bandwidth_bytes_per_cycle > 0 ? out.dram_bytes / g.shared_bandwidth_bytes_per_cycle : 0;
  out.shared_global_cycles = std::max(l2, dram);
  out.total = std::max(std::max(memory, out.compute_cycles) + out.latency_cycles, out.shared_global_cycles);
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
