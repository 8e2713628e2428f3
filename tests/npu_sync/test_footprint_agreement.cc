// The simulator's exact footprints and the sync pass's interval footprints come from one definition
// (isa/npu_footprint.h); this property test keeps them from drifting apart. For every opcode of the
// instruction table that touches memory, random valid instructions (values as immediates or through
// registers, addresses stepping with a loop counter) are run through both: every byte the simulator
// says an instance touches must lie inside the sync pass's range of the same buffer and direction.
#include <doctest/doctest.h>

#include <map>
#include <optional>
#include <random>

#include "compiler/npu_sync/footprint.h"
#include "compiler/npu_sync/sync_insertion.h"
#include "isa/base/error.h"
#include "isa/npu_footprint.h"
#include "isa/npu_machine.h"
#include "npu_sim/semantics.h"

using namespace tessel;
using npu::Buffer;
using npu::Opcode;
using npu::Operand;

namespace {

const isa::Hierarchy& target(const std::string& name) {
  static std::map<std::string, isa::Hierarchy> loaded;
  auto it = loaded.find(name);
  if (it == loaded.end())
    it = loaded.emplace(name, isa::load_hierarchy(std::string(TESSEL_SOURCE_DIR) + "/isa/targets/" + name)).first;
  return it->second;
}

constexpr uint8_t kLoopReg = 20, kBaseReg = 21;
constexpr int64_t kGmBytes = int64_t(1) << 22;

// One random instance: a program `set_fmatrix; mov ...; loop { mul base; INSTR } ; barrier` and
// what the simulator needs to replay each iteration of INSTR.
struct Sample {
  npu::Program program;
  int pc = 0;            // of INSTR
  int64_t trips = 1, base_step = 0;
  std::array<int64_t, npu::kMaxOperands> value{};  // per operand: its value (addresses: without the base)
  std::array<bool, npu::kMaxOperands> on_base{};   // address operand offset by the loop's base register
  std::array<int64_t, 12> fmatrix{};
};

class Generator {
 public:
  Generator(const isa::NpuMachine& m, uint32_t seed) : m_(m), rng_(seed) {}

  Sample make(Opcode op) {
    const npu::OpcodeInfo& info = npu::opcode_info(op);
    Sample s;
    s.program.tensors.push_back({"G", DType::F16, {kGmBytes / 2}, 0, npu::TensorRole::InOut, {}});
    s.fmatrix = {pick(1, 8), pick(1, 8), pick(0, 1), pick(0, 1), pick(0, 1), pick(0, 1),
                 pick(1, 2), pick(1, 2), pick(1, 3), pick(1, 3), pick(1, 2), pick(1, 2)};
    std::vector<Operand> geometry;
    for (int64_t g : s.fmatrix) geometry.push_back(Operand::imm_(g));
    s.program.add(Opcode::SetFmatrix, geometry);
    s.trips = pick(1, 3);
    s.base_step = pick(1, 4) * 512;  // a multiple of every buffer's alignment
    std::vector<Operand> ops;
    uint8_t next_reg = 1;
    const bool vector = info.pipe_rule == npu::PipeRule::V && op != Opcode::MovL0c;
    for (int i = 0; i < info.operand_count; ++i) {
      switch (info.slots[i]) {
        case npu::OperandSlot::ElementType: ops.push_back(Operand::type(kTypes[pick(0, 3)])); break;
        case npu::OperandSlot::Scalar: ops.push_back(Operand::float_(1.5)); break;
        case npu::OperandSlot::Address: {
          const Buffer b = vector ? Buffer::UB : static_cast<Buffer>(pick(0, npu::kBufferCount - 1));
          s.value[i] = m_.alignment(b) * pick(0, 15);
          s.on_base[i] = pick(0, 1) == 1;
          ops.push_back(Operand::addr(b, s.value[i], s.on_base[i] ? kBaseReg : npu::kNoRegister));
          break;
        }
        default: {  // a value: small, or a multiple of a fractal side; an immediate or a register
          s.value[i] = pick(0, 1) ? pick(0, 4) : 16 * pick(1, 4);
          if (pick(0, 1)) {
            ops.push_back(Operand::imm_(s.value[i]));
          } else {
            s.program.add(Opcode::Mov, {Operand::reg_(next_reg), Operand::imm_(s.value[i])});
            ops.push_back(Operand::reg_(next_reg++));
          }
        }
      }
    }
    s.program.add(Opcode::Loop, {Operand::reg_(kLoopReg), Operand::imm_(0), Operand::imm_(s.trips), Operand::imm_(1)});
    s.program.add(Opcode::Mul, {Operand::reg_(kBaseReg), Operand::reg_(kLoopReg), Operand::imm_(s.base_step)});
    s.pc = static_cast<int>(s.program.code.size());
    s.program.add(op, ops);
    s.program.add(Opcode::EndLoop, {});
    s.program.add(Opcode::PipeBarrier, {Operand::pipe_(npu::Pipe::All)});
    return s;
  }

 private:
  int64_t pick(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }
  static constexpr DType kTypes[] = {DType::F16, DType::F32, DType::I32, DType::I8};
  const isa::NpuMachine& m_;
  std::mt19937 rng_;
};

bool validates(const npu::Program& p) {
  try {
    npu::validate_program(p);
    return true;
  } catch (const UserError&) {
    return false;
  }
}

// The simulator's accesses of iteration `trip`, or nothing when the simulator rejects the instance.
std::optional<std::vector<npu_sim::Access>> exact_accesses(const isa::NpuMachine& m, const Sample& s, int64_t trip) {
  npu_sim::IssuedInstruction in;
  in.pc = s.pc;
  in.instr = &s.program.code[s.pc];
  for (int i = 0; i < npu::kMaxOperands; ++i) in.value[i] = s.value[i] + (s.on_base[i] ? trip * s.base_step : 0);
  in.fmatrix = s.fmatrix;
  npu_sim::MemoryView view;
  for (int b = 0; b < npu::kBufferCount; ++b) view.size[b] = static_cast<uint64_t>(m.capacity(static_cast<Buffer>(b)));
  view.size[static_cast<int>(Buffer::GM)] = kGmBytes;
  std::vector<npu_sim::Access> accesses;
  npu_sim::InstructionCost cost;
  try {
    npu_sim::describe_instruction(m, in, view, accesses, cost);
  } catch (const npu_sim::InstructionFault&) {
    return std::nullopt;
  }
  return accesses;
}

bool inside(const npu_sim::Access& a, const std::vector<npu_sync::ByteRange>& ranges) {
  for (const npu_sim::Interval& r : a.ranges) {
    bool covered = false;
    for (const npu_sync::ByteRange& b : ranges)
      covered = covered || (b.buffer == a.buffer && b.write == a.write && b.begin <= int64_t(r.begin) && int64_t(r.end) <= b.end);
    if (!covered) return false;
  }
  return true;
}

// Checks `wanted` accepted instances of `op`; returns how many were accepted.
int check_opcode(const isa::Hierarchy& h, Opcode op, int wanted, uint32_t seed) {
  const isa::NpuMachine m = isa::npu_machine(h);
  Generator gen(m, seed);
  int accepted = 0;
  for (int attempt = 0; attempt < 400000 && accepted < wanted; ++attempt) {
    const Sample s = gen.make(op);
    if (!validates(s.program)) continue;
    std::vector<std::vector<npu_sim::Access>> instances;
    for (int64_t t = 0; t < s.trips; ++t) {
      auto a = exact_accesses(m, s, t);
      if (!a) break;
      instances.push_back(std::move(*a));
    }
    if (static_cast<int64_t>(instances.size()) != s.trips) continue;
    ++accepted;
    const npu_sync::StaticFootprints f = npu_sync::analyse_footprints(s.program, h);
    const std::vector<npu_sync::ByteRange>& bounds = f.accesses[s.pc];
    for (const auto& accesses : instances)
      for (const npu_sim::Access& a : accesses) {
        if (inside(a, bounds)) continue;
        FAIL_CHECK(npu::print_program(s.program) << "\naccess of " << npu::buffer_name(a.buffer) << " [" << a.lo << ", "
                                                 << a.hi << ") write " << a.write << " escapes the sync pass's ranges");
        return accepted;
      }
  }
  return accepted;
}

}  // namespace

TEST_CASE("every opcode's exact footprint lies inside the sync pass's interval footprint (property)") {
  for (const char* name : {"davinci-910.yaml", "davinci-310.yaml"}) {
    for (int i = 0; i < npu::kOpcodeCount; ++i) {
      const Opcode op = static_cast<Opcode>(i);
      if (npu::opcode_info(op).access_count == 0) continue;
      CAPTURE(std::string(name));
      CAPTURE(npu::mnemonic(op));
      CHECK(check_opcode(target(name), op, 12, 1000u + i) == 12);
    }
  }
}

TEST_CASE("the table's accesses: every compute or copy instruction touches memory, scalar and sync ones do not") {
  for (int i = 0; i < npu::kOpcodeCount; ++i) {
    const npu::OpcodeInfo& info = npu::opcode_info(static_cast<Opcode>(i));
    CAPTURE(info.mnemonic);
    const bool compute = info.pipe_rule != npu::PipeRule::S && info.pipe_rule != npu::PipeRule::FlagSrc &&
                         info.pipe_rule != npu::PipeRule::FlagDst && info.pipe_rule != npu::PipeRule::Barrier;
    // the scalar unit's ld reads one GM element into a register: a read, no memory write
    const bool scalar_read = static_cast<Opcode>(i) == Opcode::Ld;
    CHECK((info.access_count > 0) == (compute || scalar_read));
    if (scalar_read) CHECK((info.access_count == 1 && !info.accesses[0].write()));
    int writes = 0;
    for (int a = 0; a < info.access_count; ++a) writes += info.accesses[a].write();
    CHECK(writes == (compute ? 1 : 0));
  }
}

TEST_CASE("vmod (a vector op added as one table row): its footprint and the syncs around it") {
  const npu::Program p = npu::assemble_program(R"(
.tensor X f32 [128] at GM+0 in
.tensor O f32 [128] at GM+512 out
dma_in UB[0], GM[0], 1, 512, 0, 0
vmod f32, UB[1024], UB[0], UB[256], 2, 1, 1, 1, 8, 8, 8
dma_out GM[512], UB[1024], 1, 512, 0, 0
pipe_barrier ALL
)",
                                               "vmod.npu");
  const npu_sync::StaticFootprints f = npu_sync::analyse_footprints(p, target("davinci-910.yaml"));
  REQUIRE(f.accesses[1].size() == 2);  // both sources merge into one read range
  CHECK(f.accesses[1][0].buffer == Buffer::UB);
  CHECK_FALSE(f.accesses[1][0].write);
  CHECK(f.accesses[1][0].begin == 0);
  CHECK(f.accesses[1][0].end == 256 + 2 * 256);  // src1: 2 repeats of 256 bytes from 256
  CHECK(f.accesses[1][1].write);
  CHECK(f.accesses[1][1].begin == 1024);
  CHECK(f.accesses[1][1].end == 1024 + 512);
  const npu_sync::SyncResult r = npu_sync::insert_syncs(p, target("davinci-910.yaml"), {npu_sync::SyncMode::Pruned, -1});
  const std::string text = npu::print_program(r.program);
  CHECK(text.find("wait_flag MTE2, V") != std::string::npos);
  CHECK(text.find("wait_flag V, MTE3") != std::string::npos);
}
