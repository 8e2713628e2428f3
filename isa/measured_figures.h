// The figures of a GPU description that microbenchmarks can check (issue 19 item 1), the
// comparison of described with measured values, and the measured variant of a description.
//
// described_figures(h) lists what the description claims, each with its unit, its tolerance and
// where it lives in the YAML; gpu_backend/microbench.h measures the same ids on the device;
// compare_figures pairs them; write_measured_description rewrites the description's text with
// the measured values (comments kept, each changed value's comment citing the device and date),
// and the result validates with the same parser. Everything here runs without a GPU (the tests
// feed it fake measurements).
//
// Units: bandwidths of the global level and the L2 are whole-chip bytes per cycle at the
// description's clock_mhz (measured bytes per second / clock); the global -> shared copy rates
// (cp.async, TMA) are bytes per cycle per SM at clock_mhz (as the description's paths are); the
// shared-memory figures and tensor-core rates are per SM cycle, counted on the SM's own clock
// (clock64), so they do not depend on the clock the part happens to run at; latencies are SM
// cycles.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "isa/hierarchy.h"

namespace tessel::isa {

// Where a figure's value lives in the description (what --write-measured rewrites).
enum class FigureSite {
  GlobalBandwidth,     // levels[global].shared_bandwidth_bytes_per_cycle
  GlobalReadLatency,   // levels[global].read_latency_cycles
  L2Bandwidth,         // gpu.l2_bandwidth_bytes_per_cycle
  L2HitLatency,        // gpu.l2_hit_latency_cycles
  StageBandwidth,      // bandwidth of every path between the stage level and an on-chip level
  StageLatency,        // latency of those paths
  PathBandwidth,       // paths[path].bandwidth_bytes_per_cycle
  ShapeCycles,         // units[unit].shapes[shape].cycles (a rate in MAC/cycle/SM)
  None,                // compared only (another figure writes the key)
};

struct Figure {
  std::string id;         // "global.read_bandwidth", "tensor.f16-f32"
  std::string label;      // "global read bandwidth (chip)"
  std::string unit;       // "B/cycle", "B/cycle/SM", "cycles", "MAC/cycle/SM"
  double described = 0;   // 0: the description does not state it (shown, never a mismatch)
  double tolerance = 0;   // relative: |measured / described - 1| <= tolerance agrees
  FigureSite site = FigureSite::None;
  int path = -1;          // PathBandwidth: index into h.paths
  int unit_index = -1, shape_index = -1;  // ShapeCycles: units[unit_index].shapes[shape_index]
  DType a = DType::F16, acc = DType::F32;  // tensor figures: the shape's types
};

// What the microbenchmarks found for one figure id.
struct Measurement {
  std::string id;
  std::optional<double> value;  // empty: the benchmark failed or does not apply
  std::string detail;           // how: "wgmma m64n256k16 1843, mma.sync 1270, wmma 1105"
  std::string error;            // why value is empty
};

enum class Verdict { Agrees, Mismatch, NotDescribed, NotMeasured };

struct FigureComparison {
  Figure figure;
  Measurement measured;
  Verdict verdict = Verdict::NotMeasured;
  double ratio = 0;  // measured / described (0 when either is missing)
};

// The measurable figures of a GPU description, in table order: global read / write / copy
// bandwidth and read latency, L2 bandwidth and hit latency, shared bandwidth and latency, the
// global -> shared copy rate of the lsu path (cp.async where the description has the feature) and
// of the tma path (bulk_copy), and one tensor-core rate per matrix shape. Throws UserError for an
// NPU description.
std::vector<Figure> described_figures(const Hierarchy& h);

// The tolerances, one per kind of figure (documented in isa/README.md).
inline constexpr double kBandwidthTolerance = 0.25;
inline constexpr double kLatencyTolerance = 0.40;
inline constexpr double kTensorRateTolerance = 0.25;

std::vector<FigureComparison> compare_figures(const std::vector<Figure>& figures,
                                              const std::vector<Measurement>& measurements);
int count_figure_mismatches(const std::vector<FigureComparison>& rows);

// The table (figure, described, measured, ratio, verdict) and one "mismatch: ..." line per figure
// beyond its tolerance, both values named.
std::string format_figure_table(const Hierarchy& h, const std::string& device_name,
                                const std::vector<FigureComparison>& rows);

// The description's text with every measured figure that has a site replaced by its measured
// value (rounded as the key's type needs), each rewritten key's comment saying
// "measured on DEVICE DATE (described X)", `name` suffixed "-measured" and a header naming the
// device, the date and the command. A key the description lacks (the L2 figures) is added under
// l2_cache_bytes. Throws UserError when a rewritten key cannot be found in the text.
std::string write_measured_description(const std::string& original_text, const Hierarchy& h,
                                       const std::vector<FigureComparison>& rows, const std::string& device_name,
                                       const std::string& date);

}  // namespace tessel::isa
