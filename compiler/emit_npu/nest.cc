// General NPU vector lowering: see nest.h.
#include "compiler/emit_npu/nest.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include "compiler/emit_npu/operands.h"
#include "compiler/emit_npu/pointwise.h"
#include "isa/base/error.h"

namespace tessel::emit_npu {
namespace {

using npu::Buffer;
using npu::Opcode;
using npu::Operand;

// Registers: level i of a statement counts its blocks in r(kLevel0 + i); the core's first row of
// the partition dimension is kBase; kAddr / kTmp build GM addresses; kOnce runs the last core's range.
constexpr uint8_t kLevel0 = 1, kBase = 16, kAddr = 20, kTmp = 21, kOnce = 22, kCoreLoop = 23;
// The row pipeline: core 0 alone stores what the once-per-core statements write (kFirst = core_id == 0).
constexpr uint8_t kFirst = 24, kFirstLoop = 25;
constexpr int kMaxLevels = 14;
// not hardware: the longest program (instructions issued per core) the lowering produces, so a
// contraction refused by the cube cannot turn into an hours-long simulation.
constexpr double kMaxIssued = 1 << 23;
// not hardware: the fewest blocks of rows a core's share is cut into where it can be (the first
// block's load and the last one's store are not overlapped: 1/kMinBlocks of the time at most).
constexpr int64_t kMinBlocks = 8;
// Value sets a tile loop alternates: two (double buffering), three in the row pipeline where a
// block's vector work is shorter than a load's latency (its loads then run two blocks ahead).
constexpr int kMaxSets = 3;
constexpr int kFixedRegions = 1;  // the index sequence (accumulators, partials, row values: per value set)

struct Dim {
  std::string name;
  int64_t lo = 0, extent = 1;
  bool reduction = false;
};

// Element offset of an access at relative positions t_d (0 <= t_d < extent_d) of the dimensions:
// offset + sum(stride[d] * t_d).
struct Access {
  std::string tensor;
  DType type = DType::F32;
  int64_t offset = 0;
  std::vector<int64_t> stride;
  bool operator==(const Access& o) const { return tensor == o.tensor && offset == o.offset && stride == o.stride; }
};

// One statement's loops and tile (nest.h).
struct Plan {
  const ir::Statement* s = nullptr;
  std::vector<Dim> dims;
  Access out;
  std::vector<Access> reads;               // distinct accesses
  std::map<const ir::Expr*, int> read_of;  // access node -> index in reads
  std::map<const ir::Expr*, Access> values;  // index used as a value: offset + sum(stride_d * t_d)
  // An index divided by a constant d (floor((i + c) / d), (i + c) % d) is split into two
  // dimensions, i = lo + d * hi + low: the quotient moves with hi, the remainder is low.
  struct Split {
    int hi = -1, low = -1;
    int64_t divisor = 1, lo = 0;
  };
  std::map<std::string, Split> splits;
  int u = -1, v = -1;                      // tile dimensions (rows, lanes); -1: none
  int64_t rows = 1, cols = 1, pitch = 1;   // full tile: rows x cols used of rows x pitch
  std::vector<int> out_levels, red_levels; // dimensions in loop order (u and v innermost)
  int partition = -1;                      // the dimension split over cores (out_levels[0])
  int64_t unit = 64;                       // pitch granule: one repeat of the narrowest type
  int regions = 0, body_regions = 0;  // all values of a tile (both sets), one set's
  bool is_reduction() const { return s->reduction != ir::Reduction::None; }
  bool red(int d) const { return d >= 0 && dims[d].reduction; }
  bool out_dim(int d) const { return d >= 0 && !dims[d].reduction; }
};

// Where a dimension's current tile starts (an element index relative to its lo): c + sum(reg * mul).
struct Pos {
  int64_t c = 0;
  std::vector<std::pair<uint8_t, int64_t>> regs;
};

// The vector unit has no i8 arithmetic: i8 values are computed in i32 (wrapped to the i8 range
// after each operation, the language's i8 semantics) and narrowed by vconv when stored.
DType compute_type(DType t) { return t == DType::I8 ? DType::I32 : t; }

void collect_types(const ir::Expr& e, std::set<int>& bytes) {
  bytes.insert(dtype_bytes(e.type));
  for (const auto& a : e.args) collect_types(*a, bytes);
}


class Nest : public VectorCode {
 public:
  Nest(const kernel::Kernel& k, const isa::NpuMachine& m, double max_issued = kMaxIssued)
      : VectorCode(k, m), max_issued_(max_issued) {}

  std::string why_not() {
    const ir::Function* f = k_.function;
    if (!f) return "no tensor IR attached";
    if (f->statements.empty()) return "no statements";
    cores_ = 1;
    range_ = 1;
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
        const int64_t ext = static_cast<int>(d) == p.partition ? range_ : p.dims[d].extent;
        const int64_t blk = static_cast<int>(d) == p.u ? p.rows : static_cast<int>(d) == p.v ? p.cols : 1;
        tiles *= double((ext + blk - 1) / blk);
      }
      issued += tiles * double(8 + 4 * p.reads.size() + p.body_regions + 2 * p.rows);
    }
    if (issued > max_issued_)
      return fmt::format("about {:.3g} vector-unit instructions per core (more than {:.3g}: too slow to be a mapping)", issued,
                         max_issued_);
    return "";
  }

  std::string why_not_message() { return message(why_not(), "general vector lowering"); }
  int row_pipeline_cores() { return why_not().empty() && fz_.on ? cores_ : 0; }

  NpuKernel emit() {
    if (std::string w = why_not(); !w.empty()) throw UserError(message(w, "general vector lowering"));
    NpuKernel out;
    npu::Program& p = out.program;
    p_ = &p;
    p.source_name = k_.name + ".npu";
    bind(p);
    p.cores = cores_;
    emit_pads();
    if (cores_ == 1) {
      run_core(range_);
    } else {
      op(Opcode::Mul, {reg(kBase), reg(npu::kRegCoreId), imm(range_)});
      const int64_t last = partition_extent_ - (cores_ - 1) * range_;
      if (last == range_) {
        run_core(range_);
      } else {
        op(Opcode::Loop, {reg(kCoreLoop), reg(npu::kRegCoreId), imm(cores_ - 1), reg(npu::kRegCoreCount)});
        run_core(range_);
        op(Opcode::EndLoop, {});
        op(Opcode::Seq, {reg(kOnce), reg(npu::kRegCoreId), imm(cores_ - 1)});
        op(Opcode::Loop, {reg(kCoreLoop), imm(0), reg(kOnce), imm(1)});
        run_core(last);
        op(Opcode::EndLoop, {});
      }
    }
    p.add(Opcode::PipeBarrier, {Operand::pipe_(npu::Pipe::All)});
    for (const Plan& pl : plans_)
      out.notes.push_back(fmt::format("{}: {} loop(s), tile {} x {} (pitch {}){}{}", pl.s->name, pl.dims.size(),
                                      pl.rows, pl.cols, pl.pitch, pl.u >= 0 ? ", rows " + pl.dims[pl.u].name : "",
                                      pl.v >= 0 ? ", lanes " + pl.dims[pl.v].name : ""));
    if (fz_.on) out.notes.push_back(fused_note());
    out.notes.push_back(fmt::format("general vector lowering on {} core(s){}", cores_,
                                    cores_ > 1 ? fmt::format(", {} rows each", range_) : std::string()));
    npu::validate_program(p);
    return out;
  }

 private:
  // ---- analysis ----------------------------------------------------------------------------------

  // The linear form of an index expression over the plan's dimensions: k + sum(c[d] * t_d).
  struct Lin {
    std::vector<int64_t> c;
    int64_t k = 0;
  };
  std::string lin_of(const ir::AffineExpr& e, const Plan& p, Lin& out) const {
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
  std::string split_divisions(const ir::Statement& s, Plan& p) {
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

  std::string access_of(const std::string& tensor, const std::vector<ir::AffineExpr>& idx, const Plan& p, Access& a) {
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

  std::string model(const ir::Statement& s, Plan& p) {
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
  void coalesce(Plan& p, const std::string& keep) const {
    for (bool merged = true; merged;) {
      merged = false;
      for (size_t d = 0; d + 1 < p.dims.size() && !merged; ++d) {
        if (p.dims[d].name == keep || p.dims[d + 1].name == keep) continue;
        if (walk_as_one(p, d)) merge(p, d), merged = true;
      }
    }
  }
  // Dimensions d and d + 1 are of one kind and every access walks them as one.
  static bool walk_as_one(const Plan& p, size_t d) {
    if (p.dims[d].reduction != p.dims[d + 1].reduction) return false;
    auto walks = [&](const Access& a) { return a.stride[d] == a.stride[d + 1] * p.dims[d + 1].extent; };
    if (!walks(p.out) || !std::all_of(p.reads.begin(), p.reads.end(), walks)) return false;
    return std::all_of(p.values.begin(), p.values.end(), [&](const auto& v) { return walks(v.second); });
  }
  static void merge(Plan& p, size_t d) {
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
  bool plan_pads() {
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

  // Zero-fills each padded copy and copies its tensor in, rows of the last two dimensions at a time.
  void emit_pads() {
    const int64_t ub = m_.capacity(Buffer::UB) / 2 / bytes_per_repeat_ * bytes_per_repeat_;
    for (const auto& [name, pad] : pads_) {
      const int eb = dtype_bytes(pad.type);
      int64_t total = eb;
      for (int64_t z : pad.shape) total *= z;
      const int64_t zero = std::min(ub, (total + bytes_per_repeat_ - 1) / bytes_per_repeat_ * bytes_per_repeat_);
      for (int64_t done = 0; done < zero; done += max_repeat_ * bytes_per_repeat_)
        op(Opcode::Vdup, {type(DType::I32), at(Buffer::UB, done), Operand::float_(0),
                          imm(std::min(max_repeat_, (zero - done) / bytes_per_repeat_)), imm(1), imm(repeat_blocks_)});
      for (int64_t off = 0; off < total; off += zero)
        op(Opcode::DmaOut, {at(Buffer::GM, gm_.at(pad.name) + off), at(Buffer::UB, 0), imm(1), imm(std::min(zero, total - off)), imm(0), imm(0)});
      if (pad.written) continue;  // its writer stores into the buffer
      const size_t r = pad.source.size();
      const int64_t w = pad.source[r - 1], h = r >= 2 ? pad.source[r - 2] : 1;
      const int64_t rows = std::max<int64_t>(1, std::min(h, ub / (w * eb)));
      TESSEL_CHECK(w * eb <= ub, "nest: a padded row larger than UB");
      std::vector<int64_t> outer(pad.source.begin(), pad.source.end() - std::min<size_t>(r, 2));
      std::vector<int64_t> idx(outer.size(), 0);
      for (bool more = true; more;) {
        for (int64_t row = 0; row < h; row += rows) {
          const int64_t n = std::min(rows, h - row);
          int64_t src = 0, dst = 0, ss = 1, sd = 1;
          for (size_t j = r; j-- > 0;) {
            const int64_t i = j + 1 == r ? 0 : j + 2 == r ? row : idx[j];
            src += ss * i;
            dst += sd * (i + pad.before[j]);
            ss *= pad.source[j];
            sd *= pad.shape[j];
          }
          op(Opcode::DmaIn, {at(Buffer::UB, 0), at(Buffer::GM, gm_.at(name) + src * eb), imm(n), imm(w * eb), imm(0), imm(0)});
          op(Opcode::DmaOut, {at(Buffer::GM, gm_.at(pad.name) + dst * eb), at(Buffer::UB, 0), imm(n), imm(w * eb), imm(0),
                              imm((pad.shape[r - 1] - w) * eb)});
        }
        more = false;
        for (size_t j = outer.size(); j-- > 0 && !more;) {
          if (++idx[j] < outer[j]) more = true;
          else idx[j] = 0;
        }
      }
    }
  }

  // The partition: the dimension writing dim 0 of every statement's output, when each statement
  // reads the kernel's own results only at that row (then a core's rows depend on its rows only).
  // The index writing dimension `pos` of every statement's output (0: the leading one, -1: the
  // last), when each statement reads the kernel's own results only at that index in that dimension
  // (then a core's share depends on its share only). Empty when there is none.
  std::vector<std::string> partition_indices(int pos, int64_t& extent, size_t first = 0) const {
    std::set<std::string> written;
    std::vector<std::string> chosen;
    extent = -1;
    auto at = [&](const std::vector<ir::AffineExpr>& idx) -> const ir::AffineExpr* {
      if (idx.empty()) return nullptr;
      return &idx[pos >= 0 ? static_cast<size_t>(pos) : idx.size() - 1];
    };
    for (size_t i = first; i < plans_.size(); ++i) {
      const ir::Statement& s = *plans_[i].s;
      const ir::AffineExpr* e = at(s.out_indices);
      if (!e || e->index_coeffs.size() != 1 || !e->param_coeffs.empty() || e->constant != 0 || e->has_div() ||
          e->index_coeffs.begin()->second != 1)
        return {};
      const std::string d = e->index_coeffs.begin()->first;
      const ir::IndexVar* iv = s.find_index(d);
      const int64_t n = iv->hi.evaluate({}, k_.sizes) - iv->lo.evaluate({}, k_.sizes);
      if (iv->lo.evaluate({}, k_.sizes) != 0 || (extent >= 0 && n != extent)) return {};
      extent = n;
      bool ok = true;
      std::function<void(const ir::Expr&)> check = [&](const ir::Expr& x) {
        if (x.kind == ir::ExprKind::Access && written.count(x.name)) {
          const ir::AffineExpr* r = at(x.indices);
          if (!r || !(*r == ir::AffineExpr::index(d))) ok = false;
        }
        for (const auto& a : x.args) check(*a);
      };
      check(*s.rhs);
      if (!ok) return {};
      written.insert(s.output);
      chosen.push_back(d);
    }
    return chosen;
  }

  // The partition: rows of the leading output dimension, else of the last (channels), over the cores.
  void choose_partition() {
    int64_t extent = -1;
    std::vector<std::string> dim0 = partition_indices(0, extent);
    bool lanes = false;  // split along the last dimension: keep a vector repeat of it per core
    if (dim0.empty() || extent <= 1) dim0 = partition_indices(-1, extent), lanes = true;
    const bool ok = !dim0.empty();
    for (size_t i = 0; i < plans_.size(); ++i) coalesce(plans_[i], ok ? dim0[i] : "");
    if (!ok || extent <= 1 || !pads_.empty()) {  // padded copies: every core would read the one copy
      cores_ = 1;
      return;
    }
    const int64_t want = std::min<int64_t>(m_.cores, lanes ? std::max<int64_t>(1, extent / m_.vector_lanes(DType::F32)) : extent);
    range_ = (extent + want - 1) / want;
    cores_ = static_cast<int>((extent + range_ - 1) / range_);
    partition_extent_ = extent;
    for (size_t i = 0; i < plans_.size(); ++i) {
      Plan& p = plans_[i];
      for (size_t d = 0; d < p.dims.size(); ++d)
        if (p.dims[d].name == dim0[i]) p.partition = static_cast<int>(d);
    }
    if (std::any_of(plans_.begin(), plans_.end(), [](const Plan& p) { return p.partition < 0; })) {  // split by a division
      for (Plan& p : plans_) p.partition = -1;
      cores_ = 1;
      range_ = 1;
      return;
    }
    if (cores_ == 1) range_ = extent;
  }

  // Chooses u, v and the tile; "" or why not.
  std::string tile(Plan& p) {
    const int nd = static_cast<int>(p.dims.size());
    if (nd > kMaxLevels) return fmt::format("{} loop dimensions (at most {})", nd, kMaxLevels);
    std::vector<const Access*> all{&p.out};
    for (const auto& a : p.reads) all.push_back(&a);
    const bool half_sum = p.s->reduction == ir::Reduction::Sum && dtype_bytes(p.out.type) == 2;
    const bool has_out = std::any_of(p.dims.begin(), p.dims.end(), [](const Dim& d) { return !d.reduction; });
    // v: the dimension the most elements are contiguous along (each access counts the elements it
    // touches); ties go to output dimensions, then inner ones.
    auto touched = [&](const Access& a) {
      int64_t n = 1;
      for (int d = 0; d < nd; ++d)
        if (a.stride[d] != 0) n *= p.dims[d].extent;
      return n;
    };
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
    p.v = best;
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
    if (p.partition >= 0 && p.partition != p.u && p.partition != p.v && p.dims[p.partition].reduction)
      return "partition dimension is a reduction";
    for (const Access* a : all)
      for (int d : {p.u, p.v})
        if (d >= 0 && a->stride[d] < 0) return "reversed index " + p.dims[d].name + " in an access to " + a->tensor;
    // The tile: pitch a whole number of repeats for the narrowest type, regions within UB.
    std::set<int> bytes{dtype_bytes(p.out.type), 4};
    for (const auto& a : p.reads) bytes.insert(dtype_bytes(a.type));
    collect_types(*p.s->rhs, bytes);
    p.unit = m_.vector_lanes(*bytes.begin());
    // A tile's values, counted by compiling the right-hand side once into a throwaway program (the
    // count does not depend on the tile's size); two sets of them (double buffering).
    p.body_regions = count_regions(p);
    p.regions = kFixedRegions + 2 * (3 + p.body_regions);
    const int64_t ub = m_.capacity(Buffer::UB);
    int64_t cap = std::min<int64_t>(ub / p.regions / 4, max_repeat_ * m_.vector_lanes(4));
    cap = cap / p.unit * p.unit;
    if (cap < p.unit)
      return fmt::format("{} values of one vector repeat each need {} bytes, more than UB's {}", p.regions,
                         p.regions * p.unit * 4, ub);
    int64_t ev = p.v >= 0 ? p.dims[p.v].extent : 1;
    if (p.v >= 0 && p.v == p.partition) ev = std::min(ev, range_);
    const int64_t padded = (ev + p.unit - 1) / p.unit * p.unit;
    // A transposed read turns 16 x 16 blocks: leave room for 16 rows when the rows allow it.
    const bool turns = std::any_of(p.reads.begin(), p.reads.end(), [&](const Access& a) { return transposable(p, a); });
    const int64_t eu0 = p.u >= 0 ? std::min(p.dims[p.u].extent, p.u == p.partition ? range_ : p.dims[p.u].extent) : 1;
    const int64_t lane_cap = turns && eu0 >= 16 ? std::max<int64_t>(p.unit, cap / 16 / p.unit * p.unit) : cap;
    p.cols = padded <= lane_cap ? ev : lane_cap;
    p.pitch = padded <= lane_cap ? padded : lane_cap;
    if (p.v == p.partition && p.v >= 0) p.cols = std::min(p.cols, range_);
    const int64_t eu = p.u >= 0 ? p.dims[p.u].extent : 1;
    p.rows = std::max<int64_t>(1, std::min({eu, cap / p.pitch, max_repeat_}));
    if (p.u == p.partition && p.u >= 0) p.rows = std::min(p.rows, range_);
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
  int count_regions(const Plan& p) {
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
    for (const Access& a : p.reads) loaded_.push_back(Value{false, 0, fresh_region(), compute_type(a.type)});
    for (const Access& a : p.reads) {
      if (a.type != compute_type(a.type)) fresh_region();
      if (transposable(p, a)) fresh_region(), fresh_region();
    }
    vector_of(compile(*p.s->rhs, 1), 1);
    const int regions = static_cast<int>(next_region_ / 4) + 2;
    p_ = saved;
    plan_ = saved_plan;
    return regions;
  }

  // ---- GM ----------------------------------------------------------------------------------------

  // Every global and local tensor in GM, with room before and after for reads that reach past its
  // ends (guarded reads such as padding: their lanes are discarded by a select).
  void bind(npu::Program& p) {
    std::map<std::string, std::pair<int64_t, int64_t>> reach;  // elements before, after
    for (const Plan& pl : plans_)
      for (const Access& a : pl.reads) {
        int64_t lo = a.offset, hi = a.offset;
        for (size_t d = 0; d < pl.dims.size(); ++d) {
          const int64_t span = a.stride[d] * (pl.dims[d].extent - 1);
          (span < 0 ? lo : hi) += span;
        }
        const ir::Tensor* t = k_.function->find_tensor(a.tensor);
        if (!t) continue;  // a zero-padded copy: read inside
        int64_t n = 1;
        for (int64_t s : sizes_of(*t)) n *= s;
        auto& r = reach[a.tensor];
        r.first = std::max(r.first, -lo);
        r.second = std::max(r.second, hi - n);
      }
    const int64_t g = m_.granularity(Buffer::GM);
    auto round = [&](int64_t b) { return (b + g - 1) / g * g; };
    int64_t gm = 0;
    auto place = [&](const std::string& name, DType t, const std::vector<int64_t>& shape, npu::TensorRole role) {
      const auto r = reach.count(name) ? reach.at(name) : std::pair<int64_t, int64_t>{0, 0};
      gm += round(r.first * dtype_bytes(t));
      // A 0-d tensor is bound as one element (a program tensor has a shape).
      npu::TensorBinding b{name, t, shape.empty() ? std::vector<int64_t>{1} : shape, gm, role, {}};
      gm = round(gm + b.byte_size() + r.second * dtype_bytes(t));
      gm_[name] = b.gm_offset;
      p.tensors.push_back(b);
    };
    for (const auto& t : k_.tensors)
      place(t.name, t.dtype, t.shape,
            t.temporary ? npu::TensorRole::Scratch
                        : t.kind == ir::TensorKind::Input ? npu::TensorRole::In : npu::TensorRole::Out);
    for (const auto& t : k_.function->tensors)
      if (!gm_.count(t.name)) place(t.name, t.dtype, sizes_of(t), npu::TensorRole::Scratch);
    for (const auto& [name, pad] : pads_) place(pad.name, pad.type, pad.shape, npu::TensorRole::Scratch);
  }

  // GM operand of access `a` at the current tile origin, plus `extra` bytes (address in kAddr).
  Operand gm_operand(const Plan& p, const Access& a, int64_t extra) {
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
  void move(bool to_ub, const Plan& p, const Access& a, int64_t region, int64_t rows, int64_t cols, int64_t pitch,
            int64_t su, int64_t sv) {
    const int eb = dtype_bytes(a.type);
    const Operand gm = gm_operand(p, a, 0);
    auto dma = [&](int64_t ub, int64_t gm_extra, int64_t n, int64_t burst, int64_t ub_gap, int64_t gm_gap) {
      Operand g = gm;
      g.imm += gm_extra;
      if (to_ub) op(Opcode::DmaIn, {at(Buffer::UB, ub), g, imm(n), imm(burst), imm(gm_gap), imm(ub_gap)});
      else op(Opcode::DmaOut, {g, at(Buffer::UB, ub), imm(n), imm(burst), imm(ub_gap), imm(gm_gap)});
    };
    if (rows == 1) su = cols;  // no second row: any gap
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

  // ---- emission ----------------------------------------------------------------------------------

  void run_core(int64_t range) {
    range_now_ = range;
    if (fz_.on) {
      fused_core(range);
      return;
    }
    memo_prefix_.clear();
    for (const Plan& p : plans_) statement(p);
  }

  int64_t stride_of(const Access& a, int d) const { return d >= 0 ? a.stride[d] : 0; }

  void statement(const Plan& p) {
    plan_ = &p;
    pos_.assign(p.dims.size(), Pos{});
    size_.assign(p.dims.size(), 1);
    chunk_ = p.rows * p.pitch;
    region_base_ = 0;
    next_region_ = 0;
    seq_ = fresh_region();
    if (!p.values.empty()) sequence(p);
    for (int k = 0; k < 2; ++k) {
      accs_[k] = fresh_region();
      parts_[k] = fresh_region();
      rowvals_of_[k] = fresh_region();
    }
    body_base_ = next_region_;
    set_bytes_ = p.body_regions * chunk_ * 4;
    set_ = acc_set_ = 0;
    // Double buffering at the innermost loop of two or more tiles: its tiles alternate the two sets
    // of values (and of accumulators when it is an output loop).
    db_dim_ = -1;
    std::vector<int> order = p.out_levels;
    order.insert(order.end(), p.red_levels.begin(), p.red_levels.end());
    for (int d : order)
      if (extent_of(p, d) / block_of(p, d) >= 2) db_dim_ = d;
    db_out_ = db_dim_ >= 0 && !p.dims[db_dim_].reduction;
    levels(p, 0, true);
  }

  int64_t extent_of(const Plan& p, int d) const { return d == p.partition ? range_now_ : p.dims[d].extent; }
  int64_t block_of(const Plan& p, int d) const { return d == p.u ? p.rows : d == p.v ? p.cols : 1; }

  // The loops of out_levels (output == true) then red_levels; each level: its full blocks in a
  // loop (or straight when one), then its tail block.
  void levels(const Plan& p, size_t i, bool output) {
    const std::vector<int>& lv = output ? p.out_levels : p.red_levels;
    if (i == lv.size()) {
      if (output) reduction(p);
      else body(p);
      return;
    }
    const int d = lv[i];
    const int level = static_cast<int>(output ? i : p.out_levels.size() + i);
    const uint8_t r = static_cast<uint8_t>(kLevel0 + level);
    const int64_t ext = extent_of(p, d), blk = block_of(p, d);
    const int64_t full = ext / blk, tail = ext % blk;
    Pos base;
    if (d == p.partition && cores_ > 1) base.regs.push_back({kBase, 1});
    size_[d] = blk;
    const bool innermost = d == db_dim_;
    if (innermost && full > 1) {  // pairs of tiles alternate the two value sets
      if (full > 3) op(Opcode::Loop, {reg(r), imm(0), imm(full / 2), imm(1)});
      for (int64_t k = 0; k < (full > 3 ? 2 : full); ++k) {
        pos_[d] = base;
        if (full > 3) pos_[d].regs.push_back({r, 2 * blk});
        pos_[d].c = k * blk;
        set_ = static_cast<int>(k % 2);
        if (db_out_) acc_set_ = set_;
        levels(p, i + 1, output);
      }
      if (full > 3) op(Opcode::EndLoop, {});
      if (full > 3 && full % 2) {
        pos_[d] = base;
        pos_[d].c = (full - 1) * blk;
        set_ = 0;
        if (db_out_) acc_set_ = 0;
        levels(p, i + 1, output);
      }
      set_ = 1;
      if (db_out_) acc_set_ = 1;
    } else if (full > 1) {
      op(Opcode::Loop, {reg(r), imm(0), imm(full), imm(1)});
      pos_[d] = base;
      pos_[d].regs.push_back({r, blk});
      levels(p, i + 1, output);
      op(Opcode::EndLoop, {});
    } else if (full == 1) {
      pos_[d] = base;
      levels(p, i + 1, output);
    }
    if (tail > 0) {
      pos_[d] = base;
      pos_[d].c = full * blk;
      size_[d] = tail;
      levels(p, i + 1, output);
    }
    if (innermost) set_ = acc_set_ = 0;
  }

  int64_t cur(int d) const { return d >= 0 ? size_[d] : 1; }

  // Accumulator shape: [rows of u if u is an output dim][pitch if v is one, else 1 packed].
  int64_t acc_rows(const Plan& p) const { return p.out_dim(p.u) ? cur(p.u) : 1; }
  int64_t acc_elements(const Plan& p) const { return acc_rows(p) * (p.out_dim(p.v) ? p.pitch : 1); }

  double identity(const Plan& p) const {
    const bool fl = dtype_is_float(p.out.type);
    switch (p.s->reduction) {
      case ir::Reduction::Max: return fl ? -INFINITY : double(std::numeric_limits<int32_t>::min());
      case ir::Reduction::Min: return fl ? INFINITY : double(std::numeric_limits<int32_t>::max());
      default: return 0;
    }
  }
  Opcode combine_op(const Plan& p) const {
    return p.s->reduction == ir::Reduction::Max ? Opcode::Vmax : p.s->reduction == ir::Reduction::Min ? Opcode::Vmin : Opcode::Vadd;
  }

  void store_acc(const Plan& p, bool to_ub) {
    const bool narrow = p.out.type != compute_type(p.out.type);  // through part() in the output type
    const int64_t n = acc_elements(p), ub = narrow ? part() : acc();
    const Value total{false, 0, acc(), compute_type(p.out.type)}, staged{false, 0, part(), p.out.type};
    if (narrow && !to_ub && p.s->reduction == ir::Reduction::Sum) wrap_to_i8(total, part(), n);
    if (narrow && !to_ub) convert(staged, total, n);
    if (p.out_dim(p.v))
      move(to_ub, p, p.out, ub, acc_rows(p), cur(p.v), p.pitch, p.out_dim(p.u) ? stride_of(p.out, p.u) : 0, stride_of(p.out, p.v));
    else
      move(to_ub, p, p.out, ub, acc_rows(p), 1, 1, p.out_dim(p.u) ? stride_of(p.out, p.u) : 0, 0);
    if (narrow && to_ub) convert(total, staged, n);
  }

  // An i8 sum accumulated in i32, wrapped in place to [-128, 127] as the language's i8 sum wraps
  // after every step (wrapping commutes with the sum; vconv to i8 would saturate: issue 31).
  // `scratch` holds n i32 values (the constant 256).
  void wrap_to_i8(const Value& x, int64_t scratch, int64_t n) {
    const Value k256{false, 0, scratch, DType::I32};
    op(Opcode::Vdup, {type(DType::I32), at(Buffer::UB, scratch), Operand::float_(256), imm(repeats(n, DType::I32)), imm(1),
                      imm(repeat_blocks_)});
    binary(Opcode::Vmod, x, x, k256, n);
    with_scalar(Opcode::Vadds, x, x, 384, n);
    binary(Opcode::Vmod, x, x, k256, n);
    with_scalar(Opcode::Vadds, x, x, -128, n);
  }

  // After the output levels: a reduction initialises the accumulator, runs its loops, stores it.
  void reduction(const Plan& p) {
    if (!p.is_reduction()) {
      levels(p, 0, false);
      return;
    }
    if (p.s->init) {
      const DType t = compute_type(p.out.type);
      op(Opcode::Vdup, {type(t), at(Buffer::UB, acc()), Operand::float_(identity(p)), imm(repeats(acc_elements(p), t)), imm(1),
                        imm(repeat_blocks_)});
    } else {
      store_acc(p, true);
    }
    levels(p, 0, false);
    store_acc(p, false);
  }

  // One tile: load every access, evaluate, reduce within the tile, combine or store.
  void body(const Plan& p) {
    next_region_ = body_base_ + set_ * set_bytes_;
    const int64_t rows = cur(p.u), cols = cur(p.v), n = rows * p.pitch;
    loaded_.clear();
    memo_.clear();
    for (const Access& a : p.reads) loaded_.push_back(load(p, a, rows, cols));
    Value x = compile(*p.s->rhs, n);
    x = vector_of(x, n);
    if (x.type != compute_type(p.out.type)) {
      Value y{false, 0, fresh_region(), compute_type(p.out.type)};
      convert(y, x, n);
      x = y;
    }
    if (!p.is_reduction()) {
      if (x.type != p.out.type) {  // i8: narrowed (the value is in range)
        Value y{false, 0, fresh_region(), p.out.type};
        convert(y, x, n);
        x = y;
      }
      TESSEL_CHECK(region_base_ + next_region_ <= m_.capacity(Buffer::UB), "nest: a tile's values exceed UB");
      move(false, p, p.out, x.region, rows, cols, p.pitch, stride_of(p.out, p.u), stride_of(p.out, p.v));
      return;
    }
    TESSEL_CHECK(region_base_ + next_region_ <= m_.capacity(Buffer::UB), "nest: a tile's values exceed UB");
    const DType t = x.type;
    const int eb = dtype_bytes(t);
    const Opcode o = combine_op(p);
    int64_t left = rows;
    if (p.red(p.u)) {  // rows in ascending order into row 0
      for (int64_t r = 1; r < rows; ++r)
        binary(o, x, x, Value{false, 0, x.region + r * p.pitch * eb, t}, p.pitch);
      left = 1;
    }
    const Value total{false, 0, acc(), t};
    if (!p.red(p.v)) {
      binary(o, total, total, x, left * p.pitch);
      return;
    }
    lanes(p, x, left, cols);
    binary(o, total, total, Value{false, 0, part(), t}, left);
  }

  // Reduces each of `rows` rows of x (cols valid lanes) to one element at part()[r]; folds into
  // `scratch` when given (x is then only read, but for its lanes past cols, set to the identity).
  void lanes(const Plan& p, const Value& x, int64_t rows, int64_t cols, int64_t scratch = -1) {
    const DType t = x.type;
    const int64_t w = m_.vector_lanes(t), k = p.pitch / w, rep = k * repeat_blocks_;
    const double id = identity(p);
    const int64_t j0 = cols / w, lane0 = cols % w;
    if (lane0 > 0) {
      uint64_t lo = 0, hi = 0;
      for (int64_t l = lane0; l < w; ++l) {
        const int64_t bit = l % m_.vector_mask_bits;
        (bit < 64 ? lo : hi) |= uint64_t{1} << (bit % 64);
      }
      op(Opcode::SetVectorMask, {imm(static_cast<int64_t>(hi)), imm(static_cast<int64_t>(lo))});
      op(Opcode::Vdup, {type(t), at(Buffer::UB, x.region + j0 * bytes_per_repeat_), Operand::float_(id), imm(rows), imm(1), imm(rep)});
      op(Opcode::SetVectorMask, {imm(-1), imm(-1)});
    }
    for (int64_t j = j0 + (lane0 > 0 ? 1 : 0); j < k; ++j)
      op(Opcode::Vdup, {type(t), at(Buffer::UB, x.region + j * bytes_per_repeat_), Operand::float_(id), imm(rows), imm(1), imm(rep)});
    const Opcode o = combine_op(p);
    const int64_t dst = scratch >= 0 ? scratch : x.region;
    int64_t src = x.region;  // where the rows' remaining repeats are
    auto copy = [&](int64_t j) {  // repeat j of every row from src to dst
      op(Opcode::Vmuls, {type(t), at(Buffer::UB, dst + j * bytes_per_repeat_), at(Buffer::UB, src + j * bytes_per_repeat_),
                         Operand::float_(1), imm(rows), imm(1), imm(1), imm(rep), imm(rep)});
    };
    for (int64_t c = k; c > 1;) {  // fold a row's repeats pairwise into its first
      const int64_t h = c / 2;
      if (rows == 1) {
        vop(o, t, dst, src, src + (c - h) * bytes_per_repeat_, h, repeat_blocks_);
      } else {
        for (int64_t j = 0; j < h; ++j)
          vop(o, t, dst + j * bytes_per_repeat_, src + j * bytes_per_repeat_, src + (c - h + j) * bytes_per_repeat_, rows, rep);
      }
      if (dst != src)
        for (int64_t j = h; j < c - h; ++j) copy(j);  // the odd repeat stays
      src = dst;
      c -= h;
    }
    const bool min = p.s->reduction == ir::Reduction::Min;
    if (min) {
      op(Opcode::Vmuls, {type(t), at(Buffer::UB, dst), at(Buffer::UB, src), Operand::float_(-1), imm(rows), imm(1), imm(1), imm(rep), imm(rep)});
      src = dst;
    }
    const Opcode r = p.s->reduction == ir::Reduction::Sum ? Opcode::Vcadd : Opcode::Vcmax;
    op(r, {type(t), at(Buffer::UB, part()), at(Buffer::UB, src), imm(rows), imm(1), imm(rep)});
    if (min) with_scalar(Opcode::Vmuls, Value{false, 0, part(), t}, Value{false, 0, part(), t}, -1, rows);
  }

  void vop(Opcode o, DType t, int64_t dst, int64_t a, int64_t b, int64_t repeat, int64_t rep) {
    op(o, {type(t), at(Buffer::UB, dst), at(Buffer::UB, a), at(Buffer::UB, b), imm(repeat), imm(1), imm(1), imm(1), imm(rep),
           imm(rep), imm(rep)});
  }

  // A read of a dtype the vector unit has no instructions for (u8, bf16: moved by DMA only) that
  // load() would spread over lanes or rows with vbrcb / vmuls (issue 31), or "".
  std::string unmovable_read(const Plan& p) const {
    for (const Access& a : p.reads) {
      if (a.type != DType::U8 && a.type != DType::BF16) continue;
      const int64_t su = stride_of(a, p.u), sv = stride_of(a, p.v);
      if ((sv == 0 && p.cols > 1) || (su == 0 && sv == 1 && p.rows > 1))
        return "a read of the " + std::string(dtype_name(a.type)) + " tensor " + a.tensor +
               " broadcast over the tile (the vector unit has no " + std::string(dtype_name(a.type)) +
               " instructions; such values are moved by DMA only)";
    }
    return "";
  }

  // Loads access `a` as a rows x pitch tile (cols valid lanes per row).
  Value load(const Plan& p, const Access& a, int64_t rows, int64_t cols) {
    // rows x pitch values in whole repeats (a row block of the pipeline may be wider than the chunk
    // of the statement that reads it: a broadcast wrote past its region into the next set, issue 31)
    const int64_t tile = rows * p.pitch;
    const Value v{false, 0, tile > chunk_ ? fresh_bytes(tile * 4) : fresh_region(), a.type};
    const int64_t su = stride_of(a, p.u), sv = stride_of(a, p.v);
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

  // A 2-byte operand contiguous along the rows and strided along the lanes (a transposed read).
  static bool transposable(const Plan& p, const Access& a) {
    return a.type == DType::F16 && p.u >= 0 && p.v >= 0 && a.stride[p.u] == 1 && a.stride[p.v] > 1;
  }

  // Loads the tile transposed (lanes as rows: one dma_in of contiguous row segments) into the two
  // regions after `v`, then turns each 16 x 16 block with vtranspose into the rows x pitch tile.
  Value load_transposed(const Plan& p, const Access& a, const Value& v, int64_t rows, int64_t cols) {
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

  // A value per row (the access does not move along the lanes): gathered, then spread over the
  // row's lanes (vbrcb per repeat of the row; one value for all rows: one repeat, copied).
  void broadcast_rows(const Plan& p, const Access& a, const Value& v, int64_t rows) {
    const DType t = compute_type(a.type);
    const int64_t su = stride_of(a, p.u);
    const int64_t k = p.pitch / m_.vector_lanes(t), rep = k * repeat_blocks_;
    // The row values, widened in place past the gathered ones when the type has no arithmetic.
    int64_t values = rowvals();
    auto widen = [&](int64_t count) {
      if (t == a.type) return;
      values = rowvals() + (count * dtype_bytes(a.type) + 31) / 32 * 32;
      convert(Value{false, 0, values, t}, Value{false, 0, rowvals(), a.type}, count);
    };
    if (su == 0 || rows == 1) {
      move(true, p, a, rowvals(), 1, 1, 1, 1, 0);
      widen(1);
      op(Opcode::Vbrcb, {type(t), at(Buffer::UB, v.region), at(Buffer::UB, values), imm(1), imm(1), imm(repeat_blocks_)});
      if (rows * k > 1)
        op(Opcode::Vmuls, {type(t), at(Buffer::UB, v.region + bytes_per_repeat_), at(Buffer::UB, v.region), Operand::float_(1),
                           imm(rows * k - 1), imm(1), imm(1), imm(repeat_blocks_), imm(0)});
      return;
    }
    move(true, p, a, rowvals(), rows, 1, 1, su, 0);
    widen(rows);
    for (int64_t j = 0; j < k; ++j)
      op(Opcode::Vbrcb, {type(t), at(Buffer::UB, v.region + j * bytes_per_repeat_), at(Buffer::UB, values), imm(rows), imm(1), imm(rep)});
  }

  // seq_ = 0, 1, 2, ... (i32) over the region: lane l of every repeat set by a masked vdup, then
  // each repeat offset by its first index.
  void sequence(const Plan& p) {
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
  Value index_value(const Plan& p, const Access& a, int64_t n) {
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

  // ---- expressions -------------------------------------------------------------------------------

  // Equal subexpressions are computed once per tile (GELU's z appears five times).
  Value compile(const ir::Expr& e, int64_t n) override {
    const Value v = compile_rows(e, n);
    if (!v.per_row) return v;
    const std::string key = memo_prefix_ + ir::to_string(e) + "#expanded";
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    const Value x = expand(v);
    memo_[key] = x;
    return x;
  }
  // The same, but a value per row may stay one (row pipeline: operations with a value per row read
  // its one repeat per row with repeat stride 0).
  Value compile_rows(const ir::Expr& e, int64_t n) {
    const std::string key = memo_prefix_ + ir::to_string(e);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    const Value v = fz_.on || sizing_ ? row_op(e, n) : compile_node(e, n);
    memo_[key] = v;
    return v;
  }
  // A binary operation of which one or both operands are values per row.
  Value row_op(const ir::Expr& e, int64_t n) {
    static const std::map<ir::Op, Opcode> ops{{ir::Op::Add, Opcode::Vadd}, {ir::Op::Sub, Opcode::Vsub}, {ir::Op::Mul, Opcode::Vmul},
                                              {ir::Op::Div, Opcode::Vdiv}, {ir::Op::Max, Opcode::Vmax}, {ir::Op::Min, Opcode::Vmin}};
    const auto o = ops.find(e.op);
    if (e.kind != ir::ExprKind::Apply || o == ops.end() || e.args.size() != 2 || e.type == DType::I8) return compile_node(e, n);
    const Value a = compile_rows(*e.args[0], n), b = compile_rows(*e.args[1], n);
    if (!(a.per_row || b.per_row) || a.scalar || b.scalar || a.type != e.type || b.type != e.type) return compile_node(e, n);
    const DType t = e.type;
    const int64_t rows = cur(plan_->u);
    Value r{false, 0, 0, t};
    if (a.per_row && b.per_row) {
      r.region = fresh_bytes(fz_.rows * bytes_per_repeat_);
      r.per_row = true;
      vop(o->second, t, r.region, a.region, b.region, rows, repeat_blocks_);
      return r;
    }
    r.region = result_region(e, {a, b});
    const int64_t k = fz_.pitch / m_.vector_lanes(t), rep = k * repeat_blocks_;
    auto src = [&](const Value& v, int64_t j) { return v.per_row ? v.region : v.region + j * bytes_per_repeat_; };
    for (int64_t j = 0; j < k; ++j)
      op(o->second, {type(t), at(Buffer::UB, r.region + j * bytes_per_repeat_), at(Buffer::UB, src(a, j)), at(Buffer::UB, src(b, j)),
                     imm(rows), imm(1), imm(1), imm(1), imm(rep), imm(a.per_row ? repeat_blocks_ : rep),
                     imm(b.per_row ? repeat_blocks_ : rep)});
    return r;
  }
  // In the row pipeline an element-wise operation overwrites an operand of its own element size
  // that no other node of the block reads (its text occurs once in the block's statements) and that
  // is neither a load nor a kept result; a cast to a narrower type gets a region of its size.
  int64_t result_region(const ir::Expr& e, const std::vector<Value>& a) override {
    if (!fz_.on && !sizing_) return fresh_region();
    for (size_t i = 0; i < a.size(); ++i)
      if (!a[i].scalar && !a[i].per_row && dtype_bytes(a[i].type) == dtype_bytes(e.type) && dies(*e.args[i], a[i].region))
        return a[i].region;
    if (e.op == ir::Op::Cast && dtype_bytes(e.type) < 4) return fresh_bytes(chunk_ * dtype_bytes(e.type));
    return fresh_region();
  }
  bool dies(const ir::Expr& x, int64_t region) {
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
  // Is `region` a load (hoisted, this block's) or a result kept in UB? (A cast to the same type
  // is its operand's value, so an expression's value may be one of them.)
  bool kept(int64_t region) const {
    auto held = [&](const std::map<std::string, Value>& m) {
      return std::any_of(m.begin(), m.end(), [&](const auto& v) { return v.second.region == region; });
    };
    if (held(hoisted_) || held(block_loads_) || held(prefetched_[set_])) return true;
    return std::any_of(resident_.begin(), resident_.end(), [&](const auto& r) { return r.second.v.region == region; });
  }

  // A value per row spread over the row's lanes.
  Value expand(const Value& v) {
    const Value r{false, 0, fresh_region(), v.type};
    const int64_t k = fz_.pitch / m_.vector_lanes(v.type), rep = k * repeat_blocks_;
    for (int64_t j = 0; j < k; ++j)
      op(Opcode::Vmuls, {type(v.type), at(Buffer::UB, r.region + j * bytes_per_repeat_), at(Buffer::UB, v.region), Operand::float_(1),
                         imm(cur(plan_->u)), imm(1), imm(1), imm(rep), imm(repeat_blocks_)});
    return r;
  }

  Value compile_node(const ir::Expr& e, int64_t n) {
    if (e.kind == ir::ExprKind::Access) return loaded_.at(plan_->read_of.at(&e));
    if (e.kind == ir::ExprKind::IndexValue) {
      if (e.affine.is_constant()) return {true, double(e.affine.evaluate({}, k_.sizes)), 0, DType::I32};
      return index_value(*plan_, plan_->values.at(&e), n);
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
    if (e.type == DType::I8) return narrow_op(e, n);
    return VectorCode::compile(e, n);
  }

  // An i8 operation or cast to i8 computed in i32 and wrapped to [-128, 127] (from floats: truncated
  // and saturated), the result kept in i32.
  Value narrow_op(const ir::Expr& e, int64_t n) {
    if (e.op == ir::Op::Cast && dtype_is_float(e.args[0]->type)) {
      Value x = compile(*e.args[0], n);
      if (x.scalar) return {true, std::clamp(std::trunc(x.constant), -128.0, 127.0), 0, DType::I32};
      x = truncate_to_i32(x, n);
      const Value r{false, 0, fresh_region(), DType::I32};
      with_scalar(Opcode::Vmaxs, r, x, -128, n);
      binary(Opcode::Vmin, r, r, vector_of(Value{true, 127, 0, DType::I32}, n), n);
      return r;
    }
    ir::Expr wide = e;
    wide.type = DType::I32;
    Value x = e.op == ir::Op::Cast ? compile(*e.args[0], n) : VectorCode::compile(wide, n);
    if (x.scalar) return {true, double(static_cast<int8_t>(static_cast<int64_t>(x.constant))), 0, DType::I32};
    if (dtype_is_float(x.type) || x.type == DType::I8) return x;  // (not reached: handled above)
    const Value k256 = vector_of(Value{true, 256, 0, DType::I32}, n), w{false, 0, fresh_region(), DType::I32};
    binary(Opcode::Vmod, w, x, k256, n);
    with_scalar(Opcode::Vadds, w, w, 384, n);
    binary(Opcode::Vmod, w, w, k256, n);
    with_scalar(Opcode::Vadds, w, w, -128, n);
    return w;
  }

  // A condition as f32 1 / 0 (compares give it in their operands' type).
  Value condition(const Value& c, int64_t n) {
    if (c.scalar || c.type == DType::F32) return c;
    const Value r{false, 0, fresh_region(), DType::F32};
    convert(r, c, n);
    return r;
  }

  Value compare(const ir::Expr& e, int64_t n) {
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

  Value select(const ir::Expr& e, int64_t n) {
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

  // ---- the row pipeline (nest.h) -----------------------------------------------------------------

  // What a plan is in the pipeline: once per core over the lanes, over blocks of rows and the lanes,
  // over blocks of rows only.
  enum class Role { Prologue, Row, PerRow };
  // Where a result stays in UB: R x pitch (a row tile), R values (one per row), pitch values (one
  // per lane, the same for every row).
  enum class Layout { Row, PerRow, PerLane };
  struct Resident {
    Value v;
    Layout layout = Layout::Row;
    int64_t offset = 0, su = 0, sv = 0;  // the producer's output access (element offset, strides)
  };
  struct Fused {
    bool on = false;
    int prologue = 0;                   // statements [0, prologue) run once per core
    int64_t lanes = 1, pitch = 1, rows = 1;
    int64_t persist = 0, block_bytes = 0;  // UB bytes of the per-core values, of one block's set
    int64_t prefetch_bytes = 0;            // the part of a set its block's loads take
    int sets = 2;                          // value sets the blocks cycle through (loads sets - 1 ahead)
    int64_t vector_cycles = 0, load_cycles = 0;  // one block's vector work and loads (the model)
  };

  Role role_of(size_t i) const {
    if (static_cast<int>(i) < fz_.prologue) return Role::Prologue;
    return plans_[i].dims.size() == 2 ? Role::Row : Role::PerRow;
  }
  size_t index_of(const Plan& p) const { return static_cast<size_t>(&p - plans_.data()); }
  Layout layout_of(size_t i) const {
    switch (role_of(i)) {
      case Role::Prologue: return Layout::PerLane;
      case Role::Row: return plans_[i].is_reduction() ? Layout::PerRow : Layout::Row;
      default: return Layout::PerRow;
    }
  }
  // The producer's output access in its layout's terms.
  Resident resident_of(size_t i, const Value& v) const {
    const Plan& p = plans_[i];
    Resident r{v, layout_of(i), p.out.offset, 0, 0};
    if (r.layout == Layout::Row) r.su = p.out.stride[p.u], r.sv = p.out.stride[p.v];
    else if (role_of(i) == Role::Row) r.su = p.out.stride[p.u];
    else r.su = p.out.stride[p.v];  // along the rows (PerRow) or the lanes (PerLane)
    return r;
  }
  // How plan i reads access `a` of a result r: 0 not at all (another element), 1 as it is, 2
  // broadcast across the lanes (a value per row), 3 expanded down the rows (a value per lane).
  int reads_resident(size_t i, const Access& a, const Resident& r) const {
    const Plan& p = plans_[i];
    if (a.offset != r.offset) return 0;
    switch (role_of(i)) {
      case Role::Row: {
        const int64_t su = a.stride[p.u], sv = a.stride[p.v];
        if (r.layout == Layout::Row) return su == r.su && sv == r.sv ? 1 : 0;
        if (r.layout == Layout::PerRow) return su == r.su && sv == 0 ? 2 : 0;
        return su == 0 && sv == r.su ? 3 : 0;
      }
      case Role::PerRow: return r.layout == Layout::PerRow && a.stride[p.v] == r.su ? 1 : 0;
      default: return r.layout == Layout::PerLane && a.stride[p.v] == r.su ? 1 : 0;
    }
  }
  bool stored(const std::string& tensor) const {
    for (const auto& t : k_.tensors)
      if (t.name == tensor) return !t.temporary && t.kind != ir::TensorKind::Input;
    return false;
  }

  // Chooses the pipeline when it applies (every statement fits it and a block of rows fits UB):
  // the statements after a prologue of statements over the lanes only share a row partition.
  bool try_fused() {
    if (!pads_.empty() || plans_.empty()) return false;
    const std::vector<Plan> base = plans_;
    for (size_t l = 0; l < base.size(); ++l) {
      plans_ = base;
      if (fuse(static_cast<int>(l))) return true;
      if (base[l].dims.size() != 1 || base[l].is_reduction()) break;  // no longer prologue
    }
    plans_ = base;
    fz_ = Fused{};
    cores_ = 1;
    range_ = 1;
    return false;
  }

  bool fuse(int prologue) {
    fz_ = Fused{};
    fz_.prologue = prologue;
    int64_t extent = -1;
    const std::vector<std::string> names = partition_indices(0, extent, prologue);
    if (names.empty() || extent <= 1) return false;
    for (int i = 0; i < prologue; ++i) coalesce(plans_[i], "");
    int64_t rows = -1;
    for (size_t i = prologue; i < plans_.size(); ++i) {
      Plan& p = plans_[i];
      coalesce(p, names[i - prologue]);
      for (size_t d = 0; d < p.dims.size(); ++d)
        if (p.dims[d].name == names[i - prologue]) p.partition = static_cast<int>(d);
      if (p.partition < 0) return false;
      // the partition takes the output dimensions walked with it, but the lanes
      while (static_cast<size_t>(p.partition) + 2 < p.dims.size() && walk_as_one(p, p.partition)) merge(p, p.partition);
      if (rows >= 0 && p.dims[p.partition].extent != rows) return false;
      rows = p.dims[p.partition].extent;
    }
    partition_extent_ = rows;
    // Equal shares where a divisor of the rows keeps at least half the cores: every core then runs
    // the same code (an uneven last share needs a loop over cores, whose carried syncs the sync pass
    // must keep although each core runs it once).
    int64_t want = std::min<int64_t>(m_.cores, rows);
    for (int64_t c = want; 2 * c >= want; --c)
      if (rows % c == 0) {
        want = c;
        break;
      }
    range_ = (rows + want - 1) / want;
    cores_ = static_cast<int>((rows + range_ - 1) / range_);
    if (cores_ == 1) range_ = rows;
    for (auto& p : plans_)
      if (!tile(p).empty()) return false;
    if (!fits_pipeline()) return false;
    return size_pipeline();
  }

  // Every statement has a role and reads earlier results only where they are in UB.
  bool fits_pipeline() {
    fz_.lanes = -1;
    int64_t unit = 1;
    for (size_t i = 0; i < plans_.size(); ++i) {
      const Plan& p = plans_[i];
      if (!p.values.empty() || !p.splits.empty()) return false;
      const Role r = role_of(i);
      if (r == Role::Prologue && (p.dims.size() != 1 || p.is_reduction() || p.v != 0)) return false;
      if (r == Role::PerRow && (p.v != p.partition || p.is_reduction())) return false;
      if (r == Role::Row) {
        if (p.u != p.partition || p.v < 0 || p.v == p.u || p.dims[p.u].reduction) return false;
        if (p.is_reduction() && (!p.dims[p.v].reduction || !p.s->init)) return false;
        if (std::any_of(p.reads.begin(), p.reads.end(), [&](const Access& a) { return transposable(p, a); })) return false;
        if (fz_.lanes >= 0 && fz_.lanes != p.dims[p.v].extent) return false;
        fz_.lanes = p.dims[p.v].extent;
      }
      if (r != Role::PerRow) unit = std::max(unit, p.unit);
    }
    if (fz_.lanes < 0) return false;
    for (int i = 0; i < fz_.prologue; ++i)
      if (plans_[i].dims[0].extent != fz_.lanes) return false;
    std::map<std::string, Resident> written;
    for (size_t i = 0; i < plans_.size(); ++i) {
      const Plan& p = plans_[i];
      for (const Access& a : p.reads) {
        if (!k_.function->find_tensor(a.tensor)) return false;
        const bool later = std::any_of(plans_.begin() + i, plans_.end(), [&](const Plan& q) { return q.s->output == a.tensor; });
        if (later) return false;
        if (auto w = written.find(a.tensor); w != written.end() && reads_resident(i, a, w->second) == 0) return false;
      }
      if (written.count(p.s->output)) return false;
      written[p.s->output] = resident_of(i, Value{});
    }
    fz_.pitch = (fz_.lanes + unit - 1) / unit * unit;
    for (size_t i = 0; i < plans_.size(); ++i) {
      Plan& p = plans_[i];
      if (role_of(i) == Role::PerRow) continue;
      p.pitch = fz_.pitch;
      p.cols = fz_.lanes;
      p.rows = 1;
    }
    return true;
  }

  // Blocks of R rows: the prologue's values, the hoisted reads and two sets of a block's values fit
  // UB (measured by emitting them once into a throwaway program; they grow with R), R within one
  // instruction's repeats and, where the rows allow, at least kMinBlocks blocks per core so that
  // the loads of one block overlap the vector work of the one before.
  // Sets: two where a block's vector work covers its loads' latency and transfer (the loads of
  // block b + 1 run during the compute of b), else three (two blocks ahead), both from the machine
  // model (vector: one cycle per repeat; GM -> UB: latency + bytes / bandwidth).
  bool size_pipeline() {
    const int64_t most = std::min({range_, max_repeat_, max_repeat_ * m_.vector_lanes(DType::F32) / fz_.pitch,
                                   std::max<int64_t>(1, (range_ + kMinBlocks - 1) / kMinBlocks)});
    int64_t chosen = 0;
    for (int sets = 2; sets <= kMaxSets; ++sets) {
      fz_.sets = sets;
      if (most < 1 || !fits_rows(1)) break;
      int64_t lo = 1, hi = most;
      while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (fits_rows(mid)) lo = mid;
        else hi = mid - 1;
      }
      fits_rows(lo);
      chosen = lo;
      if ((sets - 1) * fz_.vector_cycles >= fz_.load_cycles || lo == range_) break;
    }
    if (chosen == 0) return false;
    if (fz_.rows != chosen || !fits_rows(chosen)) {  // three sets do not fit: two
      fz_.sets = 2;
      if (!fits_rows(chosen)) return false;
    }
    fz_.on = true;
    return true;
  }
  bool fits_rows(int64_t r) {
    npu::Program scratch;
    npu::Program* saved = p_;
    p_ = &scratch;
    sizing_ = true;
    fz_.rows = r;
    set_plan_rows(r);
    region_base_ = next_region_ = 0;
    resident_.clear();
    hoisted_.clear();
    fused_prologue();
    fused_hoist();
    fz_.persist = next_region_;
    fz_.block_bytes = fz_.prefetch_bytes = 0;
    const size_t first = scratch.code.size();
    prefetch(Pos{}, r, 0);
    fz_.prefetch_bytes = next_region_ - fz_.persist;
    fused_block(Pos{}, r, 0);
    fz_.block_bytes = next_region_ - fz_.persist;
    sizing_ = false;
    p_ = saved;
    const isa::NpuPathSpec& gm = m_.path(Buffer::GM, Buffer::UB);
    int64_t bytes = 0;
    fz_.vector_cycles = 0;
    for (size_t pc = first; pc < scratch.code.size(); ++pc) {
      const npu::Instruction& in = scratch.code[pc];
      const npu::OpcodeInfo& info = npu::opcode_info(in.opcode);
      if (in.opcode == Opcode::DmaIn) bytes += in.operands[2].imm * in.operands[3].imm;
      else if (info.repeat_operand >= 0 && info.pipe_rule == npu::PipeRule::V) fz_.vector_cycles += in.operands[info.repeat_operand].imm;
    }
    fz_.load_cycles = gm.latency_cycles + (bytes + gm.bandwidth_bytes_per_cycle - 1) / gm.bandwidth_bytes_per_cycle;
    return fz_.persist + fz_.sets * fz_.block_bytes <= m_.capacity(Buffer::UB);
  }
  void set_plan_rows(int64_t r) {
    for (size_t i = fz_.prologue; i < plans_.size(); ++i) {
      Plan& p = plans_[i];
      if (role_of(i) == Role::Row) p.rows = r;
      else p.pitch = (r + p.unit - 1) / p.unit * p.unit, p.cols = r, p.rows = 1;
    }
  }
  void use_chunk(int64_t elements) { chunk_ = elements; }

  std::string fused_note() const {
    std::string hoisted;
    for (const auto& [key, v] : hoisted_) hoisted += (hoisted.empty() ? "" : ", ") + key.substr(0, key.find('@'));
    return fmt::format("row pipeline: statements {}..{} per block of {} rows x {} lanes (pitch {}), loaded once and kept in "
                       "UB, {} sets of blocks (loads {} ahead){}{}",
                       plans_[fz_.prologue].s->name, plans_.back().s->name, fz_.rows, fz_.lanes, fz_.pitch, fz_.sets, fz_.sets - 1,
                       fz_.prologue > 0 ? fmt::format("; {}..{} once per core", plans_[0].s->name, plans_[fz_.prologue - 1].s->name)
                                        : std::string(),
                       hoisted.empty() ? std::string() : "; row-invariant reads once per core: " + hoisted);
  }

  // One core's rows: the prologue, the hoisted reads, then the blocks.
  void fused_core(int64_t range) {
    region_base_ = next_region_ = 0;
    set_ = acc_set_ = 0;
    resident_.clear();
    hoisted_.clear();
    fused_prologue();
    fused_hoist();
    TESSEL_CHECK(next_region_ == fz_.persist, "nest: the row pipeline's per-core values differ from its sizing");
    // Block b (set b % S) is loaded while blocks b - S + 1 .. b - 1 are computed: in program
    // order the loads of b + S - 1 come before the compute of b. Groups of S blocks in a loop while
    // its loads stay within the full blocks, the rest straight.
    const int sets = fz_.sets;
    const int64_t r = fz_.rows, full = range / r, tail = range % r, blocks = full + (tail > 0 ? 1 : 0);
    Pos base;
    if (cores_ > 1) base.regs.push_back({kBase, 1});
    auto block_at = [&](int64_t c, bool looped) {
      Pos q = base;
      q.c = c;
      if (looped) q.regs.push_back({kLevel0, sets * r});
      return q;
    };
    auto rows_of = [&](int64_t b) { return b < full ? r : tail; };
    int64_t groups = full >= 2 * sets - 1 ? (full - sets + 1) / sets : 0;
    if (groups < 2) groups = 0;
    for (int64_t b = 0; b < std::min<int64_t>(sets - 1, blocks); ++b) prefetch(block_at(b * r, false), rows_of(b), static_cast<int>(b));
    if (groups > 0) {
      op(Opcode::Loop, {reg(kLevel0), imm(0), imm(groups), imm(1)});
      for (int k = 0; k < sets; ++k) {
        prefetch(block_at((k + sets - 1) * r, true), r, (k + sets - 1) % sets);
        fused_block(block_at(k * r, true), r, k);
      }
      op(Opcode::EndLoop, {});
    }
    for (int64_t b = sets * groups; b < blocks; ++b) {
      if (b + sets - 1 < blocks) prefetch(block_at((b + sets - 1) * r, false), rows_of(b + sets - 1), static_cast<int>((b + sets - 1) % sets));
      fused_block(block_at(b * r, false), rows_of(b), static_cast<int>(b % sets));
    }
    set_ = acc_set_ = 0;
  }

  // Points pos_ / size_ at plan p's share: `rows` rows from `at` (the prologue: its lanes).
  void enter(const Plan& p, const Pos& origin, int64_t rows) {
    plan_ = &p;
    pos_.assign(p.dims.size(), Pos{});
    size_.assign(p.dims.size(), 1);
    if (p.partition >= 0) pos_[p.partition] = origin, size_[p.partition] = rows;
    if (p.v >= 0 && p.v != p.partition) size_[p.v] = fz_.lanes;
    memo_prefix_.clear();
    for (const Dim& d : p.dims) memo_prefix_ += fmt::format("{}@{}:{},", d.name, d.lo, d.extent);
    memo_prefix_ += "|";
  }

  void fused_prologue() {
    use_chunk(fz_.pitch);
    for (int i = 0; i < fz_.prologue; ++i) {
      const Plan& p = plans_[i];
      enter(p, Pos{}, 1);
      loaded_.clear();
      memo_.clear();
      for (const Access& a : p.reads) loaded_.push_back(fused_read(i, a, 1));
      const Value x = result(p, fz_.pitch);
      resident_[p.s->output] = resident_of(i, x);
      if (!stored(p.s->output)) continue;
      if (cores_ > 1) {  // the same values on every core: core 0 writes them
        op(Opcode::Seq, {reg(kFirst), reg(npu::kRegCoreId), imm(0)});
        op(Opcode::Loop, {reg(kFirstLoop), imm(0), reg(kFirst), imm(1)});
      }
      store(p, x, 1);
      if (cores_ > 1) op(Opcode::EndLoop, {});
    }
  }

  // Reads of the row statements that do not move with the rows: once per core, R rows of them.
  void fused_hoist() {
    use_chunk(fz_.rows * fz_.pitch);
    for (size_t i = fz_.prologue; i < plans_.size(); ++i) {
      const Plan& p = plans_[i];
      if (role_of(i) != Role::Row) continue;
      enter(p, Pos{}, fz_.rows);
      for (const Access& a : p.reads) {
        if (a.stride[p.u] != 0) continue;
        const std::string key = key_of(p, a);
        if (hoisted_.count(key)) continue;
        if (auto w = resident_.find(a.tensor); w != resident_.end()) {  // a prologue result: copied down the rows
          const Value& src = w->second.v;
          const Value v{false, 0, fresh_region(), src.type};
          const int64_t k = fz_.pitch / m_.vector_lanes(src.type), rep = k * repeat_blocks_;
          for (int64_t j = 0; j < k; ++j)
            op(Opcode::Vmuls, {type(src.type), at(Buffer::UB, v.region + j * bytes_per_repeat_),
                               at(Buffer::UB, src.region + j * bytes_per_repeat_), Operand::float_(1), imm(fz_.rows), imm(1),
                               imm(1), imm(rep), imm(0)});
          hoisted_[key] = v;
          continue;
        }
        if (a.stride[p.v] == 0) rowvals_of_[set_] = fresh_region();
        hoisted_[key] = load(p, a, fz_.rows, fz_.lanes);
      }
    }
  }

  std::string key_of(const Plan& p, const Access& a) const {
    return fmt::format("{}@{}:{}:{}", a.tensor, a.offset, p.u >= 0 ? a.stride[p.u] : 0, p.v >= 0 ? a.stride[p.v] : 0);
  }

  // A read a block loads ahead of its compute: a row statement's plain read of an input that moves
  // with the rows (no widening, no gather).
  bool prefetched(size_t i, const Access& a) const {
    const Plan& p = plans_[i];
    if (role_of(i) == Role::Prologue || a.type != compute_type(a.type)) return false;
    if (std::any_of(plans_.begin(), plans_.end(), [&](const Plan& q) { return q.s->output == a.tensor; })) return false;
    if (role_of(i) == Role::Row) return stride_of(a, p.u) != 0 && stride_of(a, p.v) != 0;
    return stride_of(a, p.v) != 0;
  }

  // The loads of the block at `origin` into the first regions of set `set`.
  void prefetch(const Pos& origin, int64_t rows, int set) {
    use_chunk(fz_.rows * fz_.pitch);
    next_region_ = fz_.persist + set * fz_.block_bytes;
    prefetched_[set].clear();
    for (size_t i = fz_.prologue; i < plans_.size(); ++i) {
      const Plan& p = plans_[i];
      enter(p, origin, rows);
      for (const Access& a : p.reads) {
        const std::string key = key_of(p, a);
        if (!prefetched(i, a) || prefetched_[set].count(key)) continue;
        const Value v{false, 0, fresh_bytes(chunk_ * dtype_bytes(a.type)), a.type};
        if (role_of(i) == Role::Row) move(true, p, a, v.region, rows, fz_.lanes, p.pitch, stride_of(a, p.u), stride_of(a, p.v));
        else move(true, p, a, v.region, 1, rows, p.pitch, 0, stride_of(a, p.v));
        prefetched_[set][key] = v;
      }
    }
  }

  // A region of `bytes` (whole repeats) among the current ones.
  int64_t fresh_bytes(int64_t bytes) {
    const int64_t r = region_base_ + next_region_;
    next_region_ += (bytes + bytes_per_repeat_ - 1) / bytes_per_repeat_ * bytes_per_repeat_;
    return r;
  }
  // Bytes of one value per row (R of them).
  int64_t per_row_bytes() const { return fz_.rows * 4; }

  // Does a statement after plan i use expression text `key` (with its dimensions)? Then plan i
  // must not overwrite that value.
  bool used_after(size_t i, const std::string& key) {
    bool used = false;
    for (size_t j = i + 1; j < plans_.size() && !used; ++j) {
      std::string prefix;
      for (const Dim& d : plans_[j].dims) prefix += fmt::format("{}@{}:{},", d.name, d.lo, d.extent);
      prefix += "|";
      std::function<void(const ir::Expr&)> walk = [&](const ir::Expr& e) {
        if (prefix + ir::to_string(e) == key) used = true;
        for (const auto& a : e.args) walk(*a);
      };
      walk(*plans_[j].s->rhs);
    }
    return used;
  }

  // One block: every row statement on `rows` rows from `at`, values in set `set`.
  void fused_block(const Pos& origin, int64_t rows, int set) {
    use_chunk(fz_.rows * fz_.pitch);
    set_ = acc_set_ = set;
    next_region_ = fz_.persist + set * fz_.block_bytes + fz_.prefetch_bytes;
    memo_.clear();
    block_loads_.clear();
    for (auto it = resident_.begin(); it != resident_.end();)
      it = it->second.layout == Layout::PerLane ? std::next(it) : resident_.erase(it);
    for (size_t i = fz_.prologue; i < plans_.size(); ++i) {
      const Plan& p = plans_[i];
      const bool row = role_of(i) == Role::Row;
      enter(p, origin, rows);
      // this statement's chunk before its loads: their regions (a widened i8 read, a broadcast) were
      // sized by the previous statement's, and overwrote the next block set (issue 31)
      use_chunk(row ? fz_.rows * fz_.pitch : (fz_.rows + p.unit - 1) / p.unit * p.unit);
      loaded_.clear();
      for (const Access& a : p.reads) loaded_.push_back(fused_read(i, a, rows));
      const int64_t n = row ? rows * fz_.pitch : rows;
      if (!p.is_reduction()) {
        const Value x = result(p, n);
        resident_[p.s->output] = resident_of(i, x);
        if (stored(p.s->output)) store(p, x, row ? rows : 1);
        continue;
      }
      // a row reduction: folded out of place (x may be kept), lanes reduced, into the accumulator
      Value x = vector_of(compile(*p.s->rhs, n), n);
      if (x.type != compute_type(p.out.type)) {
        const Value y{false, 0, fresh_region(), compute_type(p.out.type)};
        convert(y, x, n);
        x = y;
      }
      const DType t = x.type;
      parts_[set_] = fresh_bytes(per_row_bytes());
      accs_[acc_set_] = fresh_bytes(per_row_bytes());
      // folded in place unless a later statement reads x (a result, a load, a shared subexpression)
      const bool own = p.s->rhs->kind == ir::ExprKind::Apply && !used_after(i, memo_prefix_ + ir::to_string(*p.s->rhs)) &&
                       !kept(x.region);
      const int64_t scratch = own ? -1 : fresh_region();
      op(Opcode::Vdup, {type(t), at(Buffer::UB, acc()), Operand::float_(identity(p)), imm(repeats(rows, t)), imm(1), imm(repeat_blocks_)});
      lanes(p, x, rows, fz_.lanes, scratch);
      binary(combine_op(p), Value{false, 0, acc(), t}, Value{false, 0, acc(), t}, Value{false, 0, part(), t}, rows);
      resident_[p.s->output] = resident_of(i, Value{false, 0, acc(), t});
      if (stored(p.s->output)) store_acc(p, false);
    }
  }

  // The right-hand side of a statement without reduction, in its output's compute type.
  Value result(const Plan& p, int64_t n) {
    Value x = vector_of(compile(*p.s->rhs, n), n);
    if (x.type != compute_type(p.out.type)) {
      const Value y{false, 0, fresh_region(), compute_type(p.out.type)};
      convert(y, x, n);
      x = y;
    }
    return x;
  }

  // Writes x (rows x the plan's tile) to the statement's output in GM.
  void store(const Plan& p, Value x, int64_t rows) {
    const int64_t n = rows * p.pitch;
    if (x.type != p.out.type) {  // i8: narrowed (the value is in range)
      const Value y{false, 0, fresh_region(), p.out.type};
      convert(y, x, n);
      x = y;
    }
    move(false, p, p.out, x.region, rows, cur(p.v), p.pitch, stride_of(p.out, p.u), stride_of(p.out, p.v));
  }

  // Access `a` of plan i: a result in UB (as it is, broadcast across the lanes), a hoisted read,
  // this block's load of it, or a new load.
  Value fused_read(size_t i, const Access& a, int64_t rows) {
    const Plan& p = plans_[i];
    if (auto w = resident_.find(a.tensor); w != resident_.end()) {
      const Resident& r = w->second;
      const int how = reads_resident(i, a, r);
      TESSEL_CHECK(how != 0, "nest: a row-pipeline read of a result at another element (fits_pipeline should refuse it)");
      if (how == 1) return r.v;
      if (how == 3) return hoisted_.at(key_of(p, a));
      // a value per row: one repeat per row, which the row's operations read with repeat stride 0
      Value v{false, 0, fresh_bytes(fz_.rows * bytes_per_repeat_), r.v.type};
      v.per_row = true;
      op(Opcode::Vbrcb, {type(r.v.type), at(Buffer::UB, v.region), at(Buffer::UB, r.v.region), imm(rows), imm(1), imm(repeat_blocks_)});
      return v;
    }
    const std::string key = key_of(p, a);
    if (role_of(i) == Role::Row && a.stride[p.u] == 0) return hoisted_.at(key);
    if (auto it = prefetched_[set_].find(key); it != prefetched_[set_].end() && role_of(i) != Role::Prologue) return it->second;
    if (role_of(i) != Role::Prologue)
      if (auto it = block_loads_.find(key); it != block_loads_.end()) return it->second;
    const bool row = role_of(i) == Role::Row;
    const int64_t lanes = row || role_of(i) == Role::Prologue ? fz_.lanes : rows;
    if (stride_of(a, p.v) == 0 && lanes > 1) rowvals_of_[set_] = fresh_region();
    const Value v = load(p, a, row ? rows : 1, lanes);
    if (role_of(i) != Role::Prologue) block_loads_[key] = v;
    return v;
  }

  struct Pad {
    std::string name;
    DType type = DType::F32;
    std::vector<int64_t> source, shape, before;  // the tensor's sizes, the copy's, the leading margins
    bool written = false;  // a local the kernel writes: kept in the padded buffer itself, nothing copied in
  };
  std::string pad_refusal_;  // an output read outside its shape (plan_pads)
  std::map<std::string, Pad> pads_;                                         // by the tensor read
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> reach_;  // index range per dimension
  double max_issued_ = kMaxIssued;
  std::vector<Plan> plans_;
  int cores_ = 1;
  int64_t range_ = 1, range_now_ = 1, partition_extent_ = 1;
  std::map<std::string, int64_t> gm_;
  const Plan* plan_ = nullptr;
  std::vector<Pos> pos_;
  std::vector<int64_t> size_;
  std::vector<Value> loaded_;
  std::map<std::string, Value> memo_;  // this tile's values by expression text
  int64_t seq_ = 0, body_base_ = 0, set_bytes_ = 0;
  int64_t accs_[kMaxSets] = {}, parts_[kMaxSets] = {}, rowvals_of_[kMaxSets] = {};
  int set_ = 0, acc_set_ = 0;  // the tile's value set and the accumulator's (double buffering)
  int db_dim_ = -1;            // the double-buffered loop's dimension
  bool db_out_ = false;        // ... an output one (the accumulators alternate too)
  Fused fz_;
  bool sizing_ = false;                        // measuring the pipeline's regions (GM not bound yet)
  std::map<std::string, Resident> resident_;   // results in UB by tensor: the prologue's, this block's
  std::map<std::string, Value> hoisted_;       // the row statements' row-invariant reads, by access key
  std::map<std::string, Value> block_loads_;   // this block's loads, by access key
  std::map<std::string, Value> prefetched_[kMaxSets];  // each set's loads ahead of its compute, by access key
  std::string memo_prefix_;                    // the statement's dimensions (memo_ spans a block's statements)
  int64_t acc() const { return accs_[acc_set_]; }
  int64_t part() const { return parts_[set_]; }
  int64_t rowvals() const { return rowvals_of_[set_]; }
};

}  // namespace

std::string why_not_nest(const kernel::Kernel& kernel, const isa::NpuMachine& machine) {
  return Nest(kernel, machine).why_not_message();
}

std::string why_not_nest(const kernel::Kernel& kernel, const isa::NpuMachine& machine, double max_issued) {
  return Nest(kernel, machine, max_issued).why_not_message();
}

int row_pipeline_cores(const kernel::Kernel& kernel, const isa::NpuMachine& machine) {
  return Nest(kernel, machine).row_pipeline_cores();
}

NpuKernel emit_nest(const kernel::Kernel& kernel, const isa::Hierarchy& target) {
  return Nest(kernel, isa::npu_machine(target)).emit();
}

}  // namespace tessel::emit_npu
