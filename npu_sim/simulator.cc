#include "npu_sim/simulator.h"

#include <sys/mman.h>
#if defined(__SANITIZE_ADDRESS__)
#define TESSEL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TESSEL_ASAN 1
#endif
#endif
#ifdef TESSEL_ASAN
#include <sanitizer/asan_interface.h>
#endif

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <set>

#define SC_INCLUDE_DYNAMIC_PROCESSES
#include <systemc>

#include "isa/base/error.h"
#include "npu_sim/race_detector.h"
#include "npu_sim/semantics.h"

namespace tessel::npu_sim {
namespace {

using npu::Buffer;
using npu::Opcode;
using npu::Pipe;

int64_t wrapping_add(int64_t x, int64_t y) { return static_cast<int64_t>(static_cast<uint64_t>(x) + static_cast<uint64_t>(y)); }
int64_t wrapping_sub(int64_t x, int64_t y) { return static_cast<int64_t>(static_cast<uint64_t>(x) - static_cast<uint64_t>(y)); }

// for (r = begin; r < end; r += step), step > 0: the number of iterations, without overflow.
uint64_t trip_count(int64_t begin, int64_t end, int64_t step) {
  if (begin >= end) return 0;
  const uint64_t span = static_cast<uint64_t>(end) - static_cast<uint64_t>(begin);  // < 2^64: exact
  return (span - 1) / static_cast<uint64_t>(step) + 1;
}

// The bytes of each access, into the core's per-buffer read / write counts (the energy events).
void count_traffic(std::array<BufferTraffic, npu::kBufferCount>& traffic, const std::vector<Access>& accesses) {
  for (const Access& a : accesses) {
    uint64_t bytes = 0;
    for (const Interval& r : a.ranges) bytes += r.end - r.begin;
    BufferTraffic& t = traffic[static_cast<size_t>(a.buffer)];
    (a.write ? t.bytes_written : t.bytes_read) += bytes;
  }
}

struct AbortRun {};  // unwinds a pipe thread when the run is aborted

enum class PipeActivity : uint8_t { Idle, Running, WaitFlag, WaitBarrier, WaitCores, QueueFull, Done };

struct PipeState {
  std::deque<IssuedInstruction> queue;
  sc_core::sc_event pushed;   // the scalar pipe queued an instruction
  sc_core::sc_event changed;  // a slot freed, or the pipe became idle
  bool executing = false;
  uint64_t last_completion = 0;
  PipeActivity activity = PipeActivity::Idle;
  int activity_pc = -1;
  Pipe waiting_on = Pipe::S;  // QueueFull: the full queue; WaitFlag: the flag's source
  int waiting_id = 0;
};

constexpr size_t kNoFlagEvent = ~size_t(0);  // a folded record keeps no flag events
constexpr size_t kStallKinds = 4;

struct PendingSet {
  uint64_t available_time;
  RaceDetector::Clock clock;
  size_t flag_event;
};

struct FlagSlot {
  std::deque<PendingSet> pending;
  sc_core::sc_event signalled;
};

struct CoreState {
  int id = 0;
  std::array<PipeState, npu::kPipeCount> pipes;
  std::vector<FlagSlot> flags;  // [src][dst][event id]
  std::array<int64_t, npu::kRegisterCount> regs{};
  uint64_t mask_hi = ~0ull, mask_lo = ~0ull;
  std::array<int64_t, 12> fmatrix{};
  std::array<std::vector<uint8_t>, npu::kBufferCount> buffers;  // GM unused (shared)
  MemoryView view;
  bool scalar_done = false;
};

class Simulation {
 public:
  Simulation(const npu::Program& program, const isa::NpuMachine& machine, const SimOptions& options, SimRecord& record,
             GmBytes& gm, uint64_t gm_extent)
      : program_(program),
        machine_(machine),
        options_(options),
        max_cycles_(options.max_cycles == 0 ? kDefaultMaxCycles : options.max_cycles),
        record_(record),
        gm_(gm),
        partner_(npu::match_loops(program)),
        races_(program.cores, record) {
    static int run_counter = 0;
    run_id_ = run_counter++;
    cores_.resize(program.cores);
    const size_t flag_slots = size_t(npu::kPipeCount) * npu::kPipeCount * std::max<uint32_t>(1, machine.event_ids_per_pipe_pair);
    for (int c = 0; c < program.cores; ++c) {
      auto core = std::make_unique<CoreState>();
      core->id = c;
      core->flags = std::vector<FlagSlot>(flag_slots);
      core->regs[npu::kRegCoreId] = c;
      core->regs[npu::kRegCoreCount] = program.cores;
      for (int b = 0; b < npu::kBufferCount; ++b) {
        const Buffer buffer = static_cast<Buffer>(b);
        if (buffer == Buffer::GM) {
          core->view.size[b] = gm_extent;
          core->view.base[b] = options.timing_only ? nullptr : gm.data();
        } else {
          core->view.size[b] = machine.buffer(buffer).capacity_bytes;
          if (!options.timing_only) {
            core->buffers[b].assign(machine.buffer(buffer).capacity_bytes, 0);
            core->view.base[b] = core->buffers[b].data();
          }
        }
      }
      cores_[c] = std::move(core);
    }
    record_.peak_bytes.assign(program.cores, {});
    record_.folded = options.fold_events;
    if (options.fold_events) {
      folded_instructions_.assign(size_t(program.cores) * program.code.size() * npu::kPipeCount, -1);
      folded_stalls_.assign(size_t(program.cores) * program.code.size() * npu::kPipeCount * kStallKinds, -1);
    }
    record_.traffic.assign(program.cores, {});
  }

  void run() {
    base_time_ = sc_core::sc_time_stamp();
    for (auto& core : cores_) {
      CoreState* c = core.get();
      spawn(fmt::format("tessel_r{}_c{}_S", run_id_, c->id), [this, c] { scalar_thread(*c); });
      for (int p = 1; p < npu::kPipeCount; ++p)
        spawn(fmt::format("tessel_r{}_c{}_{}", run_id_, c->id, npu::pipe_name(static_cast<Pipe>(p))),
              [this, c, p] { pipe_thread(*c, static_cast<Pipe>(p)); });
    }
    sc_core::sc_start();  // returns when no thread can make progress
    record_.total_cycles = std::max(record_.total_cycles, now());
    if (!error_ && !all_done()) record_.deadlock = describe_deadlock();
    if (!all_done()) {  // wake every blocked thread so it unwinds before the state goes away
      abort_run();
      sc_core::sc_start();
    }
    for (const auto& h : handles_)
      TESSEL_CHECK(h.terminated(), "a simulator thread outlived its run");
    if (error_) std::rethrow_exception(error_);
  }

 private:
  template <typename F>
  void spawn(const std::string& name, F body) {
    handles_.push_back(sc_core::sc_spawn([this, body] {
      try {
        body();
      } catch (const AbortRun&) {
      } catch (...) {
        if (!error_) error_ = std::current_exception();
        abort_run();
      }
    }, name.c_str()));
  }

  uint64_t now() const { return (sc_core::sc_time_stamp() - base_time_).value() / cycle_.value(); }

  void check_abort() const {
    if (aborted_) throw AbortRun{};
  }
  void wait_cycles(uint64_t n) {
    if (n == 0) return;
    sc_core::wait(sc_core::sc_time::from_value(n * cycle_.value()));
    check_abort();
  }
  void wait_until(uint64_t t) {
    const uint64_t n = now();
    if (t > n) wait_cycles(t - n);
  }
  void wait_event(sc_core::sc_event& e) {
    sc_core::wait(e);
    check_abort();
  }

  void abort_run() {
    aborted_ = true;
    for (auto& c : cores_) {
      for (PipeState& p : c->pipes) {
        p.pushed.notify();
        p.changed.notify();
      }
      for (FlagSlot& f : c->flags) f.signalled.notify();
    }
    barrier_released_.notify();
  }

  bool all_done() const {
    for (const auto& c : cores_) {
      if (!c->scalar_done) return false;
      for (int p = 1; p < npu::kPipeCount; ++p)
        if (c->pipes[p].activity != PipeActivity::Done) return false;
    }
    return true;
  }

  std::string where(int pc) const {
    const npu::Instruction& instr = program_.code[pc];
    const std::string at = instr.location.line > 0
                               ? fmt::format("{}:{}:{}", program_.source_name, instr.location.line, instr.location.column)
                               : fmt::format("{}: instruction {}", program_.source_name, pc);
    return fmt::format("{}: '{}'", at, record_.instruction_text[pc]);
  }

  [[noreturn]] void user_fault(const CoreState& c, int pc, const std::string& reason) const {
    throw UserError(fmt::format("{} on core {}: {}", where(pc), c.id, reason));
  }
  [[noreturn]] void limit_fault(const CoreState& c, int pc, const std::string& reason) const {
    throw RunLimit(fmt::format("{} on core {}: {}", where(pc), c.id, reason));
  }

  std::string describe_deadlock() const {
    std::string s = fmt::format("deadlock at cycle {}: no pipe can make progress.", now());
    for (const auto& c : cores_) {
      for (int p = 0; p < npu::kPipeCount; ++p) {
        const PipeState& ps = c->pipes[p];
        std::string state;
        switch (ps.activity) {
          case PipeActivity::Idle: state = "idle"; break;
          case PipeActivity::Running: state = "running"; break;
          case PipeActivity::Done: state = "done"; break;
          case PipeActivity::WaitFlag:
            state = fmt::format("blocked in {} (flag {}->{} id {} is never set)", where(ps.activity_pc),
                                npu::pipe_name(ps.waiting_on), npu::pipe_name(static_cast<Pipe>(p)), ps.waiting_id);
            break;
          case PipeActivity::WaitBarrier: state = fmt::format("blocked in {}", where(ps.activity_pc)); break;
          case PipeActivity::WaitCores:
            state = fmt::format("waiting for the other cores in {} ({} of {} arrived)", where(ps.activity_pc), arrived_,
                                cores_.size());
            break;
          case PipeActivity::QueueFull:
            state = fmt::format("blocked dispatching {} (queue of {} full)", where(ps.activity_pc),
                                npu::pipe_name(ps.waiting_on));
            break;
        }
        if (p != 0 && !ps.queue.empty()) state += fmt::format("; {} queued instruction(s)", ps.queue.size());
        s += fmt::format("\n  core {} pipe {}: {}", c->id, npu::pipe_name(static_cast<Pipe>(p)), state);
      }
    }
    return s;
  }

  // ------------------------------------------------------------------ scalar pipe

  int64_t value_of(const CoreState& c, const npu::Operand& o) const {
    switch (o.kind) {
      case npu::OperandKind::Register: return c.regs[o.reg];
      case npu::OperandKind::Immediate: return o.imm;
      case npu::OperandKind::Address:  // wraps like `add`; a wrapped address is then out of bounds
        return wrapping_add(o.reg == npu::kNoRegister ? 0 : c.regs[o.reg], o.imm);
      default: return 0;
    }
  }

  IssuedInstruction issue(const CoreState& c, int pc) const {
    const npu::Instruction& instr = program_.code[pc];
    IssuedInstruction in;
    in.pc = pc;
    in.core = c.id;
    in.instr = &instr;
    for (size_t i = 0; i < instr.operands.size(); ++i) {
      const npu::Operand& o = instr.operands[i];
      in.value[i] = value_of(c, o);
      if (npu::opcode_info(instr.opcode).slots[i] == npu::OperandSlot::Scalar)
        in.scalar = o.kind == npu::OperandKind::FloatImmediate ? o.fimm : static_cast<double>(in.value[i]);
    }
    in.mask_hi = c.mask_hi;
    in.mask_lo = c.mask_lo;
    in.fmatrix = c.fmatrix;
    return in;
  }

  void record_instruction(const CoreState& c, Pipe pipe, int pc, uint64_t start, uint64_t end, uint64_t completion,
                          const InstructionCost* cost = nullptr) {
    InstructionEvent e;
    e.core = c.id;
    e.pipe = pipe;
    e.pc = pc;
    e.start = start;
    e.end = end;
    e.completion = completion;
    if (cost) {
      e.bytes = cost->bytes;
      e.path_from = cost->path_from;
      e.path_to = cost->path_to;
      if (cost->macs) e.op_kind = cost->i8 ? OpKind::MacI8 : OpKind::MacF16, e.ops = cost->macs;
      if (cost->repeats) e.op_kind = OpKind::VectorRepeat, e.ops = cost->repeats;
    }
    check_record_budget(c, pc);
    ++record_.executed;
    if (!options_.fold_events) {
      record_.instructions.push_back(e);
      return;
    }
    int64_t& slot = folded_instructions_[(size_t(c.id) * record_.instruction_text.size() + size_t(pc)) * npu::kPipeCount +
                                         static_cast<size_t>(pipe)];
    if (slot < 0) {
      slot = int64_t(record_.instructions.size());
      e.end = e.end - e.start;
      e.start = 0;
      record_.instructions.push_back(e);
      return;
    }
    InstructionEvent& f = record_.instructions[size_t(slot)];
    f.end += end - start;
    f.completion = std::max(f.completion, completion);
    f.bytes += e.bytes;
    f.ops += e.ops;
    ++f.count;
  }

  // The record keeps every executed instruction; a run that would outgrow the budget (a runaway
  // loop, a huge trip count) stops here instead of exhausting memory.
  void check_record_budget(const CoreState& c, int pc) const {
    const uint64_t n = options_.fold_events ? record_.executed : record_.instructions.size() + record_.stalls.size();
    if (n >= options_.max_recorded_events)
      limit_fault(c, pc, fmt::format("the run executed more than {} instructions (the simulator's record limit, "
                                    "--max-instructions); a loop with a huge trip count?",
                                    options_.max_recorded_events));
  }

  void record_stall(const CoreState& c, Pipe pipe, int pc, StallKind kind, uint64_t start, uint64_t end) {
    if (end <= start) return;
    check_record_budget(c, pc);
    if (!options_.fold_events) {
      record_.stalls.push_back({c.id, pipe, pc, kind, start, end});
      return;
    }
    int64_t& slot =
        folded_stalls_[((size_t(c.id) * record_.instruction_text.size() + size_t(pc)) * npu::kPipeCount + static_cast<size_t>(pipe)) *
                           kStallKinds +
                       static_cast<size_t>(kind)];
    if (slot < 0) {
      slot = int64_t(record_.stalls.size());
      record_.stalls.push_back({c.id, pipe, pc, kind, 0, end - start});
      return;
    }
    StallEvent& f = record_.stalls[size_t(slot)];
    f.end += end - start;
    ++f.count;
  }

  int64_t scalar_op(const CoreState& c, int pc, Opcode op, int64_t x, int64_t y) const {
    switch (op) {
      case Opcode::Add: return wrapping_add(x, y);
      case Opcode::Sub: return wrapping_sub(x, y);
      case Opcode::Mul: return static_cast<int64_t>(static_cast<uint64_t>(x) * static_cast<uint64_t>(y));
      case Opcode::Div:
        if (y == 0) user_fault(c, pc, "division by zero");
        if (y == -1) return wrapping_sub(0, x);  // INT64_MIN / -1 wraps to INT64_MIN (isa/README.md)
        return x / y;
      case Opcode::Shl:
        if (y < 0 || y > 63) user_fault(c, pc, fmt::format("shift amount {} is outside 0..63", y));
        return static_cast<int64_t>(static_cast<uint64_t>(x) << y);
      case Opcode::Seq: return x == y ? 1 : 0;
      case Opcode::Slt: return x < y ? 1 : 0;
      default: TESSEL_CHECK(false, "scalar_op on a non-arithmetic opcode"); return 0;
    }
  }

  void scalar_thread(CoreState& c) {
    // The trip count is fixed when the loop starts (overflow-free: the counter never has to pass
    // `end`); iteration i sets the counter to begin + i * step, whatever the body wrote to it.
    struct Frame {
      int loop_pc;
      uint8_t reg;
      int64_t begin, step;
      uint64_t trips, done;
    };
    std::vector<Frame> frames;
    PipeState& s = c.pipes[0];
    s.activity = PipeActivity::Running;
    uint64_t local = now();  // the scalar pipe runs ahead of SystemC time until it must interact
    auto charge = [&](int pc, uint64_t cycles) {
      record_instruction(c, Pipe::S, pc, local, local + cycles, local + cycles);
      local += cycles;
      if (local > max_cycles_) limit_fault(c, pc, fmt::format("the run passed --max-cycles {}", max_cycles_));
    };
    const auto& code = program_.code;
    int pc = 0;
    while (pc < static_cast<int>(code.size())) {
      const npu::Instruction& instr = code[pc];
      const auto& ops = instr.operands;
      switch (instr.opcode) {
        case Opcode::Mov:
          c.regs[ops[0].reg] = value_of(c, ops[1]);
          charge(pc++, machine_.scalar_cycles);
          continue;
        case Opcode::Add: case Opcode::Sub: case Opcode::Mul: case Opcode::Div:
        case Opcode::Shl: case Opcode::Seq: case Opcode::Slt:
          c.regs[ops[0].reg] = scalar_op(c, pc, instr.opcode, value_of(c, ops[1]), value_of(c, ops[2]));
          charge(pc++, machine_.scalar_cycles);
          continue;
        case Opcode::Loop: {
          const int64_t begin = value_of(c, ops[1]), end = value_of(c, ops[2]), step = value_of(c, ops[3]);
          if (step <= 0) user_fault(c, pc, fmt::format("loop step {} must be positive", step));
          charge(pc, machine_.scalar_cycles);
          if (const uint64_t trips = trip_count(begin, end, step); trips > 0) {
            c.regs[ops[0].reg] = begin;
            frames.push_back({pc, ops[0].reg, begin, step, trips, 0});
            ++pc;
          } else {
            pc = partner_[pc] + 1;
          }
          continue;
        }
        case Opcode::EndLoop: {
          Frame& f = frames.back();
          charge(pc, machine_.scalar_cycles);
          ++f.done;
          // After the last iteration the counter holds begin + trips * step (wrapping, isa/README.md).
          c.regs[f.reg] = wrapping_add(f.begin, static_cast<int64_t>(f.done * static_cast<uint64_t>(f.step)));
          if (f.done < f.trips) {
            pc = f.loop_pc + 1;
          } else {
            frames.pop_back();
            ++pc;
          }
          continue;
        }
        case Opcode::SetVectorMask:
          c.mask_hi = static_cast<uint64_t>(value_of(c, ops[0]));
          c.mask_lo = static_cast<uint64_t>(value_of(c, ops[1]));
          charge(pc++, machine_.scalar_cycles);
          continue;
        case Opcode::SetFmatrix:
          for (size_t i = 0; i < c.fmatrix.size(); ++i) c.fmatrix[i] = value_of(c, ops[i]);
          charge(pc++, machine_.scalar_cycles);
          continue;
        default: break;
      }
      if ((instr.opcode == Opcode::PipeBarrier && ops[0].pipe == Pipe::All) || instr.opcode == Opcode::SyncAll) {
        const bool all_cores = instr.opcode == Opcode::SyncAll;
        wait_until(local);
        drain_pipes(c, pc);
        if (all_cores) wait_for_cores(c, pc);
        local = now();
        charge(pc++, all_cores ? machine_.scalar_cycles : machine_.barrier_cycles);
        continue;
      }
      // Every other instruction goes to the queue of the pipe that executes it; the scalar pipe's
      // own sync instructions (set_flag S, X / wait_flag X, S / pipe_barrier S) and its GM reads
      // (ld: the pipe waits for the value) run right here.
      IssuedInstruction in = issue(c, pc);
      if (npu::executing_pipe(instr) == Pipe::S) {
        wait_until(local);
        execute(c, Pipe::S, s, in);
        if (instr.opcode == Opcode::Ld) c.regs[ops[0].reg] = scalar_load(in, c.view);
        s.activity = PipeActivity::Running;
        local = now();
        ++pc;
        continue;
      }
      charge(pc, machine_.scalar_cycles);
      wait_until(local);
      PipeState& target = c.pipes[static_cast<size_t>(npu::executing_pipe(instr))];
      if (target.queue.size() >= machine_.queue_depth) {
        const uint64_t start = now();
        s.activity = PipeActivity::QueueFull;
        s.activity_pc = pc;
        s.waiting_on = npu::executing_pipe(instr);
        while (target.queue.size() >= machine_.queue_depth) wait_event(target.changed);
        s.activity = PipeActivity::Running;
        record_stall(c, Pipe::S, pc, StallKind::QueueFull, start, now());
        local = now();
      }
      target.queue.push_back(std::move(in));
      target.pushed.notify();
      ++pc;
    }
    wait_until(local);
    record_.total_cycles = std::max(record_.total_cycles, now());
    c.scalar_done = true;
    ++cores_ended_;
    check_barrier_reachable(c.id, code.size() - 1);
    s.activity = PipeActivity::Done;
    for (PipeState& p : c.pipes) p.pushed.notify();
  }

  // pipe_barrier ALL (and the first half of sync_all): S waits until every other pipe of the core
  // has an empty queue and its last instruction has completed; then every pipe has seen the core.
  void drain_pipes(CoreState& c, int pc) {
    PipeState& s = c.pipes[0];
    const uint64_t start = now();
    s.activity = PipeActivity::WaitBarrier;
    s.activity_pc = pc;
    for (int p = 1; p < npu::kPipeCount; ++p) {
      PipeState& ps = c.pipes[p];
      while (!ps.queue.empty() || ps.executing) wait_event(ps.changed);
    }
    uint64_t drained = now();
    for (int p = 1; p < npu::kPipeCount; ++p) drained = std::max(drained, c.pipes[p].last_completion);
    wait_until(drained);
    s.activity = PipeActivity::Running;
    record_stall(c, Pipe::S, pc, StallKind::Barrier, start, now());
    if (options_.detect_races) races_.barrier_all(c.id);
  }

  // sync_all after the drain: the core arrives; the last arrival releases every core
  // cross_core_barrier_cycles later, their clocks joined (GM written by any core before the barrier
  // is ordered before any access after it). Arrivals count per barrier generation.
  void wait_for_cores(CoreState& c, int pc) {
    PipeState& s = c.pipes[0];
    const uint64_t start = now();
    if (options_.detect_races) races_.arrive_all(c.id, arriving_clock_);
    barrier_pcs_.insert(pc);
    if (++arrived_ == static_cast<int>(cores_.size())) {
      release_time_ = now() + machine_.cross_core_barrier_cycles;
      released_clock_ = std::move(arriving_clock_);
      arriving_clock_.clear();
      arrived_ = 0;
      barrier_pcs_.clear();
      ++generation_;
      barrier_released_.notify();
    } else {
      check_barrier_reachable(c.id, pc);
      const uint64_t generation = generation_;
      s.activity = PipeActivity::WaitCores;
      s.activity_pc = pc;
      while (generation_ == generation) wait_event(barrier_released_);
      s.activity = PipeActivity::Running;
    }
    wait_until(release_time_);
    record_stall(c, Pipe::S, pc, StallKind::Cores, start, now());
    if (options_.detect_races) races_.join_all(c.id, released_clock_);
  }

  // A core that ended can never arrive: when every core still running waits in a sync_all, the
  // barrier can never open. Refused at once with the cores that are missing (not a hang, not a
  // generic deadlock: a core-dependent trip count around a sync_all, or a sync_all only some cores run).
  void check_barrier_reachable(int core, int pc) const {
    if (arrived_ == 0 || arrived_ + cores_ended_ < static_cast<int>(cores_.size())) return;
    std::string ended, waiting;
    for (const auto& other : cores_) {
      if (other->scalar_done) ended += (ended.empty() ? "" : ", ") + std::to_string(other->id);
      else waiting += (waiting.empty() ? "" : ", ") + std::to_string(other->id);
    }
    std::string at;
    for (int b : barrier_pcs_) at += (at.empty() ? "" : "; ") + where(b);
    throw UserError(fmt::format("cross-core barrier never completes: core(s) {} wait in sync_all ({}) but core(s) {} "
                                "ended without reaching it; every core of the launch must execute each sync_all the "
                                "same number of times (no sync_all under a core-dependent loop or trip count) "
                                "[noticed on core {}, {}]",
                                waiting, at, ended, core, where(pc)));
  }

  // ------------------------------------------------------------------ pipes

  void pipe_thread(CoreState& c, Pipe pipe) {
    PipeState& ps = c.pipes[static_cast<size_t>(pipe)];
    for (;;) {
      while (ps.queue.empty()) {
        if (c.scalar_done) {
          ps.activity = PipeActivity::Done;
          return;
        }
        ps.activity = PipeActivity::Idle;
        ps.changed.notify();
        wait_event(ps.pushed);
      }
      IssuedInstruction in = std::move(ps.queue.front());
      ps.queue.pop_front();
      ps.executing = true;
      ps.activity = PipeActivity::Running;
      ps.changed.notify();
      execute(c, pipe, ps, in);
      ps.executing = false;
      ps.changed.notify();
    }
  }

  FlagSlot& flag_slot(CoreState& c, const IssuedInstruction& in) {
    const int64_t id = in.value[2];
    if (id < 0 || id >= static_cast<int64_t>(machine_.event_ids_per_pipe_pair))
      user_fault(c, in.pc, fmt::format("event id {} is out of range: the target has {} event ids per pipe pair (0..{})", id,
                                       machine_.event_ids_per_pipe_pair, int64_t(machine_.event_ids_per_pipe_pair) - 1));
    const size_t src = static_cast<size_t>(in.instr->operands[0].pipe), dst = static_cast<size_t>(in.instr->operands[1].pipe);
    return c.flags[(src * npu::kPipeCount + dst) * machine_.event_ids_per_pipe_pair + id];
  }

  void execute(CoreState& c, Pipe pipe, PipeState& ps, const IssuedInstruction& in) {
    const Opcode op = in.instr->opcode;
    if (op == Opcode::SetFlag) {
      FlagSlot& slot = flag_slot(c, in);
      const uint64_t t = now();
      FlagEvent fe;
      fe.core = c.id;
      fe.src = in.instr->operands[0].pipe;
      fe.dst = in.instr->operands[1].pipe;
      fe.event_id = static_cast<int>(in.value[2]);
      fe.set_pc = in.pc;
      fe.set_time = t;
      fe.available_time = std::max(t, ps.last_completion);
      slot.pending.push_back({fe.available_time,
                              options_.detect_races ? races_.clock(c.id, pipe) : RaceDetector::Clock{},
                              options_.fold_events ? kNoFlagEvent : record_.flags.size()});
      if (!options_.fold_events) record_.flags.push_back(fe);
      slot.signalled.notify();
      wait_cycles(machine_.set_flag_cycles);
      record_instruction(c, pipe, in.pc, t, now(), now());
      return;
    }
    if (op == Opcode::WaitFlag) {
      FlagSlot& slot = flag_slot(c, in);
      const uint64_t start = now();
      ps.activity = PipeActivity::WaitFlag;
      ps.activity_pc = in.pc;
      ps.waiting_on = in.instr->operands[0].pipe;
      ps.waiting_id = static_cast<int>(in.value[2]);
      for (;;) {
        if (slot.pending.empty()) {
          wait_event(slot.signalled);
          continue;
        }
        if (slot.pending.front().available_time > now()) {
          wait_until(slot.pending.front().available_time);
          continue;
        }
        break;
      }
      PendingSet set = std::move(slot.pending.front());
      slot.pending.pop_front();
      ps.activity = PipeActivity::Running;
      if (options_.detect_races) races_.join(c.id, pipe, set.clock);
      if (set.flag_event != kNoFlagEvent) {
        record_.flags[set.flag_event].wait_time = now();
        record_.flags[set.flag_event].wait_pc = in.pc;
      }
      record_stall(c, pipe, in.pc, StallKind::Flag, start, now());
      const uint64_t t = now();
      wait_cycles(machine_.set_flag_cycles);
      record_instruction(c, pipe, in.pc, t, now(), now());
      return;
    }
    if (op == Opcode::PipeBarrier) {
      const uint64_t start = now();
      ps.activity = PipeActivity::WaitBarrier;
      ps.activity_pc = in.pc;
      wait_until(ps.last_completion);
      ps.activity = PipeActivity::Running;
      record_stall(c, pipe, in.pc, StallKind::Barrier, start, now());
      const uint64_t t = now();
      wait_cycles(machine_.barrier_cycles);
      record_instruction(c, pipe, in.pc, t, now(), now());
      return;
    }
    InstructionCost cost;
    try {
      describe_instruction(machine_, in, c.view, accesses_, cost);
    } catch (const InstructionFault& f) {
      user_fault(c, in.pc, f.reason);
    }
    const uint64_t start = now();
    uint64_t occupancy = cost.occupancy_cycles;
    if (cost.uses_gm) {  // the shared GM bandwidth is one next-free-time resource for every core
      const uint64_t gm_start = std::max(start, gm_next_free_);
      gm_next_free_ = add_cycles(gm_start, cycles_for(cost.gm_bytes, machine_.gm_shared_bandwidth_bytes_per_cycle));
      occupancy = std::max(occupancy, gm_next_free_ - start);
    }
    // Saturating sums: an instruction that would end past --max-cycles stops the run before SystemC
    // time is advanced (which would wrap at 2^64 ps).
    if (add_cycles(add_cycles(start, occupancy), cost.latency_cycles) > max_cycles_)
      limit_fault(c, in.pc, fmt::format("the run passed --max-cycles {} (the instruction alone takes {}{} cycles)", max_cycles_,
                                       occupancy >= kSaturatedCycles ? "more than " : "", std::min(occupancy, kSaturatedCycles)));
    auto& peak = record_.peak_bytes[c.id];
    for (const Access& a : accesses_) peak[static_cast<size_t>(a.buffer)] = std::max(peak[static_cast<size_t>(a.buffer)], a.hi);
    count_traffic(record_.traffic[c.id], accesses_);
    if (options_.detect_races) races_.on_accesses(c.id, pipe, in.pc, accesses_);
    if (!options_.timing_only) {
      try {
        execute_instruction(machine_, in, c.view);
      } catch (const InstructionFault& f) {
        user_fault(c, in.pc, f.reason);
      }
    }
    wait_cycles(occupancy);
    const uint64_t end = now();
    ps.last_completion = std::max(ps.last_completion, end + cost.latency_cycles);
    record_instruction(c, pipe, in.pc, start, end, end + cost.latency_cycles, &cost);
    record_.total_cycles = std::max(record_.total_cycles, end + cost.latency_cycles);
  }

  const npu::Program& program_;
  const isa::NpuMachine& machine_;
  SimOptions options_;
  uint64_t max_cycles_;  // options_.max_cycles, 0 replaced by the default
  SimRecord& record_;
  // folded records: the entry of each (core, pc, pipe) in record_.instructions and of each (core,
  // pc, pipe, stall kind) in record_.stalls, -1 before its first (an instruction the scalar pipe
  // issues to another pipe has an entry on each)
  std::vector<int64_t> folded_instructions_, folded_stalls_;
  GmBytes& gm_;
  std::vector<int> partner_;
  RaceDetector races_;
  std::vector<std::unique_ptr<CoreState>> cores_;
  std::vector<sc_core::sc_process_handle> handles_;
  std::vector<Access> accesses_;  // scratch: the footprint of the instruction being executed
  sc_core::sc_time base_time_;
  const sc_core::sc_time cycle_{1, sc_core::SC_NS};
  uint64_t gm_next_free_ = 0;
  // sync_all: cores arrived at the open barrier, cores whose program ended, the barrier's
  // generation (one per release), its release time, and the joined race clocks of the arrivals.
  int arrived_ = 0, cores_ended_ = 0;
  uint64_t generation_ = 0, release_time_ = 0;
  std::set<int> barrier_pcs_;  // the sync_all instructions the arrived cores wait in
  sc_core::sc_event barrier_released_;
  RaceDetector::Clock arriving_clock_, released_clock_;
  bool aborted_ = false;
  std::exception_ptr error_;
  int run_id_ = 0;
};

void quiet_systemc() {
  static bool done = false;
  if (done) return;
  done = true;
  setenv("SYSTEMC_DISABLE_COPYRIGHT_MESSAGE", "1", 0);
  // Simulation runs end by starvation on purpose; SystemC's warnings about that are noise here.
  sc_core::sc_report_handler::set_actions(sc_core::SC_WARNING, sc_core::SC_DO_NOTHING);
  sc_core::sc_report_handler::set_actions(sc_core::SC_INFO, sc_core::SC_DO_NOTHING);
}

void bind_inputs(const npu::Program& program, const isa::NpuMachine& machine, const std::map<std::string, NpyArray>& inputs,
                 bool timing_only, GmBytes& gm) {
  for (const auto& [name, array] : inputs) {
    const npu::TensorBinding* t = program.find_tensor(name);
    if (!t) {
      std::string known;
      for (const auto& d : program.tensors) known += (known.empty() ? "" : ", ") + d.name;
      throw UserError(fmt::format("--input {}: {} declares no tensor '{}' (declared: {})", name, program.source_name,
                                  name, known.empty() ? "none" : known));
    }
    if (!t->is_input())
      throw UserError(fmt::format("--input {}: tensor '{}' is declared '{}', not an input", name, name,
                                  npu::tensor_role_name(t->role)));
    if (array.dtype != t->dtype || array.shape != t->shape) {
      NpyArray expected;
      expected.shape = t->shape;
      throw UserError(fmt::format("--input {}: the .npy holds {} {}, the program declares {} {}", name,
                                  dtype_name(array.dtype), array.shape_string(), dtype_name(t->dtype),
                                  expected.shape_string()));
    }
    if (!timing_only) std::memcpy(gm.data() + t->gm_offset, array.data.data(), array.data.size());
  }
  if (timing_only) return;
  for (const npu::TensorBinding& t : program.tensors)
    if (t.role == npu::TensorRole::In && !inputs.count(t.name))
      throw UserError(fmt::format("{}: input tensor '{}' is not bound (give --input {}=FILE.npy)", program.source_name,
                                  t.name, t.name));
  (void)machine;
}

}  // namespace

GmBytes& GmBytes::operator=(GmBytes&& o) noexcept {
  if (this != &o) {
    if (data_) ::munmap(data_, size_);
    data_ = o.data_, size_ = o.size_;
    o.data_ = nullptr, o.size_ = 0;
  }
  return *this;
}

GmBytes::~GmBytes() {
  if (data_) ::munmap(data_, size_);
}

void GmBytes::allocate(uint64_t bytes) {
  if (data_) ::munmap(data_, size_);
  data_ = nullptr, size_ = 0;
  if (bytes == 0) return;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    throw UserError(fmt::format("cannot map {} bytes of simulated GM ({})", bytes, std::strerror(errno)));
  data_ = static_cast<uint8_t*>(p), size_ = bytes;
#ifdef TESSEL_ASAN
  // AddressSanitizer does not clear its shadow on munmap: a SystemC coroutine stack that lived at
  // these addresses earlier in the process leaves its frames' redzones behind, and the simulated
  // GM's first DMA would be reported as a stack-buffer-underflow (the fuzz target runs thousands
  // of simulations in one process). The mapping is ours and wholly addressable.
  ASAN_UNPOISON_MEMORY_REGION(data_, bytes);
#endif
}

NpyArray SimResult::tensor(const npu::Program& program, const std::string& name) const {
  const npu::TensorBinding* t = program.find_tensor(name);
  if (!t) throw UserError(fmt::format("{} declares no tensor '{}'", program.source_name, name));
  if (record.timing_only) throw UserError(fmt::format("tensor '{}': a timing-only run computes no data", name));
  NpyArray a;
  a.dtype = t->dtype;
  a.shape = t->shape;
  a.data.assign(gm.begin() + t->gm_offset, gm.begin() + t->gm_offset + t->byte_size());
  return a;
}

SimResult simulate(const npu::Program& program, const isa::Hierarchy& target,
                   const std::map<std::string, NpyArray>& inputs, const SimOptions& options) {
  npu::validate_program(program);
  quiet_systemc();
  const isa::NpuMachine machine = isa::npu_machine(target);
  if (machine.gm_shared_bandwidth_bytes_per_cycle <= 0)
    throw UserError(machine.source + ": the global level needs shared_bandwidth_bytes_per_cycle for the simulator");
  if (program.cores > machine.cores)
    throw UserError(fmt::format("{}: .cores {} exceeds the {} cores of {}", program.source_name, program.cores,
                                machine.cores, machine.target_name));
  uint64_t gm_extent = 0;  // validate_program checked that every tensor's end fits int64
  const npu::TensorBinding* last = nullptr;
  for (const npu::TensorBinding& t : program.tensors) {
    const uint64_t end = static_cast<uint64_t>(t.gm_offset + t.byte_size());
    if (end > gm_extent) gm_extent = end, last = &t;
  }
  if (gm_extent > machine.buffer(Buffer::GM).capacity_bytes)
    throw UserError(fmt::format("{}: tensor '{}' ({} bytes at GM+{}) ends at byte {}, past the {} bytes of GM of {}",
                                program.source_name, last->name, last->byte_size(), last->gm_offset, gm_extent,
                                machine.buffer(Buffer::GM).capacity_bytes, machine.target_name));
  if (options.max_cycles > kMaxCyclesLimit)
    throw UserError(fmt::format("max cycles {} is outside 0..{} (0: the default, {})", options.max_cycles, kMaxCyclesLimit,
                                kDefaultMaxCycles));
  if (options.max_recorded_events == 0)
    throw UserError("the instruction limit must be at least 1");
  SimResult result;
  if (!options.timing_only) result.gm.allocate(gm_extent);
  bind_inputs(program, machine, inputs, options.timing_only, result.gm);

  SimRecord& record = result.record;
  record.program_name = program.source_name;
  record.machine = machine;
  record.cores = program.cores;
  record.timing_only = options.timing_only;
  for (const npu::Instruction& instr : program.code) {
    record.instruction_text.push_back(npu::format_instruction(instr));
    record.instruction_line.push_back(instr.location.line);
  }
  const auto wall_start = std::chrono::steady_clock::now();
  {
    Simulation sim(program, record.machine, options, record, result.gm, gm_extent);
    sim.run();
  }
  record.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return result;
}

SimResult simulate_emitted(const npu::Program& program, const isa::Hierarchy& target,
                           const std::map<std::string, NpyArray>& inputs, const SimOptions& options) {
  try {
    return simulate(program, target, inputs, options);
  } catch (const RunLimit&) {
    throw;
  } catch (const UserError& e) {
    std::string op = program.source_name;
    if (op.size() > 4 && op.compare(op.size() - 4, 4, ".npu") == 0) op.resize(op.size() - 4);
    throw InternalError(fmt::format("tessel bug: the simulator refused the program tessel emitted for operator '{}' on {}: {}",
                                    op, target.name, e.what()));
  }
}

}  // namespace tessel::npu_sim
