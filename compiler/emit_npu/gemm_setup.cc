// The decisions of the NPU GEMM path before it emits (gemm_setup.h).
#include "compiler/emit_npu/gemm_setup.h"

#include <fmt/format.h>

#include <algorithm>

#include "compiler/emit_npu/operands.h"
#include "isa/base/error.h"

namespace tessel::emit_npu::gemm_detail {
namespace {

using npu::Buffer;

// The box of `buffer` (a tile of the tensor whose dimensions are indexed by `indices`) along anchor
// index `var`; 0 when no dimension reads it.
int64_t box_along(const kernel::Buffer& buffer, const std::vector<ir::AffineExpr>& indices, const std::string& var) {
  for (size_t d = 0; d < indices.size() && d < buffer.extents.size(); ++d)
    if (indices[d].index_coeffs.count(var)) return buffer.extents[d];
  return 0;
}

// The GEMM tile policy's request from the kernel's boxes: the accumulator's m x n, A's stage k (or
// its operand box's), A's operand m x k and B's operand n — each read along its index, whatever
// the dimension order of the tensor (transposed operands, a batch anywhere).
tile::GemmRequest gemm_request(const GemmShape& g, const kernel::Kernel& k, const kernel::MatmulOp& mm) {
  const kernel::Contraction& con = *k.contraction;
  const std::string &vm = con.m[0].var, &vn = con.n[0].var, &vk = con.k[0].var;
  const kernel::Buffer& a0 = k.buffers.at(mm.a);
  const kernel::Buffer& b0 = k.buffers.at(mm.b);
  const kernel::Buffer& c = k.buffers.at(mm.c);
  std::vector<ir::AffineExpr> c_indices;
  for (const std::string& v : con.out_vars) c_indices.push_back(ir::AffineExpr::index(v));
  int64_t tk = 0;
  for (const auto& b : k.buffers)
    if (b.role == isa::Role::Stage && b.tensor == mm.a_tensor && b.extents.size() >= 2) tk = box_along(b, con.a.indices, vk);
  if (tk == 0) tk = box_along(a0, con.a.indices, vk);
  tile::GemmRequest r;
  r.M = g.M, r.N = g.N, r.K = g.K;
  r.box_m = box_along(c, c_indices, vm), r.box_n = box_along(c, c_indices, vn), r.box_k = tk;
  r.box_m0 = box_along(a0, con.a.indices, vm), r.box_k0 = box_along(a0, con.a.indices, vk), r.box_n0 = box_along(b0, con.b.indices, vn);
  r.out = g.out, r.int_out = g.int_out, r.has_epilogue = g.epilogue != nullptr;
  r.operand = g.operand, r.unit_m = g.unit_m, r.unit_n = g.unit_n;
  if (g.epilogue) {
    r.epilogue_ub_bytes = [e = g.epilogue](int64_t rows) { return e->ub_bytes(rows); };
    r.epilogue_loads = static_cast<int64_t>(g.epilogue->broadcasts().size());
  }
  return r;
}

int64_t stride_of(const std::map<std::string, int64_t>& coeff, const std::string& var) {
  auto it = coeff.find(var);
  return it == coeff.end() ? 0 : it->second;
}

std::string gemm_unsupported(const kernel::Kernel& k, const std::string& why) {
  return "kernel " + k.name + ": the NPU backend does not map this matmul yet: " + why;
}

// An operand's rows: `rows` of `length` elements along its unit-stride dimension, `stride` elements
// apart. An index of extent 1 never moves the address, so its stride is free, and a tensor storing it
// innermost gives both matrix dimensions a stride of 1 (X[K][1] read as A(m, k) with M = 1): rows one
// element apart, which no DMA reads (a negative gap, a row stride below the row). Such an index takes
// the stride of a packed matrix's outer dimension, the row length, as if stored outermost; the edge
// tiles' rows past it read the guard, which is sized from the strides. Rows that overlap with more
// than one of them (A(m + k)) are no matrix: false.
bool separate_rows(int64_t& stride, int64_t rows, int64_t length) {
  if (stride >= length) return true;
  if (rows != 1) return false;
  stride = length;
  return true;
}

// The operands' form: global inputs read whole, one M, N, K and batch index, an output accumulator
// or an epilogue, a unit-stride matrix dimension each, f16 (or plain i8 -> i32) types, no other
// tensor. "" or the UserError text.
std::string setup_operands(const kernel::Kernel& k, const kernel::MatmulOp& mm, const Machine& m, const isa::Hierarchy& target,
                           GemmSetup& s) {
  auto unsupported = [&](const std::string& why) { return gemm_unsupported(k, why); };
  const kernel::GlobalTensor* A = s.A = k.find_tensor(mm.a_tensor);
  const kernel::GlobalTensor* B = s.B = k.find_tensor(mm.b_tensor);
  const kernel::GlobalTensor*& C = s.C = k.find_tensor(mm.c_tensor);
  if (!A || !B || A->temporary || B->temporary) return unsupported("A and B must be global inputs");
  if (!k.contraction) return unsupported("no contraction was recorded (" + k.no_contraction + ")");
  const kernel::Contraction& con = *k.contraction;
  if (con.a.tensor != A->name || con.b.tensor != B->name || con.a.producer || con.b.producer || con.a.base || con.b.base)
    return unsupported("operands other than whole global inputs read directly");
  if (con.m.size() != 1 || con.n.size() != 1 || con.k.size() != 1)
    return unsupported("more than one M, N or K index (indices that are not adjacent in every tensor, so they do not collapse)");
  if (!C) {
    std::string refusal;
    s.epilogue = std::make_unique<GemmEpilogue>(k, target, mm.statement, mm.c_tensor, false, refusal);
    if (!refusal.empty()) return refusal;
  } else if (C->kind != ir::TensorKind::Output) {
    return unsupported("the accumulator is a global temporary");
  }
  if (s.epilogue) C = k.find_tensor(s.epilogue->output());
  // GM strides from the contraction record: each operand needs a unit-stride matrix dimension.
  const std::string &vm = con.m[0].var, &vn = con.n[0].var, &vk = con.k[0].var;
  const std::string vb = con.batch.size() == 1 ? con.batch[0].var : "";
  GemmShape& g = s.g;
  g.a_sm = stride_of(con.a.coeff, vm), g.a_sk = stride_of(con.a.coeff, vk), g.a_sb = stride_of(con.a.coeff, vb);
  g.b_sk = stride_of(con.b.coeff, vk), g.b_sn = stride_of(con.b.coeff, vn), g.b_sb = stride_of(con.b.coeff, vb);
  g.c_sm = stride_of(con.out_coeff, vm), g.c_sb = stride_of(con.out_coeff, vb);
  if (con.batch.size() > 1)
    for (const auto& b : con.batch)
      g.batch_dims.push_back({b.extent, stride_of(con.a.coeff, b.var), stride_of(con.b.coeff, b.var), stride_of(con.out_coeff, b.var)});
  if ((g.a_sk != 1 && g.a_sm != 1) || (g.b_sn != 1 && g.b_sk != 1) || stride_of(con.out_coeff, vn) != 1)
    return unsupported("an operand whose matrix dimensions both have a stride other than 1 (the batch is innermost)");
  const int64_t M = con.m[0].extent, N = con.n[0].extent, K = con.k[0].extent;
  const bool rows_apart = (g.a_transposed() ? separate_rows(g.a_sk, K, M) : separate_rows(g.a_sm, M, K)) &&
                          (g.b_transposed() ? separate_rows(g.b_sn, N, K) : separate_rows(g.b_sk, K, N)) &&
                          separate_rows(g.c_sm, M, N);
  if (!rows_apart) return unsupported("an operand whose rows overlap (a row stride below the row's length)");
  // i8 x i8 -> i32: on the cube's i8 shape (i32 accumulation, exact for any K), or, where the
  // description has none, on the f16 cube (every i8 is an f16, every product |p| <= 2^14 is exact,
  // every partial sum is an integer of magnitude <= K * 2^14 <= 2^24 for K <= 1024, so exact in f32).
  s.i8 = A->dtype == DType::I8 && B->dtype == DType::I8;
  s.native_i8 = s.i8 && m.cube_i8.exists && m.cube_i8.acc == DType::I32;
  if (s.i8) {
    // on the i8 cube an i32 accumulator may feed a fused epilogue (a dequant: f16(f32(C) * scale)),
    // which reads it converted to f32 on UB
    const bool plain = C->dtype == DType::I32 && !s.epilogue;
    const bool dequant = s.epilogue && s.native_i8 && mm.acc_type == DType::I32 &&
                         (s.epilogue->output_type() == DType::F16 || s.epilogue->output_type() == DType::F32);
    if (!(plain || dequant) || (!s.native_i8 && A->shape.size() != 2))
      return unsupported("i8 operands other than an i8 x i8 -> i32 GEMM (on the i8 cube: with a fused epilogue)");
    // not hardware: 2^24 / 2^14, the exactness of the f32 sums
    if (!s.native_i8 && con.k[0].extent > 1024) return unsupported("i8 GEMM with K > 1024 (the f32 accumulation would no longer be exact)");
  } else {
    // 16-bit float operands on the cube shape of their dtype (f16; bf16 where the description lists it)
    const DType in = A->dtype;
    const isa::CubeShape& shape = m.cube(in);
    if ((in != DType::F16 && in != DType::BF16) || mm.in_type != in || B->dtype != in)
      return unsupported("operands other than f16 (or bf16 on a cube with a bf16 shape)");
    if (!shape.exists || shape.a != in || shape.acc != DType::F32)
      return unsupported(fmt::format("{} operands: the cube of {} has no {} x {} -> f32 shape", dtype_name(in), m.target_name,
                                     dtype_name(in), dtype_name(in)));
    s.operand = in;
    if (C->dtype != DType::F32 && C->dtype != DType::F16) return unsupported("an output other than f32 / f16");
  }
  for (const auto& t : k.tensors) {
    const bool broadcast = s.epilogue && std::count(s.epilogue->broadcasts().begin(), s.epilogue->broadcasts().end(), t.name);
    if (t.name != A->name && t.name != B->name && t.name != C->name && !broadcast) return unsupported("extra tensor " + t.name);
  }
  return "";
}

// Tails in place address the user's tensors at any element (edge tiles start mid-row, the K fills
// and clipped write-backs burst any number of elements): every element size a multiple of the GM
// alignment.
bool in_place_addressable(const kernel::Kernel& k, const Machine& m, const GemmSetup& s) {
  const int64_t align = m.alignment(Buffer::GM);
  bool ok = dtype_bytes(s.A->dtype) % align == 0 && dtype_bytes(s.B->dtype) % align == 0 && dtype_bytes(s.C->dtype) % align == 0;
  if (s.epilogue)
    for (const std::string& name : s.epilogue->broadcasts()) ok = ok && dtype_bytes(k.find_tensor(name)->dtype) % align == 0;
  return ok;
}

// Tails in place: the tile policy's stage tiles over the cores for the user's sizes (a user's tile
// spec: its boxes), the sizes padded to them (tile::plan_gemm_tails).
std::string setup_in_place_plan(const kernel::Kernel& k, const kernel::MatmulOp& mm, const Machine& m, GemmSetup& s) {
  GemmShape& g = s.g;
  tile::GemmTailRequest t;
  t.gemm = gemm_request(g, k, mm);
  t.gemm.M = s.M, t.gemm.N = s.N, t.gemm.K = s.K;
  t.batch = g.batch;
  t.keep_boxes = k.user_tile.has_value();
  // an operand stored K-major is loaded by whole rows of its tiles (B: tn, A^T: tm0 elements)
  if (!g.b_transposed()) t.most_tn = s.N;
  if (g.a_transposed()) t.most_tm0 = s.M;
  t.a_k_major = g.a_transposed(), t.b_k_major = !g.b_transposed();
  t.a_stride = g.a_transposed() ? g.a_sk : g.a_sm, t.b_stride = g.b_transposed() ? g.b_sn : g.b_sk, t.c_stride = g.c_sm;
  const tile::GemmTailPlanResult planned = tile::plan_gemm_tails(t, m);
  if (!planned.plan) return "kernel " + k.name + ": " + planned.no_fit->what();
  static_cast<tile::GemmPlan&>(g) = planned.plan->plan;
  g.M = planned.plan->M, g.N = planned.plan->N, g.K = planned.plan->K;
  g.real_m = s.M == g.M ? 0 : s.M, g.real_n = s.N == g.N ? 0 : s.N, g.real_k = s.K == g.K ? 0 : s.K;
  return "";
}

// The sizes padded to the cube's shape and the tile policy's plan. "" or the fit failure's text.
std::string setup_plan(const kernel::Kernel& k, const kernel::MatmulOp& mm, const Machine& m, GemmSetup& s) {
  const kernel::Contraction& con = *k.contraction;
  GemmShape& g = s.g;
  s.M = con.m[0].extent, s.K = con.k[0].extent, s.N = con.n[0].extent;
  g.batch = 1;
  for (const auto& b : con.batch) g.batch *= b.extent;
  g.out = s.C->dtype;
  g.int_out = s.i8 && !s.native_i8;
  g.epilogue = s.epilogue.get();
  const isa::CubeShape& cube = s.native_i8 ? m.cube_i8 : m.cube(s.operand);
  g.operand = cube.a;
  if (s.native_i8) {  // i8 transposes move k0 x k0 squares of bytes (pairs of fractals)
    if (g.a_transposed()) g.unit_m = cube.k0;
    if (!g.b_transposed()) g.unit_n = cube.k0;
  }
  const int64_t mu = std::max<int64_t>(cube.m0, g.unit_m), nu = std::max<int64_t>(cube.n0, g.unit_n);
  s.aligned = s.M % mu == 0 && s.N % nu == 0 && s.K % cube.k0 == 0 && !g.int_out;
  s.in_place = !s.aligned && !g.int_out && g.batch == 1 && in_place_addressable(k, m, s);
  g.M = round_up(s.M, mu), g.N = round_up(s.N, nu), g.K = round_up(s.K, cube.k0);
  if (s.aligned) {
    const tile::GemmPlanResult planned = tile::plan_gemm(gemm_request(g, k, mm), m);
    if (planned.no_fit) return "kernel " + k.name + ": " + planned.no_fit->what();
    static_cast<tile::GemmPlan&>(g) = *planned.plan;
    return "";
  }
  if (s.in_place) {
    const GemmShape unplanned = g;
    // an operand stored K-major is loaded by rows of a whole operand tile (dma_in_nz): its rows must
    // be at least that long (A^T: M >= tm0, B: N >= tn), else (or no plan fits) the padded copies
    s.in_place = setup_in_place_plan(k, mm, m, s).empty() && (!g.a_transposed() || s.M >= g.tm0) &&
                 (g.b_transposed() || s.N >= g.tn);
    if (s.in_place) return "";
    g = unplanned;
  }
  // Tails through padded copies on one core: the plan's tiles divide the padded sizes, so padding to
  // one fractal can leave only thin tiles. Sizes padded to 1, 2, 4 and 8 fractals are planned and
  // the one whose tiles cost least is kept, a tile costing its cube fractals plus its operand rows
  // (tm x tn + m0 x (tm + tn), per K).
  std::optional<tile::GemmPlan> best;
  std::optional<tile::FitFailure> first_failure;
  double best_cost = 0;
  const GemmShape base = g;
  for (int64_t f : {1, 2, 4, 8}) {
    GemmShape c = base;
    c.M = round_up(s.M, mu * f), c.N = round_up(s.N, nu * f), c.K = round_up(s.K, cube.k0 * f);
    const tile::GemmPlanResult planned = tile::plan_gemm(gemm_request(c, k, mm), m);
    if (planned.no_fit) {
      if (!first_failure) first_failure = planned.no_fit;
      continue;
    }
    const tile::GemmPlan& p = *planned.plan;
    const int64_t tiles = c.batch * (c.M / p.tm) * (c.N / p.tn);
    const double cost = double(tiles) * double(p.tm * p.tn + cube.m0 * (p.tm + p.tn)) * double(c.K);
    if (best && cost >= best_cost) continue;
    best = p, best_cost = cost;
    g.M = c.M, g.N = c.N, g.K = c.K;
  }
  if (!best) return "kernel " + k.name + ": " + first_failure->what();
  static_cast<tile::GemmPlan&>(g) = *best;
  return "";
}

// Each epilogue tensor's register and strides along the batch, M and N (its GM place comes with
// the placement). "" or why one cannot be read per tile that way.
std::string setup_broadcasts(const kernel::Kernel& k, const Machine& m, GemmSetup& s) {
  const kernel::Contraction& con = *k.contraction;
  const std::string &vm = con.m[0].var, &vn = con.n[0].var;
  GemmShape& g = s.g;
  for (const std::string& name : s.epilogue->broadcasts()) {
    const kernel::GlobalTensor* t = k.find_tensor(name);
    GemmShape::Broadcast& b = g.broadcast[name];
    b.eb = dtype_bytes(t->dtype);
    b.reg = static_cast<uint8_t>(kBroadcast + g.broadcast.size() - 1);
    const std::vector<int>& dims = s.epilogue->broadcast_dims(name);
    int64_t stride = 1;
    for (int d = static_cast<int>(dims.size()) - 1; d >= 0; --d) {
      const std::string& v = con.out_vars.at(dims[d]);
      if (v != vm && v != vn && !g.batch_dims.empty())
        return gemm_unsupported(k, "epilogue tensor " + name + " varies along one of several batch indices");
      (v == vm ? b.s_m : v == vn ? b.s_n : b.s_b) = stride;
      stride *= t->shape[d];
    }
    if (b.reg >= npu::kGeneralRegisterCount || b.s_n > 1 || (!b.s_m && !b.s_n))
      return gemm_unsupported(k, "epilogue tensor " + name + " (at most " + std::to_string(npu::kGeneralRegisterCount - kBroadcast) +
                                     " broadcast tensors, each varying along N with unit stride or along M)");
    if (!s.aligned && !s.in_place && ((b.s_m && b.s_n) || (g.batch > 1 && b.s_b * b.eb % m.alignment(Buffer::GM) != 0)))
      return gemm_unsupported(k, "epilogue tensor " + name +
                                     " with tails: only [N] or [M] tensors, or per-batch ones whose batches are aligned in GM");
  }
  return "";
}

// Tails go through zero-padded copies on one core: a batch's copies fit UB in one piece, i8 rows
// widen through UB. "" or why not.
std::string setup_tails(const kernel::Kernel& k, const Machine& m, const GemmSetup& s) {
  const GemmShape& g = s.g;
  const TailCopies t = tail_copies(g, s.M, s.N, s.K);
  const int64_t nb = g.batch, ib = dtype_bytes(g.operand), eo = dtype_bytes(g.out);
  // an operand whose unit-stride dimension is not its innermost one in the tail copies' view (an
  // extent-1 index between them: `T(j, i)` with one i) is left to the general lowering
  if (!(t.a.rows_of_cols() && t.b.rows_of_cols() && t.c.rows_of_cols() && (nb > 1 || (t.a.row_step() == 1 && t.b.row_step() == 1))))
    return gemm_unsupported(k, "tails of an operand whose unit-stride dimension is not its innermost one in the copies' view");
  const int64_t largest = std::max({nb * t.a.rows * t.ac * ib, nb * t.b.rows * t.bc * ib, nb * s.M * g.N * eo});
  if (nb > 1 && largest > m.capacity(Buffer::UB))
    return gemm_unsupported(k, "batched matmul with tails whose batch does not fit the vector buffer in one piece (" +
                                   std::to_string(largest) + " bytes for the largest operand, UB holds " +
                                   std::to_string(m.capacity(Buffer::UB)) + " bytes)");
  if (g.int_out) {
    if (std::string why = widen_i8_refusal(m, t.a.rows, t.a.cols, t.ac); !why.empty()) return why;
    if (std::string why = widen_i8_refusal(m, t.b.rows, t.b.cols, t.bc); !why.empty()) return why;
  }
  return "";
}

}  // namespace

// Rows per chunk of Builder::widen_i8: a whole GM alignment unit of i8 rows per chunk, within a
// quarter of UB and one instruction's repeats.
int64_t widen_i8_chunk_rows(const Machine& m, int64_t rows, int64_t dst_cols) {
  const int64_t lanes = m.vector_lanes(DType::F16), unit = m.granularity(Buffer::GM) / dtype_bytes(DType::I8);
  int64_t chunk_rows = std::max<int64_t>(unit, (m.capacity(Buffer::UB) / 4) / dst_cols / unit * unit);
  chunk_rows = std::min(chunk_rows, std::max<int64_t>(1, m.vector_max_repeat * lanes / dst_cols / unit * unit));
  return std::min(chunk_rows, rows);
}

// "" when Builder::widen_i8 can widen `rows` i8 rows of `cols` elements to `dst_cols`, else the
// UserError text of why a chunk does not fit UB or one repeat run.
std::string widen_i8_refusal(const Machine& m, int64_t rows, int64_t cols, int64_t dst_cols) {
  const int64_t lanes = m.vector_lanes(DType::F16), chunk_rows = widen_i8_chunk_rows(m, rows, dst_cols);
  const int64_t narrow = round_up(chunk_rows * dst_cols, m.vector_bytes_per_repeat);
  const int64_t needed = narrow + round_up(chunk_rows * dst_cols * dtype_bytes(DType::F16), m.alignment(Buffer::UB));
  if (needed <= m.capacity(Buffer::UB) && chunk_rows * dst_cols <= m.vector_max_repeat * lanes) return "";
  return "an i8 operand row of " + std::to_string(cols) + " elements does not fit the vector buffer (UB): a chunk of " +
         std::to_string(chunk_rows) + " rows needs " + std::to_string(needed) + " bytes and at most " +
         std::to_string(m.vector_max_repeat * lanes) + " elements per repeat run; UB holds " + std::to_string(m.capacity(Buffer::UB)) +
         " bytes";
}

TailCopies tail_copies(const GemmShape& g, int64_t M, int64_t N, int64_t K) {
  TailCopies t;
  t.a = g.a_transposed() ? StoredMatrix{K, M, g.a_sk, g.a_sb} : StoredMatrix{M, K, g.a_sm, g.a_sb};
  t.b = g.b_transposed() ? StoredMatrix{N, K, g.b_sn, g.b_sb} : StoredMatrix{K, N, g.b_sk, g.b_sb};
  t.c = StoredMatrix{M, N, g.c_sm, g.c_sb};
  t.ar = g.a_transposed() ? g.K : g.M, t.ac = g.a_transposed() ? g.M : g.K;
  t.br = g.b_transposed() ? g.N : g.K, t.bc = g.b_transposed() ? g.K : g.N;
  return t;
}

// Every decision of the GEMM path, in the order its checks apply. "" or the UserError text of why
// it does not take the kernel.
std::string setup_gemm(const kernel::Kernel& k, const kernel::MatmulOp& mm, const Machine& m, const isa::Hierarchy& target,
                       GemmSetup& s) {
  if (std::string why = setup_operands(k, mm, m, target, s); !why.empty()) return why;
  if (std::string why = setup_plan(k, mm, m, s); !why.empty()) return why;
  if (s.epilogue)
    if (std::string why = setup_broadcasts(k, m, s); !why.empty()) return why;
  if (!s.aligned && !s.in_place && !s.g.batch_dims.empty())
    return gemm_unsupported(k, fmt::format("several batch indices with tails ({}x{}x{} not whole {}x{}x{} fractals)", s.M, s.N,
                                           s.K, m.cube_f16.m0, m.cube_f16.n0, m.cube_f16.k0));
  if (!s.aligned && !s.in_place) return setup_tails(k, m, s);
  return "";
}

// The notes of the setup: the i8 cube shape, the plan's, the operands' storage.
void gemm_notes(const Machine& m, const GemmSetup& s, std::vector<std::string>& notes) {
  const GemmShape& g = s.g;
  if (s.native_i8) {
    const isa::CubeShape& cube = m.cube_i8;
    notes.push_back(fmt::format("i8 on the cube's {}x{}x{} i8 shape, i32 accumulation{}", cube.m0, cube.n0, cube.k0,
                                g.a_transposed() || !g.b_transposed() ? " (load2d transposes i8 fractal pairs)" : ""));
  }
  notes.insert(notes.end(), g.notes.begin(), g.notes.end());
  if (g.a_transposed() || g.b_transposed())
    notes.push_back(fmt::format("operands as stored: A {}, B {}, each loaded as stored (dma_in_nz), load2d transposing {}",
                                g.a_transposed() ? "[k][m]" : "[m][k]", g.b_transposed() ? "[n][k]" : "[k][n]",
                                g.a_transposed() && g.b_transposed() ? "A only" : g.a_transposed() ? "A and B" : "neither"));
}

// What the tails in place do, for the notes.
void in_place_notes(const GemmSetup& s, std::vector<std::string>& notes) {
  const GemmShape& g = s.g;
  if (!g.real_n && !g.real_k) {
    notes.push_back(fmt::format("M tail: {} rows computed as {} on every core; the {} rows past M read and write "
                                "guards after {} and {} (no padded copies)",
                                s.M, g.M, g.M - s.M, s.A->name, s.C->name));
    return;
  }
  const bool fill = g.real_k && (!g.a_transposed() || g.b_transposed());
  notes.push_back(fmt::format("tails: {}x{}x{} computed as {}x{}x{} on every core, in place (no padded copies): edge tiles "
                              "read the guards after {} and {}, rows past M are written into the guard after {}, "
                              "columns past N clipped{}",
                              s.M, s.N, s.K, g.M, g.N, g.K, s.A->name, s.B->name, s.C->name,
                              !g.real_k ? ""
                              : fill    ? "; the K-minor operand's columns past K zero-filled in L1"
                                        : "; the rows past K are the guards' zeros"));
}

}  // namespace tessel::emit_npu::gemm_detail
