// libFuzzer target for the .npu assembler and the simulator (issue 17): any byte string either
// assembles and validates or raises a UserError; what validates and is small (at most 4 cores,
// 4096 instructions, 16 MiB of tensors) is simulated on davinci-910 with zero inputs, functional
// and with race detection, under tight cycle and event budgets so that no program — an endless
// loop, a deadlock, a wrapped counter — runs long or grows the record. Its UserErrors (budgets,
// out-of-range addresses, division by zero) are fine; a crash, an ASan report, an InternalError or a
// hang is a bug. Built by scripts/fuzz.sh, not by CMake.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "isa/base/error.h"
#include "isa/hierarchy.h"
#include "isa/npu_program.h"
#include "npu_sim/simulator.h"

namespace {

constexpr int kMaxCores = 4;
constexpr size_t kMaxInstructions = 4096;
constexpr int64_t kMaxTensorBytes = int64_t(16) << 20;

const tessel::isa::Hierarchy& target() {
  static const tessel::isa::Hierarchy h = tessel::isa::load_hierarchy(TESSEL_SOURCE_DIR "/isa/targets/davinci-910.yaml");
  return h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessel;
  const std::string text(reinterpret_cast<const char*>(data), size);
  npu::Program program;
  try {
    program = npu::assemble_program(text, "fuzz.npu");
    npu::validate_program(program);
  } catch (const UserError&) {
    return 0;
  }
  if (program.cores > kMaxCores || program.code.size() > kMaxInstructions) return 0;
  std::map<std::string, NpyArray> inputs;
  int64_t bytes = 0;
  for (const auto& t : program.tensors) {
    bytes += t.byte_size();
    if (t.byte_size() < 0 || bytes > kMaxTensorBytes) return 0;
    if (!t.is_input()) continue;
    NpyArray a;
    a.dtype = t.dtype;
    a.shape = t.shape;
    a.data.assign(size_t(t.byte_size()), 0);
    inputs.emplace(t.name, std::move(a));
  }
  npu_sim::SimOptions o;
  o.max_cycles = 2'000'000;
  o.max_recorded_events = 200'000;
  try {
    npu_sim::simulate(program, target(), inputs, o);
  } catch (const UserError&) {
  }
  return 0;
}
