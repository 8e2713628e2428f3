#include "isa/npu_footprint.h"

#include <fmt/format.h>

#include <algorithm>

#include "isa/base/error.h"

namespace tessel::isa {
namespace {

using npu::Extent;

// One access being evaluated: the operands its family reads, and the rules they must keep.
class Formula {
 public:
  Formula(const NpuMachine& m, const npu::Instruction& in, const npu::OperandAccess& a, const OperandValues& v)
      : m(m), in_(in), a_(a), v_(v) {}

  DType type(int param) const { return in_.operands[a_.param[param]].dtype; }
  int64_t bytes_of(int param) const { return dtype_bytes(type(param)); }
  int64_t value(int param) const { return v_.value(a_.param[param]); }
  int64_t positive(int param, const char* what) const {
    const int64_t x = value(param);
    if (x <= 0) v_.reject(fmt::format("{} must be positive, got {}", what, x));
    return x;
  }
  int64_t non_negative(int param, const char* what) const {
    const int64_t x = value(param);
    if (x < 0) v_.reject(fmt::format("{} must not be negative, got {}", what, x));
    return x;
  }
  void reject(const std::string& rule) const { v_.reject(rule); }
  int64_t fmatrix(int field) const { return v_.fmatrix(field); }

  const NpuMachine& m;

 private:
  const npu::Instruction& in_;
  const npu::OperandAccess& a_;
  const OperandValues& v_;
};

void contiguous(AccessPattern& p, WideInt bytes) { p.piece_bytes = bytes; }

// `repeat` repeats of the blocks one repeat covers, strides in blocks. `lane_bytes`: the element
// size that sets the lanes (the wider type of a cast), `element_bytes`: this operand's.
void vector_blocks(const Formula& f, AccessPattern& p, int64_t element_bytes, int64_t lane_bytes, int repeat_param) {
  const int64_t repeat = f.value(repeat_param);
  if (repeat < 1 || repeat > static_cast<int64_t>(f.m.vector_max_repeat))
    f.reject(fmt::format("repeat {} is outside 1..{} (vector max_repeat)", repeat, f.m.vector_max_repeat));
  const int64_t blk = f.non_negative(repeat_param + 1, "blk_stride");
  const int64_t rep = f.non_negative(repeat_param + 2, "rep_stride");
  const int64_t lanes = f.m.vector_lanes(static_cast<int>(lane_bytes));
  const WideInt block = f.m.vector_block_bytes;
  p.outer_count = repeat;
  p.outer_stride = rep * block;
  p.inner_count = std::max<int64_t>(1, lanes * element_bytes / f.m.vector_block_bytes);
  p.inner_stride = blk * block;
  p.piece_bytes = block;
}

void bursts(const Formula& f, AccessPattern& p) {
  const int64_t n = f.positive(0, "nburst"), len = f.positive(1, "burst_bytes");
  const int64_t gap = f.non_negative(2, "gap_bytes");
  p.outer_count = n;
  p.outer_stride = WideInt(len) + gap;
  p.piece_bytes = len;
}

// ND rows x cols of `type` with a row stride in elements (the source of ND -> NZ).
void nd_rows(const Formula& f, AccessPattern& p) {
  const int64_t eb = f.bytes_of(0);
  const int64_t rows = f.positive(1, "rows"), cols = f.positive(2, "cols"), stride = f.positive(3, "row_stride");
  if (rows % f.m.fractal_rows() != 0 || (cols * eb) % f.m.fractal_row_bytes != 0)
    f.reject(fmt::format("rows {} must be a multiple of {} and cols {} x {} bytes a multiple of {} (fractal)", rows,
                         f.m.fractal_rows(), cols, eb, f.m.fractal_row_bytes));
  if (stride < cols) f.reject(fmt::format("row_stride {} is smaller than cols {}", stride, cols));
  p.outer_count = rows;
  p.outer_stride = WideInt(stride) * eb;
  p.piece_bytes = WideInt(cols) * eb;
}

void fractal_grid(const Formula& f, AccessPattern& p) {
  const WideInt fb = f.m.fractal_bytes();
  p.outer_count = f.positive(0, "outer");
  p.inner_count = f.positive(1, "inner");
  p.outer_stride = f.non_negative(2, "outer_stride") * fb;
  p.inner_stride = f.non_negative(3, "inner_stride") * fb;
  p.piece_bytes = fb;
}

// C0: the channels of one fractal row of the f16 feature map (C1HWC0).
int64_t img2col_c0(const NpuMachine& m) { return m.fractal_row_bytes / dtype_bytes(DType::F16); }

void img2col_source(const Formula& f, AccessPattern& p) {
  bool geometry = true;
  for (int field : {0, 1, 6, 7, 8, 9, 10, 11}) geometry = geometry && f.fmatrix(field) > 0;
  for (int field : {2, 3, 4, 5}) geometry = geometry && f.fmatrix(field) >= 0;
  if (!geometry) {
    f.reject("img2col geometry unset or invalid: run set_fmatrix with positive H, W, strides, kernel, dilation and "
             "non-negative pads");
    p.unbounded = true;
    return;
  }
  // the dilated kernel must fit the padded map (else there is no output pixel: an empty image)
  const WideInt span_h = WideInt(f.fmatrix(10)) * (f.fmatrix(8) - 1) + 1, span_w = WideInt(f.fmatrix(11)) * (f.fmatrix(9) - 1) + 1;
  const WideInt padded_h = WideInt(f.fmatrix(0)) + f.fmatrix(2) + f.fmatrix(3), padded_w = WideInt(f.fmatrix(1)) + f.fmatrix(4) + f.fmatrix(5);
  if (span_h > padded_h || span_w > padded_w) {
    f.reject(fmt::format("img2col: the dilated kernel ({} x {}) is larger than the padded feature map ({} x {}): no output pixel",
                         static_cast<int64_t>(span_h), static_cast<int64_t>(span_w), static_cast<int64_t>(padded_h),
                         static_cast<int64_t>(padded_w)));
    p.unbounded = true;
    return;
  }
  const int64_t channels = f.positive(0, "channels");
  if (channels % img2col_c0(f.m) != 0)
    f.reject(fmt::format("channels {} must be a multiple of C0 = {}", channels, img2col_c0(f.m)));
  contiguous(p, WideInt(channels) * f.fmatrix(0) * f.fmatrix(1) * dtype_bytes(DType::F16));
}

void img2col_fractals(const Formula& f, AccessPattern& p) {
  const int64_t c1 = f.value(0) / img2col_c0(f.m);
  f.non_negative(1, "pixel_begin");
  const int64_t pixels = f.positive(2, "pixel_count");
  const int64_t kpos_begin = f.non_negative(3, "kpos_begin"), kpos = f.positive(4, "kpos_count");
  const int64_t rows = f.m.fractal_rows();
  if (pixels % rows != 0) f.reject(fmt::format("pixel_count {} must be a multiple of {}", pixels, rows));
  const WideInt kpos_total = WideInt(c1) * f.fmatrix(8) * f.fmatrix(9);
  if (kpos_begin + kpos > kpos_total)
    f.reject(fmt::format("kpos_begin + kpos_count = {} exceeds C1 x KH x KW = {}", kpos_begin + kpos,
                         static_cast<int64_t>(kpos_total)));
  contiguous(p, WideInt(pixels / rows) * kpos * f.m.fractal_bytes());
}

// One cube operand of `rows` x `cols` elements, each dimension a multiple of its fractal side.
void cube_operand(const Formula& f, AccessPattern& p, int rows_side, int cols_side, int64_t element_bytes) {
  const CubeShape& s = f.m.cube(f.type(0));
  if (!s.exists) f.reject(fmt::format("the target's cube has no {} shape", dtype_name(f.type(0))));
  const int64_t rows = f.positive(1, "cube rows"), cols = f.positive(2, "cube cols");
  if (s.exists && (rows % rows_side != 0 || cols % cols_side != 0))
    f.reject(fmt::format("{} x {} must be a multiple of the cube's {} x {} fractal ({}x{}x{})", rows, cols, rows_side,
                         cols_side, s.m0, s.k0, s.n0));
  contiguous(p, WideInt(rows) * cols * element_bytes);
}

void cube(const Formula& f, AccessPattern& p, Extent e) {
  const CubeShape& s = f.m.cube(f.type(0));
  switch (e) {
    case Extent::CubeA: cube_operand(f, p, s.m0, s.k0, f.bytes_of(0)); return;
    case Extent::CubeB: cube_operand(f, p, s.k0, s.n0, f.bytes_of(0)); return;
    default: cube_operand(f, p, s.m0, s.n0, dtype_bytes(s.acc)); return;
  }
}

void evaluate(const Formula& f, Extent e, AccessPattern& p) {
  const NpuMachine& m = f.m;
  switch (e) {
    case Extent::Vector: vector_blocks(f, p, f.bytes_of(0), f.bytes_of(0), 1); return;
    case Extent::VectorCast: vector_blocks(f, p, f.bytes_of(0), std::max(f.bytes_of(0), f.bytes_of(1)), 2); return;
    case Extent::Elements: contiguous(p, WideInt(f.positive(1, "count")) * f.bytes_of(0)); return;
    case Extent::Dense: contiguous(p, WideInt(f.positive(1, "rows")) * f.positive(2, "cols") * f.bytes_of(0)); return;
    case Extent::Bursts: bursts(f, p); return;
    case Extent::NdRows: nd_rows(f, p); return;
    case Extent::FractalGrid: fractal_grid(f, p); return;
    case Extent::Fractals:
      contiguous(p, WideInt(f.positive(0, "outer")) * f.positive(1, "inner") * m.fractal_bytes());
      return;
    case Extent::Img2colSource: img2col_source(f, p); return;
    case Extent::Img2colFractals: img2col_fractals(f, p); return;
    case Extent::CubeA:
    case Extent::CubeB:
    case Extent::CubeC: cube(f, p, e); return;
    case Extent::AccFractals: contiguous(p, WideInt(f.positive(0, "fractals")) * m.cube_f16.acc_fractal_bytes()); return;
    case Extent::AccFractalsAs:
      contiguous(p, WideInt(f.positive(1, "fractals")) * m.cube_f16.acc_fractal_elements() * f.bytes_of(0));
      return;
    case Extent::Element: contiguous(p, WideInt(f.bytes_of(0))); return;
  }
  TESSEL_CHECK(false, "footprint: an npu::Extent without a formula");
}

}  // namespace

Footprint footprint(const NpuMachine& m, const npu::Instruction& in, const OperandValues& values) {
  const npu::OpcodeInfo& info = npu::opcode_info(in.opcode);
  Footprint out;
  for (int i = 0; i < info.access_count; ++i) {
    const npu::OperandAccess& a = info.accesses[i];
    if (a.mode == npu::AccessMode::ReadUnlessSet && values.known_nonzero(a.flag)) continue;
    AccessPattern& p = out.access[out.count++];
    p.buffer = in.operands[a.address].buffer;
    p.write = a.write();
    p.address_operand = a.address;
    evaluate(Formula(m, in, a, values), a.extent, p);
  }
  return out;
}

}  // namespace tessel::isa
