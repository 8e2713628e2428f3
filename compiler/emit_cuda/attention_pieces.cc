#include "compiler/emit_cuda/attention_pieces.h"

#include "compiler/emit_cuda/cuda_expr.h"
#include "isa/base/error.h"

namespace tessel::emit_cuda::attention {

namespace {

std::string num(int64_t v) { return std::to_string(v) + "LL"; }

// An expression of the record as a float value: running values by name ("score", "O", "Z" ->
// a C expression), indices through the statement's rename, other reads from the global tensors.
std::string print_value(const kernel::Kernel& k, const kernel::AttentionExpr& x, const std::map<std::string, std::string>& running) {
  TESSEL_CHECK(x.expr, "emit_cuda attention: an expression of the record is empty (poly/online_softmax builds every step)");
  auto index = [&](const ir::AffineExpr& e) {
    return int_expr(kernel::from_affine(e, k.sizes, [&](const std::string& n) {
      auto it = x.rename.find(n);
      TESSEL_CHECK(it != x.rename.end(), "emit_cuda attention: index " + n + " of a step has no role (poly/online_softmax renames every index)");
      return kernel::Expr::var(role_var(it->second));
    }));
  };
  ValueContext ctx;
  const ir::Expr* printing = nullptr;  // the bf16 node being printed inside its rounding
  ctx.sizes = &k.sizes;
  ctx.affine = index;
  ctx.access = [&](const ir::Expr& acc) -> std::string {
    const kernel::GlobalTensor* t = k.find_tensor(acc.name);
    TESSEL_CHECK(t, "emit_cuda attention: a step reads " + acc.name + ", which is no tensor of the kernel (poly/online_softmax)");
    std::string lin = "0LL";
    for (size_t d = 0; d < acc.indices.size(); ++d) lin = "(" + lin + " * " + num(t->shape.at(d)) + " + " + index(acc.indices[d]) + ")";
    const std::string element = "t_" + acc.name + "[" + lin + "]";
    return acc.type == DType::BF16 ? load_elem(DType::BF16, element) : element;
  };
  ctx.replace = [&](const ir::Expr& e) -> std::optional<std::string> {
    if (e.kind == ir::ExprKind::Access) {
      auto it = x.inputs.find(e.name);
      if (it == x.inputs.end()) return std::nullopt;
      return running.at(it->second);
    }
    // cuda_expr rounds f16 results only; a bf16 result is rounded here
    if (e.kind == ir::ExprKind::Apply && e.type == DType::BF16 && &e != printing) {
      const ir::Expr* outer = printing;
      printing = &e;
      const std::string v = rounded(DType::BF16, value_expr(e, ctx));
      printing = outer;
      return v;
    }
    return std::nullopt;
  };
  return rounded(x.type, value_expr(*x.expr, ctx));
}

}  // namespace

std::string elem_type(DType t) { return t == DType::BF16 ? "__nv_bfloat16" : storage_type(t); }

std::string load_elem(DType t, const std::string& stored) {
  return t == DType::BF16 ? "__bfloat162float(" + stored + ")" : load_value(t, stored);
}

std::string store_elem(DType t, const std::string& value) {
  return t == DType::BF16 ? "__float2bfloat16_rn(" + value + ")" : store_value(t, value);
}

std::string rounded(DType t, const std::string& value) {
  if (t == DType::F16) return "tessel_r16(" + value + ")";
  if (t == DType::BF16) return "tessel_rbf16(" + value + ")";
  return value;
}

std::string role_var(const std::string& role) { return "r_" + role; }

std::string helpers() {
  return "#include <cuda_bf16.h>\n";  // tessel_rbf16 is cuda_prelude()'s
}

std::string kernel_parameters(const kernel::Kernel& k) {
  std::string p;
  for (const auto& t : k.tensors) p += elem_type(t.dtype) + "* __restrict__ t_" + t.name + ", ";
  return p + "unsigned char* __restrict__ scratch";
}

std::vector<std::string> batch_roles(const kernel::Attention& a) {
  std::vector<std::string> r;
  for (const auto& d : a.batch) r.push_back(d.var);
  return r;
}

std::string batch_indices(const kernel::Attention& a, const std::string& flat, const std::string& pad) {
  std::string s;
  int64_t inner = 1;
  for (size_t n = a.batch.size(); n-- > 0;) {
    s = pad + "const long long " + role_var(a.batch[n].var) + " = (" + flat + " / " + num(inner) + ") % " + num(a.batch[n].extent) +
        ";\n" + s;
    inner *= a.batch[n].extent;
  }
  return s;
}

std::string operand_offset(const kernel::AttentionOperand& o, const std::vector<std::string>& roles) {
  std::string s = "(" + num(o.base);
  for (const auto& r : roles)
    if (const int64_t c = o.stride(r)) s += " + " + num(c) + " * " + role_var(r);
  return s + ")";
}

std::string flat_offset(const kernel::AttentionOperand& o, const std::vector<kernel::ContractionDim>& dims, const std::string& flat) {
  std::string s = "(0LL";
  int64_t inner = 1;
  for (size_t n = dims.size(); n-- > 0;) {
    if (const int64_t c = o.stride(dims[n].var)) s += " + " + num(c) + " * ((" + flat + " / " + num(inner) + ") % " + num(dims[n].extent) + ")";
    inner *= dims[n].extent;
  }
  return s + ")";
}

std::string store_call(const kernel::Attention& a, const std::string& acc, const std::string& l, const std::string& i,
                       const std::string& flat) {
  std::vector<std::string> idx(a.value.size());
  int64_t inner = 1;
  for (size_t n = a.value.size(); n-- > 0;) {
    idx[n] = "((" + flat + " / " + num(inner) + ") % " + num(a.value[n].extent) + ")";
    inner *= a.value[n].extent;
  }
  std::string s = "tessel_store(" + acc + ", " + l + ", " + i;
  for (const auto& x : idx) s += ", " + x;
  return s + ")";
}

int64_t value_elements(const kernel::Attention& a) { return kernel::extent_product(a.value); }

int64_t partial_bytes(const kernel::Attention& a, int splits) {
  return int64_t(sizeof(float)) * a.size_batch() * a.query.extent * splits * (2 + value_elements(a));
}

std::string combine_kernel(const kernel::Kernel& k, const kernel::Attention& a, int splits, const std::string& name) {
  const int64_t rows = a.size_batch() * a.query.extent, E = value_elements(a);
  std::string s = "extern \"C\" __global__ void __launch_bounds__(256) " + name + "(" + kernel_parameters(k) + ") {\n";
  s += "  const float* part_ = (const float*)scratch;\n";
  s += "  const float* acc_ = part_ + " + num(rows * splits * 2) + ";\n";
  s += "  for (long long x_ = (long long)blockIdx.x * 256 + threadIdx.x; x_ < " + num(rows * E) + "; x_ += (long long)gridDim.x * 256) {\n";
  s += "    const long long row_ = x_ / " + num(E) + ", ve_ = x_ % " + num(E) + ";\n";
  s += "    const long long qi_ = row_ % " + num(a.query.extent) + ", flat_ = row_ / " + num(a.query.extent) + ";\n";
  s += batch_indices(a, "flat_", "    ");
  s += store_lambda(k, a, "    ");
  s += "    float M_ = -TESSEL_INF;\n";
  s += "    for (int s_ = 0; s_ < " + std::to_string(splits) + "; ++s_) M_ = fmaxf(M_, part_[(row_ * " + num(splits) + " + s_) * 2]);\n";
  s += "    const float mu_ = M_ == -TESSEL_INF ? 0.0f : M_;\n";
  s += "    float L_ = 0.0f, A_ = 0.0f;\n";
  s += "    for (int s_ = 0; s_ < " + std::to_string(splits) + "; ++s_) {\n";
  s += "      const long long at_ = row_ * " + num(splits) + " + s_;\n";
  s += "      const float w_ = expf(part_[at_ * 2] - mu_);\n";
  s += "      L_ += w_ * part_[at_ * 2 + 1];\n";
  s += "      A_ += w_ * acc_[at_ * " + num(E) + " + ve_];\n    }\n";
  s += "    " + store_call(a, "A_", "L_", "qi_", "ve_") + ";\n  }\n}\n";
  return s;
}

std::string logit_lambda(const kernel::Kernel& k, const kernel::Attention& a, const std::string& pad) {
  const std::string I = role_var(a.query.var), J = role_var(a.key.var);
  std::string s = pad + "auto tessel_logit = [&](float x_, long long " + I + ", long long " + J + ") -> float {\n";
  s += pad + "  (void)" + I + "; (void)" + J + ";\n";
  std::string cur = "v0_";
  s += pad + "  const float v0_ = " + rounded(a.score_type, "x_") + ";\n";
  for (size_t n = 0; n < a.steps.size(); ++n) {
    const std::string v = "v" + std::to_string(n + 1) + "_";
    s += pad + "  const float " + v + " = " + print_value(k, a.steps[n], {{"score", cur}}) + ";\n";
    cur = v;
  }
  return s + pad + "  return " + cur + ";\n" + pad + "};\n";
}

std::string store_lambda(const kernel::Kernel& k, const kernel::Attention& a, const std::string& pad) {
  std::vector<std::string> roles = batch_roles(a);
  roles.push_back(a.query.var);
  std::string s = pad + "auto tessel_store = [&](float acc_, float l_, long long " + role_var(a.query.var);
  for (const auto& d : a.value) {
    s += ", long long " + role_var(d.var);
    roles.push_back(d.var);
  }
  s += ") {\n";
  s += pad + "  const float O_ = " + rounded(a.context_type, a.normalise_first ? "acc_ / l_" : "acc_") + ";\n";
  s += pad + "  const float Z_ = " + rounded(a.sum_type, "l_") + ";\n" + pad + "  (void)Z_;\n";
  const std::string result = a.epilogue.expr ? print_value(k, a.epilogue, {{"O", "O_"}, {"Z", "Z_"}}) : "O_";
  s += pad + "  t_" + a.out.tensor + "[" + operand_offset(a.out, roles) + "] = " + store_elem(a.out.dtype, result) + ";\n";
  return s + pad + "};\n";
}

}  // namespace tessel::emit_cuda::attention
