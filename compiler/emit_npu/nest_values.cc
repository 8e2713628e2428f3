// The general NPU vector lowering's values (nest_lowering.h): moves between GM and UB at the
// current tile origin, the loads of a tile (contiguous rows, strided lanes, a value per row
// broadcast by vbrcb, f16 reads turned by vtranspose, i8 widened to i32), indices used as values,
// and the expression compiler over UB regions: equal subexpressions computed once per tile,
// conditions as f32 1 / 0, selects by vselv, i8 arithmetic in i32 wrapped to the i8 range, and in
// the row pipeline values per row kept as one repeat per row and operations run in place on
// operands that die.
#include "compiler/emit_npu/nest_lowering.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "compiler/emit_npu/operands.h"
#include "isa/base/error.h"

namespace tessel::emit_npu::nest {

// GM operand of access `a` at the current tile origin, plus `extra` bytes (address in kAddr).
Operand Nest::gm_operand(const Plan& p, const Access& a, int64_t extra) {
  const int eb = dtype_bytes(a.type);
  int64_t c = (sizing_ ? 0 : gm_.at(a.tensor)) + eb * a.offset + extra;  // (sizing: before GM is bound)
  std::map<uint8_t, int64_t> terms;
  for (size_t d = 0; d < p.dims.size(); ++d) {
    c += eb * a.stride[d] * pos_[d].c;
    for (const auto& [r, mul] : pos_[d].regs) terms[r] += eb * a.stride[d] * mul;
  }
  bool first = true;
  for (const auto& [r, mul] : terms) {
    if (mul == 0) continue;
    op(Opcode::Mul, {reg(first ? kAddr : kTmp), reg(r), imm(mul)});
    if (!first) op(Opcode::Add, {reg(kAddr), reg(kAddr), reg(kTmp)});
    first = false;
  }
  return at(Buffer::GM, c, first ? npu::kNoRegister : kAddr);
}

// Moves `rows` rows of `cols` elements between UB (row r at region + r * pitch elements) and GM
// (element (r, c) at the access's origin + r * su + c * sv). su, sv >= 0.
void Nest::move(bool to_ub, const Plan& p, const Access& a, int64_t region, int64_t rows, int64_t cols,
    int64_t pitch, int64_t su, int64_t sv) {
  const int eb = dtype_bytes(a.type);
  const Operand gm = gm_operand(p, a, 0);
  auto dma = [&](int64_t ub, int64_t gm_extra, int64_t n, int64_t burst, int64_t ub_gap, int64_t gm_gap) {
    Operand g = gm;
    g.imm += gm_extra;
    if (to_ub) op(Opcode::DmaIn, {at(Buffer::UB, ub), g, imm(n), imm(burst), imm(gm_gap), imm(ub_gap)});
    else op(Opcode::DmaOut, {g, at(Buffer::UB, ub), imm(n), imm(burst), imm(ub_gap), imm(gm_gap)});
  };
  if (rows == 1) su = cols;  // no second row: any gap
  if (to_ub && (sv < 0 || (cols == 1 && pitch == 1 && su < 0))) {  // reversed lanes (or a reversed column)
    // (count_regions counts these; a region after another is contiguous with it)
    const int span = gather_span(a.type);
    Gather g{fresh_region(), 0, 0, span * chunk_ * 4 / m_.vector_block_bytes};
    for (int i = 1; i < span; ++i) fresh_region();
    if (gathered_bytewise(a.type)) {
      g.wide = fresh_region();
      for (int i = 1; i < span; ++i) fresh_region();
      g.packed = fresh_region();
    }
    if (su >= 1 && !(cols == 1 && pitch == 1) && gather_columns(p, a, region, g, rows, cols, pitch, su, sv)) return;
    if (cols == 1 && pitch == 1) return gather_reversed(p, a, region, g, rows, [&](int64_t r) { return r * su; });
    for (int64_t r = 0; r < rows; ++r)
      gather_reversed(p, a, region + r * pitch * eb, g, cols, [&](int64_t c) { return r * su + c * sv; });
    return;
  }
  if (cols == 1 && pitch == 1) {  // contiguous elements in UB
    if (su == 1 || rows == 1) dma(region, 0, 1, rows * eb, 0, 0);
    else dma(region, 0, rows, eb, 0, (su - 1) * eb);
    TESSEL_CHECK(su >= 1 || rows == 1, "nest: a column move with stride 0");
    return;
  }
  if (sv == 1 || cols == 1) {
    if (su >= cols) {
      dma(region, 0, rows, cols * eb, (pitch - cols) * eb, (su - cols) * eb);
    } else {
      for (int64_t r = 0; r < rows; ++r) dma(region + r * pitch * eb, r * su * eb, 1, cols * eb, 0, 0);
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r) dma(region + r * pitch * eb, r * su * eb, cols, eb, 0, (sv - 1) * eb);
}

// Places n elements of access `a` (element c at the tile origin + at(c) elements, in any order in
// GM) contiguously at UB `region`: a DMA runs forward in GM and in UB and starts on a UB block, so
// each element goes to a 32-byte block of its own in the region `g.scratch`, and vcmax of the one
// enabled lane 0 over the blocks (a repeat per block) packs them in order (exact: a max of one
// value; NaN and -0 kept). Elements vcmax has no type for (gathered_bytewise: i8, u8, bf16) go a
// byte per block, packed by pack_bytes.
void Nest::gather_reversed(const Plan& p, const Access& a, int64_t region, const Gather& g, int64_t n, const std::function<int64_t(int64_t)>& at_c) {
  const int eb = dtype_bytes(a.type), ub = gathered_bytewise(a.type) ? 1 : eb;  // bytes gathered a block each
  const int64_t block = m_.vector_block_bytes, per_block = block / ub, units = n * (eb / ub);
  // at most a vcmax's repeats: all units in one piece where they fit the scratch, else pieces of
  // whole destination blocks (each piece's first unit starts a UB block). (A pipeline of i32 rows
  // holds 8 blocks a row: fewer than the 16 f16 of a block, and its reversed f16 value per row was
  // cut into pieces of 0.)
  const int64_t fits = std::min<int64_t>(max_repeat_, g.blocks);
  const int64_t piece = units <= fits ? units : fits / per_block * per_block;
  TESSEL_CHECK(piece > 0, "nest: a region smaller than a block per lane");
  const Operand gm = gm_operand(p, a, 0);
  for (int64_t u0 = 0; u0 < units; u0 += piece) {
    const int64_t k = std::min(piece, units - u0);
    for (int64_t c = 0; c < k; ++c) {
      Operand src = gm;
      src.imm += at_c((u0 + c) / (eb / ub)) * eb + (u0 + c) % (eb / ub) * ub;
      op(Opcode::DmaIn, {at(Buffer::UB, g.scratch + c * block), src, imm(1), imm(ub), imm(0), imm(0)});
    }
    mask_lanes(1);
    if (ub == 1) pack_bytes(eb == 1 ? a.type : DType::I8, region + u0, g.scratch, g.wide, g.packed, k);
    else op(Opcode::Vcmax, {type(a.type), at(Buffer::UB, region + u0 * eb), at(Buffer::UB, g.scratch), imm(k), imm(1), imm(1)});
    op(Opcode::SetVectorMask, {imm(-1), imm(-1)});
  }
}

// gather_reversed's packing for 1-byte elements (vcmax has no i8): lane 0 of each of k blocks at
// `scratch` widened to i32 at `wide` by a one-lane vconv per block (a repeat per block), packed at
// `packed` by vcmax in i32, narrowed back (exact: the values are in range) k elements to `region`, the last repeat
// masked to what remains. Expects the one-lane mask; leaves it set to whole repeats' lanes.
void Nest::pack_bytes(DType bytes, int64_t region, int64_t scratch, int64_t wide, int64_t packed, int64_t k) {
  const DType t = bytes == DType::U8 ? DType::I8 : bytes;  // u8 bytes move as i8 (no instruction takes u8; the bits round-trip)
  op(Opcode::Vconv, {type(DType::I32), type(t), at(Buffer::UB, wide), at(Buffer::UB, scratch), imm(k), imm(1), imm(1), imm(1), imm(1)});
  op(Opcode::Vcmax, {type(DType::I32), at(Buffer::UB, packed), at(Buffer::UB, wide), imm(k), imm(1), imm(1)});
  const int64_t lanes = m_.vector_lanes(4), whole = k / lanes, rest = k % lanes;
  const int64_t rep_dst = lanes / m_.vector_block_bytes, rep_src = lanes * 4 / m_.vector_block_bytes;
  op(Opcode::SetVectorMask, {imm(-1), imm(-1)});
  if (whole > 0)
    op(Opcode::Vconv, {type(t), type(DType::I32), at(Buffer::UB, region), at(Buffer::UB, packed), imm(whole), imm(1), imm(1),
                       imm(rep_dst), imm(rep_src)});
  if (rest > 0) {
    mask_lanes(rest);
    op(Opcode::Vconv, {type(t), type(DType::I32), at(Buffer::UB, region + whole * lanes), at(Buffer::UB, packed + whole * lanes * 4),
                       imm(1), imm(1), imm(1), imm(rep_dst), imm(rep_src)});
  }
}

// gather_reversed for a tile whose rows run forward (su >= 1): a DMA per column of K lanes (of
// bytes where gathered bytewise) gives its unit of every row a block of its own (row r's blocks K
// apart), then a one-lane vcmax (pack_bytes) per row packs them. False (nothing emitted) where the
// scratch region holds fewer than a block of lanes per row.
bool Nest::gather_columns(const Plan& p, const Access& a, int64_t region, const Gather& g, int64_t rows, int64_t cols,
                          int64_t pitch, int64_t su, int64_t sv) {
  const int eb = dtype_bytes(a.type), ub = gathered_bytewise(a.type) ? 1 : eb, per_unit = eb / ub;
  const int64_t block = m_.vector_block_bytes, per_block = block / ub, units = cols * per_unit;
  const int64_t lanes = std::min({units, max_repeat_, g.blocks / rows}) / per_block * per_block;
  if (lanes == 0) return false;
  const Operand gm = gm_operand(p, a, 0);
  for (int64_t c0 = 0; c0 < units; c0 += lanes) {
    const int64_t k = std::min(lanes, units - c0);
    for (int64_t c = 0; c < k; ++c) {
      Operand src = gm;
      src.imm += (c0 + c) / per_unit * sv * eb + (c0 + c) % per_unit * ub;
      op(Opcode::DmaIn, {at(Buffer::UB, g.scratch + c * block), src, imm(rows), imm(ub), imm(su * eb - ub), imm(lanes * block - ub)});
    }
    mask_lanes(1);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t dst = region + r * pitch * eb + c0 * ub, src = g.scratch + r * lanes * block;
      if (ub == 1) {
        if (r > 0) mask_lanes(1);  // (pack_bytes leaves whole repeats' lanes)
        pack_bytes(eb == 1 ? a.type : DType::I8, dst, src, g.wide, g.packed, k);
      } else {
        op(Opcode::Vcmax, {type(a.type), at(Buffer::UB, dst), at(Buffer::UB, src), imm(k), imm(1), imm(1)});
      }
    }
    op(Opcode::SetVectorMask, {imm(-1), imm(-1)});
  }
  return true;
}

// Loads access `a` as a rows x pitch tile (cols valid lanes per row).
Nest::Value Nest::load(const Plan& p, const Access& a, int64_t rows, int64_t cols) {
  // rows x pitch values in whole repeats (a row block of the pipeline may be wider than the chunk
  // of the statement that reads it: a broadcast wrote past its region into the next set, issue 31)
  const int64_t su = stride_of(a, p.u), sv = stride_of(a, p.v);
  if (rowwise_ && sv == 0 && su != 0) return row_values(p, a, rows);
  const int64_t tile = rows * p.pitch;
  const Value v{false, 0, tile > chunk_ ? fresh_bytes(tile * 4) : fresh_region(), a.type};
  if (sv == 0 && cols > 1) {
    broadcast_rows(p, a, v, rows);
    return Value{false, 0, v.region, compute_type(a.type)};
  }
  // (rows >= 8: the 16-row blocks written fit the value's region, which holds rows x pitch 4-byte values)
  if (transposable(p, a) && rows >= 8 && sv >= rows) return load_transposed(p, a, v, rows, cols);
  if (su == 0 && sv == 1 && rows > 1 && a.type == compute_type(a.type)) {  // the same row for every row: load once, copy
    move(true, p, a, v.region, 1, cols, p.pitch, 0, 1);
    const int64_t k = p.pitch * dtype_bytes(a.type) / bytes_per_repeat_, rep = k * repeat_blocks_;
    for (int64_t j = 0; j < k; ++j)
      op(Opcode::Vmuls, {type(a.type), at(Buffer::UB, v.region + p.pitch * dtype_bytes(a.type) + j * bytes_per_repeat_),
                         at(Buffer::UB, v.region + j * bytes_per_repeat_), Operand::float_(1), imm(rows - 1), imm(1), imm(1),
                         imm(rep), imm(0)});
    return v;
  }
  move(true, p, a, v.region, rows, cols, p.pitch, su, sv == 0 ? 1 : sv);
  if (a.type == compute_type(a.type)) return v;
  const Value w{false, 0, fresh_region(), compute_type(a.type)};
  convert(w, v, rows * p.pitch);
  return w;
}

// Loads the tile transposed (lanes as rows: one dma_in of contiguous row segments) into the two
// regions after `v`, then turns each 16 x 16 block with vtranspose into the rows x pitch tile.
Nest::Value Nest::load_transposed(const Plan& p, const Access& a, const Value& v, int64_t rows, int64_t cols) {
  const int64_t t = fresh_region();
  fresh_region();  // the transposed tile takes up to two regions (rows >= 8)
  const int64_t tp = (rows + 15) / 16 * 16, cp = (cols + 15) / 16 * 16;  // its pitch and row count
  move(true, p, a, t, cols, rows, tp, stride_of(a, p.v), 1);
  const int64_t bb = m_.vector_block_bytes, eb = 2;
  for (int64_t bc = 0; bc < cp / 16; ++bc)
    for (int64_t br = 0; br < tp / 16; ++br)
      op(Opcode::Vtranspose, {type(DType::F16), at(Buffer::UB, v.region + (br * 16 * p.pitch + bc * 16) * eb),
                              at(Buffer::UB, t + (bc * 16 * tp + br * 16) * eb), imm(2), imm(p.pitch * eb / bb), imm(tp * eb / bb),
                              imm(8 * p.pitch * eb / bb), imm(8 * tp * eb / bb)});
  return v;
}

// The row values of a read that does not move along the lanes, gathered into a slot of the
// row-values region (widened in place past the gathered ones when the type has no arithmetic); the
// region of the values. In the statement-by-statement nests each read of a tile gathers into a
// slot of its own, so the tile's gathers (a per-channel mean, variance, scale, shift) are all in
// flight at once instead of each waiting for the previous one's broadcast.
int64_t Nest::gather_rows(const Plan& p, const Access& a, int64_t rows) {
  const DType t = compute_type(a.type);
  const int64_t su = stride_of(a, p.u), count = su == 0 ? 1 : rows;
  const int64_t slot_bytes = 2 * ((std::max<int64_t>(rows, 1) * 4 + 31) / 32 * 32);
  const int64_t slots = fz_.on ? 1 : std::max<int64_t>(1, chunk_ * 4 / slot_bytes);
  const int64_t gathered = rowvals() + (rowval_slot_++ % slots) * slot_bytes;
  move(true, p, a, gathered, count, 1, 1, su == 0 ? 1 : su, 0);
  if (t == a.type) return gathered;
  const int64_t values = gathered + (count * dtype_bytes(a.type) + 31) / 32 * 32;
  convert(Value{false, 0, values, t}, Value{false, 0, gathered, a.type}, count);
  return values;
}

// A value per row (the access does not move along the lanes): gathered, then spread over the
// row's lanes (vbrcb per repeat of the row; one value for all rows: one repeat, copied).
void Nest::broadcast_rows(const Plan& p, const Access& a, const Value& v, int64_t rows) {
  const DType t = compute_type(a.type);
  const int64_t su = stride_of(a, p.u);
  const int64_t k = p.pitch / m_.vector_lanes(t), rep = k * repeat_blocks_;
  if (su == 0 || rows == 1) {
    const int64_t values = gather_rows(p, a, 1);
    op(Opcode::Vbrcb, {type(t), at(Buffer::UB, v.region), at(Buffer::UB, values), imm(1), imm(1), imm(repeat_blocks_)});
    if (rows * k > 1)
      op(Opcode::Vmuls, {type(t), at(Buffer::UB, v.region + bytes_per_repeat_), at(Buffer::UB, v.region), Operand::float_(1),
                         imm(rows * k - 1), imm(1), imm(1), imm(repeat_blocks_), imm(0)});
    return;
  }
  const int64_t values = gather_rows(p, a, rows);
  for (int64_t j = 0; j < k; ++j)
    op(Opcode::Vbrcb, {type(t), at(Buffer::UB, v.region + j * bytes_per_repeat_), at(Buffer::UB, values), imm(rows), imm(1), imm(rep)});
}

// A value per row kept as one repeat per row (a tile's operations read it with repeat stride 0):
// one vbrcb of the gathered values instead of one per repeat of the row.
Nest::Value Nest::row_values(const Plan& p, const Access& a, int64_t rows) {
  const DType t = compute_type(a.type);
  const int64_t values = gather_rows(p, a, rows);
  Value v{false, 0, row_value_region(), t};
  v.per_row = true;
  op(Opcode::Vbrcb, {type(t), at(Buffer::UB, v.region), at(Buffer::UB, values), imm(rows), imm(1), imm(repeat_blocks_)});
  return v;
}

// The region of a value per row: R repeats (the pipeline's block, a statement's tile); while
// counting a tile's regions, a region of its own (no other value's address) counted apart.
int64_t Nest::row_value_region() {
  if (fz_.on || sizing_) return fresh_bytes(fz_.rows * bytes_per_repeat_);
  if (counting_) {
    ++counted_rows_;
    return fresh_region();
  }
  return fresh_bytes(plan_->rows * bytes_per_repeat_);
}

// seq_ = 0, 1, 2, ... (i32) over the region: lane l of every repeat set by a masked vdup, then
// each repeat offset by its first index.
void Nest::sequence(const Plan& p) {
  const int64_t w = m_.vector_lanes(DType::I32), reps = p.rows * p.pitch / w;
  for (int64_t l = 0; l < w; ++l) {
    const int64_t bit = l % m_.vector_mask_bits;
    const uint64_t b = uint64_t{1} << (bit % 64);
    op(Opcode::SetVectorMask, {imm(bit < 64 ? 0 : static_cast<int64_t>(b)), imm(bit < 64 ? static_cast<int64_t>(b) : 0)});
    op(Opcode::Vdup, {type(DType::I32), at(Buffer::UB, seq_), Operand::float_(double(l)), imm(reps), imm(1), imm(repeat_blocks_)});
  }
  op(Opcode::SetVectorMask, {imm(-1), imm(-1)});
  for (int64_t j = 1; j < reps; ++j)
    op(Opcode::Vadds, {type(DType::I32), at(Buffer::UB, seq_ + j * bytes_per_repeat_), at(Buffer::UB, seq_ + j * bytes_per_repeat_),
                       Operand::float_(double(j * w)), imm(1), imm(1), imm(1), imm(repeat_blocks_), imm(repeat_blocks_)});
}

// An index used as a value on the tile (i32): stride_v x lane + stride_u x row + the tile origin's
// value (a register sum).
Nest::Value Nest::index_value(const Plan& p, const Access& a, int64_t n) {
  const int64_t w = m_.vector_lanes(DType::I32), k = p.pitch / w, rep = k * repeat_blocks_, rows = cur(p.u);
  const int64_t sv = stride_of(a, p.v), su = stride_of(a, p.u);
  const Value r{false, 0, fresh_region(), DType::I32};
  op(Opcode::Vdup, {type(DType::I32), at(Buffer::UB, r.region), Operand::float_(0), imm(repeats(n, DType::I32)), imm(1), imm(repeat_blocks_)});
  if (sv != 0) {  // lanes: the sequence's first row in every row
    const Value l{false, 0, fresh_region(), DType::I32};
    for (int64_t j = 0; j < k; ++j)
      op(Opcode::Vmuls, {type(DType::I32), at(Buffer::UB, l.region + j * bytes_per_repeat_), at(Buffer::UB, seq_ + j * bytes_per_repeat_),
                         Operand::float_(double(sv)), imm(rows), imm(1), imm(1), imm(rep), imm(0)});
    binary(Opcode::Vadd, r, r, l, n);
  }
  if (su != 0) {  // rows: element r of the sequence across row r
    const Value q{false, 0, fresh_region(), DType::I32};
    for (int64_t j = 0; j < k; ++j)
      op(Opcode::Vbrcb, {type(DType::I32), at(Buffer::UB, q.region + j * bytes_per_repeat_), at(Buffer::UB, seq_), imm(rows), imm(1), imm(rep)});
    with_scalar(Opcode::Vmuls, q, q, double(su), n);
    binary(Opcode::Vadd, r, r, q, n);
  }
  int64_t c = a.offset;
  std::map<uint8_t, int64_t> terms;
  for (size_t d = 0; d < p.dims.size(); ++d) {
    c += a.stride[d] * pos_[d].c;
    for (const auto& [reg_, mul] : pos_[d].regs) terms[reg_] += a.stride[d] * mul;
  }
  op(Opcode::Mov, {reg(kAddr), imm(c)});
  for (const auto& [reg_, mul] : terms) {
    op(Opcode::Mul, {reg(kTmp), reg(reg_), imm(mul)});
    op(Opcode::Add, {reg(kAddr), reg(kAddr), reg(kTmp)});
  }
  op(Opcode::Vadds, {type(DType::I32), at(Buffer::UB, r.region), at(Buffer::UB, r.region), reg(kAddr), imm(repeats(n, DType::I32)),
                     imm(1), imm(1), imm(repeat_blocks_), imm(repeat_blocks_)});
  return r;
}

namespace {

// An expression's key among a tile's values: its text and its nodes' types in preorder. One text
// can be two values: an index or a constant used as a value takes its type from where it stands
// (i0 is f16 in X1() + i0 and i32 in i0 != i1), so the text alone gave the i32 compare the f16 i0.
std::string value_key(const std::string& prefix, const ir::Expr& e) {
  std::string types;
  std::function<void(const ir::Expr&)> walk = [&](const ir::Expr& x) {
    types += dtype_name(x.type);
    types += ',';
    for (const auto& a : x.args) walk(*a);
  };
  walk(e);
  return prefix + ir::to_string(e) + "#" + types;
}

}  // namespace

// Equal subexpressions are computed once per tile (GELU's z appears five times).
Nest::Value Nest::compile(const ir::Expr& e, int64_t n) {
  const Value v = compile_rows(e, n);
  if (!v.per_row || narrow_) return v;
  const std::string key = value_key(memo_prefix_, e) + "#expanded";
  if (auto it = memo_.find(key); it != memo_.end()) return it->second;
  const Value x = expand(v);
  memo_[key] = x;
  return x;
}

// The same, but a value per row may stay one (row pipeline: operations with a value per row read
// its one repeat per row with repeat stride 0).
Nest::Value Nest::compile_rows(const ir::Expr& e, int64_t n) {
  const std::string key = value_key(memo_prefix_, e);
  if (auto it = memo_.find(key); it != memo_.end()) return it->second;
  const Value v = fz_.on || sizing_ || rowwise_ ? row_op(e, n) : compile_node(e, n);
  memo_[key] = v;
  return v;
}

// An operation on values per row: of values per row (and constants) alone, a value per row computed
// on their repeats (narrow_rows); a binary one of a value per row and a tile, the row's repeats
// reading the value with repeat stride 0 (mixed_rows).
Nest::Value Nest::row_op(const ir::Expr& e, int64_t n) {
  static const std::map<ir::Op, Opcode> ops{{ir::Op::Add, Opcode::Vadd}, {ir::Op::Sub, Opcode::Vsub}, {ir::Op::Mul, Opcode::Vmul},
                                            {ir::Op::Div, Opcode::Vdiv}, {ir::Op::Max, Opcode::Vmax}, {ir::Op::Min, Opcode::Vmin}};
  if (e.kind != ir::ExprKind::Apply || narrow_int(e.type)) return compile_node(e, n);
  std::vector<Value> a;
  for (const auto& x : e.args) a.push_back(compile_rows(*x, n));
  if (Value r = narrow_rows(e, a); r.per_row) return r;
  const auto o = ops.find(e.op);
  if (o == ops.end() || e.args.size() != 2 || (e.op == ir::Op::Div && !dtype_is_float(e.type)))  // guarded against a divisor of 0 there
    return compile_node(e, n);
  if (!(a[0].per_row || a[1].per_row) || a[0].scalar || a[1].scalar || a[0].type != e.type || a[1].type != e.type)
    return compile_node(e, n);
  const DType t = e.type;
  const int64_t rows = cur(plan_->u);
  Value r{false, 0, 0, t};
  if (a[0].per_row && a[1].per_row) {
    r.region = row_value_region();
    r.per_row = true;
    vop(o->second, t, r.region, a[0].region, a[1].region, rows, repeat_blocks_);
    return r;
  }
  r.region = result_region(e, a);
  mixed_rows(o->second, t, r.region, a[0], a[1], rows);
  return r;
}

// A float operation whose operands are values per row or constants, on the values' repeats (one per
// row, the same element size; a float cast converts one repeat's lanes per row); per_row false when
// the operation is not one.
Nest::Value Nest::narrow_rows(const ir::Expr& e, const std::vector<Value>& a) {
  switch (e.op) {
    case ir::Op::Lt: case ir::Op::Le: case ir::Op::Gt: case ir::Op::Ge: case ir::Op::Eq: case ir::Op::Ne:
    case ir::Op::And: case ir::Op::Or: case ir::Op::Not: case ir::Op::Select: return {};
    default: break;
  }
  if (!dtype_is_float(e.type) || a.empty()) return {};
  bool any = false;
  for (const Value& v : a) {
    if (!v.scalar && (!v.per_row || !dtype_is_float(v.type))) return {};
    if (!v.scalar && e.op != ir::Op::Cast && v.type != e.type) return {};
    any = any || v.per_row;
  }
  if (!any) return {};
  const int64_t rows = cur(plan_->u);
  if (e.op == ir::Op::Cast) {
    if (a[0].type == e.type) return a[0];
    Value r{false, 0, row_value_region(), e.type};
    r.per_row = true;
    const int64_t db = dtype_bytes(e.type), lanes = bytes_per_repeat_ / std::max(db, int64_t{dtype_bytes(a[0].type)});
    for (int64_t j = 0; j * lanes * db < bytes_per_repeat_; ++j)  // every lane of each row's repeat: its value
      op(Opcode::Vconv, {type(e.type), type(a[0].type), at(Buffer::UB, r.region + j * lanes * db), at(Buffer::UB, a[0].region),
                         imm(rows), imm(1), imm(1), imm(repeat_blocks_), imm(repeat_blocks_)});
    return r;
  }
  struct Narrow {
    bool& on;
    ~Narrow() { on = false; }
  } narrow{narrow_ = true};
  Value r = VectorCode::compile(e, rows * m_.vector_lanes(e.type));
  r.per_row = !r.scalar;
  return r;
}

// dst = a o b, one of them a value per row (read with repeat stride 0), the other a rows x pitch
// tile: an instruction per repeat of the row over the rows, or per row over its repeats, whichever
// issues fewer.
void Nest::mixed_rows(Opcode o, DType t, int64_t dst, const Value& a, const Value& b, int64_t rows) {
  const int64_t k = tile_pitch() / m_.vector_lanes(t), rep = k * repeat_blocks_;
  if (k <= rows) {
    auto src = [&](const Value& v, int64_t j) { return v.per_row ? v.region : v.region + j * bytes_per_repeat_; };
    for (int64_t j = 0; j < k; ++j)
      op(o, {type(t), at(Buffer::UB, dst + j * bytes_per_repeat_), at(Buffer::UB, src(a, j)), at(Buffer::UB, src(b, j)), imm(rows),
             imm(1), imm(1), imm(1), imm(rep), imm(a.per_row ? repeat_blocks_ : rep), imm(b.per_row ? repeat_blocks_ : rep)});
    return;
  }
  const int64_t row_bytes = k * bytes_per_repeat_;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < k; j += max_repeat_) {
      const int64_t n = std::min(max_repeat_, k - j);
      auto src = [&](const Value& v) { return v.per_row ? v.region + r * bytes_per_repeat_ : v.region + r * row_bytes + j * bytes_per_repeat_; };
      op(o, {type(t), at(Buffer::UB, dst + r * row_bytes + j * bytes_per_repeat_), at(Buffer::UB, src(a)), at(Buffer::UB, src(b)), imm(n),
             imm(1), imm(1), imm(1), imm(repeat_blocks_), imm(a.per_row ? 0 : repeat_blocks_), imm(b.per_row ? 0 : repeat_blocks_)});
    }
}

// In the row pipeline an element-wise operation overwrites an operand of its own element size
// that no other node of the block reads (its text occurs once in the block's statements) and that
// is neither a load nor a kept result; a cast to a narrower type gets a region of its size.
int64_t Nest::result_region(const ir::Expr& e, const std::vector<Value>& a) {
  if (narrow_) return row_value_region();
  if (!fz_.on && !sizing_) {  // a statement's tile: over an operand that no other node reads
    if (rowwise_)
      for (size_t i = 0; i < a.size(); ++i)
        if (!a[i].scalar && !a[i].per_row && dtype_bytes(a[i].type) == dtype_bytes(e.type) && dies_in_tile(*e.args[i], a[i].region))
          return a[i].region;
    return fresh_region();
  }
  for (size_t i = 0; i < a.size(); ++i)
    if (!a[i].scalar && !a[i].per_row && dtype_bytes(a[i].type) == dtype_bytes(e.type) && dies(*e.args[i], a[i].region))
      return a[i].region;
  if (e.op == ir::Op::Cast && dtype_bytes(e.type) < 4) return fresh_bytes(chunk_ * dtype_bytes(e.type));
  return fresh_region();
}

bool Nest::dies(const ir::Expr& x, int64_t region) {
  if (x.kind != ir::ExprKind::Apply || x.op == ir::Op::Cast) return false;  // (a cast may be its operand's value)
  const std::string key = memo_prefix_ + ir::to_string(x);
  int uses = 0;
  for (size_t j = fz_.prologue; j < plans_.size(); ++j) {
    std::string prefix;
    for (const Dim& d : plans_[j].dims) prefix += fmt::format("{}@{}:{},", d.name, d.lo, d.extent);
    prefix += "|";
    std::function<void(const ir::Expr&)> walk = [&](const ir::Expr& y) {
      for (const auto& c : y.args) {
        if (prefix + ir::to_string(*c) == key) ++uses;
        walk(*c);
      }
    };
    walk(*plans_[j].s->rhs);
    if (prefix + ir::to_string(*plans_[j].s->rhs) == key) uses += 2;  // a statement's value: kept
  }
  return uses == 1 && !kept(region);
}

// Outside the pipeline: is x's value read by this node only (its text occurs once in the
// statement) and not a load?
bool Nest::dies_in_tile(const ir::Expr& x, int64_t region) const {
  if (x.kind != ir::ExprKind::Apply || x.op == ir::Op::Cast) return false;
  if (std::any_of(loaded_.begin(), loaded_.end(), [&](const Value& v) { return v.region == region; })) return false;
  const std::string key = ir::to_string(x);
  int uses = 0;
  std::function<void(const ir::Expr&)> walk = [&](const ir::Expr& y) {
    for (const auto& c : y.args) {
      if (ir::to_string(*c) == key) ++uses;
      walk(*c);
    }
  };
  walk(*plan_->s->rhs);
  return uses == 1;
}

// Is `region` a load (hoisted, this block's) or a result kept in UB? (A cast to the same type
// is its operand's value, so an expression's value may be one of them.)
bool Nest::kept(int64_t region) const {
  auto held = [&](const std::map<std::string, Value>& m) {
    return std::any_of(m.begin(), m.end(), [&](const auto& v) { return v.second.region == region; });
  };
  if (held(hoisted_) || held(block_loads_) || held(prefetched_[set_])) return true;
  return std::any_of(resident_.begin(), resident_.end(), [&](const auto& r) { return r.second.v.region == region; });
}

// A value per row spread over the row's lanes.
Nest::Value Nest::expand(const Value& v) {
  const Value r{false, 0, fresh_region(), v.type};
  const int64_t k = tile_pitch() / m_.vector_lanes(v.type), rep = k * repeat_blocks_;
  for (int64_t j = 0; j < k; ++j)
    op(Opcode::Vmuls, {type(v.type), at(Buffer::UB, r.region + j * bytes_per_repeat_), at(Buffer::UB, v.region), Operand::float_(1),
                       imm(cur(plan_->u)), imm(1), imm(1), imm(rep), imm(repeat_blocks_)});
  return r;
}

Nest::Value Nest::compile_node(const ir::Expr& e, int64_t n) {
  if (e.kind == ir::ExprKind::Access) return loaded_.at(plan_->read_of.at(&e));
  if (e.kind == ir::ExprKind::IndexValue) {
    if (e.affine.is_constant()) return {true, double(e.affine.evaluate({}, k_.sizes)), 0, DType::I32};
    const Value v = index_value(*plan_, plan_->values.at(&e), n);
    if (!dtype_is_float(e.type)) return v;
    // an index used as a float value (a weak operand next to a float: X(i) * i) is the i32
    // sequence converted, exactly below 2^24 (f16: 2^11, as the interpreter's rounding gives)
    const Value f{false, 0, fresh_region(), e.type};
    convert(f, v, n);
    return f;
  }
  if (e.kind != ir::ExprKind::Apply) return VectorCode::compile(e, n);
  switch (e.op) {
    case ir::Op::Lt: case ir::Op::Le: case ir::Op::Gt: case ir::Op::Ge: case ir::Op::Eq: case ir::Op::Ne:
      return compare(e, n);
    case ir::Op::And: case ir::Op::Or: {
      const Value a = condition(compile(*e.args[0], n), n), b = condition(compile(*e.args[1], n), n);
      if (a.scalar && b.scalar) return {true, e.op == ir::Op::And ? double(a.constant && b.constant) : double(a.constant || b.constant), 0, DType::F32};
      const Value r{false, 0, fresh_region(), DType::F32};
      binary(e.op == ir::Op::And ? Opcode::Vmul : Opcode::Vmax, r, vector_of(a, n), vector_of(b, n), n);
      return r;
    }
    case ir::Op::Not: {
      const Value a = condition(compile(*e.args[0], n), n);
      if (a.scalar) return {true, double(a.constant == 0), 0, DType::F32};
      const Value r{false, 0, fresh_region(), DType::F32};
      with_scalar(Opcode::Vmuls, r, a, -1, n);
      with_scalar(Opcode::Vadds, r, r, 1, n);
      return r;
    }
    case ir::Op::Select: return select(e, n);
    default: break;
  }
  if (narrow_int(e.type)) return narrow_op(e, n);
  return VectorCode::compile(e, n);
}

// An i8 or u8 operation or cast computed in i32 and wrapped to the type's range ([-128, 127],
// [0, 255]; from floats: truncated and saturated), the result kept in i32.
Nest::Value Nest::narrow_op(const ir::Expr& e, int64_t n) {
  const int64_t lo = e.type == DType::U8 ? 0 : -128, hi = lo + 255;
  if (e.op == ir::Op::Cast && dtype_is_float(e.args[0]->type)) {
    Value x = compile(*e.args[0], n);
    if (x.scalar) return {true, std::clamp(std::trunc(x.constant), double(lo), double(hi)), 0, DType::I32};
    x = truncate_to_i32(x, n);
    const Value r{false, 0, fresh_region(), DType::I32};
    with_scalar(Opcode::Vmaxs, r, x, double(lo), n);
    binary(Opcode::Vmin, r, r, vector_of(Value{true, double(hi), 0, DType::I32}, n), n);
    return r;
  }
  ir::Expr wide = e;
  wide.type = DType::I32;
  Value x = e.op == ir::Op::Cast ? compile(*e.args[0], n) : VectorCode::compile(wide, n);
  if (x.scalar) {
    const auto v = static_cast<int64_t>(x.constant);
    return {true, double(lo == 0 ? int64_t(static_cast<uint8_t>(v)) : int64_t(static_cast<int8_t>(v))), 0, DType::I32};
  }
  if (dtype_is_float(x.type) || narrow_int(x.type)) return x;  // (not reached: handled above)
  const Value w{false, 0, fresh_region(), DType::I32};
  wrap(w, x, lo, constant_256(n), n);
  return w;
}

// x (in its compute type) in the output type t: i8 values are in range; a u8 value goes as its i8
// bit pattern (convert). Fresh regions: the narrowed value, and for u8 the pattern and the constant.
Nest::Value Nest::narrowed(Value x, DType t, int64_t n) {
  if (x.type == t) return x;
  if (t == DType::U8) {
    const Value w{false, 0, fresh_region(), DType::I32};
    wrap(w, x, -128, constant_256(n), n);
    x = w;
  }
  const Value y{false, 0, fresh_region(), t};
  convert(y, x, n);
  return y;
}

// A condition as f32 1 / 0 (compares give it in their operands' type).
Nest::Value Nest::condition(const Value& c, int64_t n) {
  if (c.scalar || c.type == DType::F32) return c;
  const Value r{false, 0, fresh_region(), DType::F32};
  convert(r, c, n);
  return r;
}

Nest::Value Nest::compare(const ir::Expr& e, int64_t n) {
  Value a = compile(*e.args[0], n), b = compile(*e.args[1], n);
  if (a.scalar && b.scalar) {
    const double x = a.constant, y = b.constant;
    bool r = false;
    switch (e.op) {
      case ir::Op::Lt: r = x < y; break;
      case ir::Op::Le: r = x <= y; break;
      case ir::Op::Gt: r = x > y; break;
      case ir::Op::Ge: r = x >= y; break;
      case ir::Op::Eq: r = x == y; break;
      default: r = x != y; break;
    }
    return {true, double(r), 0, DType::F32};
  }
  const DType t = a.scalar ? b.type : a.type;
  a.type = b.type = t;
  a = vector_of(a, n);
  b = vector_of(b, n);
  const bool swap = e.op == ir::Op::Gt || e.op == ir::Op::Ge;
  const Opcode o = e.op == ir::Op::Lt || e.op == ir::Op::Gt ? Opcode::Vcmplt
                   : e.op == ir::Op::Le || e.op == ir::Op::Ge ? Opcode::Vcmple : Opcode::Vcmpeq;
  const Value r{false, 0, fresh_region(), t};
  binary(o, r, swap ? b : a, swap ? a : b, n);
  Value c = condition(r, n);
  if (e.op == ir::Op::Ne) {
    const Value q{false, 0, fresh_region(), DType::F32};
    with_scalar(Opcode::Vmuls, q, c, -1, n);
    with_scalar(Opcode::Vadds, q, q, 1, n);
    c = q;
  }
  return c;
}

Nest::Value Nest::select(const ir::Expr& e, int64_t n) {
  const Value c = condition(compile(*e.args[0], n), n);
  Value a = compile(*e.args[1], n), b = compile(*e.args[2], n);
  const DType t = compute_type(e.type);
  if (c.scalar) {
    Value r = c.constant != 0 ? a : b;
    r.type = t;
    return r;
  }
  a.type = a.scalar ? t : a.type;
  b.type = b.scalar ? t : b.type;
  a = vector_of(a, n);
  b = vector_of(b, n);
  Value ct = c;
  if (t != DType::F32) {
    ct = {false, 0, fresh_region(), t};
    convert(ct, c, n);
  }
  const Value r{false, 0, fresh_region(), t};
  op(Opcode::Vselv, {type(t), at(Buffer::UB, r.region), at(Buffer::UB, ct.region), at(Buffer::UB, a.region), at(Buffer::UB, b.region),
                     imm(repeats(n, t)), imm(1), imm(1), imm(1), imm(1), imm(repeat_blocks_), imm(repeat_blocks_),
                     imm(repeat_blocks_), imm(repeat_blocks_)});
  return r;
}

}  // namespace tessel::emit_npu::nest
