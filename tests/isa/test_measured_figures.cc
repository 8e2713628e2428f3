// What a GPU description claims that microbenchmarks check, the comparison with tolerances, and
// the measured variant's writer (isa/measured_figures.h), with fake measurements (no GPU).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "isa/base/error.h"
#include "isa/measured_figures.h"
#include "tests/isa/description_text.h"

using namespace tessel;
using namespace tessel::isa;
using namespace tessel::isa::testing;

namespace {

const Figure& figure(const std::vector<Figure>& fs, const std::string& id) {
  for (const auto& f : fs)
    if (f.id == id) return f;
  FAIL("no figure " << id);
  return fs.front();
}

std::vector<std::string> ids(const std::vector<Figure>& fs) {
  std::vector<std::string> out;
  for (const auto& f : fs) out.push_back(f.id);
  return out;
}

// Every figure measured at `scale` x its described value (L2 figures, where not described, at
// fixed values), except the overrides.
std::vector<Measurement> fake(const std::vector<Figure>& fs, double scale, std::map<std::string, double> overrides = {}) {
  std::vector<Measurement> out;
  for (const auto& f : fs) {
    double v = f.described > 0 ? f.described * scale : (f.id == "l2.bandwidth" ? 3000 : 250);
    if (overrides.count(f.id)) v = overrides.at(f.id);
    out.push_back({f.id, v, "fake", ""});
  }
  return out;
}

const TransferPath& path(const Hierarchy& h, const std::string& from, const std::string& to, const std::string& engine) {
  for (const auto& p : h.paths)
    if (p.from == from && p.to == to && p.engine == engine) return p;
  FAIL("no path " << from << " -> " << to << " by " << engine);
  return h.paths.front();
}

}  // namespace

TEST_CASE("the measurable figures of the H100 description, with the description's values and units") {
  const Hierarchy h = load_hierarchy(target_path("sm90-h100.yaml"));
  const auto fs = described_figures(h);
  CHECK(ids(fs) == std::vector<std::string>{"global.read_bandwidth", "global.write_bandwidth", "global.copy_bandwidth",
                                            "global.read_latency", "l2.bandwidth", "l2.hit_latency", "shared.bandwidth",
                                            "shared.latency", "copy.cp_async", "copy.tma", "tensor.f16-f32", "tensor.bf16-f32",
                                            "tensor.i8-i32"});
  CHECK(figure(fs, "global.read_bandwidth").described == 1830);
  CHECK(figure(fs, "global.read_bandwidth").unit == "B/cycle");
  CHECK(figure(fs, "global.read_latency").described == 480);
  CHECK(figure(fs, "l2.bandwidth").described == 3600);
  CHECK(figure(fs, "l2.hit_latency").described == 263);
  CHECK(figure(fs, "shared.bandwidth").described == 128);
  CHECK(figure(fs, "shared.latency").described == 30);
  CHECK(figure(fs, "copy.cp_async").described == doctest::Approx(13.9));
  CHECK(figure(fs, "copy.tma").described == doctest::Approx(13.9));
  // 16x16x16 = 4096 MAC in 8 cycles on each of 4 tensor cores: 2048 MAC/cycle/SM; i8 in 4 cycles
  CHECK(figure(fs, "tensor.f16-f32").described == 2048);
  CHECK(figure(fs, "tensor.i8-i32").described == 4096);
  CHECK(figure(fs, "tensor.f16-f32").unit == "MAC/cycle/SM");
  CHECK(figure(fs, "shared.latency").tolerance == kLatencyTolerance);
}

TEST_CASE("a Turing description: load + store copies, no TMA, and the L2 figures not described") {
  const Hierarchy h = load_hierarchy(target_path("sm75.yaml"));
  const auto fs = described_figures(h);
  const auto v = ids(fs);
  CHECK(std::find(v.begin(), v.end(), "copy.load_store") != v.end());
  CHECK(std::find(v.begin(), v.end(), "copy.cp_async") == v.end());
  CHECK(std::find(v.begin(), v.end(), "copy.tma") == v.end());
  CHECK(figure(fs, "l2.bandwidth").described == 0);
  const auto rows = compare_figures(fs, fake(fs, 1.0));
  for (const auto& r : rows)
    if (r.figure.id == "l2.bandwidth") CHECK(r.verdict == Verdict::NotDescribed);
  CHECK(count_figure_mismatches(rows) == 0);
}

TEST_CASE("an NPU description has no GPU figures") {
  CHECK_THROWS_WITH_AS(described_figures(load_hierarchy(target_path("davinci-910.yaml"))),
                       doctest::Contains("is not a GPU description"), UserError);
}

TEST_CASE("comparison: within tolerance agrees, beyond it is a mismatch naming both values, a failed benchmark is not measured") {
  const Hierarchy h = load_hierarchy(target_path("sm90-h100.yaml"));
  const auto fs = described_figures(h);
  auto ms = fake(fs, 1.2, {{"global.read_bandwidth", 1281}, {"shared.latency", 29}});
  for (auto& m : ms)
    if (m.id == "copy.tma") m.value.reset(), m.error = "cuTensorMapEncodeTiled failed";
  const auto rows = compare_figures(fs, ms);
  CHECK(count_figure_mismatches(rows) == 1);  // 1281 / 1830 = 0.70: 30 % below, tolerance 25 %
  for (const auto& r : rows) {
    if (r.figure.id == "global.read_bandwidth") CHECK(r.ratio == doctest::Approx(0.7));
    if (r.figure.id == "copy.tma") CHECK(r.verdict == Verdict::NotMeasured);
    if (r.figure.id == "tensor.f16-f32") CHECK(r.verdict == Verdict::Agrees);  // +20 % within 25 %
  }
  const std::string table = format_figure_table(h, "Fake H100", rows);
  CHECK(table.find("mismatch: global read bandwidth (chip): " + target_path("sm90-h100.yaml") +
                   " says 1830 B/cycle, measured 1281 B/cycle (-30 %, tolerance 25 %)") != std::string::npos);
  CHECK(table.find("not measured (cuTensorMapEncodeTiled failed)") != std::string::npos);
  CHECK(table.find("1 measured figure of " + target_path("sm90-h100.yaml") + " is beyond tolerance on Fake H100") != std::string::npos);
}

TEST_CASE("the measured variant carries the measured values, cites the device and date, and validates") {
  const std::string file = target_path("sm90-h100.yaml");
  const Hierarchy h = load_hierarchy(file);
  const auto fs = described_figures(h);
  const auto rows = compare_figures(fs, fake(fs, 1.0, {{"global.read_bandwidth", 1650.5},
                                                        {"global.read_latency", 612.4},
                                                        {"l2.bandwidth", 2950},
                                                        {"l2.hit_latency", 271.6},
                                                        {"shared.bandwidth", 121.3},
                                                        {"shared.latency", 33.2},
                                                        {"copy.cp_async", 12.1},
                                                        {"copy.tma", 12.6},
                                                        {"tensor.f16-f32", 1820}}));
  const std::string text = write_measured_description(read_text(file), h, rows, "Fake H100", "2026-01-02");
  CHECK(text.rfind("# Measured variant of " + file + ": measured on Fake H100 2026-01-02", 0) == 0);
  const Hierarchy m = parse_hierarchy(text, "measured.yaml");
  CHECK(m.name == "sm90-h100-measured");
  CHECK(m.level(Role::Global).shared_bandwidth_bytes_per_cycle == doctest::Approx(1650.5));
  CHECK(m.level(Role::Global).read_latency_cycles == 612);
  CHECK(m.level(Role::Global).write_latency_cycles == 480);  // not measured: unchanged
  CHECK(m.gpu->l2_bandwidth_bytes_per_cycle == 2950);
  CHECK(m.gpu->l2_hit_latency_cycles == 272);
  // every path between shared and an on-chip level carries the shared figures
  for (const char* to : {"frag_a", "frag_b", "registers"}) {
    CHECK(path(m, "shared", to, "lsu").bandwidth_bytes_per_cycle == doctest::Approx(121.3));
    CHECK(path(m, "shared", to, "lsu").latency_cycles == 33);
  }
  CHECK(path(m, "frag_acc", "shared", "lsu").bandwidth_bytes_per_cycle == doctest::Approx(121.3));
  CHECK(path(m, "global", "shared", "lsu").bandwidth_bytes_per_cycle == doctest::Approx(12.1));
  CHECK(path(m, "global", "shared", "tma").bandwidth_bytes_per_cycle == doctest::Approx(12.6));
  CHECK(path(m, "global", "registers", "lsu").bandwidth_bytes_per_cycle == doctest::Approx(13.9));  // not measured
  // 1820 MAC/cycle/SM over 4 tensor cores: 4096 x 4 / 1820 = 9.0 cycles per 16x16x16
  CHECK(m.units[0].shapes[0].cycles == 9);
  CHECK(m.units[0].shapes[2].cycles == 4);  // i8 measured as described
  // each rewritten key cites the device, date and the described value; other comments are kept
  CHECK(text.find("read_latency_cycles: 612   # measured on Fake H100 2026-01-02 (described 480)") != std::string::npos);
  CHECK(text.find("bandwidth_bytes_per_cycle: 12.6, latency_cycles: 480, transforms: [img2col]}   # measured on Fake H100 "
                  "2026-01-02: bandwidth_bytes_per_cycle was 13.9; [WP] cp.async.bulk / TMA, sm_90") != std::string::npos);
  CHECK(text.find("[PG] 48 KiB without opt-in") != std::string::npos);
  // checked again, the measured variant agrees with the same measurements
  const auto again = compare_figures(described_figures(m), [&] {
    std::vector<Measurement> ms;
    for (const auto& r : rows) ms.push_back(r.measured);
    return ms;
  }());
  CHECK(count_figure_mismatches(again) == 0);
}

TEST_CASE("the measured variant of a description without L2 figures gains them under l2_cache_bytes") {
  const std::string file = target_path("sm80.yaml");
  const Hierarchy h = load_hierarchy(file);
  const auto fs = described_figures(h);
  const std::string text = write_measured_description(read_text(file), h, compare_figures(fs, fake(fs, 1.0)), "Fake A100", "2026-01-02");
  const Hierarchy m = parse_hierarchy(text, "measured.yaml");
  CHECK(m.gpu->l2_bandwidth_bytes_per_cycle == 3000);
  CHECK(m.gpu->l2_hit_latency_cycles == 250);
  CHECK(m.gpu->l2_cache_bytes == h.gpu->l2_cache_bytes);
  CHECK(text.find("l2_hit_latency_cycles: 250   # measured on Fake A100 2026-01-02 (described nothing)") != std::string::npos);
}

TEST_CASE("the L2 figures are validated: negative or absurd values are rejected with the key") {
  const std::string good = read_text(target_path("sm90-h100.yaml"));
  CHECK(rejection(replaced(good, "l2_bandwidth_bytes_per_cycle: 3600", "l2_bandwidth_bytes_per_cycle: -3")).find(
            "gpu.l2_bandwidth_bytes_per_cycle") != std::string::npos);
  CHECK(rejection(replaced(good, "l2_hit_latency_cycles: 263", "l2_hit_latency_cycles: -1")).find("l2_hit_latency_cycles") !=
        std::string::npos);
}
