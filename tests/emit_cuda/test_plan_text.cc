// The TensorCore plan's text form (emit_cuda::TcConfig::to_string / parse, what --tile, --explain,
// the tuner and the benches exchange). Rule: every plan the tile policy enumerates (tc_candidates)
// prints to a text that parses back to the same plan, field by field, and prints again to the same
// text; the enumeration over these problems and machines produces every option of the text form;
// a text whose options are out of order, repeated or unknown is refused naming the reason.
#include <doctest/doctest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "compiler/emit_cuda/tile_policy.h"
#include "compiler/frontend/frontend.h"
#include "compiler/pipeline.h"
#include "isa/base/error.h"

using namespace tessel;

namespace {

struct Problem {
  const char* file;
  const char* def;
  std::map<std::string, int64_t> sizes;
};

// GEMMs of the seed table and the square suite, a wide and a narrow one, a long-K one (split-K
// across blocks), a fused epilogue (TMA store of a non-plain output), other layouts, and the seed
// convolutions (im2col, blocked windows, operand repacking).
const std::vector<Problem>& problems() {
  static const std::vector<Problem> p = {
      {"workloads/matmul.tsl", "matmul", {{"M", 512}, {"N", 16}, {"K", 512}}},
      {"workloads/matmul.tsl", "matmul", {{"M", 512}, {"N", 128}, {"K", 512}}},
      {"workloads/matmul.tsl", "matmul", {{"M", 256}, {"N", 256}, {"K", 256}}},
      {"workloads/matmul.tsl", "matmul", {{"M", 2048}, {"N", 32}, {"K", 512}}},
      {"workloads/matmul.tsl", "matmul", {{"M", 1024}, {"N", 1024}, {"K", 1024}}},
      {"workloads/matmul.tsl", "matmul", {{"M", 4096}, {"N", 4096}, {"K", 4096}}},
      {"workloads/matmul.tsl", "matmul", {{"M", 4096}, {"N", 768}, {"K", 768}}},
      {"workloads/matmul.tsl", "matmul", {{"M", 128}, {"N", 128}, {"K", 16384}}},
      {"workloads/gemm_fused.tsl", "matmul_bias_relu", {{"M", 1024}, {"N", 1024}, {"K", 1024}}},
      {"workloads/gemm_layouts.tsl", "matmul_tn", {{"M", 1024}, {"N", 1024}, {"K", 1024}}},
      {"workloads/gemm_layouts.tsl", "matmul_nt", {{"M", 1024}, {"N", 512}, {"K", 2048}}},
      {"workloads/conv_seed.tsl", "conv2d_nhwc", {{"N", 256}, {"H", 14}, {"W", 14}, {"C", 256}, {"K", 512}, {"R", 3}, {"S", 3}}},
      {"workloads/conv_seed.tsl", "conv2d_blocked", {{"NB", 16}, {"H", 14}, {"W", 14}, {"CB", 16}, {"KB", 32}, {"R", 3}, {"S", 3}}},
  };
  return p;
}

// Every field of the plan, printed: two plans are the same plan exactly when these agree.
std::string fields(const emit_cuda::TcConfig& g) {
  std::string s;
  for (int v : {g.bm, g.bn, g.bk, g.wm, g.wn, g.k_split, g.stages, g.k_blocks}) s += std::to_string(v) + ",";
  for (const char* e : {name(g.mma), name(g.loader), name(g.reduce), name(g.issue), name(g.schedule), name(g.store)}) s += std::string(e) + ",";
  for (bool b : {g.keep_operands, g.repack}) s += b ? "1" : "0";
  return s;
}

// The options a plan's text carries after its four fixed fields ("kb" for /kbN).
std::set<std::string> options_of(const std::string& text) {
  std::set<std::string> out;
  size_t at = 0;
  for (int field = 0; at != std::string::npos; ++field) {
    const size_t next = text.find('/', at);
    const std::string f = text.substr(at, next == std::string::npos ? std::string::npos : next - at);
    if (field >= 4) out.insert(f.rfind("kb", 0) == 0 ? "kb" : f);
    at = next == std::string::npos ? next : next + 1;
  }
  return out;
}

}  // namespace

TEST_CASE("plan text: every plan the tile policy enumerates round-trips through to_string and parse, field by field") {
  const std::vector<std::string> targets = {"isa/targets/sm75.yaml", "isa/targets/sm80.yaml", "isa/targets/sm90.yaml",
                                            "isa/targets/sm90-h200.yaml"};
  std::set<std::string> texts, options;
  for (const Problem& p : problems()) {
    frontend::Module module = frontend::load_module(p.file);
    for (const auto& target : targets) {
      CompileOptions o;
      o.target = target;
      o.sizes = p.sizes;
      auto c = compile(frontend::select_function(module, p.def), o);
      REQUIRE(c->kernel.contraction);
      const isa::GpuMachine m = isa::GpuMachine::from(c->hierarchy);
      for (bool split_k : {true, false})
        for (const emit_cuda::TcConfig& g : emit_cuda::tc_candidates(*c->kernel.contraction, m, split_k)) {
          const std::string text = g.to_string();
          CAPTURE(text);
          CAPTURE(target);
          const emit_cuda::TcConfig back = emit_cuda::TcConfig::parse(text);
          CHECK(fields(back) == fields(g));
          CHECK(back.to_string() == text);
          CHECK(back.warps() == g.warps());
          texts.insert(text);
          for (const auto& opt : options_of(text)) options.insert(opt);
        }
    }
  }
  MESSAGE(texts.size() << " distinct plans enumerated");
  CHECK(texts.size() > 200);
  // the enumeration reaches every option of the text form but /el (evict-last operand copies),
  // which only a given plan asks for (a new option needs a problem here)
  for (const std::string opt : {"kb", "mma", "red", "cl", "wg", "wgd", "cs", "cf", "bc", "ws", "sk", "pp", "mc", "rp", "ts"}) {
    CAPTURE(opt);
    CHECK(options.count(opt) == 1);
  }
  CHECK(options.count("el") == 0);
  const std::string el = "128x128x64/64x128/ks1/st4/wg/cs/el";
  const emit_cuda::TcConfig g = emit_cuda::TcConfig::parse(el);
  CHECK((g.mma == emit_cuda::MmaKind::wgmma && g.store == emit_cuda::OutputStore::evict_first && g.keep_operands &&
         g.loader == emit_cuda::OperandLoader::cp_async));
  CHECK(g.to_string() == el);
}

TEST_CASE("plan text: options out of order, repeated or unknown are user errors naming the reason") {
  CHECK_THROWS_WITH_AS(emit_cuda::TcConfig::parse("128x128x64/64x128/ks1/st4/ts/ws"), doctest::Contains("out of order or repeated"),
                       UserError);
  CHECK_THROWS_WITH_AS(emit_cuda::TcConfig::parse("128x128x32/64x64/ks1/st3/mma/mma"), doctest::Contains("out of order or repeated"),
                       UserError);
  CHECK_THROWS_WITH_AS(emit_cuda::TcConfig::parse("128x128x32/64x64/ks1/st3/fast"), doctest::Contains("unknown field 'fast'"), UserError);
  CHECK_THROWS_WITH_AS(emit_cuda::TcConfig::parse("128x128x32/64x64/ks1"), doctest::Contains("too few fields"), UserError);
  // the canonical forms parse, and /ws implies the wgmma main loop
  const emit_cuda::TcConfig ws = emit_cuda::TcConfig::parse("128x128x64/64x128/ks1/st4/ws/ts");
  CHECK(ws.mma == emit_cuda::MmaKind::wgmma);
  CHECK(ws.loader == emit_cuda::OperandLoader::tma_ws);
  CHECK(ws.store == emit_cuda::OutputStore::tma);
  CHECK(emit_cuda::TcConfig::parse("128x128x32/64x64/ks1/st3/kb4/red").k_blocks == 4);
}

TEST_CASE("plan text: two options that are choices of one enum are a user error naming both") {
  auto refused = [](const std::string& text, const char* why) {
    CAPTURE(text);
    CHECK_THROWS_WITH_AS(emit_cuda::TcConfig::parse(text), doctest::Contains(why), UserError);
  };
  refused("128x128x64/64x128/ks1/st4/mma/wg", "'/mma' and '/wg' are two choices of the main-loop instructions (mma.sync, wgmma)");
  refused("128x128x32/64x64/ks1/st3/kb4/red/cl", "'/red' and '/cl' are two choices of the split-K reduction (atomic, cluster)");
  refused("128x128x64/64x128/ks1/st4/wgd/cf", "'/wgd' and '/cf' are two choices of the copy issue (deep, before-mma)");
  refused("128x128x64/64x128/ks1/st4/bc/ws", "'/bc' and '/ws' are two choices of the operand loader (bulk, tma-ws)");
  refused("128x128x64/64x128/ks1/st4/ws/sk/pp", "'/sk' and '/pp' are two choices of the persistent schedule (stream-k, ping-pong)");
  refused("128x128x64/64x128/ks1/st4/ws/pp/mc", "'/pp' and '/mc' are two choices of the persistent schedule (ping-pong, multicast)");
  refused("128x128x64/64x128/ks1/st4/cs/ws/ts", "'/cs' and '/ts' are two choices of the output store (evict-first, tma)");
  // the names the plan report and --explain use
  CHECK(std::string(emit_cuda::name(emit_cuda::MmaKind::mma_sync)) == "mma.sync");
  CHECK(std::string(emit_cuda::name(emit_cuda::SplitKReduce::last_block)) == "last-block");
}
