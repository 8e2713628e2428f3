// GPU measurements: compile each configuration and time it with the function the binary passes
// (run_on_gpu's kernel time), one at a time (one device).
#include <chrono>

#include "compiler/tune/measure.h"

namespace tessel::tune {

namespace {

class GpuMeasurer : public Measurer {
 public:
  GpuMeasurer(const ir::Function& f, const CompileOptions& base, GpuTimeFn time) : f_(f), base_(base), time_(std::move(time)) {}
  std::string name() const override { return "gpu"; }
  std::string unit() const override { return "s"; }
  std::vector<Measurement> measure(const std::vector<tile::TileSpec>& specs) override {
    std::vector<Measurement> out;
    for (const auto& s : specs) {
      Measurement m;
      m.key = s.axes.empty() ? "default" : s.to_string();
      m.unit = unit();
      const auto t0 = std::chrono::steady_clock::now();
      try {
        CompileOptions o = base_;
        if (s.axes.empty()) o.tile.reset();  // no tile: the target's own plan
        else o.tile = m.key;
        auto c = compile(f_, o);
        m.cost = time_(*c);
        m.ok = m.cost > 0;
        if (!m.ok) m.error = "no time measured";
      } catch (const std::exception& e) {
        m.error = e.what();
      }
      m.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      landed(out.size(), m);
      out.push_back(m);
    }
    return out;
  }

 private:
  const ir::Function& f_;
  CompileOptions base_;
  GpuTimeFn time_;
};

}  // namespace

std::unique_ptr<Measurer> make_gpu_measurer(const ir::Function& f, const CompileOptions& base, GpuTimeFn time) {
  return std::make_unique<GpuMeasurer>(f, base, std::move(time));
}

}  // namespace tessel::tune
