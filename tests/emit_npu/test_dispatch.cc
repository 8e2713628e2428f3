// The NPU emitter's dispatch (compiler/emit_npu/emit_npu.cc emit_npu): the vector mappings are
// chosen by their why_not_<x>(kernel, machine) checks, which never throw; exactly the mapping that
// emits a kernel accepts it, and a kernel none accepts is one UserError listing every reason.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "compiler/emit_npu/channels.h"
#include "compiler/emit_npu/conv.h"
#include "compiler/emit_npu/depthwise.h"
#include "compiler/emit_npu/emit_npu.h"
#include "compiler/emit_npu/gather.h"
#include "compiler/emit_npu/gemm.h"
#include "compiler/emit_npu/nest.h"
#include "compiler/emit_npu/pointwise.h"
#include "compiler/emit_npu/transpose.h"
#include "compiler/frontend/frontend.h"
#include "compiler/pipeline.h"
#include "isa/base/error.h"
#include "isa/npu_machine.h"

namespace tessel {
namespace {

const std::string kRoot = TESSEL_SOURCE_DIR;

struct Compiled {
  frontend::Module module;
  std::unique_ptr<Compilation> compilation;
};

Compiled compile_kernel(const std::string& file, const std::string& def, const std::string& shape) {
  Compiled c;
  c.module = frontend::load_module(kRoot + "/workloads/" + file);
  CompileOptions o;
  o.target = kRoot + "/isa/targets/davinci-910.yaml";
  o.sizes = parse_shape(shape);
  c.compilation = compile(frontend::select_function(c.module, def), o);
  return c;
}

// Each vector mapping's answer, in emit_npu's order.
std::vector<std::string> answers(const kernel::Kernel& k, const isa::NpuMachine& m) {
  using WhyNot = std::string (*)(const kernel::Kernel&, const isa::NpuMachine&);
  std::vector<std::string> why;
  for (WhyNot f : {emit_npu::why_not_pointwise, emit_npu::why_not_channels, emit_npu::why_not_rows, emit_npu::why_not_transpose,
                   emit_npu::why_not_one_hot, emit_npu::why_not_gather, emit_npu::why_not_nest})
    CHECK_NOTHROW(why.push_back(f(k, m)));
  return why;
}

TEST_CASE("each vector mapping's why_not accepts exactly the kernels it maps and says why not for the others") {
  struct Expect {
    const char* file;
    const char* def;
    const char* shape;
    int taker;  // index in answers()
  };
  const Expect cases[] = {
      {"relu.tsl", "relu", "N=2,C=3,H=4,W=5", 0},           {"batch_norm.tsl", "bn_reduce", "N=2,H=3,W=4,C=5", 1},
      {"bert.tsl", "softmax", "M=6,N=11", 2},               {"transpose.tsl", "transpose", "N=2,H=3,W=4,C=5", 3},
      {"one_hot.tsl", "one_hot", "N=9,D=6", 4},             {"gather.tsl", "gather_rows", "N=5,D=4,L=8", 5},
  };
  for (const Expect& e : cases) {
    CAPTURE(e.def);
    const Compiled c = compile_kernel(e.file, e.def, e.shape);
    const kernel::Kernel& k = c.compilation->kernel;
    const isa::NpuMachine m = isa::npu_machine(c.compilation->hierarchy);
    const std::vector<std::string> why = answers(k, m);
    CHECK(why.back().empty());  // the general lowering (nest.h) takes every one of them too, after the templates
    for (int i = 0; i + 1 < static_cast<int>(why.size()); ++i) {
      CAPTURE(i);
      if (i == e.taker) {
        CHECK(why[i].empty());
      } else {
        CHECK(why[i].rfind("kernel " + std::string(e.def) + ": ", 0) == 0);
      }
    }
    CHECK_FALSE(emit_npu::why_not_depthwise(k, m).empty());
    CHECK_NOTHROW(emit_npu::emit_npu(k, c.compilation->hierarchy));
  }
}

TEST_CASE("a kernel no mapping takes is one UserError listing every mapping's reason, in order") {
  const Compiled c = compile_kernel("../tests/emit_npu/data/deep_transpose15.tsl", "deep",
                                    "A=2,B=2,C=2,D=2,E=2,F=2,G=2,H=2,I=2,J=2,K=2,L=2,M=2,N=2,O=2");
  const kernel::Kernel& k = c.compilation->kernel;
  const std::vector<std::string> why = answers(k, isa::npu_machine(c.compilation->hierarchy));
  std::string expected;
  for (const std::string& w : why) {
    CHECK_FALSE(w.empty());
    expected += (expected.empty() ? "" : "; ") + w;
  }
  CHECK(why.back().find("15 loop dimensions (at most 14)") != std::string::npos);
  CHECK_THROWS_WITH_AS(emit_npu::emit_npu(k, c.compilation->hierarchy), expected.c_str(), UserError);
}

TEST_CASE("the depthwise convolution is recognised from the statement, not as a contraction") {
  const Compiled c = compile_kernel("mobilenet.tsl", "depthwise_relu6", "N=1,H=6,W=6,C=8,R=3,S=3");
  const kernel::Kernel& k = c.compilation->kernel;
  CHECK_FALSE(k.contraction.has_value());
  CHECK(emit_npu::why_not_depthwise(k, isa::npu_machine(c.compilation->hierarchy)).empty());
  const Compiled relu = compile_kernel("relu.tsl", "relu", "N=2,C=3,H=4,W=5");
  CHECK(emit_npu::why_not_depthwise(relu.compilation->kernel, isa::npu_machine(relu.compilation->hierarchy)) != "");
}

// A template that recognises a kernel but cannot place it says why before emitting (no exception
// picks a mapping): the general lowering then maps it and the refusal is its first note.
void check_refused_first(const Compiled& c, const std::string& why) {
  CAPTURE(why);
  CHECK_FALSE(why.empty());
  const emit_npu::NpuKernel out = emit_npu::emit_npu(c.compilation->kernel, c.compilation->hierarchy);
  REQUIRE_FALSE(out.notes.empty());
  CHECK(out.notes.front() == "refused (" + why + "): the general vector lowering maps it");
}

TEST_CASE("a cube template's refusal is decided before emitting and becomes the general lowering's first note") {
  const Compiled ksplit = compile_kernel("gemm_layouts.tsl", "matmul_ksplit", "K1=3,M=20,K2=24,N=16");
  const kernel::Kernel& k = ksplit.compilation->kernel;
  const isa::NpuMachine m = isa::npu_machine(ksplit.compilation->hierarchy);
  const kernel::Node* mm = emit_npu::find_matmul(k);
  REQUIRE(mm != nullptr);
  const std::string why = emit_npu::why_not_gemm(k, mm->matmul, m, ksplit.compilation->hierarchy);
  CHECK(why.find("more than one M, N or K index") != std::string::npos);
  check_refused_first(ksplit, why);
  CHECK_THROWS_WITH_AS(emit_npu::emit_gemm(k, mm->matmul, m, ksplit.compilation->hierarchy), why.c_str(), UserError);

  // windows that stop short of the image (1x1 stride 2 of an even H with channels padded to the
  // fractal, so not gathered: tests/emit_npu/test_conv_gathered.cc): no img2col geometry
  const Compiled proj = compile_kernel("resnet50_layers.tsl", "conv1x1_s2", "N=1,H=8,W=8,C=8,K=16,R=1,S=1,P=4,Q=4");
  const std::string conv_why = emit_npu::why_not_conv(proj.compilation->kernel, proj.compilation->hierarchy);
  CHECK(conv_why.find("the windows stop short of the image") != std::string::npos);
  check_refused_first(proj, conv_why);

  // must not fire: a plain GEMM and a 3x3 convolution are taken
  const Compiled gemm = compile_kernel("matmul.tsl", "matmul", "M=64,N=64,K=64");
  const kernel::Node* g = emit_npu::find_matmul(gemm.compilation->kernel);
  REQUIRE(g != nullptr);
  CHECK(emit_npu::why_not_gemm(gemm.compilation->kernel, g->matmul, isa::npu_machine(gemm.compilation->hierarchy),
                               gemm.compilation->hierarchy) == "");
  const Compiled conv = compile_kernel("resnet50_layers.tsl", "conv3x3", "N=1,H=8,W=8,C=16,K=16,R=3,S=3");
  CHECK(emit_npu::why_not_conv(conv.compilation->kernel, conv.compilation->hierarchy) == "");
}

TEST_CASE("a transpose whose channels exceed one vbrcb's repeats is refused by why_not_transpose_fit, not while emitting") {
  const Compiled wide = compile_kernel("transpose.tsl", "transpose", "N=1,H=2,W=2,C=300");
  const kernel::Kernel& k = wide.compilation->kernel;
  CHECK(emit_npu::why_not_transpose(k, isa::npu_machine(wide.compilation->hierarchy)) == "");  // the form matches
  const std::string why = emit_npu::why_not_transpose_fit(k, wide.compilation->hierarchy);
  CHECK(why.find("300 channels") != std::string::npos);
  check_refused_first(wide, why);
  const Compiled small = compile_kernel("transpose.tsl", "transpose", "N=2,H=3,W=4,C=5");
  CHECK(emit_npu::why_not_transpose_fit(small.compilation->kernel, small.compilation->hierarchy) == "");
}

TEST_CASE("a depthwise convolution the one-core template cannot hold goes to the general lowering with the reason") {
  // 100 channels: more than one f32 repeat per pixel
  const Compiled wide = compile_kernel("mobilenet.tsl", "depthwise_relu6", "N=1,H=6,W=6,C=100,R=3,S=3");
  const isa::NpuMachine m = isa::npu_machine(wide.compilation->hierarchy);
  CHECK(emit_npu::why_not_depthwise(wide.compilation->kernel, m) == "");
  // the dispatcher's check: the cube's refusal (channels not a multiple of the fractal), then the vector template's
  const std::string why = emit_npu::why_not_depthwise_fit(wide.compilation->kernel, wide.compilation->hierarchy);
  CHECK(why.find("100 channels, not a multiple of the cube's fractal (16)") != std::string::npos);
  CHECK(why.find("100 channels (at most 64)") != std::string::npos);
  check_refused_first(wide, why);
  // 56x56 pixels: the tensors do not fit UB at once
  const Compiled big = compile_kernel("mobilenet.tsl", "depthwise_relu6", "N=1,H=56,W=56,C=32,R=3,S=3");
  CHECK(emit_npu::why_not_depthwise_fit(big.compilation->kernel, m).find("do not fit the vector buffer") != std::string::npos);
  // must not fire: the MobileNet layer the template was written for
  const Compiled fits = compile_kernel("mobilenet.tsl", "depthwise_relu6", "N=1,H=8,W=8,C=32,R=3,S=3");
  CHECK(emit_npu::why_not_depthwise_fit(fits.compilation->kernel, m) == "");
}

}  // namespace
}  // namespace tessel
