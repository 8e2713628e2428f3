#include "isa/gpu_machine.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>

#include "isa/base/error.h"

namespace tessel::isa {

namespace {

GpuMmaShape mnk(const MatrixShape& s) { return {s.m, s.n, s.k}; }

// The WMMA fragment: the matrix unit's f16 -> f32 shape (every GPU description has one).
GpuMmaShape wmma_fragment(const Hierarchy& h) {
  for (const Unit* u : h.units_of_kind(UnitKind::Matrix))
    for (const auto& s : u->shapes)
      if (s.a == DType::F16 && s.acc == DType::F32) return mnk(s);
  throw UserError(h.source_file + ": units: a GPU description needs a matrix unit with an f16 -> f32 shape (the WMMA fragment)");
}

std::vector<MatrixShape> matrix_shapes(const Hierarchy& h) {
  std::vector<MatrixShape> out;
  for (const Unit* u : h.units_of_kind(UnitKind::Matrix)) out.insert(out.end(), u->shapes.begin(), u->shapes.end());
  return out;
}

}  // namespace

bool GpuMachine::has(GpuFeature f) const { return std::find(features.begin(), features.end(), f) != features.end(); }

GpuMachine GpuMachine::from(const Hierarchy& h) {
  TESSEL_CHECK(h.kind == TargetKind::Gpu && h.gpu, "GpuMachine::from: '" + h.name + "' is not a validated GPU description");
  const GpuProperties& g = *h.gpu;
  const Level& stage = h.level(Role::Stage);
  GpuMachine m;
  m.name = h.name;
  m.arch = g.arch;
  m.compute_capability = g.compute_capability_major * 10 + g.compute_capability_minor;
  m.sm_count = h.cores;
  m.warp_size = g.warp_size;
  m.max_threads_per_block = g.max_threads_per_block;
  m.registers_per_sm = g.registers_per_sm;
  m.shared_bytes_per_block_optin = g.shared_bytes_per_block_optin;
  m.shared_bytes_per_sm = g.shared_bytes_per_sm;
  m.shared_bytes_reserved_per_block = g.shared_bytes_reserved_per_block;
  m.shared_banks = stage.banks;
  m.shared_bank_width_bytes = stage.bank_width_bytes;
  m.vector_access_bytes = g.vector_access_bytes;
  m.wmma = wmma_fragment(h);
  if (g.mma_sync_shape) m.mma_sync = mnk(*g.mma_sync_shape);
  if (g.wgmma_shape) m.wgmma = mnk(*g.wgmma_shape);
  m.warps_per_warpgroup = g.warps_per_warpgroup;
  m.bulk_copy_alignment_bytes = g.bulk_copy_alignment_bytes;
  m.cluster_max_blocks = g.cluster_max_blocks;
  m.tensor_shapes = matrix_shapes(h);
  const auto& names = gpu_feature_names();
  for (const auto& f : g.features)
    m.features.push_back(GpuFeature(std::find(names.begin(), names.end(), f) - names.begin()));
  return m;
}

GpuMachine stock_gpu_machine(const std::string& arch) {
  static std::mutex mu;
  static std::map<std::string, GpuMachine> by_arch;  // every stock GPU description, loaded once
  std::lock_guard<std::mutex> lock(mu);
  // the descriptions of the source tree: $TESSEL_SOURCE_DIR, the working directory (a packed
  // binary on a GPU machine runs from a copy of the tree), the tree this tessel was built from
  std::vector<std::filesystem::path> roots;
  if (const char* env = std::getenv("TESSEL_SOURCE_DIR")) roots.emplace_back(env);
  roots.emplace_back(".");
  roots.emplace_back(TESSEL_SOURCE_DIR);
  for (const auto& root : roots) {
    if (!by_arch.empty()) break;
    std::error_code ec;
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(root / "isa" / "targets", ec))
      if (entry.path().extension() == ".yaml") files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    // several parts of one architecture (sm90-h100, sm90-h200): the generic description named
    // after the architecture (sm90 for sm_90) wins, else the first by file name
    for (const auto& file : files) {
      Hierarchy h = load_hierarchy(file.string());
      if (h.kind != TargetKind::Gpu) continue;
      std::string generic = h.gpu->arch;
      generic.erase(std::remove(generic.begin(), generic.end(), '_'), generic.end());
      if (h.name == generic)
        by_arch.insert_or_assign(h.gpu->arch, GpuMachine::from(h));
      else
        by_arch.emplace(h.gpu->arch, GpuMachine::from(h));
    }
  }
  auto it = by_arch.find(arch);
  if (it != by_arch.end()) return it->second;
  std::string known;
  for (const auto& [a, m] : by_arch) known += (known.empty() ? "" : ", ") + a + " (" + m.name + ")";
  throw UserError("no GPU description for " + arch + " among " + std::string(TESSEL_SOURCE_DIR) +
                  "/isa/targets (have: " + (known.empty() ? "none" : known) + "); pass --target with a description of it");
}

}  // namespace tessel::isa
