#include "compiler/emit_cuda/tile_scheduler.h"

#include <algorithm>

#include "compiler/emit_cuda/tc_kernel.h"
#include "compiler/emit_cuda/tile_policy.h"

namespace tessel::emit_cuda {

PersistentSplit persistent_split(const Contraction& c, const TcConfig& g, const isa::GpuMachine& m) {
  PersistentSplit p;
  const int64_t tiles = output_tiles(c, g);
  p.k_tiles = k_tiles(c, g);
  if (g.schedule == WsSchedule::multicast) {  // units are pairs of M-adjacent tiles, one per 2-block cluster
    const int64_t pairs = c.size_batch() * ((c.size_m() + 2 * g.bm - 1) / (2 * g.bm)) * ((c.size_n() + g.bn - 1) / g.bn);
    p.blocks = 2 * std::min<int64_t>(pairs, m.sm_count / 2);
    p.dp_tiles = pairs;
    return p;
  }
  p.blocks = std::min<int64_t>(tiles, m.sm_count);
  p.dp_tiles = tiles;
  const int64_t sms = m.sm_count;
  if (g.schedule == WsSchedule::stream_k && tiles % sms) {  // the last wave is partial: it and the full wave before it go stream-K over every SM
    p.dp_tiles = std::max<int64_t>(tiles / sms - 1, 0) * sms;
    p.sk_tiles = tiles - p.dp_tiles;
    p.blocks = std::min<int64_t>(sms, p.sk_iterations());
  }
  return p;
}

std::array<unsigned, 3> TileSchedule::grid() const {
  if (persistent) return {unsigned(split.blocks), 1u, 1u};
  return {unsigned(tiles_m * tiles_n), unsigned(k_blocks), unsigned(batch)};
}

TileSchedule tile_schedule(const Contraction& c, const TcConfig& g, const isa::GpuMachine& m) {
  TileSchedule s;
  s.persistent = g.tma_ws();
  s.pairs = g.schedule == WsSchedule::multicast;
  s.batch = c.size_batch();
  s.tiles_m = m_tiles(c, g);
  s.tiles_n = (c.size_n() + g.bn - 1) / g.bn;
  s.k_tiles = k_tiles(c, g);
  s.k_blocks = std::max(1, g.k_blocks);
  s.k_per_block = (s.k_tiles + s.k_blocks - 1) / s.k_blocks;
  if (s.persistent) s.split = persistent_split(c, g, m);
  return s;
}

TileSchedule tile_schedule(const TcKernel& t) { return tile_schedule(t.c, t.cfg, t.m); }

// ---- reference evaluations --------------------------------------------------------------------

TileCoord grouped_tile(int64_t pid, int64_t rows, int64_t cols, int64_t group_rows) {
  const int64_t group = group_rows * cols, first = pid / group * group_rows;
  const int64_t size = std::min(rows - first, group_rows), q = pid % group;
  return {first + q % size, q / size};
}

KRange split_k_range(const TileSchedule& s, int64_t k_block) {
  if (s.k_blocks <= 1) return {0, s.k_tiles};
  const int64_t begin = k_block * s.k_per_block;
  return {begin, std::min(s.k_per_block, s.k_tiles - begin)};
}

int64_t split_k_tile(const TileSchedule& s, int64_t block_x, int64_t block_z) { return block_z * s.tiles_m * s.tiles_n + block_x; }
int64_t split_k_tiles(const TileSchedule& s) { return s.batch * s.tiles_m * s.tiles_n; }
int64_t split_counter_bytes(int64_t tiles) { return (tiles * int64_t(sizeof(unsigned)) + kCounterBytes - 1) / kCounterBytes * kCounterBytes; }

std::vector<WorkPiece> persistent_work(const PersistentSplit& p, int64_t block, bool pairs) {
  std::vector<WorkPiece> out;
  const int64_t first = pairs ? block / 2 : block, step = pairs ? p.blocks / 2 : p.blocks;
  for (int64_t tile = first; tile < p.dp_tiles; tile += step) out.push_back({tile, 0, p.k_tiles, false, false});
  if (p.sk_tiles > 0) {
    const int64_t W = p.sk_iterations(), beg = block * W / p.blocks, end = (block + 1) * W / p.blocks;
    for (int64_t i = beg; i < end;) {
      const int64_t kt0 = i % p.k_tiles, ktn = std::min(p.k_tiles - kt0, end - i);
      out.push_back({p.dp_tiles + i / p.k_tiles, kt0, ktn, ktn != p.k_tiles, i == beg});
      i += ktn;
    }
  }
  return out;
}

int64_t stream_k_block(const PersistentSplit& p, int64_t iteration) {
  const int64_t W = p.sk_iterations();
  return ((iteration + 1) * p.blocks + W - 1) / W - 1;
}

// ---- device text ------------------------------------------------------------------------------

namespace {

// the grouped rasterisation of pid_ over rows x cols: group_ / first_m_ (declared by the caller's
// statement), then gsize_; the tile's row and column as expressions
std::string group_declarators(int64_t cols) {
  return "group_ = " + S(kRasterGroupRows) + " * " + S(cols) + ", first_m_ = (pid_ / group_) * " + S(kRasterGroupRows);
}
std::string group_size_line(int64_t rows) { return "const int gsize_ = min(" + S(rows) + " - first_m_, " + S(kRasterGroupRows) + ");\n"; }
const char* const kGroupRow = "first_m_ + (pid_ % group_) % gsize_";
const char* const kGroupColumn = "(pid_ % group_) / gsize_";

}  // namespace

void emit_grid_tile(const TcKernel& t) {
  auto& os = t.os;
  const TileSchedule s = tile_schedule(t);
  os << "  const int pid_ = blockIdx.x, " << group_declarators(s.tiles_n) << ";\n";
  os << "  " << group_size_line(s.tiles_m);
  os << "  const int tile_m_ = " << kGroupRow << ", tile_n_ = " << kGroupColumn << ";\n";
  os << "  const int m0_ = tile_m_ * " << t.cfg.bm << ", n0_ = tile_n_ * " << t.cfg.bn << ";\n";
  for (const auto& d : t.c.batch) os << "  int bv_" << d.var << ";\n";
  t.decompose("  ", "blockIdx.z", t.c.batch, "bv_");
}

void emit_split_k_range(const TcKernel& t) {
  auto& os = t.os;
  const TileSchedule s = tile_schedule(t);
  if (s.k_blocks > 1) {
    os << "  const int kt0_ = blockIdx.y * " << s.k_per_block << ";  /* split-K: this block's first K tile */\n";
    os << "  const int kt_total_ = min(" << s.k_per_block << ", " << s.k_tiles << " - kt0_);\n";
  } else {
    os << "  const int kt0_ = 0, kt_total_ = " << s.k_tiles << ";\n";
  }
}

void emit_split_k_tile(const TcKernel& t) { t.os << "  const int tile_ = blockIdx.z * gridDim.x + blockIdx.x;\n"; }

void emit_persistent_tile(const TcKernel& t, const std::string& pad) {
  auto& os = t.os;
  const auto& cfg = t.cfg;
  const TileSchedule s = tile_schedule(t);
  // multicast: tile_ numbers pairs of M-adjacent tiles (rows of 2 * bm); cluster rank crank_ takes one
  const int64_t rows = s.rows();
  os << pad << "const int bz_ = tile_ / " << rows * s.tiles_n << ", pid_ = tile_ % " << rows * s.tiles_n << ";\n";
  os << pad << "const int " << group_declarators(s.tiles_n) << ";\n";
  os << pad << group_size_line(rows);
  if (s.pairs)
    os << pad << "const int m0_ = ((" << kGroupRow << ") * 2 + (int)crank_) * " << cfg.bm << ", n0_ = (" << kGroupColumn << ") * " << cfg.bn << ";\n";
  else if (const int64_t seg = m_segment(t.c, cfg); seg > 0) {  // tiles cut per segment of seg rows; rows past it are not stored
    const int64_t per = (seg + cfg.bm - 1) / cfg.bm;
    os << pad << "const int mt_ = " << kGroupRow << ", n0_ = (" << kGroupColumn << ") * " << cfg.bn << ";\n";
    os << pad << "const int m0_ = (mt_ / " << per << ") * " << seg << " + (mt_ % " << per << ") * " << cfg.bm << ", mend_ = (mt_ / " << per << ") * " << seg
       << " + " << seg << ";\n";
  } else
    os << pad << "const int m0_ = (" << kGroupRow << ") * " << cfg.bm << ", n0_ = (" << kGroupColumn << ") * " << cfg.bn << ";\n";
  if (m_segment(t.c, cfg) == 0) os << pad << "const int mend_ = " << t.M << ";  /* rows from mend_ on are not stored */\n";
  for (const auto& d : t.c.batch) os << pad << "int bv_" << d.var << ";\n";
  t.decompose(pad, "bz_", t.c.batch, "bv_");
  os << pad << "(void)m0_; (void)n0_; (void)bz_; (void)mend_;\n";
}

void emit_persistent_work(const TcKernel& t, const PersistentSplit& ps, const std::string& pad,
                          const std::function<void(const std::string&, bool)>& body) {
  auto& os = t.os;
  if (ps.dp_tiles > 0) {
    if (t.cfg.schedule == WsSchedule::multicast)  // a pair of tiles per cluster
      os << pad << "for (int tile_ = blockIdx.x / 2; tile_ < " << ps.dp_tiles << "; tile_ += " << ps.blocks / 2 << ") {\n";
    else
      os << pad << "for (int tile_ = blockIdx.x; tile_ < " << ps.dp_tiles << "; tile_ += " << ps.blocks << ") {\n";
    os << pad << "  const int kt0_ = 0, ktn_ = " << ps.k_tiles << ";\n";
    os << pad << "  const bool sk_ = false, head_ = false;\n";
    emit_persistent_tile(t, pad + "  ");
    body(pad + "  ", false);
    os << pad << "}\n";
  }
  if (ps.sk_tiles > 0) {
    os << pad << "{  /* stream-K: this block's range of the last " << ps.sk_tiles << " tiles' " << ps.sk_iterations() << " K iterations */\n";
    os << pad << "  const long long beg_ = (long long)blockIdx.x * " << ps.sk_iterations() << "LL / " << ps.blocks << ", end_ = (long long)(blockIdx.x + 1) * "
       << ps.sk_iterations() << "LL / " << ps.blocks << ";\n";
    os << pad << "  for (long long i_ = beg_; i_ < end_;) {\n";
    os << pad << "    const int sk_tile_ = (int)(i_ / " << ps.k_tiles << "), kt0_ = (int)(i_ % " << ps.k_tiles << ");\n";
    os << pad << "    const int ktn_ = (int)min((long long)(" << ps.k_tiles << " - kt0_), end_ - i_);\n";
    os << pad << "    const int tile_ = " << ps.dp_tiles << " + sk_tile_;\n";
    os << pad << "    const bool sk_ = ktn_ != " << ps.k_tiles << ", head_ = i_ == beg_;\n";
    emit_persistent_tile(t, pad + "    ");
    body(pad + "    ", true);
    os << pad << "    i_ += ktn_;\n";
    os << pad << "  }\n" << pad << "}\n";
  }
}

void emit_pingpong_tiles(const TcKernel& t, const PersistentSplit& ps, const std::string& pad, const std::function<void(const std::string&)>& body) {
  auto& os = t.os;
  // the block's j-th tile is j * grid + blockIdx.x and fills slots from j * K tiles on
  os << pad << "for (int lt_ = cw_;; lt_ += 2) {\n";
  os << pad << "  const int tile_ = blockIdx.x + lt_ * " << ps.blocks << ";\n";
  os << pad << "  if (tile_ >= " << ps.dp_tiles << ") break;\n";
  os << pad << "  const int kt0_ = 0, ktn_ = " << ps.k_tiles << ";\n";
  os << pad << "  const bool sk_ = false, head_ = false;\n";
  os << pad << "  int it_ = lt_ * " << ps.k_tiles << ";\n";
  emit_persistent_tile(t, pad + "  ");
  body(pad + "  ");
  os << pad << "}\n";
}

std::string stream_k_block_of(const PersistentSplit& ps, const std::string& iteration) {
  const int64_t W = ps.sk_iterations();
  return "(int)(((" + iteration + " + 1) * " + S(ps.blocks) + "LL + " + S(W - 1) + "LL) / " + S(W) + "LL - 1)";
}

std::string stream_k_starts_in(const PersistentSplit& ps, const std::string& block, const std::string& tile) {
  return "(long long)" + block + " * " + S(ps.sk_iterations()) + "LL / " + S(ps.blocks) + " / " + S(ps.k_tiles) + " == " + tile;
}

}  // namespace tessel::emit_cuda
