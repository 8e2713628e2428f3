// The scalar unit's `ld` (isa/README.md): an i32 read from GM into a register, so a DMA's address
// can depend on data (a gather's row index). Checked: the value read drives a row copy, its timing
// (scalar_cycles + the GM->UB latency before the next instruction issues), timing-only runs read 0,
// only i32 from GM is accepted, and a GM element an earlier dma_out wrote is a race without a flag
// from MTE3 to S and none with it.
#include <doctest/doctest.h>

#include <cstring>

#include "isa/base/error.h"
#include "sim_test_util.h"

using namespace tessel;
using namespace tessel::npu_sim;
using namespace tessel::npu_sim::testing;

namespace {

// Copies row ids[1] of T [4, 8] f32 to Y: ld, row offset, one DMA in and one out.
const std::string kRowCopy = R"(.tensor ids i32 [2] at GM+0 in
.tensor T f32 [4, 8] at GM+32 in
.tensor Y f32 [8] at GM+160 out
ld r1, i32, GM[4]
mul r2, r1, 32
dma_in UB[0], GM[r2+32], 1, 32, 0, 0
set_flag MTE2, MTE3, 0
wait_flag MTE2, MTE3, 0
dma_out GM[160], UB[0], 1, 32, 0, 0
pipe_barrier ALL
)";

NpyArray i32_array(std::vector<int32_t> v) {
  NpyArray a;
  a.dtype = DType::I32;
  a.shape = {int64_t(v.size())};
  a.data.resize(v.size() * 4);
  std::memcpy(a.data.data(), v.data(), a.data.size());
  return a;
}

NpyArray table() {
  NpyArray a;
  a.dtype = DType::F32;
  a.shape = {4, 8};
  std::vector<float> v(32);
  for (int i = 0; i < 32; ++i) v[size_t(i)] = float(100 + i);
  a.data.resize(128);
  std::memcpy(a.data.data(), v.data(), 128);
  return a;
}

std::string error_of(const std::string& text, std::vector<int32_t> ids, SimOptions o = {}) {
  try {
    simulate(npu::assemble_program(text, "ld.npu"), davinci(), {{"ids", i32_array(ids)}, {"T", table()}}, o);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("ld reads an i32 from GM and a DMA copies the row it names") {
  const npu::Program p = npu::assemble_program(kRowCopy, "ld.npu");
  for (int32_t row : {0, 2, 3}) {
    CAPTURE(row);
    const SimResult r = simulate(p, davinci(), {{"ids", i32_array({7, row})}, {"T", table()}});
    const NpyArray y = r.tensor(p, "Y");
    for (int j = 0; j < 8; ++j) CHECK(f32_at(y, j) == float(100 + 8 * row + j));
    CHECK(r.record.races.empty());
  }
}

TEST_CASE("ld holds the scalar pipe for scalar_cycles + the GM->UB latency, and a timing-only run reads 0") {
  // issue of ld (1 + 300), mul (1), dma_in dispatched at 302: its 32 bytes take 1 cycle + 300 latency
  const npu::Program p = npu::assemble_program(kRowCopy, "ld.npu");
  const SimResult r = simulate(p, davinci(), {{"ids", i32_array({7, 3})}, {"T", table()}});
  SimOptions o;
  o.timing_only = true;
  const SimResult t = simulate(p, davinci(), {}, o);
  CHECK(t.record.total_cycles == r.record.total_cycles);  // the row's value does not change the timing
  CHECK(r.record.total_cycles >= 301 + 1 + 1 + 300);
  // an index only a data run sees: past the table in data runs, row 0 in timing-only runs
  const std::string past = R"(.tensor ids i32 [2] at GM+0 in
.tensor T f32 [4, 8] at GM+32 in
.tensor Y f32 [8] at GM+160 out
ld r1, i32, GM[0]
mul r2, r1, 1000
dma_in UB[0], GM[r2+32], 1, 32, 0, 0
pipe_barrier ALL
)";
  CHECK(error_of(past, {5, 0}, o) == "");
  CHECK(error_of(past, {0, 0}) == "");
  CHECK(error_of(past, {5, 0}).find("beyond the GM the program's tensors declare") != std::string::npos);
  CHECK_THROWS_WITH_AS(npu::assemble_program("ld r1, f32, GM[0]\npipe_barrier ALL\n.tensor G f32 [8] at GM+0 in\n", "ld.npu"),
                       doctest::Contains("'ld' reads i32 only"), UserError);
  CHECK_THROWS_WITH_AS(npu::assemble_program("ld r1, i32, UB[0]\npipe_barrier ALL\n", "ld.npu"),
                       doctest::Contains("cannot be in UB"), UserError);
}

TEST_CASE("ld of a GM element a dma_out wrote: a race without a flag from MTE3 to S, none with it") {
  const std::string head = R"(.tensor ids i32 [8] at GM+0 in
.tensor T f32 [4, 8] at GM+32 in
.tensor Y f32 [8] at GM+160 out
dma_in UB[0], GM[0], 1, 32, 0, 0
set_flag MTE2, MTE3, 0
wait_flag MTE2, MTE3, 0
dma_out GM[160], UB[0], 1, 32, 0, 0
)";
  const std::string tail = "ld r1, i32, GM[164]\npipe_barrier ALL\n";
  const std::map<std::string, NpyArray> in = {{"ids", i32_array({0, 1, 2, 3, 4, 5, 6, 7})}, {"T", table()}};
  const npu::Program racy = npu::assemble_program(head + tail, "ld.npu");
  CHECK_FALSE(simulate(racy, davinci(), in).record.races.empty());
  const npu::Program synced = npu::assemble_program(head + "set_flag MTE3, S, 0\nwait_flag MTE3, S, 0\n" + tail, "ld.npu");
  CHECK(simulate(synced, davinci(), in).record.races.empty());
}
