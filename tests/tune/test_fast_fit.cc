// The fit check's arithmetic model (compiler/tune/fit_check.h, issue 17 item 9) against the full
// check (tile_program + promote, isl): on samples of the default spaces of a GEMM, a batched GEMM,
// two convolutions and fused epilogues, the same accept / reject, the same reason, the same
// footprints and group tilings; and a 512^3 GEMM's space is built in seconds.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "compiler/frontend/frontend.h"
#include "compiler/tune/fit_check.h"
#include "compiler/tune/space.h"
#include "tune_test_util.h"

using namespace tessel;
using namespace tessel::tune;

namespace {

std::string davinci() { return std::string(TESSEL_SOURCE_DIR) + "/isa/targets/davinci-910.yaml"; }

void same_info(const ConfigInfo& a, const ConfigInfo& b, const std::string& key) {
  INFO(key);
  REQUIRE(a.buffers.size() == b.buffers.size());
  for (size_t i = 0; i < a.buffers.size(); ++i) {
    const Footprint &x = a.buffers[i], &y = b.buffers[i];
    INFO("buffer " << i << " " << y.tensor << " at " << y.level);
    CHECK(x.role == y.role);
    CHECK(x.level == y.level);
    CHECK(x.tensor == y.tensor);
    CHECK(x.bytes == y.bytes);
    CHECK(x.double_buffered == y.double_buffered);
    CHECK(x.tile_level == y.tile_level);
    CHECK(x.copy_in == y.copy_in);
    CHECK(x.copy_out == y.copy_out);
    CHECK(x.group == y.group);
  }
  CHECK(a.level_bytes == b.level_bytes);
  REQUIRE(a.groups.size() == b.groups.size());
  for (size_t g = 0; g < a.groups.size(); ++g) {
    const GroupTiling &x = a.groups[g], &y = b.groups[g];
    CHECK(x.outer == y.outer);
    CHECK(x.inner == y.inner);
    CHECK(x.extent == y.extent);
    CHECK(x.reduction == y.reduction);
    CHECK(x.matched == y.matched);
    CHECK(x.m == y.m);
    CHECK(x.n == y.n);
    CHECK(x.k == y.k);
    CHECK(x.unit_m == y.unit_m);
    CHECK(x.unit_n == y.unit_n);
    CHECK(x.unit_k == y.unit_k);
    CHECK(x.unit_cycles == y.unit_cycles);
    CHECK(x.img2col == y.img2col);
  }
}

struct Coverage {
  size_t fit = 0, rejected = 0;
};

// Every `stride`-th configuration of the whole product of `spec` (no inference from smaller
// tiles), plus the first and the last: check() (the model) against check_full().
Coverage compare(const char* source, const std::string& def, const std::map<std::string, int64_t>& sizes,
                 const std::string& target, const std::string& space_text, size_t samples) {
  frontend::Module module = frontend::parse_module(source, "fast_fit.tsl");
  const ir::Function& f = frontend::select_function(module, def);
  CompileOptions options;
  options.target = target;
  options.sizes = sizes;
  FitChecker fit(f, options);
  const SpaceSpec spec = space_text.empty() ? default_space_spec(fit.problem().default_spec, fit.problem().extents,
                                                                 fit.problem().units)
                                            : parse_space_spec(space_text);
  // the axes build_space adds (default sizes) for those the spec leaves out
  const SpaceSpec full = with_default_axes(spec, fit.problem().default_spec);
  const auto per_axis = axis_candidates(full, fit.problem().extents);
  size_t total = 1;
  for (const auto& c : per_axis) total *= c.size();
  const size_t stride = std::max<size_t>(1, total / samples);
  Coverage cov;
  std::vector<size_t> picks;
  for (size_t n = 0; n < total; n += stride) picks.push_back(n);
  if (picks.back() != total - 1) picks.push_back(total - 1);
  for (size_t n : picks) {
    tile::TileSpec t;
    size_t rest = n;
    for (size_t a = per_axis.size(); a-- > 0;) {
      const auto& [outer, inner] = per_axis[a][rest % per_axis[a].size()];
      rest /= per_axis[a].size();
      t.axes.insert(t.axes.begin(), {full.axes[a].axis, outer, inner});
    }
    const std::string key = t.to_string();
    std::string why_fast, why_full;
    const auto fast = fit.check(t, &why_fast);
    const auto slow = fit.check_full(t, &why_full);
    INFO(def << " " << key);
    REQUIRE(fast.has_value() == slow.has_value());
    if (fast) {
      same_info(*fast, *slow, key);
      ++cov.fit;
    } else {
      CHECK(why_fast == why_full);
      ++cov.rejected;
    }
  }
  // the model answered (else the comparison above compared the full check with itself)
  CHECK_MESSAGE(fit.fast(), def << ": " << fit.why_not_fast());
  CHECK(fit.full_checks() - picks.size() <= 3);  // check() itself: one full check per set of matmul matches
  MESSAGE(def << ": " << cov.fit << " fit, " << cov.rejected << " rejected of " << total << " (" << fit.full_checks()
              << " full checks)");
  return cov;
}

const char* kGemms =
    "def matmul(f16[M, K] A, f16[K, N] B) -> (f32[M, N] C) {\n"
    "  C(m, n) +=! f32(A(m, k)) * f32(B(k, n))\n"
    "}\n"
    "def matmul_bias_relu(f16[M, K] A, f16[K, N] B, f32[N] bias) -> (f16[M, N] D) {\n"
    "  C(m, n) +=! f32(A(m, k)) * f32(B(k, n))\n"
    "  D(m, n) = f16(max(C(m, n) + bias(n), 0))\n"
    "}\n"
    "def batch_matmul(f16[B, M, K] X, f16[B, K, N] Y) -> (f32[B, M, N] Z) {\n"
    "  Z(b, m, n) +=! f32(X(b, m, k)) * f32(Y(b, k, n))\n"
    "}\n";

const char* kConvs =
    "def conv2d(f16[N, C, H, W] X, f16[K, C, R, S] Wt) -> (f32[N, K, H + 3 - R, W + 3 - S] Y) {\n"
    "  Xp(n, c, h, w) = select(h >= 1 && h <= H && w >= 1 && w <= W, X(n, c, h - 1, w - 1), 0)\n"
    "      where h in 0:H + 2, w in 0:W + 2\n"
    "  Y(n, k, p, q) +=! f32(Xp(n, c, p + r, q + s)) * f32(Wt(k, c, r, s))\n"
    "}\n"
    "def conv2d_nhwc_relu(f16[N, H, W, C] X, f16[R, S, C, K] Wt, f32[K] bias) -> (f16[N, H, W, K] Z) {\n"
    "  Xp(n, h, w, c) = select(h >= 1 && h <= H && w >= 1 && w <= W, X(n, h - 1, w - 1, c), 0)\n"
    "      where h in 0:H+2, w in 0:W+2\n"
    "  Y(n, p, q, k) +=! f32(Xp(n, p + r, q + s, c)) * f32(Wt(r, s, c, k)) where p in 0:H, q in 0:W\n"
    "  Z(n, p, q, k) = f16(max(Y(n, p, q, k) + bias(k), 0))\n"
    "}\n"
    "def conv2d_stride2(f16[N, C, 2 * P + R - 2, 2 * Q + S - 2] X, f16[K, C, R, S] Wt) -> (f32[N, K, P, Q] Y) {\n"
    "  Y(n, k, p, q) +=! f32(X(n, c, p * 2 + r, q * 2 + s)) * f32(Wt(k, c, r, s))\n"
    "}\n";

}  // namespace

TEST_CASE("fast fit check: a GEMM's default space on davinci-910 (512^3 and odd sizes), same as tile + promote") {
  const Coverage a = compare(kGemms, "matmul", {{"M", 512}, {"N", 512}, {"K", 512}}, davinci(), "", 60);
  CHECK(a.fit > 0);
  CHECK(a.rejected > 0);
  // partial tiles: extents that no tile size divides, on the small test description
  const Coverage b = compare(kGemms, "matmul", {{"M", 100}, {"N", 72}, {"K", 200}}, tune::testing::small_target(),
                             "m=16-128:pow2/16|32,n=16-96:x8/8|16,k=16-256:pow2/16|32", 60);
  CHECK(b.fit > 0);
  CHECK(b.rejected > 0);
}

TEST_CASE("fast fit check: fused epilogue and batched GEMM (matched and unmatched by the tile), same as tile + promote") {
  const Coverage a = compare(kGemms, "matmul_bias_relu", {{"M", 256}, {"N", 384}, {"K", 512}}, davinci(), "", 50);
  CHECK(a.fit > 0);
  CHECK(a.rejected > 0);
  // b tiled by more than 1 undoes the matmul match: two sets of buffers
  const Coverage b = compare(kGemms, "batch_matmul", {{"B", 4}, {"M", 128}, {"N", 128}, {"K", 256}}, davinci(),
                             "b=1|2|4,m=32-128:pow2/16|32,n=32-128:pow2/16,k=32-256:pow2/16|32", 50);
  CHECK(b.fit > 0);
}

TEST_CASE("fast fit check: convolutions (padding stage, fused epilogue, stride 2), same as tile + promote") {
  const Coverage a = compare(kConvs, "conv2d", {{"N", 2}, {"C", 32}, {"H", 14}, {"W", 14}, {"K", 64}, {"R", 3}, {"S", 3}},
                             davinci(), "n=1|2,k=16-64:pow2/16,c=16|32/16,p=1|2|7|14,q=1|4|14", 60);
  CHECK(a.fit > 0);
  const Coverage b = compare(kConvs, "conv2d_nhwc_relu",
                             {{"N", 2}, {"C", 64}, {"H", 14}, {"W", 14}, {"K", 128}, {"R", 3}, {"S", 3}}, davinci(),
                             "n=1|2,k=16-128:pow2/16,c=16-64:pow2/16,p=1|2|7|14,q=1|7|14", 60);
  CHECK(b.fit > 0);
  const Coverage c = compare(kConvs, "conv2d_stride2",
                             {{"N", 1}, {"C", 32}, {"P", 7}, {"Q", 7}, {"K", 64}, {"R", 3}, {"S", 3}},
                             tune::testing::small_target(), "k=16-64:pow2/16,c=16|32/16,p=1|7,q=1|7,r=1|3", 40);
  CHECK(c.fit + c.rejected > 0);
}

TEST_CASE("fast fit check: the 512^3 GEMM's default space is built in seconds") {
  tune::testing::SmallGemm g(512, davinci());
  FitChecker fit(g.f, g.options);
  const auto t0 = std::chrono::steady_clock::now();
  size_t calls = 0;
  const Space space = build_space(default_space_spec(fit.problem().default_spec, fit.problem().extents, fit.problem().units),
                                  fit, [&](size_t, size_t) { ++calls; });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("512^3 space: " << space.configs.size() << " configurations, " << space.stats.fit_checks << " checks, "
                          << space.stats.full_checks << " by tile + promote, " << s << " s");
  CHECK(fit.fast());
  CHECK(space.configs.size() > 100);
  CHECK(space.stats.full_checks <= 2);
  CHECK(calls > 1);
  CHECK(s < 20);  // generous for a loaded CI machine; ~1 s alone
}

TEST_CASE("tessel tune: bad options are refused at once (usage: exit 2, an unwritable log: exit 1 with the path)") {
  const std::string base = std::string(TESSEL_CLI) + " tune " + TESSEL_SOURCE_DIR + "/workloads/matmul.tsl --target " +
                           davinci() + " --shape M=1024,N=1024,K=1024 --db off --no-progress ";
  auto run = [&](const std::string& args, std::string* out) {
    FILE* p = popen((base + args + " 2>&1").c_str(), "r");
    REQUIRE(p);
    char buf[512];
    out->clear();
    while (fgets(buf, sizeof buf, p)) *out += buf;
    const int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  };
  std::string out;
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(run("--strategy bogus", &out) == 2);
  CHECK_MESSAGE(out.find("--strategy") != std::string::npos, out);
  CHECK(run("--trials 0", &out) == 2);
  CHECK_MESSAGE(out.find("--trials") != std::string::npos, out);
  CHECK(run("--measure-timeout -1", &out) == 2);
  CHECK_MESSAGE(out.find("--measure-timeout") != std::string::npos, out);
  CHECK(run("--model bogus", &out) == 2);
  CHECK(run("--log /nonexistent-dir-tessel/x.jsonl", &out) == 1);
  CHECK_MESSAGE(out.find("--log /nonexistent-dir-tessel/x.jsonl: the directory /nonexistent-dir-tessel does not exist") !=
                    std::string::npos,
                out);
  const std::string file =
      (std::filesystem::temp_directory_path() / ("tessel_fast_fit_" + std::to_string(::getpid()) + ".txt")).string();
  { std::ofstream(file) << "a file\n"; }
  CHECK(run("--log " + file + "/x.jsonl", &out) == 1);
  std::filesystem::remove(file);
  CHECK_MESSAGE(out.find("is not a directory") != std::string::npos, out);
  CHECK(out.find("tune: space") == std::string::npos);  // refused before the space is built
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 30);
}
