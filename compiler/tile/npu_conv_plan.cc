#include "compiler/tile/npu_conv_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace tessel::tile {
namespace {

using npu::Buffer;

// Policy: an output-channel tile spans at most this many cube fractals (its weights stay in L1
// next to two feature maps; larger tiles leave cores idle on the seed problems).
constexpr int64_t kMaxChannelTileFractals = 8;
// Policy: a band spread over cores has at least this many output rows (its halo rows are read by
// two cores).
constexpr int64_t kMinCoreBandRows = 2;
// Policy: kernel positions per L0 step leave room in an L0A half for pixel blocks of at least this
// many fractal rows (a 7 x 7 kernel's 49 positions at once would leave blocks of one fractal).
constexpr int64_t kMinPixelBlockFractals = 4;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
int64_t ceil_div(int64_t x, int64_t m) { return (x + m - 1) / m; }

// The largest multiple of unit that is <= limit and divides n.
int64_t dividing(int64_t n, int64_t limit, int64_t unit) {
  for (int64_t t = std::max(unit, limit / unit * unit); t >= unit; t -= unit)
    if (n % t == 0) return t;
  return unit;
}

// What the user's tile spec asks for (0: the planner chooses).
struct UserSizes {
  int64_t tn = 0, kc = 0, rows = 0;
};

UserSizes user_sizes(const ConvGeometry& g, const isa::CubeShape& cube, const TileSpec* spec) {
  UserSizes u;
  if (!spec) return u;
  auto find = [&](const std::string& a) { return a.empty() ? nullptr : spec->find(a); };
  const AxisTile *t_k = find(g.ak), *t_p = find(g.ap), *t_q = find(g.aq), *t_r = find(g.ar), *t_s = find(g.as);
  const int64_t Pp = round_up(g.pixels(), cube.m0);
  if (t_k) u.tn = dividing(g.K, round_up(std::min(g.K, t_k->outer * g.unit), cube.k0), cube.k0);
  if (t_r || t_s) u.kc = std::min(t_r ? t_r->inner : g.R, g.R) * std::min(t_s ? t_s->inner : g.S, g.S);
  if (t_p || t_q)
    u.rows = std::min(Pp, round_up(std::min(t_p ? t_p->inner : g.OH, g.OH) * std::min(t_q ? t_q->inner : g.OW, g.OW), cube.m0));
  return u;
}

class Planner {
 public:
  Planner(const ConvGeometry& g, const isa::NpuMachine& m, const TileSpec* spec, const std::function<int64_t(int64_t, int64_t)>& epi)
      : g_(g), m_(m), cube_(m.cube_f16), user_(user_sizes(g, m.cube_f16, spec)), epi_(epi) {
    p_.padded_pixels = round_up(g.pixels(), cube_.m0);
    p_.fm_bytes = round_up(g.C * g.H * g.W * in_, m.granularity(Buffer::GM));
    const int64_t l0_align = m.alignment(Buffer::L0A);
    p_.l0a_half = m.capacity(Buffer::L0A) / 2 / l0_align * l0_align;
    p_.l0b_half = m.capacity(Buffer::L0B) / 2 / l0_align * l0_align;
  }

  // One band of `rows` output rows: its feature map in L1 (halo rows included) and its pixels
  // rounded up to the fractal.
  int64_t band_fm_bytes(int64_t rows) const {
    return round_up(g_.C * g_.band_input_rows(rows) * g_.W * in_, m_.granularity(Buffer::GM));
  }
  int64_t band_pixels(int64_t rows) const { return round_up(rows * g_.OW, cube_.m0); }

  // Cycles of a candidate's GM reads: each core's feature maps (its jobs' bands) and its tiles'
  // weights at the core's GM -> L1 bandwidth, and every core's copies within the shared GM, which
  // (as the simulator charges) each copy holds for ceil(its bytes / the shared bandwidth) cycles,
  // at least one (one strided copy per fractal row of channels per band, one per fractal row and
  // kernel position of the weights or the emitter's one copy). 0 unless
  // ConvGeometry::weigh_gm_reads (scratch copies: plan_conv weighs those with copy_cycles).
  double gm_read_cycles(const ConvPlan& c, int64_t bands_per_job) const {
    if (!g_.weigh_gm_reads || g_.copies) return 0;
    const int64_t RS = g_.kernel_positions(), C1 = g_.C / cube_.k0;
    const double tiles = c.k_tiles <= c.cores ? 1.0 : double(ceil_div(c.k_tiles, c.cores));
    const double jobs = double(c.jobs_per_core) * double(bands_per_job);
    const double fm_bytes = double(g_.C * g_.band_input_rows(c.band_rows) * g_.W * in_), w_bytes = double(g_.C * RS * c.tn * in_);
    const double bytes = jobs * fm_bytes + tiles * w_bytes;
    const double w_copies = double(g_.weight_copies ? g_.weight_copies : C1 * RS), map_copies = double(map_copies_per_band());
    const double per_core_bw = std::max(1.0, double(m_.path(Buffer::GM, Buffer::L1).bandwidth_bytes_per_cycle));
    const double shared = m_.gm_shared_bandwidth_bytes_per_cycle > 0 ? m_.gm_shared_bandwidth_bytes_per_cycle : per_core_bw * m_.cores;
    auto held = [&](double copy_bytes) { return std::max(1.0, std::ceil(copy_bytes / shared)); };
    const double shared_cycles = jobs * map_copies * held(fm_bytes / map_copies) + tiles * w_copies * held(w_bytes / w_copies);
    return std::max(bytes / per_core_bw, double(c.cores) * shared_cycles);
  }

  // Copies that bring one band's map into L1: one per fractal row of channels, or the gathered
  // map's (ConvGeometry::map_copies).
  int64_t map_copies_per_band() const { return g_.map_copies ? g_.map_copies : g_.C / cube_.k0; }
  // Bytes of the map that must land before a band's first slice: its first plane, or a gathered
  // map whole.
  double first_map_bytes(int64_t band_rows) const {
    const double plane = double(g_.band_input_rows(band_rows) * g_.W * cube_.k0 * in_);
    return g_.map_copies ? plane * double(g_.C / cube_.k0) : plane;
  }

  // A core's `steps` bands of `compute` cycles each (C1 slices) behind its GM reads of `gm`
  // cycles: the cube starts once the tile's weights and the first plane of the map (a gathered
  // map: all of it) have landed (the weights' one copy whole; the other planes land as the slices
  // before them run), and ends a slice after the last read. Without weighed reads (gm 0), the
  // compute alone.
  double pipelined(const ConvPlan& c, double steps, double compute, double gm) const {
    if (gm <= 0) return steps * compute;
    const int64_t RS = g_.kernel_positions(), C1 = g_.C / cube_.k0;
    const double per_core_bw = std::max(1.0, double(m_.path(Buffer::GM, Buffer::L1).bandwidth_bytes_per_cycle));
    const double w_bytes = double(g_.C * RS * c.tn * in_) / double(g_.weight_copies ? 1 : C1 * RS);
    return std::max((w_bytes + first_map_bytes(c.band_rows)) / per_core_bw + steps * compute, gm + compute / double(C1));
  }

  // Output rows per band next to weights of w_bytes: the whole image when its feature map and
  // accumulator fit (twice: ping-pong, else once), else the most rows whose input window and
  // accumulator fit twice (then once), balanced over the bands; 0 when not even one row fits.
  int64_t band_rows(int64_t w_bytes, int64_t t, int64_t copies) const {
    const int64_t cap_l1 = m_.capacity(Buffer::L1), cap_l0c = m_.capacity(Buffer::L0C);
    auto fits = [&](int64_t rows) {
      return w_bytes + copies * band_fm_bytes(rows) <= cap_l1 && copies * acc_bytes(band_pixels(rows), t) <= cap_l0c;
    };
    int64_t rows = g_.OH;
    while (rows > 0 && !fits(rows)) --rows;
    if (rows <= 0) return 0;
    return ceil_div(g_.OH, ceil_div(g_.OH, rows));
  }

  ConvPlanResult run() {
    ConvPlanResult r;
    if (!choose_channel_tile(r)) return r;
    if (!choose_kernel_groups(r) || !choose_pixel_blocks(r)) return r;
    choose_weight_chunks();
    r.plan = p_;
    return r;
  }

 private:
  int64_t acc_bytes(int64_t rows, int64_t channels) const { return rows * channels * acc_; }

  FitFailure no_fit(Buffer b, int64_t need, std::string parts, bool double_buffered) const {
    const isa::NpuBufferSpec& s = m_.buffer(b);
    return {npu::buffer_role(b), s.level_name, m_.target_name, need, int64_t(s.capacity_bytes), std::move(parts), double_buffered};
  }

  // Output-channel tile tn: the weights of one tile stay in L1 (loaded once per tile and core) next
  // to two feature maps; the estimate (per core: cube cycles vs MTE1's img2col + weight loads)
  // picks among the tiles that fit, preferring more cores, then larger tiles.
  bool choose_channel_tile(ConvPlanResult& r) {
    const int64_t RS = g_.kernel_positions(), C1 = g_.C / cube_.k0;
    const int64_t cores_avail = g_.one_core ? 1 : m_.cores, k0 = cube_.k0;
    auto bw = [&](Buffer to) { return std::max<int64_t>(1, m_.path(Buffer::L1, to).bandwidth_bytes_per_cycle); };
    const int64_t bw_a = bw(Buffer::L0A), bw_b = bw(Buffer::L0B);
    const int64_t cap_l1 = m_.capacity(Buffer::L1), cap_l0c = m_.capacity(Buffer::L0C), cap_l0b = m_.capacity(Buffer::L0B);
    std::optional<ConvPlan> best;
    const int64_t first = user_.tn ? user_.tn : g_.whole_k ? g_.K : std::min<int64_t>(g_.K, kMaxChannelTileFractals * cube_.n0);
    for (int64_t t = first; t >= cube_.n0; t -= cube_.n0) {
      if (g_.K % t) continue;
      ConvPlan c = p_;
      c.tn = t, c.k_tiles = g_.groups * g_.K / t;
      const int64_t w_bytes = g_.C * RS * t * in_;
      // Bands: ping-pong when the whole image fits twice or when bands of two copies are no more
      // than twice as many as of one.
      const int64_t one = band_rows(w_bytes, t, 1), two = band_rows(w_bytes, t, 2);
      const int64_t th = two > 0 && (two == g_.OH || ceil_div(g_.OH, two) <= 2 * ceil_div(g_.OH, std::max<int64_t>(one, 1))) ? two : one;
      if (user_.tn && th == 0 && w_bytes + band_fm_bytes(1) > cap_l1) {  // not even a band of one row fits next to them
        r.no_fit = no_fit(Buffer::L1, w_bytes + p_.fm_bytes,
                          fmt::format("weights of {} output channels {} + one image's feature map {}", t, w_bytes, p_.fm_bytes), false);
        return false;
      }
      if (user_.tn && th == 0) {
        r.no_fit = no_fit(Buffer::L0C, acc_bytes(band_pixels(1), t),
                          fmt::format("the accumulator of one output row: {} pixel rows x {} channels x {}", band_pixels(1), t, acc_), false);
        return false;
      }
      if (user_.tn && !user_.kc && k0 * t * in_ > p_.l0b_half) {
        r.no_fit = no_fit(Buffer::L0B, 2 * k0 * t * in_,
                          fmt::format("2 x 1 kernel position x {} input channels x {} output channels x {}", k0, t, in_), true);
        return false;
      }
      if (!user_.tn && (th == 0 || 2 * k0 * t * in_ > cap_l0b)) continue;
      c.band_rows = th, c.bands = ceil_div(g_.OH, th);
      c.padded_pixels = band_pixels(th), c.fm_bytes = band_fm_bytes(th);
      if (c.k_tiles <= cores_avail) {
        const int64_t per = cores_avail / c.k_tiles;
        for (int64_t grp = std::min(per, g_.N); grp >= 1; --grp)
          if (g_.N % grp == 0) {
            c.group = grp;
            break;
          }
        c.cores = c.k_tiles * c.group;
      } else {
        c.cores = cores_avail;
      }
      c.jobs_per_core = c.k_tiles <= cores_avail ? g_.N / c.group : ceil_div(c.k_tiles, c.cores) * g_.N;
      // a gathered map pays where a core reads it once, its weights streaming in behind it (one job
      // of one band: the copy model of choose_weight_chunks prices that); re-read per job, nothing
      // of it overlaps the cube
      if (g_.map_copies && (c.jobs_per_core != 1 || c.bands != 1)) continue;
      const int64_t Pb = c.padded_pixels;
      const double cube = double(Pb / cube_.m0) * (t / cube_.n0) * C1 * RS;
      const double mte1 = double(Pb) * g_.C * RS * in_ / bw_a + double(g_.C) * RS * t * in_ / bw_b;
      c.cost = pipelined(c, double(c.jobs_per_core) * c.bands, std::max(cube, mte1), gm_read_cycles(c, c.bands));
      c.fm_halves = w_bytes + 2 * c.fm_bytes <= cap_l1 ? 2 : 1;
      c.c_halves = 2 * acc_bytes(Pb, t) <= cap_l0c ? 2 : 1;
      c.one_core = g_.one_core;
      if (!best || c.cost < best->cost * 0.999) best = c;
      if (std::optional<ConvPlan> spread = spread_over_cores(c, cores_avail); spread && spread->cost < best->cost * 0.999) best = spread;
      if (user_.tn || g_.whole_k) break;
    }
    if (!best) {
      r.unsupported = fmt::format("the weights of {} output channels and the input window of one output row exceed L1, or "
                                  "its accumulator L0C", cube_.n0);
      return false;
    }
    p_ = *best;
    return true;
  }

  // The candidate with its bands spread over the cores channel tiles x images leave idle: each
  // core one band (at least kMinCoreBandRows output rows, all bands alike) of every image; nullopt
  // when none are idle.
  std::optional<ConvPlan> spread_over_cores(const ConvPlan& c, int64_t cores_avail) const {
    if (!g_.spread_bands || user_.tn || user_.rows || c.k_tiles * g_.N >= cores_avail) return std::nullopt;
    const int64_t most = std::min(cores_avail / (c.k_tiles * g_.N), g_.OH / kMinCoreBandRows);
    if (most < 2 || most < c.bands) return std::nullopt;
    // equal bands (every core runs the same code at its own offsets): rows dividing OH
    int64_t rows = ceil_div(g_.OH, most);
    while (g_.OH % rows) ++rows;
    const int64_t bands = g_.OH / rows;
    if (bands < 2) return std::nullopt;
    ConvPlan s = c;
    s.band_rows = rows, s.bands = bands, s.core_bands = bands;
    s.padded_pixels = band_pixels(rows), s.fm_bytes = band_fm_bytes(rows);
    s.group = g_.N, s.cores = c.k_tiles * g_.N * bands, s.jobs_per_core = 1;
    const int64_t RS = g_.kernel_positions(), C1 = g_.C / cube_.k0;
    auto bw = [&](Buffer to) { return std::max<int64_t>(1, m_.path(Buffer::L1, to).bandwidth_bytes_per_cycle); };
    const double cube = double(s.padded_pixels / cube_.m0) * (s.tn / cube_.n0) * C1 * RS;
    const double mte1 = double(s.padded_pixels) * g_.C * RS * in_ / bw(Buffer::L0A) + double(g_.C) * RS * s.tn * in_ / bw(Buffer::L0B);
    s.cost = pipelined(s, 1, std::max(cube, mte1), gm_read_cycles(s, 1));
    s.fm_halves = 1, s.c_halves = 1;
    return s;
  }

  // Kernel positions per step: as many as two L0B halves hold, in balanced groups (a user's count:
  // groups of that many, the last one smaller).
  bool choose_kernel_groups(ConvPlanResult& r) {
    const int64_t RS = g_.kernel_positions(), k0 = cube_.k0, tn = p_.tn;
    int64_t kc = user_.kc;
    if (user_.kc && kc * k0 * tn * in_ > p_.l0b_half) {
      r.no_fit = no_fit(Buffer::L0B, 2 * kc * k0 * tn * in_,
                        fmt::format("2 x {} kernel positions x {} input channels x {} output channels x {}", kc, k0, tn, in_), true);
      return false;
    }
    if (!user_.kc) {
      const int64_t min_rows = std::min(p_.padded_pixels, kMinPixelBlockFractals * cube_.m0);
      kc = std::min<int64_t>({RS, (m_.capacity(Buffer::L0B) / 2) / (k0 * tn * in_), std::max<int64_t>(1, p_.l0a_half / (min_rows * k0 * in_))});
      kc = ceil_div(RS, ceil_div(RS, kc));
    }
    p_.kc = kc;
    for (int64_t q0 = 0; q0 < RS; q0 += kc) p_.kgroups.push_back({q0, std::min(kc, RS - q0)});
    return true;
  }

  // Pixel blocks (first row, rows), balanced in fractals; smaller where two accumulator blocks and
  // the epilogue's regions would not fit UB. A user's size: blocks of that many rows, the last smaller.
  bool choose_pixel_blocks(ConvPlanResult& r) {
    const int64_t Pp = p_.padded_pixels, m0 = cube_.m0, k0 = cube_.k0, tn = p_.tn, kc = p_.kc;
    const int64_t cap_ub = m_.capacity(Buffer::UB);
    auto epi = [&](int64_t rows) { return epi_ ? epi_(rows, tn) : 0; };
    int64_t tm0 = user_.rows ? std::min(user_.rows, Pp) : std::min<int64_t>(Pp, p_.l0a_half / (kc * k0 * in_) / m0 * m0);
    if (user_.rows && tm0 * kc * k0 * in_ > p_.l0a_half) {
      r.no_fit = no_fit(Buffer::L0A, 2 * tm0 * kc * k0 * in_,
                        fmt::format("2 x {} pixel rows x {} kernel positions x {} input channels x {}", tm0, kc, k0, in_), true);
      return false;
    }
    if (tm0 < m0) {
      r.unsupported = "one pixel block of one kernel-position group does not fit L0A twice";
      return false;
    }
    std::vector<std::pair<int64_t, int64_t>>& blocks = p_.blocks;
    if (user_.rows) {
      for (int64_t b0 = 0; b0 < Pp; b0 += tm0) blocks.push_back({b0, std::min(tm0, Pp - b0)});
      const int64_t need = 2 * acc_bytes(tm0, tn) + epi(tm0);
      if (need > cap_ub) {
        r.no_fit = no_fit(Buffer::UB, need,
                          fmt::format("2 x {} pixel rows x {} channels x {}{}", tm0, tn, acc_,
                                      epi_ ? fmt::format(" + the epilogue's regions {}", epi(tm0)) : std::string()),
                          false);
        return false;
      }
    }
    for (int64_t limit = tm0; !user_.rows; limit -= m0) {
      const int64_t fr = Pp / m0, nblk = ceil_div(Pp, limit);
      blocks.clear();
      int64_t b0 = 0;
      for (int64_t i = 0; i < nblk; ++i) {
        const int64_t n = fr / nblk + (i < fr % nblk ? 1 : 0);
        blocks.push_back({b0 * m0, n * m0});
        b0 += n;
      }
      tm0 = 0;
      for (const auto& b : blocks) tm0 = std::max(tm0, b.second);
      if (2 * acc_bytes(tm0, tn) + epi(tm0) <= cap_ub || limit <= m0) break;
    }
    if (2 * acc_bytes(tm0, tn) > cap_ub) {
      r.unsupported = "two accumulator blocks exceed UB";
      return false;
    }
    p_.tm0 = tm0;
    return true;
  }

  // Weight chunks (ConvPlan::weight_chunks) where a core copies its tile's weights once by one copy
  // ahead of one band (one job): chunks of whole slice pairs that double (s, s, 2s, 4s, ...; s = 2,
  // 4, ...) or are equal (s, s, ..., s: where the map lands whole first, the weights then stream
  // ahead of slices that take about as long as their copies), where a model of one core's copies
  // ends the cube sooner than the one copy by 5 % (the shared GM serves every core's copies in
  // issue order, which a model of one core does not see). The plan's cost becomes the model's end.
  void choose_weight_chunks() {
    const int64_t C1 = g_.C / cube_.k0;
    if (!g_.chunk_weights || g_.one_core || p_.jobs_per_core != 1 || p_.bands != p_.core_bands || C1 < 4 || C1 / 2 > kConvStraightPairs)
      return;
    double best = chunked_end({});
    for (const bool doubling : {true, false}) {
      if (!doubling && !g_.map_copies) break;  // planes ahead of their slices: the doubling chunks (a9735b0) alone
      for (int64_t s = 2; s < C1; s *= 2) {
        std::vector<int64_t> sizes;
        for (int64_t first = 0, size = s; first < C1; first += sizes.back()) {
          const int64_t n = C1 - first - size <= 1 ? C1 - first : size;  // an odd last slice joins the last chunk
          sizes.push_back(n);
          if (doubling && sizes.size() > 1) size *= 2;
        }
        if (sizes.size() < 2) break;
        if (const double e = chunked_end(sizes); e < best * 0.95) best = e, p_.weight_chunks = sizes;
      }
    }
    p_.cost = best;
  }

  // When one core's last slice ends (cycles), its weights copied in chunks of `sizes` slices (empty:
  // one copy): MTE2 runs the copies in program order (a chunk's, one per kernel position, then its
  // slices' planes; a gathered map's copies all first), each for the longer of its bytes at the
  // core's bandwidth and every core's turn at the shared GM (the simulator holds it ceil(bytes /
  // shared) cycles per copy, at least one); a slice starts once its chunk and plane (a gathered
  // map: the whole map) have landed (the GM latency after) and the slice before it is done, and
  // takes the cube's or MTE1's cycles, the larger.
  double chunked_end(const std::vector<int64_t>& sizes) const {
    const int64_t C1 = g_.C / cube_.k0, RS = g_.kernel_positions();
    const isa::NpuPathSpec& path = m_.path(Buffer::GM, Buffer::L1);
    const double bw = std::max(1.0, double(path.bandwidth_bytes_per_cycle)), lat = double(path.latency_cycles);
    const double shared = m_.gm_shared_bandwidth_bytes_per_cycle > 0 ? m_.gm_shared_bandwidth_bytes_per_cycle : bw * m_.cores;
    auto copy = [&](double bytes) { return std::max(std::ceil(bytes / bw), double(p_.cores) * std::max(1.0, std::ceil(bytes / shared))); };
    auto bwl = [&](Buffer to) { return double(std::max<int64_t>(1, m_.path(Buffer::L1, to).bandwidth_bytes_per_cycle)); };
    const double slice_w = double(cube_.k0 * RS * p_.tn * in_), plane = double(g_.band_input_rows(p_.band_rows) * g_.W * cube_.k0 * in_);
    const double cube = double(p_.padded_pixels / cube_.m0) * double(p_.tn / cube_.n0) * RS;
    const double step = std::max(cube, double(p_.padded_pixels * cube_.k0 * RS * in_) / bwl(Buffer::L0A) + slice_w / bwl(Buffer::L0B));
    double mte2 = 0, end = 0, chunk_landed = 0, map_landed = 0;
    if (g_.map_copies) {  // the gathered map first, whole
      for (int64_t i = 0; i < g_.map_copies; ++i) mte2 += copy(plane * double(C1) / double(g_.map_copies));
      map_landed = mte2 + lat;
    }
    size_t chunk = 0;
    int64_t next_chunk = 0;  // the first slice of chunk `chunk`
    for (int64_t c1 = 0; c1 < C1; ++c1) {
      if (sizes.empty() && c1 == 0) mte2 += copy(slice_w * C1), chunk_landed = mte2 + lat;
      if (!sizes.empty() && c1 == next_chunk) {
        for (int64_t q = 0; q < RS; ++q) mte2 += copy(slice_w * double(sizes[chunk]) / double(RS));
        chunk_landed = mte2 + lat, next_chunk += sizes[chunk++];
      }
      if (!g_.map_copies) mte2 += copy(plane), map_landed = mte2 + lat;
      end = std::max({end, chunk_landed, map_landed}) + step;
    }
    return end;
  }

  const ConvGeometry& g_;
  const isa::NpuMachine& m_;
  const isa::CubeShape& cube_;
  const UserSizes user_;
  const std::function<int64_t(int64_t, int64_t)>& epi_;
  const int64_t in_ = dtype_bytes(m_.cube_f16.a), acc_ = dtype_bytes(m_.cube_f16.acc);
  ConvPlan p_;
};

// Cycles the layout copies' GM traffic takes (ConvGeometry::copy_bytes and the per-job parts): on
// one core all of it at that core's bandwidth; per core, each core's share, with every core's
// traffic within the shared bandwidth.
double copy_cycles(const ConvGeometry& g, const isa::NpuMachine& m, const ConvPlan& p, bool one_core) {
  const double per_core_bw = std::max(1.0, double(m.path(Buffer::GM, Buffer::UB).bandwidth_bytes_per_cycle));
  const double shared = m.gm_shared_bandwidth_bytes_per_cycle > 0 ? m.gm_shared_bandwidth_bytes_per_cycle : per_core_bw * double(m.cores);
  if (one_core) return g.copy_bytes / std::min(per_core_bw, shared);
  const double tiles = double(ceil_div(p.k_tiles, p.cores));
  const double per_core = double(p.jobs_per_core) * (g.x_job_bytes * (p.bands > 1 ? 3 : 1) + g.y_channel_bytes * double(p.tn)) +
                          3 * tiles * g.w_channel_bytes * double(p.tn);
  return std::max(per_core / per_core_bw, per_core * double(p.cores) / shared);
}

}  // namespace

ConvPlanResult plan_conv(const ConvGeometry& g, const isa::NpuMachine& m, const TileSpec* spec,
                         const std::function<int64_t(int64_t rows, int64_t channels)>& epilogue_ub_bytes) {
  if (!g.copies || g.one_core) return Planner(g, m, spec, epilogue_ub_bytes).run();
  ConvPlanResult r = Planner(g, m, spec, epilogue_ub_bytes).run();
  if (r.no_fit) return r;
  ConvGeometry one = g;  // the copies on one core, any channel tile
  one.whole_k = false, one.one_core = true;
  ConvPlanResult single = Planner(one, m, spec, epilogue_ub_bytes).run();
  const bool multi = r.plan && (!g.whole_k || r.plan->tn == g.K);
  // Per-core copies cost each core a chain of GM round trips (its images, weights and results out
  // and back); worth it once one core's work is larger than that.
  const double round_trips = g.copy_round_trips * double(m.path(npu::Buffer::GM, npu::Buffer::UB).latency_cycles +
                                                      m.path(npu::Buffer::UB, npu::Buffer::GM).latency_cycles);
  const double single_cost = single.plan ? single.plan->cost + copy_cycles(g, m, *single.plan, true) : 0;
  const double multi_cost = r.plan ? r.plan->cost + round_trips + copy_cycles(g, m, *r.plan, false) : 0;
  if (multi && (!single.plan || !g.copies_fit_one_core || single_cost > multi_cost)) return r;
  return single.plan || !multi ? single : r;
}

}  // namespace tessel::tile
