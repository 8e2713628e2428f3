// The simulator's energy (npu_sim/report.h energy_report): the record counts events (bytes each
// instruction reads and writes per buffer, MACs, vector repeats, scalar-pipe instructions, bytes
// each path engine moves), the report prices them with the description's energies. Checked on
// hand-counted programs (tests/npu_sim/energy/*.npu, the counts in their header comments).
#include <doctest/doctest.h>

#include <numeric>

#include "npu_sim/report.h"
#include "sim_test_util.h"

using namespace tessel;
using namespace tessel::npu_sim;
using namespace tessel::npu_sim::testing;

namespace {

// davinci-910.yaml's prices (pJ), restated so that the hand computations below are plain numbers.
constexpr double kGm = 31.2, kL0ab = 0.86, kL0cUb = 1.64, kMacF16 = 0.5, kRepeat = 24, kScalar = 17.5;
constexpr double kMte2 = 2.0, kMte3 = 2.0, kVectorMove = 0.4;

SimRecord run(const std::string& name, bool timing_only = true) {
  const npu::Program p = npu::load_program(std::string(TESSEL_SOURCE_DIR) + "/tests/npu_sim/energy/" + name);
  std::map<std::string, NpyArray> inputs;
  for (const npu::TensorBinding& t : p.tensors)
    if (!timing_only && t.is_input()) inputs[t.name] = random_f16(t.shape, 7);
  SimOptions o;
  o.timing_only = timing_only;
  return simulate(p, davinci(), inputs, o).record;
}

const LevelEnergy& level(const EnergyReport& e, const std::string& name) {
  for (const LevelEnergy& l : e.levels)
    if (l.level == name) return l;
  FAIL("no level " << name);
  return e.levels.front();
}

const UnitEnergy& unit(const EnergyReport& e, const std::string& name) {
  for (const UnitEnergy& u : e.units)
    if (u.unit == name) return u;
  FAIL("no unit " << name);
  return e.units.front();
}

void check_sums(const EnergyReport& e) {
  const double levels = std::accumulate(e.levels.begin(), e.levels.end(), 0.0, [](double s, const LevelEnergy& l) { return s + l.pj; });
  const double units = std::accumulate(e.units.begin(), e.units.end(), 0.0, [](double s, const UnitEnergy& u) { return s + u.pj; });
  CHECK(e.levels_pj == doctest::Approx(levels));
  CHECK(e.units_pj == doctest::Approx(units));
  CHECK(e.total_pj == doctest::Approx(levels + units));
}

}  // namespace

TEST_CASE("energy: the description's prices the hand computations use") {
  const isa::NpuMachine m = isa::npu_machine(davinci());
  CHECK(m.buffer(npu::Buffer::GM).read_energy_pj_per_byte == kGm);
  CHECK(m.buffer(npu::Buffer::GM).write_energy_pj_per_byte == kGm);
  CHECK(m.buffer(npu::Buffer::L0A).read_energy_pj_per_byte == kL0ab);
  CHECK(m.buffer(npu::Buffer::L0C).write_energy_pj_per_byte == kL0cUb);
  CHECK(m.buffer(npu::Buffer::UB).read_energy_pj_per_byte == kL0cUb);
  CHECK(m.cube_f16.energy_pj_per_mac == kMacF16);
  CHECK(m.vector_energy_pj_per_repeat == kRepeat);
  CHECK(m.scalar_energy_pj_per_instruction == kScalar);
  CHECK(m.path(npu::Buffer::GM, npu::Buffer::UB).engine_energy_pj_per_byte == kMte2);
  CHECK(m.path(npu::Buffer::UB, npu::Buffer::GM).engine_energy_pj_per_byte == kMte3);
  CHECK(m.path(npu::Buffer::L0C, npu::Buffer::UB).engine == "vector");
  CHECK(m.path(npu::Buffer::L0C, npu::Buffer::UB).engine_energy_pj_per_byte == kVectorMove);
}

TEST_CASE("energy: vector program (dma_in x2, vadd, vrelu, dma_out) equals the hand count") {
  const EnergyReport e = energy_report(run("add_relu.npu"));
  CHECK(level(e, "GM").bytes_read == 16384);
  CHECK(level(e, "GM").bytes_written == 8192);
  CHECK(level(e, "UB").bytes_read == 16384 + 8192 + 8192);
  CHECK(level(e, "UB").bytes_written == 16384 + 8192 + 8192);
  CHECK(level(e, "L1").bytes_read + level(e, "L1").bytes_written == 0);
  CHECK(unit(e, "vector").repeats == 64);
  CHECK(unit(e, "scalar").instructions == 10);
  CHECK(unit(e, "mte2").bytes_moved == 16384);
  CHECK(unit(e, "mte3").bytes_moved == 8192);
  CHECK(unit(e, "cube").macs == 0);
  CHECK(level(e, "GM").pj == doctest::Approx((16384 + 8192) * kGm));
  CHECK(unit(e, "vector").pj == doctest::Approx(64 * kRepeat));
  const double hand = (16384 + 8192) * kGm + 65536 * kL0cUb + 64 * kRepeat + 10 * kScalar + 16384 * kMte2 + 8192 * kMte3;
  CHECK(e.total_pj == doctest::Approx(hand));  // 925,113.24 pJ
  CHECK(e.macs == 0);
  CHECK(e.pj_per_mac() == 0);
  check_sums(e);
}

TEST_CASE("energy: cube program (two mmads, the second accumulating, L0C -> UB -> GM) equals the hand count") {
  const EnergyReport e = energy_report(run("mmad_twice.npu"));
  CHECK(level(e, "L0A").bytes_written == 512);
  CHECK(level(e, "L0A").bytes_read == 1024);
  CHECK(level(e, "L0B").bytes_read == 1024);
  CHECK(level(e, "L0C").bytes_written == 2048);
  CHECK(level(e, "L0C").bytes_read == 2048);  // the accumulating mmad and mov_l0c; the initialising mmad reads none
  CHECK(level(e, "UB").bytes_written == 1024);
  CHECK(unit(e, "cube").macs == 8192);
  CHECK(unit(e, "vector").repeats == 0);
  CHECK(unit(e, "vector").bytes_moved == 1024);  // the L0C -> UB move is the vector unit's
  CHECK(unit(e, "scalar").instructions == 13);
  const double hand = 2048 * kGm + 2 * 1536 * kL0ab + 4096 * kL0cUb + 2048 * kL0cUb + 8192 * kMacF16 + 1024 * kVectorMove +
                      13 * kScalar + 1024 * kMte2 + 1024 * kMte3;
  CHECK(e.total_pj == doctest::Approx(hand));  // 85,444.78 pJ
  CHECK(e.pj_per_mac() == doctest::Approx(hand / 8192));
  check_sums(e);
}

TEST_CASE("energy: a functional run counts the same events as a timing-only run") {
  const EnergyReport timing = energy_report(run("mmad_twice.npu", true));
  const EnergyReport functional = energy_report(run("mmad_twice.npu", false));
  CHECK(functional.total_pj == timing.total_pj);
}

TEST_CASE("energy: the JSON report carries levels, units and the totals") {
  const nlohmann::json j = report_json(run("add_relu.npu"));
  REQUIRE(j.contains("energy"));
  const nlohmann::json& e = j["energy"];
  CHECK(e["levels"]["GM"]["bytes_read"] == 16384);
  CHECK(e["units"]["vector"]["repeats"] == 64);
  CHECK(e["units"]["scalar"]["instructions"] == 10);
  CHECK(e["total_pj"].get<double>() == doctest::Approx(925113.24));
  CHECK(e["levels_pj"].get<double>() + e["units_pj"].get<double>() == doctest::Approx(925113.24));
  CHECK(j["units"]["pj"].get<std::string>().find("picojoules") == 0);
}

TEST_CASE("energy: the text line names the total, pJ/MAC, levels and units") {
  const std::string t = energy_text(energy_report(run("mmad_twice.npu")));
  CHECK(t.rfind("energy: 85.44 nJ (10.430 pJ/MAC); levels ", 0) == 0);
  CHECK(t.find(" GM 63.9 ") != std::string::npos);
  CHECK(t.find(" cube 4.096 ") != std::string::npos);
  CHECK(t.find("L1") == std::string::npos);  // levels with no traffic are left out
}
