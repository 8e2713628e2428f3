// Device query and the description-vs-device comparison (gpu_backend/device_query.h).
#include <doctest/doctest.h>

#include "gpu_backend/device_query.h"
#include "gpu_backend/runtime.h"
#include "isa/base/error.h"
#include "isa/hierarchy.h"
#include "tests/gpu/gpu_test_kernels.h"

using namespace tessel;
using namespace tessel::gpu;

namespace {
isa::Hierarchy target(const char* name) {
  return isa::load_hierarchy(test::source_dir() + "/isa/targets/" + name + ".yaml");
}

DeviceInfo fake_device_from(const isa::Hierarchy& h) {
  DeviceInfo d;
  d.name = "fake";
  d.properties = *h.gpu;
  d.sm_count = h.cores;
  d.clock_mhz = 1000;
  return d;
}
}  // namespace

TEST_CASE("device check: a device equal to the description has no mismatch, each changed property is named") {
  const isa::Hierarchy h = target("sm90");
  DeviceInfo d = fake_device_from(h);
  auto rows = compare_with_device(h, d);
  for (const auto& r : rows) CHECK_MESSAGE((r.matches || !r.must_match), r.property);
  CHECK(format_device_comparison(h, d, rows).find("agrees with fake on every checked property") != std::string::npos);

  d.sm_count = 114;
  d.properties.l2_cache_bytes = h.gpu->l2_cache_bytes / 2;
  d.clock_mhz = 1980;  // information only
  rows = compare_with_device(h, d);
  const std::string text = format_device_comparison(h, d, rows);
  CHECK(text.find("mismatch: SM count (cores): " + h.source_file + " says 132, the device reports 114") !=
        std::string::npos);
  CHECK(text.find("mismatch: L2 cache bytes") != std::string::npos);
  CHECK(text.find("mismatch: clock") == std::string::npos);
  CHECK(text.find("2 properties of") != std::string::npos);
}

TEST_CASE("device check: an NPU description is refused") {
  const isa::Hierarchy h = target("davinci-910");
  CHECK_THROWS_WITH_AS(compare_with_device(h, DeviceInfo{}), doctest::Contains("compares GPU descriptions"), UserError);
}

TEST_CASE("device query: the GPU present agrees with the description of its architecture") {
  if (!test::have_gpu()) return;
  const DeviceInfo d = query_device(0);
  MESSAGE(d.name << ": " << d.properties.arch << ", " << d.sm_count << " SMs, L2 " << d.properties.l2_cache_bytes
                 << " bytes, " << d.clock_mhz << " MHz");
  CHECK(d.sm_count > 0);
  CHECK(d.properties.warp_size == 32);
  const std::string file = d.properties.arch == "sm_75"   ? "sm75"
                           : d.properties.arch == "sm_80" ? "sm80"
                           : d.properties.arch == "sm_90" ? "sm90"
                                                          : "";
  if (file.empty()) {
    MESSAGE("no description for " << d.properties.arch << "; comparison skipped");
    return;
  }
  const isa::Hierarchy h = target(file.c_str());
  const auto rows = compare_with_device(h, d);
  MESSAGE(format_device_comparison(h, d, rows));
  if (d.properties.arch == "sm_90")  // the lent machines: isa/targets/sm90.yaml must describe them
    for (const auto& r : rows) CHECK_MESSAGE((r.matches || !r.must_match), r.property << ": " << r.described << " vs " << r.measured);
  CHECK(&Context::get().device() != nullptr);
}
