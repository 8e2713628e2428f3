// The tile scheduler (compiler/emit_cuda/tile_scheduler.h): grouped rasterisation covers every
// tile exactly once for ragged tile counts, split-K and stream-K ranges partition K, the persistent
// work of all blocks covers every (tile, K tile) once, and the launch grid and the generated loop
// bounds come from the same schedule.
#include <doctest/doctest.h>

#include <map>
#include <set>
#include <utility>

#include "compiler/emit_cuda/tile_policy.h"
#include "compiler/emit_cuda/tile_scheduler.h"
#include "compiler/frontend/frontend.h"
#include "compiler/pipeline.h"

using namespace tessel;
using emit_cuda::PersistentSplit;

namespace {

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

// the split persistent_split makes of `tiles` output tiles of `k_tiles` K tiles on `sms` SMs
PersistentSplit split_of(int64_t tiles, int64_t k_tiles, int64_t sms, bool stream_k) {
  PersistentSplit p;
  p.k_tiles = k_tiles;
  p.blocks = std::min(tiles, sms);
  p.dp_tiles = tiles;
  if (stream_k && tiles % sms) {
    p.dp_tiles = std::max<int64_t>(tiles / sms - 1, 0) * sms;
    p.sk_tiles = tiles - p.dp_tiles;
    p.blocks = std::min(sms, p.sk_iterations());
  }
  return p;
}

}  // namespace

TEST_CASE("grouped rasterisation: every tile exactly once, ragged rows and columns included") {
  for (int64_t rows = 1; rows <= 21; ++rows)
    for (int64_t cols = 1; cols <= 11; ++cols) {
      std::set<std::pair<int64_t, int64_t>> seen;
      for (int64_t pid = 0; pid < rows * cols; ++pid) {
        const auto t = emit_cuda::grouped_tile(pid, rows, cols);
        REQUIRE(t.m >= 0);
        REQUIRE(t.m < rows);
        REQUIRE(t.n >= 0);
        REQUIRE(t.n < cols);
        seen.insert({t.m, t.n});
      }
      CHECK(int64_t(seen.size()) == rows * cols);
    }
  // 20 x 5 tiles: a group's tiles walk down its 8 rows first; the last group has 4 rows
  CHECK(emit_cuda::grouped_tile(7, 20, 5).m == 7);
  CHECK(emit_cuda::grouped_tile(8, 20, 5).m == 0);
  CHECK(emit_cuda::grouped_tile(8, 20, 5).n == 1);
  CHECK(emit_cuda::grouped_tile(80, 20, 5).m == 16);
  CHECK(emit_cuda::grouped_tile(84, 20, 5).m == 16);
  CHECK(emit_cuda::grouped_tile(84, 20, 5).n == 1);
  CHECK(emit_cuda::grouped_tile(99, 20, 5).m == 19);
  CHECK(emit_cuda::grouped_tile(99, 20, 5).n == 4);
}

TEST_CASE("split-K ranges partition the K tiles, none empty") {
  for (int64_t kt = 1; kt <= 80; ++kt)
    for (int64_t kb = 1; kb <= 8; ++kb) {
      emit_cuda::TileSchedule s;
      s.k_tiles = kt;
      s.k_blocks = kb;
      s.k_per_block = (kt + kb - 1) / kb;
      if (kb > 1 && (kb - 1) * s.k_per_block >= kt) continue;  // config_obstacle refuses it
      int64_t next = 0;
      for (int64_t y = 0; y < kb; ++y) {
        const auto r = emit_cuda::split_k_range(s, y);
        CHECK(r.begin == next);
        CHECK(r.count > 0);
        next = r.begin + r.count;
      }
      CHECK(next == kt);
    }
}

TEST_CASE("split-K counters: every block of the plain grid counts on its own output tile, the partials after the counters") {
  emit_cuda::TileSchedule s;
  s.batch = 3, s.tiles_m = 5, s.tiles_n = 7, s.k_tiles = 12, s.k_blocks = 4, s.k_per_block = 3;
  const auto grid = s.grid();
  CHECK(emit_cuda::split_k_tiles(s) == 105);
  std::set<int64_t> seen;
  for (unsigned z = 0; z < grid[2]; ++z)
    for (unsigned x = 0; x < grid[0]; ++x) {
      const int64_t tile = emit_cuda::split_k_tile(s, x, z);
      REQUIRE(tile >= 0);
      REQUIRE(tile < emit_cuda::split_k_tiles(s));
      seen.insert(tile);
    }
  CHECK(int64_t(seen.size()) == emit_cuda::split_k_tiles(s));
  CHECK(emit_cuda::split_counter_bytes(1) == 256);  // 4-byte counters, the partials on a 256-byte boundary
  CHECK(emit_cuda::split_counter_bytes(64) == 256);
  CHECK(emit_cuda::split_counter_bytes(105) == 512);
}

TEST_CASE("persistent work: every (tile, K tile) once over all blocks, stream-K pieces flagged and found by their block") {
  for (int64_t tiles : {1, 7, 131, 132, 133, 264, 300, 517})
    for (int64_t k_tiles : {1, 3, 64})
      for (bool sk : {false, true}) {
        const PersistentSplit p = split_of(tiles, k_tiles, 132, sk);
        std::map<std::pair<int64_t, int64_t>, int> count;
        for (int64_t b = 0; b < p.blocks; ++b) {
          bool first_sk = true;
          for (const auto& w : emit_cuda::persistent_work(p, b)) {
            REQUIRE(w.ktn > 0);
            CHECK(w.kt0 + w.ktn <= k_tiles);
            CHECK(w.sk == (w.ktn != k_tiles));
            if (w.tile >= p.dp_tiles) {  // a stream-K piece: its iterations lie in this block's range
              CHECK(w.head == first_sk);
              first_sk = false;
              const int64_t i0 = (w.tile - p.dp_tiles) * k_tiles + w.kt0;
              CHECK(emit_cuda::stream_k_block(p, i0) == b);
              CHECK(emit_cuda::stream_k_block(p, i0 + w.ktn - 1) == b);
            } else {
              CHECK(w.kt0 == 0);
            }
            for (int64_t k = w.kt0; k < w.kt0 + w.ktn; ++k) ++count[{w.tile, k}];
          }
        }
        CHECK(int64_t(count.size()) == tiles * k_tiles);
        for (const auto& [key, n] : count) CHECK(n == 1);
        if (sk && tiles % 132 && tiles > 132) CHECK(p.sk_tiles > 0);
      }
}

TEST_CASE("persistent multicast: both blocks of a cluster take the same pairs, every pair once") {
  PersistentSplit p;
  p.blocks = 2 * 66;
  p.dp_tiles = 200;  // pairs of M-adjacent tiles
  p.k_tiles = 4;
  std::map<int64_t, int> count;
  for (int64_t b = 0; b < p.blocks; b += 2) {
    const auto even = emit_cuda::persistent_work(p, b, true), odd = emit_cuda::persistent_work(p, b + 1, true);
    REQUIRE(even.size() == odd.size());
    for (size_t i = 0; i < even.size(); ++i) {
      CHECK(even[i].tile == odd[i].tile);
      ++count[even[i].tile];
    }
  }
  CHECK(count.size() == 200);
  for (const auto& [tile, n] : count) CHECK(n == 1);
}

TEST_CASE("the launch grid and the kernel's loop bounds come from one schedule") {
  const isa::GpuMachine m = isa::stock_gpu_machine("sm_90");
  auto module = frontend::load_module("workloads/matmul.tsl");
  // matmul M x N x K under `plan`: its schedule and its CUDA program
  auto emitted = [&](int64_t M, int64_t N, int64_t K, const std::string& plan) {
    CompileOptions o;
    o.target = "isa/targets/sm90.yaml";
    o.sizes = {{"M", M}, {"N", N}, {"K", K}};
    auto r = compile(frontend::select_function(module, "matmul"), o);
    const auto& c = *r->kernel.contraction;
    emit_cuda::CudaOptions co;
    co.config = emit_cuda::TcConfig::parse(plan);
    REQUIRE(emit_cuda::config_obstacle(c, *co.config, m).empty());
    return std::make_pair(emit_cuda::tile_schedule(c, *co.config, m), emit_cuda::emit_cuda(r->kernel, co));
  };
  SUBCASE("persistent stream-K: 1024 tiles on 132 SMs") {
    const auto e = emitted(4096, 4096, 4096, "128x128x64/64x128/ks1/st4/ws/sk");
    const auto& s = e.first;
    const auto& p = e.second;
    CHECK(s.grid() == std::array<unsigned, 3>{132, 1, 1});
    CHECK(s.split.dp_tiles == 792);  // 1024 tiles = 7 waves + 100: six whole waves, then 232 tiles stream-K
    CHECK(s.split.sk_tiles == 232);
    CHECK(p.launches.at(0).grid[0] == 132);
    CHECK(contains(p.source, "for (int tile_ = blockIdx.x; tile_ < 792; tile_ += 132)"));
    CHECK(contains(p.source, "beg_ = (long long)blockIdx.x * 14848LL / 132"));  // 232 tiles x 64 K tiles
    CHECK(contains(p.source, "group_ = 8 * 32, first_m_ = (pid_ / group_) * 8"));
  }
  SUBCASE("plain grid with split-K: grid = (tiles, K blocks, 1), block y's K range") {
    const auto e = emitted(64, 64, 4096, "32x16x64/32x16/ks2/st3/kb4/red");
    const auto& s = e.first;
    const auto& p = e.second;
    CHECK(s.grid() == std::array<unsigned, 3>{8, 4, 1});
    const auto& l = p.launches.back();
    CHECK(l.grid[0] == 8);
    CHECK(l.grid[1] == 4);
    CHECK(contains(p.source, "const int kt0_ = blockIdx.y * 16;"));
    CHECK(contains(p.source, "const int gsize_ = min(2 - first_m_, 8);"));
  }
  SUBCASE("plain grid with split-K reduced by the last block: its counter and partials from the schedule") {
    const auto e = emitted(64, 64, 4096, "32x16x64/32x16/ks2/st3/kb4");
    const auto& s = e.first;
    const auto& p = e.second;
    CHECK(emit_cuda::split_k_tiles(s) == 8);
    CHECK(contains(p.source, "const int tile_ = blockIdx.z * gridDim.x + blockIdx.x;"));
    CHECK(contains(p.source, "(float*)(scratch + 256) + (long long)tile_ * 2048LL;"));  // 4 partial tiles of 32 x 16 per tile
    CHECK(contains(p.source, "last_ = atomicAdd(cnt_ + tile_, 1u) == 3u;"));
  }
}
