// Memory hierarchy descriptions: what a target machine is, as data (isa/targets/*.yaml).
//
// One schema serves both the DaVinci-like NPU and NVIDIA GPUs. The scheduling core asks for
// levels by Role, never by name; the simulator and the cost model read sizes, bandwidths and
// latencies from here and nowhere else. The YAML schema is documented in isa/README.md.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "isa/base/dtype.h"
#include "isa/hierarchy_override.h"

namespace tessel::isa {

// X(enumerator, yaml name, what the scheduling core uses it for)
#define TESSEL_ROLES(X)                                                     \
  X(Global, "global", "off-chip memory holding a kernel's inputs/outputs")  \
  X(Stage, "stage", "tile staging shared by a core's units")                \
  X(OperandA, "operand_a", "left operand of the matrix unit")               \
  X(OperandB, "operand_b", "right operand of the matrix unit")              \
  X(Accumulator, "accumulator", "partial sums of the matrix unit")          \
  X(Vector, "vector", "element-wise work")

enum class Role : uint8_t {
#define TESSEL_X(e, name, doc) e,
  TESSEL_ROLES(TESSEL_X)
#undef TESSEL_X
};
inline constexpr int kRoleCount = 6;
std::string_view role_name(Role r);
std::optional<Role> parse_role(std::string_view name);

enum class TargetKind : uint8_t { Npu, Gpu };
std::string_view target_kind_name(TargetKind k);

struct SourceMark {  // where a value came from, for messages
  int line = 0;      // 1-based; 0 when unknown
  int column = 0;
};

struct Level {
  std::string name;  // "L0A", "shared"
  Role role = Role::Global;
  uint64_t capacity_bytes = 0;
  uint32_t alignment_bytes = 1;    // start addresses of buffers are multiples of this
  uint32_t granularity_bytes = 1;  // smallest access unit
  std::string layout;              // "nd", "fractal_nz", "fractal_zz", "fragment", "banked"
  uint32_t banks = 0;              // shared-memory banks (0: not banked)
  uint32_t bank_width_bytes = 0;
  // Only the global level: bandwidth shared by every core, and access latencies.
  double shared_bandwidth_bytes_per_cycle = 0;
  uint32_t read_latency_cycles = 0;
  uint32_t write_latency_cycles = 0;
  // Energy per byte read from / written into this level (pJ/B; isa/README.md "Energy"). Required in
  // NPU descriptions, optional in GPU ones.
  std::optional<double> read_energy_pj_per_byte, write_energy_pj_per_byte;
  SourceMark mark;
};

enum class UnitKind : uint8_t { Matrix, Vector, Scalar, Copy };
std::string_view unit_kind_name(UnitKind k);

// One shape a matrix unit executes: C[m,n] (acc) += A[m,k] (a) * B[k,n] (b).
struct MatrixShape {
  int m = 0, n = 0, k = 0;
  DType a = DType::F16, b = DType::F16, acc = DType::F32;
  uint32_t cycles = 1;              // cycles one shape occupies the unit (throughput)
  std::string min_arch;             // GPU: lowest architecture that has it ("sm_75"); empty: all
  std::optional<double> energy_pj_per_mac;  // one multiply-accumulate of this shape's types
  SourceMark mark;
  uint64_t macs() const { return uint64_t(m) * n * k; }
};

// A conversion a vector unit performs (vconv) between element types it need not compute in (bf16 on
// the DaVinci descriptions: converted to f32 in UB, computed there, rounded back to nearest even).
struct VectorConversion {
  DType from = DType::F32, to = DType::F32;
  uint32_t cycles_per_repeat = 1;  // occupancy per repeat (a repeat: bytes_per_repeat of the wider type)
};

struct Unit {
  std::string name;  // "cube", "mte2", "tensor_core"
  UnitKind kind = UnitKind::Copy;
  std::string pipe;                 // NPU pipe that issues it (S, V, M, MTE1, MTE2, MTE3); GPU: empty
  std::vector<std::string> reads;   // level names
  std::vector<std::string> writes;  // level names
  std::vector<MatrixShape> shapes;  // Matrix units
  std::vector<DType> dtypes;        // Vector/Scalar units: element types supported
  std::vector<VectorConversion> conversions;  // Vector: conversions to and from types outside dtypes
  uint32_t bytes_per_repeat = 0;    // Vector: bytes processed per repeat (one cycle each)
  uint32_t max_repeat = 0;          // Vector: largest repeat count of one instruction
  uint32_t mask_bits = 0;           // Vector: width of the lane mask
  uint32_t startup_cycles = 0;      // latency before the first result
  uint32_t count = 1;               // how many of this unit a core has (GPU: tensor cores per SM)
  // Energy per operation (pJ; isa/README.md "Energy"); matrix units carry theirs per shape.
  std::optional<double> energy_pj_per_repeat;       // Vector: one repeat (bytes_per_repeat bytes)
  std::optional<double> energy_pj_per_instruction;  // Scalar: one instruction the unit issues
  std::optional<double> energy_pj_per_byte;         // engine of a path: one byte it moves (the levels' own
                                                    // read/write energy is charged separately)
  SourceMark mark;
};

struct TransferPath {
  std::string from, to;  // level names
  std::string engine;    // unit name (kind Copy, or the unit that moves the data)
  double bandwidth_bytes_per_cycle = 0;  // per core
  uint32_t latency_cycles = 0;
  std::vector<std::string> transforms;  // "nd2nz", "transpose", "img2col", "cast_f32_f16", "relu"
  SourceMark mark;
};

struct NpuSync {
  uint32_t event_ids_per_pipe_pair = 0;
  uint32_t queue_depth = 0;          // instructions each pipe's queue holds
  uint32_t set_flag_cycles = 0;      // issue cost of set_flag/wait_flag on the scalar pipe
  uint32_t barrier_cycles = 0;
  uint32_t cross_core_barrier_cycles = 0;  // sync_all: from the last core's arrival until every core resumes
  uint32_t scalar_cycles = 0;        // one scalar instruction
};

struct GpuProperties {
  std::string arch;                  // "sm_90"
  int compute_capability_major = 0, compute_capability_minor = 0;
  uint32_t warp_size = 0;
  uint32_t max_threads_per_block = 0;
  uint32_t registers_per_sm = 0;
  uint32_t registers_per_block = 0;
  uint64_t shared_bytes_per_block = 0;        // without opt-in
  uint64_t shared_bytes_per_block_optin = 0;
  uint64_t shared_bytes_per_sm = 0;
  uint64_t l2_cache_bytes = 0;
  // Optional (0: not described): the L2's bandwidth shared by all SMs, at clock_mhz, and the latency
  // of a load that hits in L2 (SM cycles). `tessel check-hierarchy --device --measure` checks them.
  double l2_bandwidth_bytes_per_cycle = 0;
  uint32_t l2_hit_latency_cycles = 0;
  // Optional (0 or 1: one L2): the L2's partitions joined by a fabric (A100, H100, H200: 2). An SM's
  // access is looked up in the slice of its own partition; one homed in another partition is looked
  // up again there after crossing the fabric, so Nsight Compute's lts__t_bytes counts the
  // (partitions - 1) / partitions of the accesses that cross twice (compiler/tune/analytic_model.cc).
  uint32_t l2_partitions = 0;
  // Optional (0: the matrix unit's own shape rate): f16 / bf16 -> f32 multiply-accumulates per SM
  // cycle that warp-level MMA reaches, where it is slower than the matrix unit's peak. On Hopper
  // the peak is reached only by the warpgroup MMA (wgmma); mma.sync and WMMA (which compiles to
  // the same HMMA.16816 instructions on sm_80+) issue at a lower rate. The analytic cost model
  // prices WMMA and mma.sync kernels with it (compiler/tune/analytic_model.cc).
  double warp_mma_f16_macs_per_cycle = 0;
  // What the CUDA emitter and the GPU tile policy need beyond the device's own properties
  // (isa/gpu_machine.h carries them to the compiler):
  uint64_t shared_bytes_reserved_per_block = 0;  // an SM keeps this much of its shared memory per resident block
  uint32_t vector_access_bytes = 0;              // widest single load/store/cp.async of one thread
  std::optional<MatrixShape> mma_sync_shape;     // warp-level mma.sync fed by ldmatrix; absent: WMMA only
  std::optional<MatrixShape> wgmma_shape;        // warpgroup MMA (n = the largest N); absent: none
  uint32_t warps_per_warpgroup = 0;              // with wgmma_shape
  uint32_t cluster_max_blocks = 0;               // portable thread-block cluster size (0: no clusters)
  uint32_t bulk_copy_alignment_bytes = 0;        // cp.async.bulk addresses and sizes are multiples of this (0: no bulk copies)
  std::vector<std::string> features;             // gpu_feature_names(): cp_async, thread_block_clusters, ...
};

// The feature names a `gpu.features` list may hold (isa/README.md says what each means).
const std::vector<std::string>& gpu_feature_names();

struct Hierarchy {
  std::string name;
  std::string description;
  std::string source_file;  // where it was loaded from
  std::string description_hash;  // of the effective description (isa/hierarchy_override.h); "" if built in code
  std::string overrides;         // the --set overrides applied, canonical ("" for none)
  TargetKind kind = TargetKind::Npu;
  double clock_mhz = 0;
  uint32_t cores = 0;  // NPU AI cores / GPU SMs
  std::vector<Level> levels;
  std::vector<Unit> units;
  std::vector<TransferPath> paths;
  std::optional<NpuSync> sync;      // NPU only
  std::optional<GpuProperties> gpu; // GPU only

  const Level* find_level(std::string_view name) const;
  const Unit* find_unit(std::string_view name) const;
  // The level carrying a role; nullptr where the description has none.
  const Level* level_with_role(Role role) const;
  const Level& level(Role role) const;  // throws InternalError if missing (validation guarantees it)
  const TransferPath* find_path(std::string_view from, std::string_view to) const;
  std::vector<const Unit*> units_of_kind(UnitKind kind) const;
  // Peak multiply-accumulates per cycle per core for the given operand/accumulator types (0: none).
  uint64_t peak_macs_per_cycle(DType a, DType acc) const;
};

// Parse and validate, after applying `overrides` to the YAML tree (isa/hierarchy_override.h).
// Throws UserError naming the file, the key, the line and the reason.
Hierarchy load_hierarchy(const std::string& path, const Overrides& overrides = {});
Hierarchy parse_hierarchy(const std::string& yaml_text, const std::string& source_name, const Overrides& overrides = {});

// The keys the parser accepts in each kind of map: section "top", "level", "unit", "path", "sync",
// "gpu" or "shape" (a matrix unit's shape).
const std::set<std::string>& hierarchy_schema_keys(std::string_view section);

// The structural checks load_hierarchy runs (public so tests can build descriptions in code),
// including the rules the compiler and the simulator rely on (isa/README.md, "What the validator
// checks"): a description they would not honour is refused here, naming the key and the rule.
void validate_hierarchy(const Hierarchy& h);

// The layout a backend implements for a role (NPU: fractal_zz / fractal_zn / fractal_nz for the cube's
// operands and accumulator, nd elsewhere; GPU: banked shared memory, fragments, nd elsewhere). No
// other layout is implemented, so a description may only name this one (or leave it out).
std::string_view implemented_layout(TargetKind kind, Role role);

// Plausible range of every bandwidth in bytes per cycle (transfer paths, the global level's shared
// bandwidth): below it a transfer of a few KiB already takes years of cycles, above it no cycle
// count could tell two descriptions apart.
inline constexpr double kMinBandwidthBytesPerCycle = 1.0 / 1024;
inline constexpr double kMaxBandwidthBytesPerCycle = double(uint64_t(1) << 30);

}  // namespace tessel::isa
