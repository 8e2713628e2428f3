#include "compiler/emit_npu/conv.h"
#include "compiler/emit_npu/conv_emitter.h"
#include "compiler/emit_npu/conv_epilogue.h"
#include "compiler/emit_npu/conv_match.h"
#include "compiler/emit_npu/operands.h"

#include "compiler/tile/npu_conv_plan.h"
#include "compiler/tile/tile_spec.h"

#include <fmt/format.h>

#include <functional>
#include <memory>

#include "isa/base/error.h"
#include "isa/npu_machine.h"

namespace tessel::emit_npu {

using namespace conv_detail;

using npu::Buffer;

bool is_nhwc_convolution(const kernel::Kernel& k, const isa::NpuMachine& m) { return match(k, m.cube_f16.m0).has_value(); }

std::optional<tile::ConvGeometry> conv_geometry(const kernel::Kernel& k, const isa::NpuMachine& m) {
  const auto orig = match(k, m.cube_f16.m0);
  if (!orig) return std::nullopt;
  return padded_geometry(fold_window(*orig, m).value_or(*orig), m);  // a folded one as plan() gives it the policy
}

namespace {

// UB past the two accumulator blocks: the epilogue's resident channel values, then two column
// blocks' regions (ping-pong).
int64_t epilogue_ub_bytes(const ConvEpilogue& e, int64_t rows, int64_t channels) {
  return e.resident_bytes(channels) + 2 * e.column_bytes(rows);
}

// The convolution, its epilogue (if any) and the plan for `spec`; `unsupported` set when no plan fits.
struct PlannedConv {
  Conv orig, cv;
  std::unique_ptr<ConvEpilogue> epi;
  tile::ConvPlanResult result;
};

// `refusal`: null to throw the epilogue's UserError, else set to its text (then nothing is planned).
// `fold`: a small-channel convolution folded (fold_window).
// `gather`: a strided 1x1 convolution with its read pixels gathered (gathered_pointwise).
PlannedConv plan_as(const Conv& matched, const kernel::Kernel& k, const isa::Hierarchy& h, const isa::NpuMachine& m,
                    const tile::TileSpec* spec, std::string* refusal, bool fold, bool gather = false) {
  PlannedConv pc;
  pc.orig = gather ? *gathered_pointwise(matched, m) : strided_pointwise(matched, m);
  if (auto folded = fold ? fold_window(pc.orig, m) : std::nullopt) pc.orig = *folded;
  Conv& cv = pc.cv = pc.orig;
  cv.C = round_up(pc.orig.C, m.cube_f16.k0), cv.K = round_up(pc.orig.K, m.cube_f16.k0);
  if ((cv.C != pc.orig.C || cv.K != pc.orig.K) && cv.layout == Layout::Blocked) {
    pc.result.unsupported = "blocked layout with channel counts not multiples of the cube's fractal";
    return pc;
  }
  if (cv.T > 1 && (cv.depth_channels() % m.cube_f16.k0 || cv.K % m.cube_f16.k0)) {
    pc.result.unsupported = "a 3-D convolution with channels not multiples of the cube's fractal";
    return pc;
  }
  if ((cv.C != pc.orig.C || cv.K != pc.orig.K) && cv.G > 1) {
    pc.result.unsupported = "a grouped convolution with channels per group not multiples of the cube's fractal";
    return pc;
  }
  if (cv.epilogue && refusal) {
    pc.epi = std::make_unique<ConvEpilogue>(k, h, cv.statement, cv.acc, *refusal);
    if (!refusal->empty()) return pc;
  } else if (cv.epilogue) {
    pc.epi = std::make_unique<ConvEpilogue>(k, h, cv.statement, cv.acc);
  }
  ConvEpilogue* epi = pc.epi.get();
  std::function<int64_t(int64_t, int64_t)> epi_bytes;
  if (epi) epi_bytes = [epi](int64_t rows, int64_t channels) { return epilogue_ub_bytes(*epi, rows, channels); };
  pc.result = tile::plan_conv(padded_geometry(pc.orig, m), m, spec, epi_bytes);
  if (pc.result.plan && pc.result.plan->one_core && (cv.G > 1 || cv.T > 1)) {
    pc.result.plan.reset();
    pc.result.unsupported = "a grouped or 3-D NCHW convolution whose copies would be made on one core";
    return pc;
  }
  if (!pc.result.plan || !epi) return pc;
  const tile::ConvPlan& p = *pc.result.plan;
  std::string why;
  if (epi->output() != cv.y || epi->output_type() != cv.out) why = "the epilogue's output is not the last statement's";
  else if (2 * p.tm0 * p.tn * dtype_bytes(m.cube_f16.acc) + epilogue_ub_bytes(*epi, p.tm0, p.tn) > m.capacity(Buffer::UB))
    why = "the epilogue of a pixel block does not fit UB";
  if (!why.empty()) {
    pc.result.plan.reset();
    pc.result.unsupported = why;
  }
  return pc;
}

// A strided 1x1 convolution without padding, planned with its read pixels gathered too (no tile
// spec: the spec's pixel axes are the image's): the gathered form where the planner prices it 5 %
// lower (its model of a core's copies: the map whole first, then the weights), else `pc`.
PlannedConv gathered_or(PlannedConv pc, const Conv& matched, const kernel::Kernel& k, const isa::Hierarchy& h,
                        const isa::NpuMachine& m, const tile::TileSpec* spec, std::string* refusal) {
  if (spec || !pc.result.plan || !gathered_pointwise(matched, m)) return pc;
  PlannedConv g = plan_as(matched, k, h, m, spec, refusal, false, true);
  if (g.result.plan && g.result.plan->cost < 0.95 * pc.result.plan->cost) return g;
  return pc;
}

// The folded convolution where its plan leaves UB room for two rows of the folded map past the
// accumulator blocks and the epilogue (conv_fold.h's staging halves and a repeat's slack), else
// the convolution as matched (a strided 1x1 one perhaps gathered).
PlannedConv plan(const Conv& matched, const kernel::Kernel& k, const isa::Hierarchy& h, const isa::NpuMachine& m,
                 const tile::TileSpec* spec, std::string* refusal = nullptr) {
  PlannedConv pc = plan_as(matched, k, h, m, spec, refusal, true);
  if (refusal && !refusal->empty()) return pc;
  if (!pc.orig.folded()) return gathered_or(std::move(pc), matched, k, h, m, spec, refusal);
  if (const tile::ConvPlan* p = pc.result.plan ? &*pc.result.plan : nullptr) {
    const int64_t used = 2 * p->tm0 * p->tn * dtype_bytes(m.cube_f16.acc) + (pc.epi ? epilogue_ub_bytes(*pc.epi, p->tm0, p->tn) : 0);
    const int64_t need = 2 * pc.cv.C / m.cube_f16.k0 * pc.cv.OW * m.fractal_row_bytes + m.vector_block_bytes + m.vector_bytes_per_repeat;
    if (used + need <= m.capacity(Buffer::UB)) return pc;
  }
  return gathered_or(plan_as(matched, k, h, m, spec, refusal, false), matched, k, h, m, spec, refusal);
}

}  // namespace

tile::ConvPlanResult plan_convolution(const kernel::Kernel& k, const isa::Hierarchy& h, const tile::TileSpec* spec) {
  const isa::NpuMachine m = isa::npu_machine(h);
  return plan(*match(k, m.cube_f16.m0), k, h, m, spec).result;
}

namespace {

// The kernel planned for the user's tile (else the policy's), and "" or the UserError text of why
// the convolution path does not take it, in the order the checks apply: the epilogue's form, the
// plan's fit, the windows' reach.
std::string plan_or_refusal(const Conv& matched, const kernel::Kernel& k, const isa::Hierarchy& h, const isa::NpuMachine& m,
                            PlannedConv& pc) {
  std::string why;
  pc = plan(matched, k, h, m, k.user_tile ? &*k.user_tile : nullptr, &why);
  if (!why.empty()) return why;
  if (pc.result.no_fit) return pc.result.no_fit->message(k.name, k.user_tile->to_string());
  if (!pc.result.plan) return conv_unsupported(k, pc.result.unsupported).what();
  return windows_stop_short(k, pc.cv);
}

std::string why_not_matched(const Conv& matched, const kernel::Kernel& k, const isa::Hierarchy& h, const isa::NpuMachine& m) {
  PlannedConv pc;
  if (std::string why = plan_or_refusal(matched, k, h, m, pc); !why.empty()) return why;
  // Whether the layout transforms fit UB depends on the emitter's copies: a dry run into a
  // throwaway program decides it, recording the first refusal instead of throwing it.
  NpuKernel scratch;
  std::string refusal;
  emit_planned(k, m, pc.orig, pc.cv, *pc.result.plan, pc.epi.get(), scratch, &refusal);
  return refusal;
}

NpuKernel emit_matched(const Conv& matched, const kernel::Kernel& k, const isa::Hierarchy& h, const isa::NpuMachine& m) {
  PlannedConv pc;
  if (std::string why = plan_or_refusal(matched, k, h, m, pc); !why.empty()) throw UserError(why);
  NpuKernel out;
  emit_planned(k, m, pc.orig, pc.cv, *pc.result.plan, pc.epi.get(), out);
  return out;
}

// The depthwise statement as a grouped convolution of one fractal of channels per group, or why not.
std::optional<Conv> depthwise_as_grouped(const DepthwiseShape& d, const kernel::Kernel& k, const isa::NpuMachine& m, std::string& why) {
  const int64_t f = m.cube_f16.k0;
  const ir::Function& fn = *k.function;
  const kernel::GlobalTensor* Y = k.find_tensor(fn.statements.back().output);
  if (d.C % f) why = fmt::format("{} channels, not a multiple of the cube's fractal ({})", d.C, f);
  else if (!Y || Y->shape != (d.nchw ? std::vector<int64_t>{d.N, d.C, d.OH, d.OW} : std::vector<int64_t>{d.N, d.OH, d.OW, d.C}))
    why = d.nchw ? "the output is not [N, C, OH, OW]" : "the output is not [N, OH, OW, C]";
  else if (d.nchw && int(fn.statements.size()) != d.statement + 1) why = "an NCHW depthwise convolution with an epilogue";
  else if (int(fn.statements.size()) == d.statement + 1 && Y->dtype != DType::F32) why = "the accumulator is not f32";
  if (!why.empty()) return std::nullopt;
  Conv c;
  c.layout = d.nchw ? Layout::Nchw : Layout::Nhwc, c.depthwise = true;
  c.x = d.x, c.w = d.w, c.acc = d.acc, c.y = Y->name, c.statement = d.statement, c.out = Y->dtype;
  c.epilogue = int(fn.statements.size()) > d.statement + 1;
  c.N = d.N, c.H = d.H, c.W = d.W, c.G = d.C / f, c.C = f, c.K = f, c.R = d.R, c.S = d.S, c.OH = d.OH, c.OW = d.OW;
  c.pt = d.pt, c.pl = d.pl;
  c.an = d.an, c.ap = d.ap, c.aq = d.aq, c.ak = d.ac, c.ac = d.ac, c.ar = d.ar, c.as = d.as;
  return c;
}

}  // namespace

std::string why_not_conv(const kernel::Kernel& k, const isa::Hierarchy& h) {
  const isa::NpuMachine m = isa::npu_machine(h);
  return why_not_matched(*match(k, m.cube_f16.m0), k, h, m);
}

NpuKernel emit_conv(const kernel::Kernel& k, const isa::Hierarchy& h) {
  const isa::NpuMachine m = isa::npu_machine(h);
  return emit_matched(*match(k, m.cube_f16.m0), k, h, m);
}

std::string why_not_depthwise_on_cube(const kernel::Kernel& k, const isa::Hierarchy& h, const DepthwiseShape& d) {
  const isa::NpuMachine m = isa::npu_machine(h);
  std::string why;
  const auto c = depthwise_as_grouped(d, k, m, why);
  if (!c) return "kernel " + k.name + ": the depthwise convolution does not map to the cube: " + why;
  return why_not_matched(*c, k, h, m);
}

NpuKernel emit_depthwise_on_cube(const kernel::Kernel& k, const isa::Hierarchy& h, const DepthwiseShape& d) {
  const isa::NpuMachine m = isa::npu_machine(h);
  std::string why;
  const auto c = depthwise_as_grouped(d, k, m, why);
  if (!c) throw UserError("kernel " + k.name + ": the depthwise convolution does not map to the cube: " + why);
  return emit_matched(*c, k, h, m);
}

}  // namespace tessel::emit_npu
