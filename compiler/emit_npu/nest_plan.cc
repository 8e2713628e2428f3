// The general NPU vector lowering's analysis (nest_lowering.h, nest.h): each statement modelled as
// loops over its index dimensions with affine accesses (divided indices split into quotient and
// remainder, dimensions walked as one coalesced), the zero-padded copies of reads outside a tensor,
// each statement's tile (u, v, rows x pitch, loop order) and
// the bounds that refuse a kernel. why_not runs these steps and returns "" or the reason; it
// decides (with nest_cores.cc's split over cores) what nest.cc and nest_pipeline.cc then emit and never throws.
#include "compiler/emit_npu/nest_lowering.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include "compiler/emit_npu/operands.h"
#include "isa/base/error.h"

namespace tessel::emit_npu::nest {

namespace {

void collect_types(const ir::Expr& e, std::set<int>& bytes) {
  bytes.insert(dtype_bytes(e.type));
  for (const auto& a : e.args) collect_types(*a, bytes);
}

}  // namespace

std::string Nest::why_not() {
  const ir::Function* f = k_.function;
  if (!f) return "no tensor IR attached";
  if (f->statements.empty()) return "no statements";
  cores_ = 1;
  range_ = 1;
  core_parts_.clear();
  core_block_.clear();
  pads_.clear();
  reach_.clear();
  pad_refusal_.clear();
  for (int pass = 0; pass < 2; ++pass) {  // the second with the reads outside their tensors padded
    plans_.clear();
    for (const auto& s : f->statements) {
      Plan p;
      if (std::string w = model(s, p); !w.empty()) return "statement " + s.name + ": " + w;
      plans_.push_back(std::move(p));
    }
    if (pass == 0 && !plan_pads()) break;
  }
  if (!pad_refusal_.empty()) return pad_refusal_;
  fz_ = Fused{};
  if (!try_fused()) choose_partition();
  if (!fz_.on)
    for (auto& p : plans_)
      if (std::string w = tile(p); !w.empty()) return "statement " + p.s->name + ": " + w;
  for (const Plan& p : plans_)
    if (std::string w = unmovable_read(p); !w.empty()) return "statement " + p.s->name + ": " + w;
  // A bound on the program's length in time: tiles x instructions per tile, per core.
  double issued = 0;
  for (const Plan& p : plans_) {
    double tiles = 1;
    for (size_t d = 0; d < p.dims.size(); ++d) {
      const int64_t ext = share(p, static_cast<int>(d));
      const int64_t blk = block_of(p, static_cast<int>(d));
      tiles *= double((ext + blk - 1) / blk);
    }
    issued += tiles * double(8 + 4 * p.reads.size() + p.body_regions + 2 * p.rows);
  }
  if (issued > max_issued_)
    return fmt::format("about {:.3g} vector-unit instructions per core (more than {:.3g}: too slow to be a mapping)", issued,
                       max_issued_);
  return "";
}

std::string Nest::lin_of(const ir::AffineExpr& e, const Plan& p, Lin& out) const {
  out.c.assign(p.dims.size(), 0);
  out.k = e.constant;
  for (const auto& [q, coeff] : e.param_coeffs) out.k += coeff * k_.sizes.at(q);
  auto index = [&](const std::string& name, int64_t coeff) {
    if (auto sp = p.splits.find(name); sp != p.splits.end()) {
      out.c[sp->second.hi] += coeff * sp->second.divisor;
      out.c[sp->second.low] += coeff;
      out.k += coeff * sp->second.lo;
      return;
    }
    auto it = std::find_if(p.dims.begin(), p.dims.end(), [&](const Dim& d) { return d.name == name; });
    TESSEL_CHECK(it != p.dims.end(), "nest: index outside the statement's domain");
    out.c[it - p.dims.begin()] += coeff;
    out.k += coeff * it->lo;
  };
  for (const auto& [name, coeff] : e.index_coeffs) index(name, coeff);
  for (const auto& t : e.divs) {  // k * floor((i + c) / d) = k * ((lo + c) / d + hi), split_divisions checked
    const std::string& i = t.numerator.index_coeffs.begin()->first;
    const Plan::Split& sp = p.splits.at(i);
    int64_t c = t.numerator.constant;
    for (const auto& [q, coeff] : t.numerator.param_coeffs) c += coeff * k_.sizes.at(q);
    out.c[sp.hi] += t.coeff;
    out.k += t.coeff * ((sp.lo + c) / sp.divisor);
  }
  return "";
}

// Splits every index that appears divided by a constant; "" or why the division is not taken.
std::string Nest::split_divisions(const ir::Statement& s, Plan& p) {
  std::map<std::string, std::pair<int64_t, std::set<int64_t>>> divisors;  // index -> divisor, residues of lo + c
  std::string why;
  auto scan = [&](const ir::AffineExpr& e) {
    for (const auto& t : e.divs) {
      const ir::AffineExpr& num = t.numerator;
      if (num.index_coeffs.size() != 1 || num.index_coeffs.begin()->second != 1 || num.has_div()) {
        why = "an index divides " + num.to_string() + " (only an index plus a constant is split)";
        return;
      }
      const std::string& i = num.index_coeffs.begin()->first;
      int64_t c = num.constant;
      for (const auto& [q, coeff] : num.param_coeffs) c += coeff * k_.sizes.at(q);
      auto& d = divisors[i];
      if (d.first != 0 && d.first != t.divisor) why = "index " + i + " divided by two constants";
      d.first = t.divisor;
      d.second.insert(c);
    }
  };
  for (const auto& e : s.out_indices) scan(e);
  std::function<void(const ir::Expr&)> walk = [&](const ir::Expr& e) {
    for (const auto& x : e.indices) scan(x);
    if (e.kind == ir::ExprKind::IndexValue) scan(e.affine);
    for (const auto& x : e.args) walk(*x);
  };
  walk(*s.rhs);
  if (!why.empty()) return why;
  for (const auto& [i, d] : divisors) {
    auto it = std::find_if(p.dims.begin(), p.dims.end(), [&](const Dim& x) { return x.name == i; });
    TESSEL_CHECK(it != p.dims.end(), "nest: a divided index outside the statement's domain");
    const int64_t q = d.first;
    if (it->extent % q != 0) return fmt::format("index {} of extent {} divided by {} (not a multiple)", i, it->extent, q);
    for (int64_t c : d.second)
      if (((it->lo + c) % q + q) % q != 0)
        return fmt::format("floor(({} + {}) / {}) does not start a quotient at the range's start", i, c, q);
    const int at = static_cast<int>(it - p.dims.begin());
    Dim hi = *it, low = *it;
    hi.name = i + "/" + std::to_string(q);
    hi.extent = it->extent / q;
    low.name = i + "%" + std::to_string(q);
    low.extent = q;
    const int64_t lo = it->lo;
    p.dims[at] = hi;
    p.dims.insert(p.dims.begin() + at + 1, low);
    for (auto& [name, sp] : p.splits) {
      if (sp.hi > at) ++sp.hi;
      if (sp.low > at) ++sp.low;
    }
    p.splits[i] = {at, at + 1, q, lo};
  }
  return "";
}

std::string Nest::access_of(const std::string& tensor, const std::vector<ir::AffineExpr>& idx, const Plan& p,
    Access& a) {
  const ir::Tensor* t = k_.function->find_tensor(tensor);
  TESSEL_CHECK(t != nullptr, "nest: access to an undeclared tensor");
  std::vector<int64_t> shape = sizes_of(*t);
  if (shape.size() != idx.size()) return "access to " + tensor + " with a wrong number of indices";
  const auto pad = pads_.find(tensor);
  a.tensor = pad == pads_.end() ? tensor : pad->second.name;
  if (pad != pads_.end()) shape = pad->second.shape;
  a.type = t->dtype;
  a.stride.assign(p.dims.size(), 0);
  auto& reach = reach_[tensor];
  reach.resize(shape.size(), {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()});
  int64_t st = 1;
  for (size_t j = shape.size(); j-- > 0;) {
    Lin l;
    if (std::string w = lin_of(idx[j], p, l); !w.empty()) return w;
    int64_t c = l.k + (pad != pads_.end() ? pad->second.before[j] : 0);
    int64_t lo = 0, hi = 0;
    for (size_t d = 0; d < p.dims.size(); ++d) {
      a.stride[d] += st * l.c[d];
      (l.c[d] < 0 ? lo : hi) += l.c[d] * (p.dims[d].extent - 1);
    }
    reach[j].first = std::min(reach[j].first, c + lo);
    reach[j].second = std::max(reach[j].second, c + hi);
    a.offset += st * c;
    st *= shape[j];
  }
  return "";
}

std::string Nest::model(const ir::Statement& s, Plan& p) {
  p.s = &s;
  for (const auto& iv : s.domain) {
    Dim d{iv.name, iv.lo.evaluate({}, k_.sizes), 0, iv.is_reduction};
    d.extent = iv.hi.evaluate({}, k_.sizes) - d.lo;
    if (d.extent <= 0) return "empty range of " + iv.name;
    p.dims.push_back(d);
  }
  if (std::string w = split_divisions(s, p); !w.empty()) return w;
  if (std::string w = access_of(s.output, s.out_indices, p, p.out); !w.empty()) return w;
  std::string why;
  std::function<void(const ir::Expr&)> walk = [&](const ir::Expr& e) {
    if (e.kind == ir::ExprKind::Access && why.empty()) {
      Access a;
      why = access_of(e.name, e.indices, p, a);
      auto it = std::find(p.reads.begin(), p.reads.end(), a);
      p.read_of[&e] = static_cast<int>(it - p.reads.begin());
      if (it == p.reads.end()) p.reads.push_back(a);
    }
    if (e.kind == ir::ExprKind::IndexValue) {
      Access a;
      a.type = DType::I32;
      Lin l;
      lin_of(e.affine, p, l);
      a.stride = l.c;
      a.offset = l.k;
      p.values[&e] = a;
    }
    for (const auto& x : e.args) walk(*x);
  };
  walk(*s.rhs);
  return why;
}

// Merges adjacent dimensions of one kind that every access walks as one (stride of the outer =
// stride of the inner x its extent): the tile then covers them together.
void Nest::coalesce(Plan& p, const std::set<std::string>& keep) const {
  for (bool merged = true; merged;) {
    merged = false;
    for (size_t d = 0; d + 1 < p.dims.size() && !merged; ++d) {
      if (keep.count(p.dims[d].name) || keep.count(p.dims[d + 1].name)) continue;
      if (walk_as_one(p, d)) merge(p, d), merged = true;
    }
  }
}

// Dimensions d and d + 1 are of one kind and every access walks them as one.
bool Nest::walk_as_one(const Plan& p, size_t d) {
  if (p.dims[d].reduction != p.dims[d + 1].reduction) return false;
  auto walks = [&](const Access& a) { return a.stride[d] == a.stride[d + 1] * p.dims[d + 1].extent; };
  if (!walks(p.out) || !std::all_of(p.reads.begin(), p.reads.end(), walks)) return false;
  return std::all_of(p.values.begin(), p.values.end(), [&](const auto& v) { return walks(v.second); });
}

void Nest::merge(Plan& p, size_t d) {
  p.dims[d].extent *= p.dims[d + 1].extent;
  p.dims[d].name += "*" + p.dims[d + 1].name;
  p.dims.erase(p.dims.begin() + d + 1);
  auto drop = [&](Access& a) {
    a.stride[d] = a.stride[d + 1];
    a.stride.erase(a.stride.begin() + d + 1);
  };
  drop(p.out);
  for (auto& a : p.reads) drop(a);
  for (auto& [e, a] : p.values) drop(a);
}

// Reads outside a tensor are zeros (the kernel IR's copy semantics, which padding folding relies
// on): such a tensor is read from a zero-padded copy. True when one is needed.
// A local the kernel writes and reads outside its shape (a select-guarded read of a statement's
// result, issue 31) lives in its zero-padded buffer: its writer stores inside the margins, which
// stay zero. An output so read has no such buffer (its GM place is the caller's): refused.
bool Nest::plan_pads() {
  std::set<std::string> written;
  for (const auto& st : k_.function->statements) written.insert(st.output);
  for (const auto& [name, r] : reach_) {
    const ir::Tensor* t = k_.function->find_tensor(name);
    const std::vector<int64_t> shape = sizes_of(*t);
    const bool local = written.count(name) && t->kind != ir::TensorKind::Output;
    if (written.count(name) && !local) {
      for (size_t j = 0; j < shape.size(); ++j)
        if (r[j].first < 0 || r[j].second > shape[j] - 1)
          pad_refusal_ = "the output " + name + " is read outside its shape (a guarded read of a result; only inputs and "
                         "locals get a zero-padded buffer)";
      continue;
    }
    Pad pad;
    pad.written = local;
    bool needed = false;
    for (size_t j = 0; j < shape.size(); ++j) {
      const int64_t before = std::max<int64_t>(0, -r[j].first), after = std::max<int64_t>(0, r[j].second - (shape[j] - 1));
      pad.before.push_back(before);
      pad.shape.push_back(shape[j] + before + after);
      needed = needed || before > 0 || after > 0;
    }
    if (!needed) continue;
    pad.name = name + "_zero_padded";
    pad.type = t->dtype;
    pad.source = shape;
    pads_[name] = pad;
  }
  reach_.clear();
  return !pads_.empty();
}

// v: the dimension the most elements are contiguous along (each access counts the elements it
// touches); ties go to output dimensions, then inner ones. An f16 sum or product keeps its
// reductions off the lanes when it has an output dimension (each step rounded in the interpreter's order).
int Nest::lane_dim(const Plan& p) const {
  const int nd = static_cast<int>(p.dims.size());
  std::vector<const Access*> all{&p.out};
  for (const auto& a : p.reads) all.push_back(&a);
  const bool half_sum = (p.s->reduction == ir::Reduction::Sum || p.s->reduction == ir::Reduction::Prod) && dtype_bytes(p.out.type) == 2;
  const bool has_out = std::any_of(p.dims.begin(), p.dims.end(), [](const Dim& d) { return !d.reduction; });
  auto touched = [&](const Access& a) {
    int64_t n = 1;
    for (int d = 0; d < nd; ++d)
      if (a.stride[d] != 0) n *= p.dims[d].extent;
    return n;
  };
  // an f16 sum or product with no output dimension: no lanes (a tree over them would reassociate
  // it); each element is a row, added or multiplied in the interpreter's order
  if (!has_out && half_sum) return -1;
  int best = -1;
  int64_t best_score = 0;
  for (int d = 0; d < nd; ++d) {
    if (half_sum && has_out && p.dims[d].reduction) continue;
    int64_t score = 0;
    for (const Access* a : all) score += a->stride[d] == 1 ? 4 * touched(*a) : 0;
    score += p.dims[d].reduction ? 0 : 2;
    score += 1;
    if (score > 3 && score >= best_score) best = d, best_score = score;
  }
  if (best < 0)
    for (int d = nd - 1; d >= 0 && best < 0; --d)
      if (!p.dims[d].reduction || !has_out) best = d;
  return best;
}

// Chooses u, v and the tile; "" or why not. The lanes go where the most elements are contiguous
// (lane_dim), unless another lane dimension's tile is estimated (tile_cycles: the roofline of one
// core's tiles) at most kClearWin of its time: a stride-2 window or an upsampled row then keeps
// whole vector repeats of the output instead of two lanes per repeat.
std::string Nest::tile(Plan& p) {
  const int nd = static_cast<int>(p.dims.size());
  if (nd > kMaxLevels) return fmt::format("{} loop dimensions (at most {})", nd, kMaxLevels);
  const Plan fresh = p;
  const int first = lane_dim(p);
  if (std::string w = tile_with(p, first); !w.empty()) return w;
  const bool has_out = std::any_of(p.dims.begin(), p.dims.end(), [](const Dim& d) { return !d.reduction; });
  double best = tile_cycles(p) * kClearWin;
  for (int d = 0; d < nd && first >= 0; ++d) {
    if (d == first || (has_out && p.dims[d].reduction)) continue;
    Plan c = fresh;
    if (!tile_with(c, d).empty()) continue;
    if (const double t = tile_cycles(c); t < best) best = t, p = std::move(c);
  }
  // A data move or window through UB blocks (plan_move, plan_mirror): the one estimated fastest,
  // where it is a clear win.
  double best_blocks = kClearWin * tile_cycles(p);
  Plan mv = fresh, mr = fresh, chosen;
  if (plan_move(mv) && move_cycles(mv) < best_blocks) best_blocks = move_cycles(mv), chosen = std::move(mv);
  if (plan_mirror(mr, false) && mirror_cycles(mr) < best_blocks) best_blocks = mirror_cycles(mr), chosen = std::move(mr);
  // Dense (a dimension both walk with unit stride in whole blocks, the NHWC channels): against the
  // lanes' tiles with the GM latency each pair of them waits out (the double buffer's depth).
  if (Plan md = fresh; plan_mirror(md, true) && mirror_cycles(md) < std::min(best_blocks, kClearWin * (tile_cycles(p) + latency_cycles(p))))
    chosen = std::move(md);
  if (!chosen.box.empty()) p = std::move(chosen);
  return "";
}

// Elements from the first to the last an access touches in a box of sizes size(d).
int64_t Nest::mirror_span(const Plan& p, const Access& a, const std::function<int64_t(int)>& size) const {
  int64_t span = 1;
  for (size_t d = 0; d < p.dims.size(); ++d) span += a.stride[d] * (size(static_cast<int>(d)) - 1);
  return span;
}

// A statement whose read and output share no unit-stride dimension and that copies its read or
// reduces it over a window (max, min; sum in f32 / i32: a strided pooling window, a nearest
// upsampling) is tiled in UB as GM lays it out, one element per block: the tile's read span goes
// to UB by one dma_in (GM side contiguous) and its output span back by one dma_out, so GM sees two
// DMAs per tile however the elements interleave; the vector unit does the rearranging with block
// strides (v: 8 elements per repeat, their GM strides) and repeat strides (u). The box: every
// reduction dimension whole, output dimensions in output order whole while the output span stays
// dense, the last one cut for UB's half (two value sets).
bool Nest::plan_mirror(Plan& p, bool dense) const {
  const ir::Expr& rhs = *p.s->rhs;
  if (rhs.kind != ir::ExprKind::Access || p.reads.size() != 1 || !pads_.empty()) return false;
  const Access& x = p.reads[0];
  const Access& y = p.out;
  const DType t = y.type;
  if (x.type != t || (t != DType::F32 && t != DType::F16 && t != DType::I32)) return false;
  if (p.is_reduction() && (!p.s->init || (p.s->reduction != ir::Reduction::Max && p.s->reduction != ir::Reduction::Min && t == DType::F16)))
    return false;
  const int nd = static_cast<int>(p.dims.size());
  const int64_t eb = dtype_bytes(t), block = m_.vector_block_bytes;
  int dc = -1;  // dense: the dimension both walk with unit stride, whole blocks of it
  for (int d = 0; d < nd; ++d) {
    if (x.stride[d] < 0 || y.stride[d] < 0) return false;
    if (share(p, d) > 1 && x.stride[d] == 1 && y.stride[d] == 1) {
      if (!dense || dc >= 0 || p.dims[d].reduction || share(p, d) != p.dims[d].extent || share(p, d) * eb % block) return false;
      dc = d;
    }
  }
  if (dense) {
    if (dc < 0) return false;
    for (int d = 0; d < nd; ++d)
      if (d != dc && share(p, d) > 1 && (x.stride[d] * eb % block || y.stride[d] * eb % block)) return false;
  }
  p.mirror_unit = dense ? block / eb : 1;
  const int64_t cap = (m_.capacity(Buffer::UB) / 2 - 2048) / block;
  p.box.assign(nd, 1);
  for (int d = 0; d < nd; ++d)
    if (p.dims[d].reduction || d == dc) p.box[d] = share(p, d);
  auto fits = [&] {
    const auto size = [&](int d) { return p.box[d]; };
    return (mirror_span(p, x, size) + mirror_span(p, y, size)) / p.mirror_unit + 2 * 32 <= cap;
  };
  if (!fits()) return false;
  std::vector<int> order;
  for (int d = 0; d < nd; ++d)
    if (!p.dims[d].reduction && share(p, d) > 1) order.push_back(d);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return y.stride[a] < y.stride[b]; });
  int64_t run = 1;
  for (int d : order) {
    if (y.stride[d] != run) break;
    p.box[d] = share(p, d);
    if (!fits()) {
      int64_t lo = 1, hi = share(p, d) - 1;  // the largest cut that fits
      while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        p.box[d] = mid;
        if (fits()) lo = mid;
        else hi = mid - 1;
      }
      p.box[d] = lo;
      break;
    }
    run *= p.box[d];
  }
  // The read's span runs from the box's first element to its last, over every element between. On
  // several cores, when the split dimension interleaves inside that span and the kernel itself
  // writes the read tensor, the span takes in elements other cores write meanwhile: a race on GM,
  // however unused (fuzz seed 304, program 154 on davinci-310). The row lowering reads only the box.
  if (p.partition >= 0 && cores_ > 1 && x.stride[p.partition] > 0 &&
      x.stride[p.partition] < mirror_span(p, x, [&](int d) { return p.box[d]; }))
    for (const auto& st : k_.function->statements)
      if (st.output == x.tensor) return false;
  // v: the output dimension of the box with the most elements, u: the next (repeats)
  std::vector<int> in_box;
  for (int d : order)
    if (p.box[d] > 1) in_box.push_back(d);
  if (in_box.empty()) return false;
  std::stable_sort(in_box.begin(), in_box.end(), [&](int a, int b) { return p.box[a] > p.box[b]; });
  if (dc >= 0) {  // its blocks are the lanes
    in_box.erase(std::find(in_box.begin(), in_box.end(), dc));
    in_box.insert(in_box.begin(), dc);
  }
  const int v = in_box[0];
  // lanes along a read broadcast over them (stride 0) are no window of the read: the row lowering
  // repeats it instead (a mirrored box of it left lanes unwritten: fuzz seed 7, program 44)
  if (x.stride[v] == 0) return false;
  // the vector instructions walk whole repeats of 8 lanes along v, masked past the box: the last
  // value set's spans as those instructions reach must stay in UB (a box cut to 3 lanes of a
  // 288-element stride reached 8: fuzz seed 11, program 5)
  const int64_t lanes = 8 * p.mirror_unit;
  const auto reach = [&](int d) { return d == v ? (p.box[d] + lanes - 1) / lanes * lanes : p.box[d]; };
  const auto box = [&](int d) { return p.box[d]; };
  const int64_t one_set = (mirror_span(p, x, box) + mirror_span(p, y, box)) / p.mirror_unit + 2 * 32;
  const int64_t excess = (mirror_span(p, x, reach) - mirror_span(p, x, box) + mirror_span(p, y, reach) - mirror_span(p, y, box)) / p.mirror_unit;
  if (2 * one_set + excess > 2 * cap) return false;
  p.mirror = true;
  p.v = in_box[0];
  p.u = in_box.size() > 1 ? in_box[1] : -1;
  p.rows = p.u >= 0 ? p.box[p.u] : 1, p.cols = p.box[p.v], p.pitch = 1;
  p.body_regions = 0, p.regions = 0;
  p.out_levels.clear();
  p.red_levels.clear();
  if (p.partition >= 0) p.out_levels.push_back(p.partition);
  for (int d = 0; d < nd; ++d)
    if (d != p.partition && !p.dims[d].reduction && share(p, d) > p.box[d]) p.out_levels.push_back(d);
  for (int d = 0; d < nd; ++d)
    if (d != p.partition && !p.dims[d].reduction && share(p, d) <= p.box[d]) p.out_levels.push_back(d);
  return true;
}

// tile_cycles for a mirrored tile: its two spans' GM bytes, the chip's shared GM a cycle per DMA of
// every core, and the vector instructions' repeats (8 elements each: one per block).
double Nest::mirror_cycles(const Plan& p) const {
  const int nd = static_cast<int>(p.dims.size());
  double tiles = 1, combos = 1, groups = 1;
  for (int d = 0; d < nd; ++d) {
    if (!p.dims[d].reduction) tiles *= double((share(p, d) + p.box[d] - 1) / p.box[d]);
    if (d == p.v) groups = double((p.box[d] / p.mirror_unit + 7) / 8);
    else if (d != p.u) combos *= double(p.box[d]);
  }
  const auto size = [&](int d) { return p.box[d]; };
  const double eb = dtype_bytes(p.out.type), g = double(m_.granularity(Buffer::GM));
  const isa::NpuPathSpec& in = m_.path(Buffer::GM, Buffer::UB);
  const double bw = std::min(double(in.bandwidth_bytes_per_cycle), m_.gm_shared_bandwidth_bytes_per_cycle / std::max(1, cores_));
  const double sx = double(mirror_span(p, p.reads[0], size)), sy = double(mirror_span(p, p.out, size));
  const double bytes = std::ceil(sx * eb / g) * g + std::ceil(sy * eb / g) * g;
  const double vector = combos * groups * double(p.rows) + (p.is_reduction() ? std::ceil(sy / double(p.mirror_unit) / 8) : 0);
  return tiles * std::max({bytes / bw, 2 * shared_dma_cycles(), vector});
}

// The GM read latency a plan's tiles wait out: one per pair of tiles (two value sets).
double Nest::latency_cycles(const Plan& p) const {
  double tiles = 1;
  for (int d = 0; d < static_cast<int>(p.dims.size()); ++d)
    tiles *= double((share(p, d) + block_of(p, d) - 1) / block_of(p, d));
  return tiles * double(m_.path(Buffer::GM, Buffer::UB).latency_cycles) / 2;
}

// The box dimensions of a move in dense output order: ascending output stride (nest.cc lays the
// box out in UB in this order, one block per element).
std::vector<int> Nest::move_order(const Plan& p) const {
  std::vector<int> order;
  for (int d = 0; d < static_cast<int>(p.dims.size()); ++d)
    if (p.box[d] > 1) order.push_back(d);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p.out.stride[a] < p.out.stride[b]; });
  return order;
}

// The UB block stride of each box dimension: dense in output order over the box.
std::vector<int64_t> Nest::move_local(const Plan& p) const {
  std::vector<int64_t> local(p.dims.size(), 0);
  int64_t n = 1;
  for (int d : move_order(p)) local[d] = n, n *= p.box[d];
  return local;
}

// The dimensions one DMA of access `a` walks from `first` on (sizes `size(d)`): each next one
// continues the run both in GM (a's stride = the run's elements so far) and in UB (its block stride
// = the run's blocks so far), so the run is one uniform burst pattern on both sides.
std::vector<int> Nest::move_run(const Plan& p, const Access& a, int first, const std::function<int64_t(int)>& size) const {
  const std::vector<int64_t> local = move_local(p);
  std::vector<int> run{first};
  for (bool more = true; more;) {
    more = false;
    const int last = run.back();
    for (int d = 0; d < static_cast<int>(p.dims.size()) && !more; ++d)
      if (size(d) > 1 && std::find(run.begin(), run.end(), d) == run.end() && a.stride[d] == a.stride[last] * size(last) &&
          local[d] == local[last] * size(last))
        run.push_back(d), more = true;
  }
  return run;
}

// A statement that only moves data (Y(...) = X(...), one read of the output's type) whose read and
// output have no unit-stride dimension in common (a permute, a nearest upsampling) is moved through
// UB one element per block: loads run along the read's unit-stride dimension dx, stores along the
// output's, both contiguous in GM, and the UB side takes the strides (a DMA's bursts may be any
// bytes apart in UB; only its start is aligned). GM serves one DMA of any core at a time, so the
// box (each dimension whole, or cut for UB's half: two value sets) is the one with the fewest DMAs
// per core (move_cycles), runs continuing over further dimensions where GM and UB strides allow.
// A read that does not move along a dimension reloads its data per element of it: at most
// kMaxMoveReloads times in all. False when the statement is no such move.
bool Nest::plan_move(Plan& p) const {
  const ir::Expr& rhs = *p.s->rhs;
  if (p.is_reduction() || p.reads.size() != 1 || rhs.kind != ir::ExprKind::Access) return false;
  const Access& x = p.reads[0];
  const Access& y = p.out;
  const int nd = static_cast<int>(p.dims.size());
  const int64_t block = m_.vector_block_bytes;
  if (x.type != y.type || dtype_bytes(x.type) > block || nd > 12) return false;
  int dx = -1, dy = -1;
  int64_t reloads = 1;
  std::vector<int> free;
  for (int d = 0; d < nd; ++d) {
    if (p.dims[d].reduction || x.stride[d] < 0 || y.stride[d] < 0) return false;
    if (share(p, d) <= 1) continue;
    if (x.stride[d] == 1 && y.stride[d] == 1) return false;  // lanes serve it
    if (x.stride[d] == 1) dx = d;
    if (y.stride[d] == 1) dy = d;
    if (x.stride[d] == 0) reloads *= share(p, d);
  }
  if (dx < 0 || dy < 0 || reloads > kMaxMoveReloads) return false;
  if (std::any_of(p.reads.begin(), p.reads.end(), [&](const Access& a) { return a.type == DType::F16 && a.stride[dy] > 1 && a.stride[dx] == 1; }))
    return false;  // vtranspose turns f16 blocks at full lanes
  for (int d = 0; d < nd; ++d)
    if (share(p, d) > 1 && d != dx && d != dy) free.push_back(d);
  const int64_t cap = (m_.capacity(Buffer::UB) / 2 - 2048) / block;  // two sets after the statement's few regions
  Plan best;
  double best_cycles = 0;
  for (uint32_t mask = 0; mask < (1u << free.size()); ++mask) {
    Plan c = p;
    c.box.assign(nd, 1);
    c.box[dx] = share(p, dx), c.box[dy] = share(p, dy);
    for (size_t j = 0; j < free.size(); ++j)
      if (mask >> j & 1) c.box[free[j]] = share(p, free[j]);
    int64_t n = 1;
    for (int64_t e : c.box) n *= e;
    if (n > cap) {  // cut the outermost dimension of the box in output order
      const std::vector<int> order = move_order(c);
      const int d = order.back();
      c.box[d] = cap / (n / c.box[d]);
      if (c.box[d] < 1) continue;
    }
    c.u = dx, c.v = dy;
    const double t = move_cycles(c);
    if (best.box.empty() || t < best_cycles) best = std::move(c), best_cycles = t;
  }
  if (best.box.empty()) return false;
  p = std::move(best);
  p.rows = p.box[dx], p.cols = p.box[dy], p.pitch = 1;
  p.body_regions = 0, p.regions = 0;
  p.out_levels.clear();
  p.red_levels.clear();
  if (p.partition >= 0) p.out_levels.push_back(p.partition);
  for (int d = 0; d < nd; ++d)
    if (d != p.partition && share(p, d) > p.box[d]) p.out_levels.push_back(d);
  for (int d = 0; d < nd; ++d)
    if (d != p.partition && share(p, d) <= p.box[d]) p.out_levels.push_back(d);
  return true;
}

// tile_cycles for a move: the loads' and stores' GM granules, a dispatch per DMA and the chip's
// shared GM a cycle per DMA of every core.
double Nest::move_cycles(const Plan& p) const {
  const int nd = static_cast<int>(p.dims.size());
  double elements = 1, box = 1;  // a core's, a box's
  for (int d = 0; d < nd; ++d) elements *= double(share(p, d)), box *= double(p.box[d]);
  const double tiles = elements / box;  // (a cut box's tail tile counted by its elements)
  const double g = double(m_.granularity(Buffer::GM)), eb = dtype_bytes(p.out.type);
  const isa::NpuPathSpec& in = m_.path(Buffer::GM, Buffer::UB);
  const double bw = std::min(double(in.bandwidth_bytes_per_cycle), m_.gm_shared_bandwidth_bytes_per_cycle / std::max(1, cores_));
  auto length = [&](const std::vector<int>& run) {
    double n = 1;
    for (int d : run) n *= double(p.box[d]);
    return n;
  };
  const auto size = [&](int d) { return p.box[d]; };
  const double load_run = length(move_run(p, p.reads[0], p.u, size)), store_run = length(move_run(p, p.out, p.v, size));
  const double loads = box / load_run, stores = box / store_run;
  const double bytes = loads * std::ceil(load_run * eb / g) * g + stores * std::ceil(store_run * eb / g) * g;
  // (among boxes GM binds alike, fewer DMAs: each one waits out its latency somewhere)
  return tiles * (std::max({bytes / bw, (loads + stores) * double(m_.scalar_cycles), (loads + stores) * shared_dma_cycles()}) +
                  kDmaTieBreak * (loads + stores));
}

// The cycles one core spends on a statement's tiles by the plan's u, v and tile, as a roofline:
// the largest of GM (the granules each tile's moves touch, at the core's share of the bandwidth),
// issue (a scalar dispatch per DMA), the chip's shared GM (a cycle per DMA of every core) and
// vector (repeats per value of a tile).
double Nest::tile_cycles(const Plan& p) const {
  const int nd = static_cast<int>(p.dims.size());
  double tiles = 1, out_tiles = 1;
  for (int d = 0; d < nd; ++d) {
    const double n = double((share(p, d) + block_of(p, d) - 1) / block_of(p, d));
    tiles *= n;
    if (!p.dims[d].reduction) out_tiles *= n;
  }
  const double g = double(m_.granularity(Buffer::GM));
  const isa::NpuPathSpec& in = m_.path(Buffer::GM, Buffer::UB);
  const double bw = std::min(double(in.bandwidth_bytes_per_cycle), m_.gm_shared_bandwidth_bytes_per_cycle / std::max(1, cores_));
  double bytes = 0, dmas = 0;
  auto add = [&](const Access& a, double times) {
    const int64_t eb = dtype_bytes(a.type);
    const int64_t rows = p.u >= 0 ? p.rows : 1, cols = p.v >= 0 ? p.cols : 1;
    const int64_t su = std::abs(stride_of(a, p.u)), sv = std::abs(stride_of(a, p.v));
    // GM charges each burst the granules it touches (adjacent bursts merged): strided lanes are a
    // burst, and a granule, per element; reversed lanes (or rows) a DMA per element (per row).
    const double row = sv == 0 ? g : sv == 1 ? std::ceil(double(cols * eb) / g) * g : double(cols) * g;
    double b = 0, n = 1;
    if (stride_of(a, p.v) < 0) b = double(rows) * double(cols) * g, n = double(cols) * (stride_of(a, p.u) >= 1 ? 1 : double(rows));
    else if (stride_of(a, p.u) < 0 && rows > 1) b = double(rows) * row, n = double(rows);
    else if (su == 0 || rows == 1) b = row;
    else if (sv <= 1 && su == cols) b = std::ceil(double(rows * cols * eb) / g) * g;
    else b = double(rows) * row, n = sv == 1 && su >= cols ? 1 : double(rows);
    bytes += b * times;
    dmas += n * times;
  };
  for (const Access& a : p.reads) add(a, tiles);
  add(p.out, p.is_reduction() ? out_tiles : tiles);
  const double repeats = std::ceil(double(p.rows * p.pitch * 4) / double(bytes_per_repeat_));
  const double vector = tiles * repeats * std::max(1, p.body_regions);
  return std::max({bytes / bw, dmas * double(m_.scalar_cycles), dmas * shared_dma_cycles(), vector});
}

// The chip's cycles of shared GM each DMA of one core costs (the simulator holds the shared GM
// resource for at least a cycle per DMA of any core): the cores' DMAs in a row, at least one cycle each.
double Nest::shared_dma_cycles() const { return double(std::max(1, cores_)); }

// The tile with lanes v: u, rows x pitch and the loop order; "" or why not.
std::string Nest::tile_with(Plan& p, int v) {
  const int nd = static_cast<int>(p.dims.size());
  std::vector<const Access*> all{&p.out};
  for (const auto& a : p.reads) all.push_back(&a);
  const bool half_sum = (p.s->reduction == ir::Reduction::Sum || p.s->reduction == ir::Reduction::Prod) && dtype_bytes(p.out.type) == 2;
  p.v = v;
  // u: the output dimension the output is densest along, else the innermost reduction one.
  int64_t best_stride = std::numeric_limits<int64_t>::max();
  for (int d = 0; d < nd; ++d) {
    if (d == p.v || p.dims[d].reduction) continue;
    const int64_t st = std::abs(p.out.stride[d]);
    if (p.u < 0 || (st > 0 && st <= best_stride)) p.u = d, best_stride = st > 0 ? st : best_stride;
  }
  if (p.u < 0)
    for (int d = nd - 1; d >= 0 && p.u < 0; --d)
      if (d != p.v) p.u = d;
  // Where a core's share of u makes tiles smaller than the bytes GM delivers in one load latency
  // (a core grid cut it, or it is short: each tile would wait out the latency for little data), the
  // dimension that gives a tile the most rows: an output one, or a reduction one unless an f16 sum
  // (its rows would be added out of the interpreter's order).
  const isa::NpuPathSpec& gm = m_.path(Buffer::GM, Buffer::UB);
  const int64_t row_bytes = 4 * (p.v >= 0 ? share(p, p.v) : 1);
  const auto in_flight = static_cast<int64_t>(gm.latency_cycles * gm.bandwidth_bytes_per_cycle);
  if (p.u >= 0 && std::min<int64_t>(share(p, p.u), max_repeat_) * row_bytes < in_flight) {
    auto rows_of = [&](int d) { return std::min<int64_t>(share(p, d), max_repeat_); };
    auto forward = [&](int d) { return std::all_of(all.begin(), all.end(), [&](const Access* a) { return a->stride[d] >= 0; }); };
    for (int d = 0; d < nd; ++d)
      if (d != p.v && rows_of(d) > rows_of(p.u) && forward(d) && !(half_sum && p.dims[d].reduction)) p.u = d;
  }
  if (p.partition >= 0 && p.partition != p.u && p.partition != p.v && p.dims[p.partition].reduction)
    return "partition dimension is a reduction";
  // A read may run backwards along the rows or the lanes (Nest::move gathers it); the output may not.
  for (const Access* a : all)
    for (int d : {p.u, p.v})
      if (d >= 0 && a->stride[d] < 0 && a == &p.out)
        return "reversed index " + p.dims[d].name + " in an access to " + a->tensor;
  // The tile: pitch a whole number of repeats for the narrowest type, regions within UB.
  std::set<int> bytes{dtype_bytes(p.out.type), 4};
  for (const auto& a : p.reads) bytes.insert(dtype_bytes(a.type));
  collect_types(*p.s->rhs, bytes);
  p.unit = m_.vector_lanes(*bytes.begin());
  // A tile's values, counted by compiling the right-hand side once into a throwaway program (the
  // count does not depend on the tile's size); two sets of them (double buffering).
  // Values per row (p.row_values) take one repeat per row each.
  p.body_regions = count_regions(p);
  p.row_values = counted_rows_;
  p.regions = kFixedRegions + 2 * (3 + p.body_regions);
  const int64_t ub = m_.capacity(Buffer::UB);
  int64_t cap = std::min<int64_t>((ub - 2 * p.row_values * bytes_per_repeat_) / p.regions / 4, max_repeat_ * m_.vector_lanes(4));
  cap = cap / p.unit * p.unit;
  if (cap < p.unit)
    return fmt::format("{} values of one vector repeat each need {} bytes, more than UB's {}", p.regions,
                       p.regions * p.unit * 4, ub);
  int64_t ev = p.v >= 0 ? p.dims[p.v].extent : 1;
  if (p.v >= 0) ev = share(p, p.v);
  const int64_t padded = (ev + p.unit - 1) / p.unit * p.unit;
  // A transposed read turns 16 x 16 blocks: leave room for 16 rows when the rows allow it.
  const bool turns = std::any_of(p.reads.begin(), p.reads.end(), [&](const Access& a) { return transposable(p, a); });
  const int64_t eu0 = p.u >= 0 ? share(p, p.u) : 1;
  const int64_t lane_cap = turns && eu0 >= 16 ? std::max<int64_t>(p.unit, cap / 16 / p.unit * p.unit) : cap;
  p.cols = padded <= lane_cap ? ev : lane_cap;
  p.pitch = padded <= lane_cap ? padded : lane_cap;
  if (p.v >= 0) p.cols = std::min(p.cols, share(p, p.v));
  const int64_t eu = p.u >= 0 ? p.dims[p.u].extent : 1;
  const int64_t row_cap = std::min(max_repeat_ * m_.vector_lanes(4) / p.pitch,
                                   ub / (p.regions * p.pitch * 4 + 2 * p.row_values * bytes_per_repeat_));
  p.rows = std::max<int64_t>(1, std::min({eu, p.row_values > 0 ? row_cap : cap / p.pitch, max_repeat_}));
  if (p.u >= 0) p.rows = std::min(p.rows, share(p, p.u));
  // Loop order: partition first, output dimensions, u and v innermost of their kind.
  auto place = [&](bool reduction) {
    std::vector<int> order;
    if (!reduction && p.partition >= 0 && p.partition != p.u && p.partition != p.v) order.push_back(p.partition);
    for (int d = 0; d < nd; ++d)
      if (p.dims[d].reduction == reduction && d != p.u && d != p.v && d != p.partition) order.push_back(d);
    for (int d : {p.u, p.v})
      if (d >= 0 && p.dims[d].reduction == reduction) order.push_back(d);
    if (!reduction && p.partition >= 0 && (p.partition == p.u || p.partition == p.v)) {
      order.erase(std::find(order.begin(), order.end(), p.partition));
      order.insert(order.begin(), p.partition);
    }
    return order;
  };
  p.out_levels = place(false);
  p.red_levels = place(true);
  return "";
}

// Regions one tile uses: its loads (and their i32 widenings), the expression's values (equal
// subexpressions once), the conversion to the output type.
int Nest::count_regions(const Plan& p) {
  npu::Program scratch;
  npu::Program* saved = p_;
  const Plan* saved_plan = plan_;
  p_ = &scratch;
  plan_ = &p;
  chunk_ = 1;
  region_base_ = next_region_ = 0;
  pos_.assign(p.dims.size(), Pos{});
  size_.assign(p.dims.size(), 1);
  loaded_.clear();
  memo_.clear();
  // a read that does not move along the lanes: a value per row (as body() loads it), counted apart
  rowwise_ = counting_ = rows_tile(p);
  counted_rows_ = 0;
  for (const Access& a : p.reads) {
    if (rowwise_ && stride_of(a, p.v) == 0 && stride_of(a, p.u) != 0) {
      Value v{false, 0, row_value_region(), compute_type(a.type)};
      v.per_row = true;
      loaded_.push_back(v);
    } else {
      loaded_.push_back(Value{false, 0, fresh_region(), compute_type(a.type)});
    }
  }
  for (const Access& a : p.reads) {
    if (a.type != compute_type(a.type)) fresh_region();
    if (a.type == DType::U8) fresh_region();  // the widening's constant 256 (convert)
    if (transposable(p, a)) fresh_region(), fresh_region();
    if (stride_of(a, p.v) < 0 || stride_of(a, p.u) < 0) {  // move() gathers it: a block per element (or byte)
      for (int i = 0; i < gather_span(a.type); ++i) fresh_region();
      if (gathered_bytewise(a.type))  // (pack_bytes: widened, packed)
        for (int i = 0; i <= gather_span(a.type); ++i) fresh_region();
    }
  }
  if (p.out.type == DType::U8) fresh_region(), fresh_region();  // narrowed(): the i8 pattern and the constant
  vector_of(compile(*p.s->rhs, 1), 1);
  rowwise_ = counting_ = false;  // (counted_rows_: the plan's row_values)
  const int product = p.s->reduction == ir::Reduction::Prod ? 1 : 0;  // lanes_product's scratch
  const int regions = static_cast<int>(next_region_ / 4) - counted_rows_ + 2 + product;
  p_ = saved;
  plan_ = saved_plan;
  return regions;
}

// A read of a dtype the vector unit has no instructions for (bf16: moved by DMA only; u8 is widened
// to i32 first) that load() would spread over lanes or rows with vbrcb / vmuls (issue 31), or "".
std::string Nest::unmovable_read(const Plan& p) const {
  // (a description listing bf16 <-> f32 conversions: bf16 is loaded as f32, compute_type, and
  // broadcast in f32)
  if (m_.conversion(DType::BF16, DType::F32) && m_.conversion(DType::F32, DType::BF16)) return "";
  for (const Access& a : p.reads) {
    if (a.type != DType::BF16) continue;
    const int64_t su = stride_of(a, p.u), sv = stride_of(a, p.v);
    if ((sv == 0 && p.cols > 1) || (su == 0 && sv == 1 && p.rows > 1))
      return "a read of the " + std::string(dtype_name(a.type)) + " tensor " + a.tensor +
             " broadcast over the tile (the vector unit has no " + std::string(dtype_name(a.type)) +
             " instructions; such values are moved by DMA only)";
  }
  return "";
}

// A 2-byte operand contiguous along the rows and strided along the lanes (a transposed read).
bool Nest::transposable(const Plan& p, const Access& a) {
  return a.type == DType::F16 && p.u >= 0 && p.v >= 0 && a.stride[p.u] == 1 && a.stride[p.v] > 1;
}

}  // namespace tessel::emit_npu::nest
