#include "compiler/interp/row_sample.h"

#include <algorithm>
#include <functional>
#include <random>
#include <set>

#include <fmt/format.h>

#include "isa/base/error.h"

namespace tessel::interp {

namespace {

// The name of `e` when it is a plain index (coefficient 1, nothing else), else "".
std::string index_name(const ir::AffineExpr& e) { return ir::plain_index(e).value_or(""); }

int64_t row_bytes(const NpyArray& a) {
  int64_t n = dtype_bytes(a.dtype);
  for (size_t d = 1; d < a.shape.size(); ++d) n *= a.shape[d];
  return n;
}

}  // namespace

RowSeparability row_separability(const ir::Function& f, const Sizes& sizes) {
  RowSeparability r;
  std::set<std::string> written;
  for (const auto& s : f.statements) written.insert(s.output);
  auto fail = [&](const ir::Statement& s, const std::string& why) {
    r.reason = fmt::format("{} (line {}) {}", s.name, s.loc.line, why);
    return r;
  };
  int64_t rows = -1;
  for (const auto& s : f.statements) {
    const ir::Tensor* t = f.find_tensor(s.output);
    if (!t || t->shape.empty() || s.out_indices.empty()) return fail(s, "writes a tensor without dimensions");
    const std::string row = index_name(s.out_indices[0]);
    const ir::IndexVar* iv = row.empty() ? nullptr : s.find_index(row);
    if (!iv || iv->is_reduction) return fail(s, "does not write " + s.output + "'s first dimension through a plain index");
    const int64_t extent = t->shape[0].evaluate({}, sizes);
    if (iv->lo.evaluate({}, sizes) != 0 || iv->hi.evaluate({}, sizes) != extent)
      return fail(s, "writes only part of " + s.output + "'s first dimension");
    if (rows >= 0 && extent != rows)
      return fail(s, fmt::format("writes {} rows where an earlier statement writes {}", extent, rows));
    rows = extent;
    std::string bad;
    if (s.rhs) ir::for_each_access(*s.rhs, [&](const ir::Expr& a) {
      if (!bad.empty() || !written.count(a.name)) return;
      if (a.indices.empty() || index_name(a.indices[0]) != row)
        bad = "reads " + a.name + " (which a statement writes) at a row other than its own";
    });
    if (!bad.empty()) return fail(s, bad);
    for (const auto& idx : s.out_indices)
      if (&idx != &s.out_indices[0] && idx.index_coeffs.count(row))
        return fail(s, "uses its row index " + row + " in another dimension of " + s.output);
  }
  if (rows < 1) {
    r.reason = "no statement writes a row";
    return r;
  }
  r.separable = true;
  r.rows = rows;
  return r;
}

double iteration_points(const ir::Function& f, const Sizes& sizes) {
  double total = 0;
  for (const auto& s : f.statements) {
    double n = 1;
    for (const auto& iv : s.domain) n *= double(std::max<int64_t>(0, iv.hi.evaluate({}, sizes) - iv.lo.evaluate({}, sizes)));
    total += n;
  }
  return total;
}

std::vector<RowBlock> choose_row_blocks(int64_t rows, int blocks, int64_t block_rows, uint64_t seed) {
  TESSEL_CHECK(rows >= 1 && blocks >= 1 && block_rows >= 1, "choose_row_blocks: empty sample");
  if (int64_t(blocks) * block_rows >= rows) return {{0, rows}};
  std::vector<int64_t> starts = {0, rows - block_rows};
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> pick(0, rows - block_rows);
  while (int(starts.size()) < blocks) starts.push_back(pick(rng));
  std::sort(starts.begin(), starts.end());
  std::vector<RowBlock> out;
  for (int64_t s : starts) {
    if (!out.empty() && s <= out.back().end) out.back().end = std::max(out.back().end, s + block_rows);
    else out.push_back({s, s + block_rows});
  }
  return out;
}

namespace {

// Appends the rows of `part` to those of the same tensors in `out`.
void append_rows(Tensors& out, const Tensors& part) {
  for (const auto& [name, a] : part) {
    auto [it, fresh] = out.emplace(name, a);
    if (fresh) continue;
    it->second.shape[0] += a.shape[0];
    it->second.data.insert(it->second.data.end(), a.data.begin(), a.data.end());
  }
}

}  // namespace

Tensors evaluate_rows(const ir::Function& f, const Sizes& sizes, const Tensors& inputs, const std::vector<RowBlock>& blocks,
                      Tensors* term_magnitudes) {
  const RowSeparability sep = row_separability(f, sizes);
  TESSEL_CHECK(sep.separable, "evaluate_rows: " + f.name + " is not row-separable: " + sep.reason);
  Tensors out;
  if (term_magnitudes) term_magnitudes->clear();
  for (const RowBlock& b : blocks) {
    ir::Function g = f;
    for (auto& s : g.statements) {
      const std::string row = index_name(s.out_indices[0]);
      for (auto& iv : s.domain)
        if (iv.name == row) {
          iv.lo = ir::AffineExpr::constant_of(b.begin);
          iv.hi = ir::AffineExpr::constant_of(b.end);
        }
    }
    Tensors mags;
    append_rows(out, take_rows(evaluate(g, sizes, inputs, term_magnitudes ? &mags : nullptr), {b}));
    if (term_magnitudes) append_rows(*term_magnitudes, take_rows(mags, {b}));
  }
  return out;
}

Tensors take_rows(const Tensors& full, const std::vector<RowBlock>& blocks) {
  Tensors out;
  for (const auto& [name, a] : full) {
    TESSEL_CHECK(!a.shape.empty(), "take_rows: " + name + " has no rows");
    NpyArray s;
    s.dtype = a.dtype;
    s.shape = a.shape;
    s.shape[0] = 0;
    const int64_t rb = row_bytes(a);
    for (const RowBlock& b : blocks) {
      TESSEL_CHECK(b.begin >= 0 && b.end <= a.shape[0], "take_rows: rows outside " + name);
      s.shape[0] += b.end - b.begin;
      s.data.insert(s.data.end(), a.data.begin() + b.begin * rb, a.data.begin() + b.end * rb);
    }
    out.emplace(name, std::move(s));
  }
  return out;
}

std::string describe_row_blocks(const std::vector<RowBlock>& blocks, int64_t rows) {
  int64_t n = 0;
  std::string list;
  for (const RowBlock& b : blocks) {
    n += b.end - b.begin;
    if (list.size() < 200) list += fmt::format("{}{}-{}", list.empty() ? "" : ", ", b.begin, b.end - 1);
  }
  if (n == rows) return fmt::format("every row ({})", rows);
  return fmt::format("{} block(s), {} of {} rows ({:.2f} % of every output): rows {}", blocks.size(), n, rows,
                     100.0 * double(n) / double(rows), list);
}

std::string unsample_position(const std::string& first_mismatch, const std::vector<RowBlock>& blocks) {
  const size_t open = first_mismatch.find('[');
  if (open == std::string::npos) return first_mismatch;
  size_t end = open + 1;
  while (end < first_mismatch.size() && std::isdigit(static_cast<unsigned char>(first_mismatch[end]))) ++end;
  if (end == open + 1) return first_mismatch;
  int64_t k = std::stoll(first_mismatch.substr(open + 1, end - open - 1));
  for (const RowBlock& b : blocks) {
    if (k < b.end - b.begin)
      return first_mismatch.substr(0, open + 1) + std::to_string(b.begin + k) + first_mismatch.substr(end);
    k -= b.end - b.begin;
  }
  return first_mismatch;
}

}  // namespace tessel::interp
