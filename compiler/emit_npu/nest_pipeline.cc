// The general NPU vector lowering's row pipeline (nest.h states the contract; nest_lowering.h):
// try_fused chooses it when the statements after a prologue over the lanes share a row partition
// and read earlier results only where they are kept in UB (fits_pipeline), size_pipeline picks the
// rows per block R and the value sets S by emitting one block into a throwaway program
// (fits_rows), and fused_core emits one core's share: the prologue, the row-invariant reads
// hoisted, then the blocks, each block's loads issued S - 1 blocks ahead of its compute.
#include "compiler/emit_npu/nest_lowering.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>

#include "compiler/emit_npu/operands.h"
#include "isa/base/error.h"

namespace tessel::emit_npu::nest {

Nest::Role Nest::role_of(size_t i) const {
  if (static_cast<int>(i) < fz_.prologue) return Role::Prologue;
  return plans_[i].dims.size() == 2 ? Role::Row : Role::PerRow;
}

Nest::Layout Nest::layout_of(size_t i) const {
  switch (role_of(i)) {
    case Role::Prologue: return Layout::PerLane;
    case Role::Row: return plans_[i].is_reduction() ? Layout::PerRow : Layout::Row;
    default: return Layout::PerRow;
  }
}

// The producer's output access in its layout's terms.
Nest::Resident Nest::resident_of(size_t i, const Value& v) const {
  const Plan& p = plans_[i];
  Resident r{v, layout_of(i), p.out.offset, 0, 0};
  if (r.layout == Layout::Row) r.su = p.out.stride[p.u], r.sv = p.out.stride[p.v];
  else if (role_of(i) == Role::Row) r.su = p.out.stride[p.u];
  else r.su = p.out.stride[p.v];  // along the rows (PerRow) or the lanes (PerLane)
  return r;
}

// How plan i reads access `a` of a result r: 0 not at all (another element), 1 as it is, 2
// broadcast across the lanes (a value per row), 3 expanded down the rows (a value per lane).
int Nest::reads_resident(size_t i, const Access& a, const Resident& r) const {
  const Plan& p = plans_[i];
  if (a.offset != r.offset) return 0;
  switch (role_of(i)) {
    case Role::Row: {
      const int64_t su = a.stride[p.u], sv = a.stride[p.v];
      if (r.layout == Layout::Row) return su == r.su && sv == r.sv ? 1 : 0;
      if (r.layout == Layout::PerRow) return su == r.su && sv == 0 ? 2 : 0;
      return su == 0 && sv == r.su ? 3 : 0;
    }
    case Role::PerRow: return r.layout == Layout::PerRow && a.stride[p.v] == r.su ? 1 : 0;
    default: return r.layout == Layout::PerLane && a.stride[p.v] == r.su ? 1 : 0;
  }
}

bool Nest::stored(const std::string& tensor) const {
  for (const auto& t : k_.tensors)
    if (t.name == tensor) return !t.temporary && t.kind != ir::TensorKind::Input;
  return false;
}

// Chooses the pipeline when it applies (every statement fits it and a block of rows fits UB):
// the statements after a prologue of statements over the lanes only share a row partition.
bool Nest::try_fused() {
  if (!pads_.empty() || plans_.empty()) return false;
  const std::vector<Plan> base = plans_;
  for (size_t l = 0; l < base.size(); ++l) {
    plans_ = base;
    if (fuse(static_cast<int>(l))) return true;
    if (base[l].dims.size() != 1 || base[l].is_reduction()) break;  // no longer prologue
  }
  plans_ = base;
  fz_ = Fused{};
  cores_ = 1;
  range_ = 1;
  return false;
}

bool Nest::fuse(int prologue) {
  fz_ = Fused{};
  fz_.prologue = prologue;
  int64_t extent = -1;
  const std::vector<std::string> names = partition_indices(0, extent, prologue);
  if (names.empty() || extent <= 1) return false;
  for (int i = 0; i < prologue; ++i) coalesce(plans_[i], {});
  int64_t rows = -1;
  for (size_t i = prologue; i < plans_.size(); ++i) {
    Plan& p = plans_[i];
    coalesce(p, {names[i - prologue]});
    for (size_t d = 0; d < p.dims.size(); ++d)
      if (p.dims[d].name == names[i - prologue]) p.partition = static_cast<int>(d);
    if (p.partition < 0) return false;
    // the partition takes the output dimensions walked with it, but the lanes
    while (static_cast<size_t>(p.partition) + 2 < p.dims.size() && walk_as_one(p, p.partition)) merge(p, p.partition);
    if (rows >= 0 && p.dims[p.partition].extent != rows) return false;
    rows = p.dims[p.partition].extent;
  }
  partition_extent_ = rows;
  // Equal shares where a divisor of the rows keeps at least half the cores: every core then runs
  // the same code (an uneven last share needs a loop over cores, whose carried syncs the sync pass
  // must keep although each core runs it once).
  int64_t want = std::min<int64_t>(m_.cores, rows);
  for (int64_t c = want; 2 * c >= want; --c)
    if (rows % c == 0) {
      want = c;
      break;
    }
  range_ = (rows + want - 1) / want;
  cores_ = static_cast<int>((rows + range_ - 1) / range_);
  if (cores_ == 1) range_ = rows;
  for (auto& p : plans_)
    if (!tile(p).empty()) return false;
  if (!fits_pipeline()) return false;
  return size_pipeline();
}

// Every statement has a role and reads earlier results only where they are in UB.
bool Nest::fits_pipeline() {
  fz_.lanes = -1;
  int64_t unit = 1;
  for (size_t i = 0; i < plans_.size(); ++i) {
    const Plan& p = plans_[i];
    // (a mirrored tile moves its whole window as GM lays it out: the pipeline's rows cannot hold it)
    if (!p.values.empty() || !p.splits.empty() || p.mirror || !p.box.empty()) return false;
    const Role r = role_of(i);
    if (r == Role::Prologue && (p.dims.size() != 1 || p.is_reduction() || p.v != 0)) return false;
    if (r == Role::PerRow && (p.v != p.partition || p.is_reduction())) return false;
    if (r == Role::Row) {
      if (p.u != p.partition || p.v < 0 || p.v == p.u || p.dims[p.u].reduction) return false;
      if (p.is_reduction() && (!p.dims[p.v].reduction || !p.s->init)) return false;
      if (std::any_of(p.reads.begin(), p.reads.end(), [&](const Access& a) { return transposable(p, a); })) return false;
      if (fz_.lanes >= 0 && fz_.lanes != p.dims[p.v].extent) return false;
      fz_.lanes = p.dims[p.v].extent;
    }
    if (r != Role::PerRow) unit = std::max(unit, p.unit);
  }
  if (fz_.lanes < 0) return false;
  for (int i = 0; i < fz_.prologue; ++i)
    if (plans_[i].dims[0].extent != fz_.lanes) return false;
  std::map<std::string, Resident> written;
  for (size_t i = 0; i < plans_.size(); ++i) {
    const Plan& p = plans_[i];
    for (const Access& a : p.reads) {
      if (!k_.function->find_tensor(a.tensor)) return false;
      const bool later = std::any_of(plans_.begin() + i, plans_.end(), [&](const Plan& q) { return q.s->output == a.tensor; });
      if (later) return false;
      if (auto w = written.find(a.tensor); w != written.end() && reads_resident(i, a, w->second) == 0) return false;
    }
    if (written.count(p.s->output)) return false;
    written[p.s->output] = resident_of(i, Value{});
  }
  fz_.pitch = (fz_.lanes + unit - 1) / unit * unit;
  for (size_t i = 0; i < plans_.size(); ++i) {
    Plan& p = plans_[i];
    if (role_of(i) == Role::PerRow) continue;
    p.pitch = fz_.pitch;
    p.cols = fz_.lanes;
    p.rows = 1;
  }
  return true;
}

// Blocks of R rows: the prologue's values, the hoisted reads and two sets of a block's values fit
// UB (measured by emitting them once into a throwaway program; they grow with R), R within one
// instruction's repeats and, where the rows allow, at least kMinBlocks blocks per core so that
// the loads of one block overlap the vector work of the one before.
// Sets: two where a block's vector work covers its loads' latency and transfer (the loads of
// block b + 1 run during the compute of b), else three (two blocks ahead), both from the machine
// model (vector: one cycle per repeat; GM -> UB: latency + bytes / bandwidth).
bool Nest::size_pipeline() {
  const int64_t most = std::min({range_, max_repeat_, max_repeat_ * m_.vector_lanes(DType::F32) / fz_.pitch,
                                 std::max<int64_t>(1, (range_ + kMinBlocks - 1) / kMinBlocks)});
  int64_t chosen = 0;
  for (int sets = 2; sets <= kMaxSets; ++sets) {
    fz_.sets = sets;
    if (most < 1 || !fits_rows(1)) break;
    int64_t lo = 1, hi = most;
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      if (fits_rows(mid)) lo = mid;
      else hi = mid - 1;
    }
    fits_rows(lo);
    chosen = lo;
    if ((sets - 1) * fz_.vector_cycles >= fz_.load_cycles || lo == range_) break;
  }
  if (chosen == 0) return false;
  if (fz_.rows != chosen || !fits_rows(chosen)) {  // three sets do not fit: two
    fz_.sets = 2;
    if (!fits_rows(chosen)) return false;
  }
  fz_.on = true;
  return true;
}

bool Nest::fits_rows(int64_t r) {
  npu::Program scratch;
  npu::Program* saved = p_;
  p_ = &scratch;
  sizing_ = true;
  fz_.rows = r;
  set_plan_rows(r);
  region_base_ = next_region_ = 0;
  resident_.clear();
  hoisted_.clear();
  fused_prologue();
  fused_hoist();
  fz_.persist = next_region_;
  fz_.block_bytes = fz_.prefetch_bytes = 0;
  const size_t first = scratch.code.size();
  prefetch(Pos{}, r, 0);
  fz_.prefetch_bytes = next_region_ - fz_.persist;
  fused_block(Pos{}, r, 0);
  fz_.block_bytes = next_region_ - fz_.persist;
  sizing_ = false;
  p_ = saved;
  const isa::NpuPathSpec& gm = m_.path(Buffer::GM, Buffer::UB);
  int64_t bytes = 0;
  fz_.vector_cycles = 0;
  for (size_t pc = first; pc < scratch.code.size(); ++pc) {
    const npu::Instruction& in = scratch.code[pc];
    const npu::OpcodeInfo& info = npu::opcode_info(in.opcode);
    if (in.opcode == Opcode::DmaIn) bytes += in.operands[2].imm * in.operands[3].imm;
    else if (info.repeat_operand >= 0 && info.pipe_rule == npu::PipeRule::V) fz_.vector_cycles += in.operands[info.repeat_operand].imm;
  }
  fz_.load_cycles = gm.latency_cycles + (bytes + gm.bandwidth_bytes_per_cycle - 1) / gm.bandwidth_bytes_per_cycle;
  return fz_.persist + fz_.sets * fz_.block_bytes <= m_.capacity(Buffer::UB);
}

void Nest::set_plan_rows(int64_t r) {
  for (size_t i = fz_.prologue; i < plans_.size(); ++i) {
    Plan& p = plans_[i];
    if (role_of(i) == Role::Row) p.rows = r;
    else p.pitch = (r + p.unit - 1) / p.unit * p.unit, p.cols = r, p.rows = 1;
  }
}

std::string Nest::fused_note() const {
  std::string hoisted;
  for (const auto& [key, v] : hoisted_) hoisted += (hoisted.empty() ? "" : ", ") + key.substr(0, key.find('@'));
  return fmt::format("row pipeline: statements {}..{} per block of {} rows x {} lanes (pitch {}), loaded once and kept in "
                     "UB, {} sets of blocks (loads {} ahead){}{}",
                     plans_[fz_.prologue].s->name, plans_.back().s->name, fz_.rows, fz_.lanes, fz_.pitch, fz_.sets, fz_.sets - 1,
                     fz_.prologue > 0 ? fmt::format("; {}..{} once per core", plans_[0].s->name, plans_[fz_.prologue - 1].s->name)
                                      : std::string(),
                     hoisted.empty() ? std::string() : "; row-invariant reads once per core: " + hoisted);
}

// One core's rows: the prologue, the hoisted reads, then the blocks.
void Nest::fused_core(int64_t range) {
  region_base_ = next_region_ = 0;
  set_ = acc_set_ = 0;
  resident_.clear();
  hoisted_.clear();
  fused_prologue();
  fused_hoist();
  TESSEL_CHECK(next_region_ == fz_.persist, "nest: the row pipeline's per-core values differ from its sizing");
  // Block b (set b % S) is loaded while blocks b - S + 1 .. b - 1 are computed: in program
  // order the loads of b + S - 1 come before the compute of b. Groups of S blocks in a loop while
  // its loads stay within the full blocks, the rest straight.
  const int sets = fz_.sets;
  const int64_t r = fz_.rows, full = range / r, tail = range % r, blocks = full + (tail > 0 ? 1 : 0);
  Pos base;
  if (cores_ > 1) base.regs.push_back({kBase, 1});
  auto block_at = [&](int64_t c, bool looped) {
    Pos q = base;
    q.c = c;
    if (looped) q.regs.push_back({kLevel0, sets * r});
    return q;
  };
  auto rows_of = [&](int64_t b) { return b < full ? r : tail; };
  int64_t groups = full >= 2 * sets - 1 ? (full - sets + 1) / sets : 0;
  if (groups < 2) groups = 0;
  for (int64_t b = 0; b < std::min<int64_t>(sets - 1, blocks); ++b) prefetch(block_at(b * r, false), rows_of(b), static_cast<int>(b));
  if (groups > 0) {
    op(Opcode::Loop, {reg(kLevel0), imm(0), imm(groups), imm(1)});
    for (int k = 0; k < sets; ++k) {
      prefetch(block_at((k + sets - 1) * r, true), r, (k + sets - 1) % sets);
      fused_block(block_at(k * r, true), r, k);
    }
    op(Opcode::EndLoop, {});
  }
  for (int64_t b = sets * groups; b < blocks; ++b) {
    if (b + sets - 1 < blocks) prefetch(block_at((b + sets - 1) * r, false), rows_of(b + sets - 1), static_cast<int>((b + sets - 1) % sets));
    fused_block(block_at(b * r, false), rows_of(b), static_cast<int>(b % sets));
  }
  set_ = acc_set_ = 0;
}

// Points pos_ / size_ at plan p's share: `rows` rows from `at` (the prologue: its lanes).
void Nest::enter(const Plan& p, const Pos& origin, int64_t rows) {
  plan_ = &p;
  pos_.assign(p.dims.size(), Pos{});
  size_.assign(p.dims.size(), 1);
  if (p.partition >= 0) pos_[p.partition] = origin, size_[p.partition] = rows;
  if (p.v >= 0 && p.v != p.partition) size_[p.v] = fz_.lanes;
  memo_prefix_.clear();
  for (const Dim& d : p.dims) memo_prefix_ += fmt::format("{}@{}:{},", d.name, d.lo, d.extent);
  memo_prefix_ += "|";
}

void Nest::fused_prologue() {
  use_chunk(fz_.pitch);
  for (int i = 0; i < fz_.prologue; ++i) {
    const Plan& p = plans_[i];
    enter(p, Pos{}, 1);
    loaded_.clear();
    memo_.clear();
    for (const Access& a : p.reads) loaded_.push_back(fused_read(i, a, 1));
    const Value x = result(p, fz_.pitch);
    resident_[p.s->output] = resident_of(i, x);
    if (!stored(p.s->output)) continue;
    if (cores_ > 1) {  // the same values on every core: core 0 writes them
      op(Opcode::Seq, {reg(kFirst), reg(npu::kRegCoreId), imm(0)});
      op(Opcode::Loop, {reg(kFirstLoop), imm(0), reg(kFirst), imm(1)});
    }
    store(p, x, 1);
    if (cores_ > 1) op(Opcode::EndLoop, {});
  }
}

// Reads of the row statements that do not move with the rows: once per core, R rows of them.
void Nest::fused_hoist() {
  use_chunk(fz_.rows * fz_.pitch);
  for (size_t i = fz_.prologue; i < plans_.size(); ++i) {
    const Plan& p = plans_[i];
    if (role_of(i) != Role::Row) continue;
    enter(p, Pos{}, fz_.rows);
    for (const Access& a : p.reads) {
      if (a.stride[p.u] != 0) continue;
      const std::string key = key_of(p, a);
      if (hoisted_.count(key)) continue;
      if (auto w = resident_.find(a.tensor); w != resident_.end()) {  // a prologue result: copied down the rows
        const Value& src = w->second.v;
        const Value v{false, 0, fresh_region(), src.type};
        const int64_t k = fz_.pitch / m_.vector_lanes(src.type), rep = k * repeat_blocks_;
        for (int64_t j = 0; j < k; ++j)
          op(Opcode::Vmuls, {type(src.type), at(Buffer::UB, v.region + j * bytes_per_repeat_),
                             at(Buffer::UB, src.region + j * bytes_per_repeat_), Operand::float_(1), imm(fz_.rows), imm(1),
                             imm(1), imm(rep), imm(0)});
        hoisted_[key] = v;
        continue;
      }
      if (a.stride[p.v] == 0) rowvals_of_[set_] = fresh_region();
      hoisted_[key] = load(p, a, fz_.rows, fz_.lanes);
    }
  }
}

std::string Nest::key_of(const Plan& p, const Access& a) const {
  return fmt::format("{}@{}:{}:{}", a.tensor, a.offset, p.u >= 0 ? a.stride[p.u] : 0, p.v >= 0 ? a.stride[p.v] : 0);
}

// A read a block loads ahead of its compute: a row statement's plain read of an input that moves
// with the rows (no widening, no gather).
bool Nest::prefetched(size_t i, const Access& a) const {
  const Plan& p = plans_[i];
  if (role_of(i) == Role::Prologue || a.type != compute_type(a.type)) return false;
  if (std::any_of(plans_.begin(), plans_.end(), [&](const Plan& q) { return q.s->output == a.tensor; })) return false;
  if (role_of(i) == Role::Row) return stride_of(a, p.u) != 0 && stride_of(a, p.v) != 0;
  return stride_of(a, p.v) != 0;
}

// The loads of the block at `origin` into the first regions of set `set`.
void Nest::prefetch(const Pos& origin, int64_t rows, int set) {
  use_chunk(fz_.rows * fz_.pitch);
  next_region_ = fz_.persist + set * fz_.block_bytes;
  prefetched_[set].clear();
  for (size_t i = fz_.prologue; i < plans_.size(); ++i) {
    const Plan& p = plans_[i];
    enter(p, origin, rows);
    for (const Access& a : p.reads) {
      const std::string key = key_of(p, a);
      if (!prefetched(i, a) || prefetched_[set].count(key)) continue;
      const Value v{false, 0, fresh_bytes(chunk_ * dtype_bytes(a.type)), a.type};
      if (role_of(i) == Role::Row) move(true, p, a, v.region, rows, fz_.lanes, p.pitch, stride_of(a, p.u), stride_of(a, p.v));
      else move(true, p, a, v.region, 1, rows, p.pitch, 0, stride_of(a, p.v));
      prefetched_[set][key] = v;
    }
  }
}

// A region of `bytes` (whole repeats) among the current ones.
int64_t Nest::fresh_bytes(int64_t bytes) {
  const int64_t r = region_base_ + next_region_;
  next_region_ += (bytes + bytes_per_repeat_ - 1) / bytes_per_repeat_ * bytes_per_repeat_;
  return r;
}

// Does a statement after plan i use expression text `key` (with its dimensions)? Then plan i
// must not overwrite that value.
bool Nest::used_after(size_t i, const std::string& key) {
  bool used = false;
  for (size_t j = i + 1; j < plans_.size() && !used; ++j) {
    std::string prefix;
    for (const Dim& d : plans_[j].dims) prefix += fmt::format("{}@{}:{},", d.name, d.lo, d.extent);
    prefix += "|";
    std::function<void(const ir::Expr&)> walk = [&](const ir::Expr& e) {
      if (prefix + ir::to_string(e) == key) used = true;
      for (const auto& a : e.args) walk(*a);
    };
    walk(*plans_[j].s->rhs);
  }
  return used;
}

// One block: every row statement on `rows` rows from `at`, values in set `set`.
void Nest::fused_block(const Pos& origin, int64_t rows, int set) {
  use_chunk(fz_.rows * fz_.pitch);
  set_ = acc_set_ = set;
  next_region_ = fz_.persist + set * fz_.block_bytes + fz_.prefetch_bytes;
  memo_.clear();
  block_loads_.clear();
  for (auto it = resident_.begin(); it != resident_.end();)
    it = it->second.layout == Layout::PerLane ? std::next(it) : resident_.erase(it);
  for (size_t i = fz_.prologue; i < plans_.size(); ++i) {
    const Plan& p = plans_[i];
    const bool row = role_of(i) == Role::Row;
    enter(p, origin, rows);
    // this statement's chunk before its loads: their regions (a widened i8 read, a broadcast) were
    // sized by the previous statement's, and overwrote the next block set (issue 31)
    use_chunk(row ? fz_.rows * fz_.pitch : (fz_.rows + p.unit - 1) / p.unit * p.unit);
    loaded_.clear();
    for (const Access& a : p.reads) loaded_.push_back(fused_read(i, a, rows));
    const int64_t n = row ? rows * fz_.pitch : rows;
    if (!p.is_reduction()) {
      const Value x = result(p, n);
      resident_[p.s->output] = resident_of(i, x);
      if (stored(p.s->output)) store(p, x, row ? rows : 1);
      continue;
    }
    // a row reduction: folded out of place (x may be kept), lanes reduced, into the accumulator
    Value x = vector_of(compile(*p.s->rhs, n), n);
    if (x.type != compute_type(p.out.type)) {
      const Value y{false, 0, fresh_region(), compute_type(p.out.type)};
      convert(y, x, n);
      x = y;
    }
    const DType t = x.type;
    parts_[set_] = fresh_bytes(per_row_bytes());
    accs_[acc_set_] = fresh_bytes(per_row_bytes());
    // folded in place unless a later statement reads x (a result, a load, a shared subexpression)
    const bool own = p.s->rhs->kind == ir::ExprKind::Apply && !used_after(i, memo_prefix_ + ir::to_string(*p.s->rhs)) &&
                     !kept(x.region);
    const int64_t scratch = own ? -1 : fresh_region();
    op(Opcode::Vdup, {type(t), at(Buffer::UB, acc()), Operand::float_(identity(p)), imm(repeats(rows, t)), imm(1), imm(repeat_blocks_)});
    lanes(p, x, rows, fz_.lanes, scratch);
    binary(combine_op(p), Value{false, 0, acc(), t}, Value{false, 0, acc(), t}, Value{false, 0, part(), t}, rows);
    resident_[p.s->output] = resident_of(i, Value{false, 0, acc(), t});
    if (stored(p.s->output)) store_acc(p, false);
  }
}

// The right-hand side of a statement without reduction, in its output's compute type.
Nest::Value Nest::result(const Plan& p, int64_t n) {
  Value x = vector_of(compile(*p.s->rhs, n), n);
  if (x.type != compute_type(p.out.type)) {
    const Value y{false, 0, fresh_region(), compute_type(p.out.type)};
    convert(y, x, n);
    x = y;
  }
  return x;
}

// Writes x (rows x the plan's tile) to the statement's output in GM.
void Nest::store(const Plan& p, Value x, int64_t rows) {
  const int64_t n = rows * p.pitch;
  x = narrowed(x, p.out.type, n);
  move(false, p, p.out, x.region, rows, cur(p.v), p.pitch, stride_of(p.out, p.u), stride_of(p.out, p.v));
}

// Access `a` of plan i: a result in UB (as it is, broadcast across the lanes), a hoisted read,
// this block's load of it, or a new load.
Nest::Value Nest::fused_read(size_t i, const Access& a, int64_t rows) {
  const Plan& p = plans_[i];
  if (auto w = resident_.find(a.tensor); w != resident_.end()) {
    const Resident& r = w->second;
    const int how = reads_resident(i, a, r);
    TESSEL_CHECK(how != 0, "nest: a row-pipeline read of a result at another element (fits_pipeline should refuse it)");
    if (how == 1) return r.v;
    if (how == 3) return hoisted_.at(key_of(p, a));
    // a value per row: one repeat per row, which the row's operations read with repeat stride 0
    Value v{false, 0, fresh_bytes(fz_.rows * bytes_per_repeat_), r.v.type};
    v.per_row = true;
    op(Opcode::Vbrcb, {type(r.v.type), at(Buffer::UB, v.region), at(Buffer::UB, r.v.region), imm(rows), imm(1), imm(repeat_blocks_)});
    return v;
  }
  const std::string key = key_of(p, a);
  if (role_of(i) == Role::Row && a.stride[p.u] == 0) return hoisted_.at(key);
  if (auto it = prefetched_[set_].find(key); it != prefetched_[set_].end() && role_of(i) != Role::Prologue) return it->second;
  if (role_of(i) != Role::Prologue)
    if (auto it = block_loads_.find(key); it != block_loads_.end()) return it->second;
  const bool row = role_of(i) == Role::Row;
  const int64_t lanes = row || role_of(i) == Role::Prologue ? fz_.lanes : rows;
  if (stride_of(a, p.v) == 0 && lanes > 1) rowvals_of_[set_] = fresh_region();
  const Value v = load(p, a, row ? rows : 1, lanes);
  if (role_of(i) != Role::Prologue) block_loads_[key] = v;
  return v;
}

}  // namespace tessel::emit_npu::nest
