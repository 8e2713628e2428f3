#include "compiler/emit_npu/attention.h"
#include "compiler/emit_npu/attention_plan.h"
#include "compiler/emit_npu/operands.h"
#include "compiler/emit_npu/pointwise.h"
#include "compiler/emit_npu/compositions.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "compiler/ir/builtin_math.h"
#include "compiler/kernel/attention.h"
#include "isa/base/error.h"
#include "isa/npu_machine.h"

namespace tessel::emit_npu {
namespace {

using npu::Buffer;
using npu::Opcode;
using npu::Operand;

enum Reg : uint8_t {
  kUnit = 1,   // the work unit (batch point, query block)
  kBatch,      // its batch point (flat)
  kQb,         // its query block
  kI0,         // its first query row
  kQ,          // GM byte address of the unit's Q block
  kK,          // GM byte address of the batch point's K (key 0)
  kV,          // ... of V
  kOut,        // GM byte address of the unit's first output row
  kT1,
  kT2,
  kRows,       // the unit's valid query rows
  kDiag,       // causal: the current block's first key minus the unit's first query minus the offset
  kRem,
  kIdx,
  kFirstRead,  // then one register per tensor a step reads (its unit's base address)
};

using Plan = AttentionPlan;

class AttentionEmitter : public VectorCode {
 public:
  AttentionEmitter(const kernel::Kernel& k, const isa::NpuMachine& m, NpuKernel& out)
      : VectorCode(k, m), a_(*k.attention), out_(out) {}

  // "" when emit() maps the record, else the refusal, decided before emitting: the record's form,
  // the plan's blocks and buffers, then each evaluation of a step or the epilogue in the order
  // emit() makes them (its expression's forms, its UB regions against what the plan leaves).
  std::string why_not() {
    if (std::string why = check_form(); !why.empty()) return refusal(why);
    if (std::string why = plan(); !why.empty()) return refusal(why);
    return check_evaluations();
  }

  // Emits into out_ the program of a record why_not() took.
  void emit() { emit_program(); }

 private:
  std::string refusal(const std::string& why) const {
    return "kernel " + k_.name + ": the NPU lowering of the fused attention (online softmax) does not take " + why;
  }

  // ---- the record's form ----
  std::string check_form() {
    if (a_.head.size() != 1 || a_.value.size() != 1)
      return "several head or value indices (one d and one e are mapped)";
    for (const kernel::AttentionOperand* o : {&a_.q, &a_.k, &a_.v})
      if (o->dtype != DType::F16) return fmt::format("{} in {} (the cube takes f16 operands here)", o->tensor, dtype_name(o->dtype));
    if (a_.score_type != DType::F32 || a_.sum_type != DType::F32 || a_.context_type != DType::F32)
      return "accumulators other than f32";
    if (a_.out.dtype != DType::F16) {
      // P goes to the cube in f16 and its exponentials run on f16 lanes: the result is as exact as
      // an f16 output, not as an f32 one (3 of 4,320 elements of a 45 x 131 d24 attention beyond
      // the f32 output's tolerance)
      if (a_.out.dtype == DType::F32)
        return fmt::format("an f32 output {} (P is multiplied on the cube in f16: exact to f16, not to f32; an f16 output "
                           "takes the fused kernel, an f32 one runs unfused)",
                           a_.out.tensor);
      return fmt::format("an output in {}", dtype_name(a_.out.dtype));
    }
    if (a_.prob_type != DType::F16 && a_.prob_type != DType::F32) return fmt::format("probabilities in {}", dtype_name(a_.prob_type));
    const std::string d = a_.head[0].var, e = a_.value[0].var, i = a_.query.var, j = a_.key.var;
    if (a_.q.stride(d) != 1 || a_.k.stride(d) != 1)
      return fmt::format("Q or K without unit stride along the head index {} (strides {}, {})", d, a_.q.stride(d), a_.k.stride(d));
    if (a_.v.stride(e) != 1 || a_.out.stride(e) != 1)
      return fmt::format("V or {} without unit stride along the value index {}", a_.out.tensor, e);
    if (a_.q.stride(i) < a_.head[0].extent || a_.k.stride(j) < a_.head[0].extent || a_.v.stride(j) < a_.value[0].extent ||
        a_.out.stride(i) < a_.value[0].extent)
      return "rows that overlap (a query or key stride below the row length)";
    if (std::string why = scan_reads(); !why.empty()) return why;
    if (a_.causal_offset && *a_.causal_offset < 0)
      return fmt::format("a causal offset {} < 0 (query rows without any key)", *a_.causal_offset);
    return "";
  }

  // ---- blocks, slots, placement (attention_plan.h) ----
  std::string plan() {
    find_scale();
    return plan_attention(a_, m_, scale_node_ != nullptr, p_plan_);
  }

  // ---- the evaluations of the steps and the epilogue, checked before emitting ----
  // In emit()'s order: per unit kind (a section per query block, or every unit alike), per key
  // block each step at its first chunk (the longest), then the epilogue; the first refusal.
  std::string check_evaluations() {
    const Plan& P = p_plan_;
    std::vector<std::pair<int64_t, int64_t>> units;  // (first row where static, else 0; key blocks)
    if (P.sections)
      for (int64_t qb = 0; qb < P.nqb; ++qb) units.emplace_back(qb * P.bq, P.blocks_seen[qb]);
    else
      units.emplace_back(0, P.nkb);
    for (const auto& [first_row, nkb] : units) {
      for (int64_t kb = 0; kb < nkb; ++kb) {
        const int64_t cols = block_cols(kb), tile = P.bq * cols;
        const bool masked = a_.causal_offset && kb * P.bk + cols - 1 > first_row + *a_.causal_offset;
        for (const kernel::AttentionExpr& step : a_.steps)
          if (std::string why = check_evaluation(step, true, masked, step_chunk(*step.expr, tile)); !why.empty()) return why;
      }
      if (a_.epilogue.expr)
        if (std::string why = check_evaluation(a_.epilogue, false, false, cb_elems()); !why.empty()) return why;
    }
    return "";
  }

  // "" or why evaluating x over n elements is refused: a form compile() does not take, or more UB
  // regions than the plan leaves (masked: the causal select computes its mask on this block).
  std::string check_evaluation(const kernel::AttentionExpr& x, bool step, bool masked, int64_t n) {
    const auto key = std::make_pair(&x, masked);
    auto it = regions_.find(key);
    if (it == regions_.end()) {
      std::string why;
      form_of(*x.expr, x, step, masked, why);
      if (!why.empty()) return why;
      it = regions_.emplace(key, regions_of(x, step, masked)).first;
    }
    if (it->second * n * 4 > p_plan_.ub_steps_bytes)
      return refusal(fmt::format("steps or an epilogue whose {} UB regions of {} elements do not fit UB", it->second, n));
    return "";
  }
  std::map<std::pair<const kernel::AttentionExpr*, bool>, int64_t> regions_;

  // The UB regions evaluate() takes for x (of any chunk length: every region is one chunk long),
  // counted by compiling it once into a throwaway program; its forms were checked (form_of).
  int64_t regions_of(const kernel::AttentionExpr& x, bool step, bool masked) {
    npu::Program scratch;
    p_ = &scratch, measuring_ = true;
    mask_needed_ = masked;
    diag_region_ = step && a_.causal_offset ? p_plan_.ub_diag : -1;
    const int64_t n = cb_elems();
    if (step) evaluate(x, {{"score", Value{false, 0, p_plan_.ub_s, DType::F32}}}, n, p_plan_.ub_s, DType::F32);
    else evaluate(x, {{"O", Value{false, 0, p_plan_.ub_acc, DType::F32}}, {"Z", Value{false, 0, p_plan_.ub_acc, DType::F32}}}, n,
                  p_plan_.ub_out, a_.out.dtype);
    p_ = nullptr, measuring_ = false, diag_region_ = -1, mask_needed_ = true;
    return next_region_ / (n * 4);
  }
  bool measuring_ = false;

  // What compile() makes of node e (a scalar or a vector of a dtype), or in `why` its refusal,
  // checked in compile()'s order (operands first, left to right; the causal select's condition is
  // the mask, and its -big operand is read only where the block is masked).
  struct Form {
    bool scalar = false;
    DType type = DType::F32;
  };
  Form form_of(const ir::Expr& e, const kernel::AttentionExpr& x, bool step, bool masked, std::string& why) const {
    const DType t = e.type;
    switch (e.kind) {
      case ir::ExprKind::Constant: case ir::ExprKind::SizeParam: return {true, t};
      case ir::ExprKind::Access:
        if (x.inputs.count(e.name)) return {false, DType::F32};  // the running values are f32
        if (auto r = reads_.find(&e); r != reads_.end()) return {false, r->second.dtype};
        why = refusal("an epilogue that reads tensor " + e.name + " (only O and Z)");
        return {};
      case ir::ExprKind::IndexValue:
        if (e.affine.index_coeffs.empty() && e.affine.divs.empty()) return {true, t};
        why = refusal("an index used as a value in a step, other than the causal mask");
        return {};
      case ir::ExprKind::Apply: break;
    }
    if (e.op == ir::Op::Select) {
      if (&e != causal_node() || !(step && a_.causal_offset)) {
        why = refusal("a select other than the causal mask select(j <= i + c, x, -1e30) of the last step");
        return {};
      }
      const Form kept = form_of(*e.args[1], x, step, masked, why);
      if (!masked || !why.empty()) return kept;
      Form other = form_of(*e.args[2], x, step, masked, why);
      if (!why.empty()) return {};
      if (other.scalar) other.type = DType::F32;
      if (kept.type != DType::F32 || other.type != DType::F32) why = refusal("a causal select on values other than f32");
      return {false, DType::F32};
    }
    std::vector<Form> a;
    for (const auto& arg : e.args) {
      a.push_back(form_of(*arg, x, step, masked, why));
      if (!why.empty()) return {};
    }
    return apply_form(e, a, why);
  }
  // VectorCode::apply's result and refusals for an operator node whose operands are `a`.
  Form apply_form(const ir::Expr& e, const std::vector<Form>& a, std::string& why) const {
    const DType t = e.type;
    if (e.op == ir::Op::Cast) return a[0].scalar ? Form{true, t} : a[0].type == t ? a[0] : Form{false, t};
    auto refused = [&](const std::string& w) { why = not_pointwise(w).what(); return Form{}; };
    for (const Form& v : a)
      if (!v.scalar && v.type != t) return refused("mixed-type arithmetic without a cast");
    static const std::set<ir::Op> folded = {ir::Op::Add, ir::Op::Sub, ir::Op::Mul, ir::Op::Div, ir::Op::Mod, ir::Op::Min, ir::Op::Max,
                                            ir::Op::Neg, ir::Op::Abs, ir::Op::Exp, ir::Op::Log, ir::Op::Sqrt, ir::Op::Rsqrt, ir::Op::Tanh};
    if (std::all_of(a.begin(), a.end(), [](const Form& v) { return v.scalar; }))
      return folded.count(e.op) || ir::is_float_math(e.op) ? Form{true, t} : refused("constant operator");
    if (composition_for(e.op))
      return dtype_is_float(t) || t == DType::I32 ? Form{false, t} : refused(fmt::format("{} of {}", ir::op_spelling(e.op), dtype_name(t)));
    static const std::set<ir::Op> unary = {ir::Op::Neg, ir::Op::Abs, ir::Op::Exp, ir::Op::Log, ir::Op::Sqrt, ir::Op::Rsqrt, ir::Op::Tanh};
    static const std::set<ir::Op> binary = {ir::Op::Add, ir::Op::Sub, ir::Op::Mul, ir::Op::Div, ir::Op::Mod, ir::Op::Min, ir::Op::Max};
    if ((a.size() == 1 ? unary : binary).count(e.op)) return {false, t};
    return refused(std::string("operator ") + ir::op_spelling(e.op));
  }

  // ---- tensors the steps read (an additive mask M(i, j), a bias B(h, i, j)) ----
  // Read at element base + sum(coeff[role] * role) of the row-major tensor: unit stride along j,
  // rows (i) at least one 16-column block apart; per chunk of the score tile one dma_in per
  // 16-column block (bq rows of 16 values) into UB, in the tile's order.
  struct Read {
    std::string tensor;
    DType dtype = DType::F32;
    std::map<std::string, int64_t> coeff;
    int64_t base = 0;
    uint8_t reg = 0;
  };
  std::map<const ir::Expr*, Read> reads_;

  std::string scan_reads() {
    std::string why;
    std::function<void(const ir::Expr&, const kernel::AttentionExpr&)> walk = [&](const ir::Expr& e, const kernel::AttentionExpr& x) {
      if (!why.empty()) return;
      for (const auto& arg : e.args) walk(*arg, x);
      if (e.kind != ir::ExprKind::Access || x.inputs.count(e.name)) return;
      const kernel::GlobalTensor* t = k_.find_tensor(e.name);
      if (!t || t->temporary || t->shape.size() != e.indices.size()) {
        why = "a step that reads " + e.name + ", no input tensor of the kernel";
        return;
      }
      Read r{e.name, t->dtype, {}, 0, 0};
      int64_t stride = 1;
      for (size_t d = e.indices.size(); d-- > 0;) {
        const ir::AffineExpr& ix = e.indices[d];
        if (ix.has_div()) {
          why = "a step that reads " + e.name + " at a divided index";
          return;
        }
        for (const auto& [v, c] : ix.index_coeffs) {
          auto it = x.rename.find(v);
          if (it == x.rename.end()) {
            why = "a step that reads " + e.name + " at an index that is not a role";
            return;
          }
          r.coeff[it->second] += c * stride;
        }
        int64_t c0 = ix.constant;
        for (const auto& [p, c] : ix.param_coeffs) c0 += c * k_.sizes.at(p);
        r.base += c0 * stride;
        stride *= t->shape[d];
      }
      for (const auto& [role, c] : r.coeff) {
        bool batch = false;
        for (const auto& b : a_.batch) batch |= b.var == role;
        if (c != 0 && !batch && role != a_.query.var && role != a_.key.var) {
          why = "a step that reads " + e.name + " along " + role + " (only batch, query and key indices)";
          return;
        }
      }
      auto stride_of = [&](const std::string& v) { auto it = r.coeff.find(v); return it == r.coeff.end() ? 0 : it->second; };
      if (stride_of(a_.key.var) != 1 || stride_of(a_.query.var) < m_.cube_f16.n0) {
        why = fmt::format("a step that reads {} with strides {} along the key and {} along the query (1 and at least {} are mapped)", e.name,
                          stride_of(a_.key.var), stride_of(a_.query.var), m_.cube_f16.n0);
        return;
      }
      if (t->dtype != DType::F32 && t->dtype != DType::F16) {
        why = "a step that reads " + e.name + " in " + std::string(dtype_name(t->dtype));
        return;
      }
      r.reg = static_cast<uint8_t>(kFirstRead + reads_.size());
      reads_[&e] = r;
    };
    for (const auto& st : a_.steps) walk(*st.expr, st);
    if (why.empty() && kFirstRead + reads_.size() > 31) why = "steps that read more than " + std::to_string(31 - kFirstRead) + " tensors";
    return why;
  }
  // ---- the score's constant scale, folded into Q ----
  // Where the first step reads the score once, as score * c (either order) with c a constant of
  // 0 < |c| <= 1 (1 / sqrt(d)), and a unit walks 16 key blocks or more (Plan::fold_scale; the work
  // sits at the unit's start, before its first scores), each unit's Q block is multiplied by c once (f16 -> f32, x c, one
  // rounding to f16, in UB before L1) and the step reads the score as the cube leaves it: one
  // vector pass over every score less. Rounding: the score is sum_d f16(c q_d) k_d, each term
  // within one f16 unit in the last place (2^-11 relative) of c q_d k_d, where the definition
  // rounds c sum_d q_d k_d once in f32; c = 2^-k (d = 4^k: 64, 256) is exact.
  const ir::Expr* scale_node_ = nullptr;   // the step's score * c
  const ir::Expr* scale_score_ = nullptr;  // its score operand
  double q_scale_ = 1;
  void find_scale() {
    if (a_.steps.empty()) return;
    const kernel::AttentionExpr& st = a_.steps.front();
    auto is_score = [&](const ir::Expr& e) {
      if (e.kind != ir::ExprKind::Access) return false;
      auto it = st.inputs.find(e.name);
      return it != st.inputs.end() && it->second == "score";
    };
    int reads = 0;
    const ir::Expr* mul = nullptr;
    std::function<void(const ir::Expr&, const ir::Expr*)> walk = [&](const ir::Expr& e, const ir::Expr* parent) {
      if (is_score(e)) ++reads, mul = parent;
      for (const auto& arg : e.args) walk(*arg, &e);
    };
    walk(*st.expr, nullptr);
    if (reads != 1 || !mul || mul->kind != ir::ExprKind::Apply || mul->op != ir::Op::Mul || mul->args.size() != 2 ||
        mul->type != DType::F32)
      return;
    const ir::Expr& score = is_score(*mul->args[0]) ? *mul->args[0] : *mul->args[1];
    const ir::Expr& other = &score == mul->args[0].get() ? *mul->args[1] : *mul->args[0];
    // only a value of constants and sizes folds: a select (or any other operator the step's
    // evaluation would emit an instruction for) stays in the step
    if (score.type != DType::F32 || reads_tensor(other) || uses_index(other) || has_select(other)) return;
    region_base_ = 0, next_region_ = 0, chunk_ = 1;
    const Value c = compile(other, 1);  // constants fold (the interpreter's f32 rounding): no instruction
    if (!c.scalar || !(std::fabs(c.constant) <= 1) || c.constant == 0) return;
    scale_node_ = mul, scale_score_ = &score, q_scale_ = c.constant;
  }
  static bool has_select(const ir::Expr& e) {
    if (e.kind == ir::ExprKind::Apply && e.op == ir::Op::Select) return true;
    for (const auto& arg : e.args)
      if (has_select(*arg)) return true;
    return false;
  }
  static bool uses_index(const ir::Expr& e) {
    if (e.kind == ir::ExprKind::IndexValue && (!e.affine.index_coeffs.empty() || !e.affine.divs.empty())) return true;
    for (const auto& arg : e.args)
      if (uses_index(*arg)) return true;
    return false;
  }
  // Q's block in the stage (f16, bq x Dp) times q_scale_, through the steps' f32 regions in pieces.
  void scale_q(int64_t stage) {
    const Plan& P = p_plan_;
    const int64_t lanes = m_.vector_lanes(DType::F32), elems = P.bq * P.Dp;
    const int64_t piece = std::min(P.ub_steps_bytes / 4, max_repeat_ * lanes) / lanes * lanes;
    for (int64_t e0 = 0; e0 < elems; e0 += piece) {
      const int64_t n = std::min(piece, elems - e0);
      conv(DType::F32, DType::F16, P.ub_steps, stage + e0 * 2, n);
      vscalar(Opcode::Vmuls, P.ub_steps, P.ub_steps, Operand::float_(q_scale_), vec_rep(n));
      conv(DType::F16, DType::F32, stage + e0 * 2, P.ub_steps, n);
    }
  }

  // the chunk of the score tile being computed: its key block and first element
  int64_t cur_kb_ = 0, cur_c0_ = 0;

  Value load_read(const Read& r, int64_t n) {
    const Plan& P = p_plan_;
    const int64_t f = m_.cube_f16.n0, esz = dtype_bytes(r.dtype), cbe = cb_elems();
    const Value v{false, 0, fresh_region(), r.dtype};
    const int64_t row = r.coeff.at(a_.query.var) * esz;
    for (int64_t cb = 0; cb < n / cbe; ++cb) {
      const int64_t col = cur_kb_ * P.bk + (cur_c0_ / cbe + cb) * f;
      op(Opcode::DmaIn, {at(Buffer::UB, v.region + cb * cbe * esz), at(Buffer::GM, col * esz, r.reg), imm(P.bq), imm(f * esz),
                         imm(row - f * esz), imm(0)});
    }
    return v;
  }

  // ---- element-wise expressions (steps, epilogue) on UB regions ----
  std::map<std::string, Value> inputs_;
  int64_t diag_region_ = -1;  // the column-minus-row values of the chunk being computed

  Value compile(const ir::Expr& e, int64_t n) override {
    switch (e.kind) {
      case ir::ExprKind::Access: {
        auto it = inputs_.find(e.name);
        if (it == inputs_.end()) {
          if (auto r = reads_.find(&e); r != reads_.end()) return load_read(r->second, n);
          TESSEL_CHECK(false, "npu attention: a tensor read why_not() did not check (form_of)");
        }
        return it->second;
      }
      case ir::ExprKind::IndexValue:
        if (e.affine.index_coeffs.empty() && e.affine.divs.empty()) return {true, double(e.affine.evaluate({}, k_.sizes)), 0, e.type};
        TESSEL_CHECK(false, "npu attention: an index value why_not() did not check (form_of)");
        break;
      case ir::ExprKind::Apply:
        if (e.op == ir::Op::Select) return causal_select(e, n);
        if (&e == scale_node_ && p_plan_.fold_scale) return compile(*scale_score_, n);  // Q carries the scale
        break;
      default: break;
    }
    return VectorCode::compile(e, n);
  }

  // The last step's select(j <= i + c, x, -big) (casts around it allowed), which the core
  // recognised as the causal mask with the record's offset c: x where the key is visible, else -big.
  const ir::Expr* causal_node() const {
    if (!a_.causal_offset || a_.steps.empty()) return nullptr;
    const ir::Expr* e = a_.steps.back().expr;
    while (e->kind == ir::ExprKind::Apply && e->op == ir::Op::Cast && e->args.size() == 1) e = e->args[0].get();
    return e;
  }
  // false where the current key block lies below the diagonal for every row of the query block
  bool mask_needed_ = true;
  int64_t cur_qb_ = -1;  // the query block when it is known statically (sections), else -1

  // The root of the expression being evaluated writes its destination directly (element-wise:
  // each lane reads its operands before it writes, so the score may be updated in place), unless
  // it is composed of several instructions.
  const ir::Expr* root_ = nullptr;
  int64_t root_dst_ = -1;
  DType root_type_ = DType::F32;
  int64_t result_region(const ir::Expr& e, const std::vector<Value>& a) override {
    (void)a;
    if (&e == root_ && e.type == root_type_ && !composition_for(e.op)) return root_dst_;
    return fresh_region();
  }
  Value causal_select(const ir::Expr& e, int64_t n) {
    TESSEL_CHECK(&e == causal_node() && diag_region_ >= 0, "npu attention: a select why_not() did not check (form_of)");
    if (!mask_needed_) {  // every key of the block is visible to every row: x
      if (&e == root_) root_ = e.args[1].get();
      return compile(*e.args[1], n);
    }
    Value tv = vector_of(compile(*e.args[1], n), n), fv = compile(*e.args[2], n);
    if (fv.scalar) fv.type = DType::F32;
    fv = vector_of(fv, n);
    TESSEL_CHECK(tv.type == DType::F32 && fv.type == DType::F32, "npu attention: a causal select why_not() did not check (form_of)");
    // t = (column - row) + (j0 - i0 - c); keep where t <= 0
    const Value t{false, 0, fresh_region(), DType::F32}, zero{false, 0, fresh_region(), DType::F32};
    op(Opcode::Vadds, {type(DType::F32), at(Buffer::UB, t.region), at(Buffer::UB, diag_region_), reg(kDiag), imm(repeats(n, DType::F32)),
                       imm(1), imm(1), imm(repeat_blocks_), imm(repeat_blocks_)});
    op(Opcode::Vdup, {type(DType::F32), at(Buffer::UB, zero.region), Operand::float_(0), imm(repeats(n, DType::F32)), imm(1), imm(repeat_blocks_)});
    binary(Opcode::Vcmple, t, t, zero, n);
    const Value r{false, 0, result_region(e, {}), DType::F32};
    const int64_t rep = repeats(n, DType::F32), b = repeat_blocks_;
    op(Opcode::Vselv, {type(DType::F32), at(Buffer::UB, r.region), at(Buffer::UB, t.region), at(Buffer::UB, tv.region), at(Buffer::UB, fv.region),
                       imm(rep), imm(1), imm(1), imm(1), imm(1), imm(b), imm(b), imm(b), imm(b)});
    return r;
  }

  // Evaluates `x` over n f32 elements with the running values `running` (by role name) and
  // writes it, rounded to its type then widened, as `dst_type` at `dst`.
  void evaluate(const kernel::AttentionExpr& x, const std::map<std::string, Value>& running, int64_t n, int64_t dst, DType dst_type) {
    inputs_.clear();
    for (const auto& [tensor, role] : x.inputs) inputs_[tensor] = running.at(role);
    region_base_ = p_plan_.ub_steps, next_region_ = 0, chunk_ = n;
    root_ = x.expr, root_dst_ = dst, root_type_ = dst_type;
    Value v = compile(*x.expr, n);
    root_ = nullptr;
    if (v.scalar) v.type = DType::F32;
    v = vector_of(v, n);
    if (v.type != x.type) {  // rounded to the statement's dtype
      const Value r{false, 0, fresh_region(), x.type};
      convert(r, v, n);
      v = r;
    }
    if (v.type == dst_type) {
      if (v.region != dst) with_scalar(Opcode::Vmuls, Value{false, 0, dst, dst_type}, v, 1, n);
    } else {
      convert(Value{false, 0, dst, dst_type}, v, n);
    }
    TESSEL_CHECK(measuring_ || next_region_ <= p_plan_.ub_steps_bytes,
                 "npu attention: steps' UB regions past what why_not() checked (check_evaluation)");
  }
  // Elements per step chunk: the whole tile when its regions fit, else one 16-column block.
  int64_t step_chunk(const ir::Expr& e, int64_t tile) const {
    const int64_t nodes = count_nodes(e) + 6;
    return nodes * tile * 4 <= p_plan_.ub_steps_bytes ? tile : p_plan_.bq * m_.cube_f16.n0;
  }

  // ---- instructions ----
  void vec2(Opcode o, int64_t dst, int64_t a, int64_t b, int64_t rep, DType t = DType::F32) {
    op(o, {type(t), at(Buffer::UB, dst), at(Buffer::UB, a), at(Buffer::UB, b), imm(rep), imm(1), imm(1), imm(1), imm(repeat_blocks_),
           imm(repeat_blocks_), imm(repeat_blocks_)});
  }
  void vec1(Opcode o, int64_t dst, int64_t a, int64_t rep, DType t = DType::F32) {
    op(o, {type(t), at(Buffer::UB, dst), at(Buffer::UB, a), imm(rep), imm(1), imm(1), imm(repeat_blocks_), imm(repeat_blocks_)});
  }
  void vscalar(Opcode o, int64_t dst, int64_t a, Operand s, int64_t rep) {
    op(o, {type(DType::F32), at(Buffer::UB, dst), at(Buffer::UB, a), s, imm(rep), imm(1), imm(1), imm(repeat_blocks_), imm(repeat_blocks_)});
  }
  void conv(DType to, DType from, int64_t dst, int64_t src, int64_t n) {
    const int64_t lanes = bytes_per_repeat_ / std::max(dtype_bytes(to), dtype_bytes(from));
    op(Opcode::Vconv, {type(to), type(from), at(Buffer::UB, dst), at(Buffer::UB, src), imm((n + lanes - 1) / lanes), imm(1), imm(1),
                       imm(lanes * dtype_bytes(to) / m_.vector_block_bytes), imm(lanes * dtype_bytes(from) / m_.vector_block_bytes)});
  }
  void mask_lanes(uint64_t lo) { op(Opcode::SetVectorMask, {imm(0), imm(static_cast<int64_t>(lo))}); }
  void mask_all() { op(Opcode::SetVectorMask, {imm(-1), imm(-1)}); }
  // the f32 lanes of one 16-column row (the first n0 lanes of a repeat)
  uint64_t row_lanes() const { return (uint64_t{1} << m_.cube_f16.n0) - 1; }
  int64_t vec_rep(int64_t n) const { return repeats(n, DType::F32); }
  int64_t cb_elems() const { return p_plan_.bq * m_.cube_f16.n0; }        // f32 elements of one 16-column block
  int64_t cb_rep() const { return vec_rep(cb_elems()); }
  int64_t row_rep_blocks() const { return m_.cube_f16.n0 * 4 / m_.vector_block_bytes; }  // one row of a column block
  // row-wise reduction of the bq x 16 tile at `src` into `dst` (bq values)
  void row_reduce(Opcode o, int64_t dst, int64_t src) {
    mask_lanes(row_lanes());
    op(o, {type(DType::F32), at(Buffer::UB, dst), at(Buffer::UB, src), imm(p_plan_.bq), imm(1), imm(row_rep_blocks())});
    mask_all();
  }
  // bq values at `src` spread over the 16 columns of their rows at `dst`
  void row_broadcast(int64_t dst, int64_t src) {
    mask_lanes(row_lanes());
    op(Opcode::Vbrcb, {type(DType::F32), at(Buffer::UB, dst), at(Buffer::UB, src), imm(p_plan_.bq), imm(1), imm(row_rep_blocks())});
    mask_all();
  }
  // dst = op over the column blocks at `blocks` (each bq x 16 f32)
  void fold_columns(Opcode o, int64_t dst, const std::vector<int64_t>& blocks) {
    if (blocks.size() == 1) {
      vscalar(Opcode::Vmuls, dst, blocks[0], Operand::float_(1), cb_rep());
      return;
    }
    vec2(o, dst, blocks[0], blocks[1], cb_rep());
    for (size_t c = 2; c < blocks.size(); ++c) vec2(o, dst, dst, blocks[c], cb_rep());
  }

  // ---- the program ----
  void emit_program() {
    const Plan& P = p_plan_;
    npu::Program& p = out_.program;
    p_ = &p;
    p.source_name = k_.name + ".npu";
    p.cores = static_cast<int>(P.cores);
    place_tensors();
    out_.macs = uint64_t(P.batch) * P.S * P.T * (P.D + P.E);
    if (a_.causal_offset) diagonal_tile();
    zero_stages();
    ones_blocks();
    if (P.sections) {
      for (int64_t qb = 0; qb < P.nqb; ++qb) {
        // this core's first batch point of the section: (core_id - qb * batch) mod cores
        const int64_t shift = P.cores - (qb * P.batch) % P.cores;
        op(Opcode::Add, {reg(kT1), Operand::reg_(npu::kRegCoreId), imm(shift)});
        op(Opcode::Div, {reg(kT2), reg(kT1), imm(P.cores)});
        op(Opcode::Mul, {reg(kT2), reg(kT2), imm(P.cores)});
        op(Opcode::Sub, {reg(kT1), reg(kT1), reg(kT2)});
        op(Opcode::Loop, {reg(kBatch), reg(kT1), imm(P.batch), Operand::reg_(npu::kRegCoreCount)});
        op(Opcode::Mov, {reg(kQb), imm(qb)});
        op(Opcode::Mov, {reg(kI0), imm(qb * P.bq)});
        unit_addresses();
        cur_qb_ = qb;
        unit_body(P.blocks_seen[qb], std::min(P.bq, P.S - qb * P.bq));
        cur_qb_ = -1;
        op(Opcode::EndLoop, {});
      }
    } else {
      op(Opcode::Loop, {reg(kUnit), Operand::reg_(npu::kRegCoreId), imm(P.units), Operand::reg_(npu::kRegCoreCount)});
      op(Opcode::Div, {reg(kBatch), reg(kUnit), imm(P.nqb)});
      op(Opcode::Mul, {reg(kT1), reg(kBatch), imm(P.nqb)});
      op(Opcode::Sub, {reg(kQb), reg(kUnit), reg(kT1)});
      op(Opcode::Mul, {reg(kI0), reg(kQb), imm(P.bq)});
      unit_addresses();
      unit_body(P.nkb, 0);
      op(Opcode::EndLoop, {});
    }
    op(Opcode::PipeBarrier, {Operand::pipe_(npu::Pipe::All)});
    notes();
    npu::validate_program(p);
  }

  std::map<std::string, int64_t> gm_;  // tensor -> GM byte offset

  void place_tensors() {
    const Plan& P = p_plan_;
    int64_t gm = 0;
    const int64_t align = m_.granularity(Buffer::GM);
    // Elements read past a tensor's end (the query rows up to the last block's end, the keys up to
    // the last fractal, V's columns up to Ep): a zero guard right after it.
    std::map<std::string, int64_t> guard;
    const int64_t rows_q = P.nqb * P.bq, rows_k = round_up(P.T, m_.cube_f16.m0);
    auto past_end = [&](const std::string& tensor, const std::map<std::string, int64_t>& coeff, int64_t base, const std::string& row,
                        int64_t rows, const std::string& col, int64_t cols) {
      auto stride = [&](const std::string& v) { auto it = coeff.find(v); return it == coeff.end() ? 0 : it->second; };
      int64_t end = base + (rows - 1) * stride(row) + (cols - 1) * stride(col) + 1;
      for (const auto& b : a_.batch) end += (b.extent - 1) * std::max<int64_t>(0, stride(b.var));
      const kernel::GlobalTensor* t = k_.find_tensor(tensor);
      const int64_t numel = std::accumulate(t->shape.begin(), t->shape.end(), int64_t{1}, std::multiplies<>());
      if (end > numel) guard[tensor] = std::max(guard[tensor], end - numel);
    };
    past_end(a_.q.tensor, a_.q.coeff, a_.q.base, a_.query.var, rows_q, a_.head[0].var, P.Dp);
    past_end(a_.k.tensor, a_.k.coeff, a_.k.base, a_.key.var, rows_k, a_.head[0].var, P.Dp);
    past_end(a_.v.tensor, a_.v.coeff, a_.v.base, a_.key.var, rows_k, a_.value[0].var, P.Ep);
    for (const auto& [e, r] : reads_) past_end(r.tensor, r.coeff, r.base, a_.query.var, rows_q, a_.key.var, rows_k);
    for (const auto& t : k_.tensors) {
      if (t.temporary) continue;
      npu::TensorBinding b{t.name, t.dtype, t.shape, gm, t.kind == ir::TensorKind::Input ? npu::TensorRole::In : npu::TensorRole::Out, {}};
      gm_[t.name] = gm;
      gm += b.byte_size();
      p_->tensors.push_back(b);
      if (auto it = guard.find(t.name); it != guard.end()) {  // right after the tensor, no gap
        npu::TensorBinding g{t.name + "_guard", t.dtype, {it->second}, gm, npu::TensorRole::Scratch, {}};
        gm += g.byte_size();
        p_->tensors.push_back(g);
      }
      gm = round_up(gm, align);
    }
    for (const kernel::AttentionOperand* o : {&a_.q, &a_.k, &a_.v, &a_.out})
      TESSEL_CHECK(gm_.count(o->tensor), "emit_npu attention: the record's tensor " + o->tensor + " is not a kernel tensor");
  }

  // Column minus row over the score tile (NZ: 16-column blocks of bq rows), f32, once per core.
  void diagonal_tile() {
    const Plan& P = p_plan_;
    const int64_t f = m_.cube_f16.n0, lanes = m_.vector_lanes(DType::F32), rows_per_rep = lanes / f;
    const int64_t nb = P.bk / f, reps = P.bq * P.bk * 4 / bytes_per_repeat_;
    for (int64_t l = 0; l < lanes; ++l) {
      const int64_t bit = l % m_.vector_mask_bits;
      const uint64_t b = uint64_t{1} << (bit % 64);
      op(Opcode::SetVectorMask, {imm(bit < 64 ? 0 : static_cast<int64_t>(b)), imm(bit < 64 ? static_cast<int64_t>(b) : 0)});
      op(Opcode::Vdup, {type(DType::F32), at(Buffer::UB, P.ub_diag), Operand::float_(double(l % f - l / f)), imm(1), imm(1), imm(repeat_blocks_)});
    }
    mask_all();
    if (reps > 1)  // the first repeat's pattern into every other (source repeat stride 0)
      op(Opcode::Vmuls, {type(DType::F32), at(Buffer::UB, P.ub_diag + bytes_per_repeat_), at(Buffer::UB, P.ub_diag), Operand::float_(1), imm(reps - 1),
                         imm(1), imm(1), imm(repeat_blocks_), imm(0)});
    const int64_t cb = cb_elems() * 4;
    for (int64_t c = 1; c < nb; ++c)
      vscalar(Opcode::Vadds, P.ub_diag + c * cb, P.ub_diag + c * cb, Operand::float_(double(c * f)), cb_rep());
    const int64_t cb_blocks = cb / m_.vector_block_bytes;
    for (int64_t g = 1; g < P.bq / rows_per_rep; ++g)
      op(Opcode::Vadds, {type(DType::F32), at(Buffer::UB, P.ub_diag + g * bytes_per_repeat_), at(Buffer::UB, P.ub_diag + g * bytes_per_repeat_),
                         Operand::float_(double(-g * rows_per_rep)), imm(nb), imm(1), imm(1), imm(cb_blocks), imm(cb_blocks)});
  }

  // kQ, kK, kV, kOut (and the step tensors' registers) for batch point kBatch, first row kI0
  void unit_addresses() {
    const std::pair<const kernel::AttentionOperand*, uint8_t> ops[] = {{&a_.q, kQ}, {&a_.k, kK}, {&a_.v, kV}, {&a_.out, kOut}};
    for (const auto& [o, r] : ops) op(Opcode::Mov, {reg(r), imm(gm_.at(o->tensor) + o->base * dtype_bytes(o->dtype))});
    // the batch point's indices, innermost first
    op(Opcode::Mov, {reg(kRem), reg(kBatch)});
    for (size_t n = a_.batch.size(); n-- > 0;) {
      const kernel::ContractionDim& b = a_.batch[n];
      op(Opcode::Div, {reg(kT1), reg(kRem), imm(b.extent)});
      op(Opcode::Mul, {reg(kT2), reg(kT1), imm(b.extent)});
      op(Opcode::Sub, {reg(kIdx), reg(kRem), reg(kT2)});
      op(Opcode::Mov, {reg(kRem), reg(kT1)});
      for (const auto& [o, r] : ops)
        if (const int64_t s = o->stride(b.var); s != 0) {
          op(Opcode::Mul, {reg(kT2), reg(kIdx), imm(s * dtype_bytes(o->dtype))});
          op(Opcode::Add, {reg(r), reg(r), reg(kT2)});
        }
    }
    for (const auto& [o, r] : {std::pair{&a_.q, kQ}, std::pair{&a_.out, kOut}}) {
      op(Opcode::Mul, {reg(kT2), reg(kI0), imm(o->stride(a_.query.var) * dtype_bytes(o->dtype))});
      op(Opcode::Add, {reg(r), reg(r), reg(kT2)});
    }
    for (const auto& [e, r] : reads_) {  // base + batch point + first query row
      op(Opcode::Mov, {reg(r.reg), imm(gm_.at(r.tensor) + r.base * dtype_bytes(r.dtype))});
      op(Opcode::Mul, {reg(kT2), reg(kI0), imm(r.coeff.at(a_.query.var) * dtype_bytes(r.dtype))});
      op(Opcode::Add, {reg(r.reg), reg(r.reg), reg(kT2)});
      int64_t inner = 1;
      for (size_t n = a_.batch.size(); n-- > 0;) {  // index n of the batch point = (kBatch / inner) % extent
        const kernel::ContractionDim& b = a_.batch[n];
        if (auto it = r.coeff.find(b.var); it != r.coeff.end() && it->second != 0) {
          op(Opcode::Div, {reg(kT1), reg(kBatch), imm(inner)});
          op(Opcode::Div, {reg(kT2), reg(kT1), imm(b.extent)});
          op(Opcode::Mul, {reg(kT2), reg(kT2), imm(b.extent)});
          op(Opcode::Sub, {reg(kT1), reg(kT1), reg(kT2)});
          op(Opcode::Mul, {reg(kT1), reg(kT1), imm(it->second * dtype_bytes(r.dtype))});
          op(Opcode::Add, {reg(r.reg), reg(r.reg), reg(kT1)});
        }
        inner *= b.extent;
      }
    }
  }

  int64_t block_keys(int64_t kb) const { return std::min(p_plan_.bk, p_plan_.T - kb * p_plan_.bk); }
  int64_t block_cols(int64_t kb) const { return round_up(block_keys(kb), m_.cube_f16.n0); }

  // rows x cols f16 of GM (row stride in elements) -> L1 NZ of rows x padded columns: dma_in_nz,
  // or where the columns are not whole fractals, through UB (`stage`, its padding zeroed once):
  // the rows at a fractal-row pitch, then one dma_out per 16-column block.
  // (Q's padding is zero whenever D is not whole fractals, so K's padded columns may hold anything
  // finite: the next row's values)
  // Column block c lands at l1 + c x pitch x 32 bytes (pitch: rows of the NZ layout, >= rows).
  // `scaled`: Q's block, multiplied by the folded scale in the stage.
  void to_l1(int64_t l1, Operand gm, int64_t rows, int64_t cols, int64_t padded, int64_t stride, int64_t stage, int64_t pitch = 0,
             bool scaled = false) {
    const int64_t f = m_.cube_f16.k0;
    if (pitch == 0) pitch = rows;
    if (stage < 0 && pitch == rows) {
      op(Opcode::DmaInNz, {type(DType::F16), at(Buffer::L1, l1), gm, imm(rows), imm(padded), imm(stride)});
      return;
    }
    if (stage < 0) {
      for (int64_t c = 0; c < padded / f; ++c) {
        Operand src = gm;
        src.imm += c * f * 2;
        op(Opcode::DmaInNz, {type(DType::F16), at(Buffer::L1, l1 + c * pitch * f * 2), src, imm(rows), imm(f), imm(stride)});
      }
      return;
    }
    op(Opcode::DmaIn, {at(Buffer::UB, stage), gm, imm(rows), imm(cols * 2), imm((stride - cols) * 2), imm((padded - cols) * 2)});
    if (scaled) scale_q(stage);
    for (int64_t c = 0; c < padded / f; ++c)
      op(Opcode::DmaOut, {at(Buffer::L1, l1 + c * pitch * f * 2), at(Buffer::UB, stage + c * f * 2), imm(rows), imm(f * 2), imm((padded - f) * 2), imm(0)});
  }
  // V's block of ones in both L1 slots, once per core (V's loads never write it)
  void ones_blocks() {
    const Plan& P = p_plan_;
    const int64_t f = m_.cube_f16.k0, bytes = P.bk * f * 2;
    op(Opcode::Vdup, {type(DType::F16), at(Buffer::UB, P.ub_ones), Operand::float_(1), imm((bytes + bytes_per_repeat_ - 1) / bytes_per_repeat_), imm(1),
                      imm(repeat_blocks_)});
    for (int s = 0; s < 2 * P.group; ++s)
      op(Opcode::DmaOut, {at(Buffer::L1, P.l1_v[s] + P.Ep / f * P.bk * f * 2), at(Buffer::UB, P.ub_ones), imm(1), imm(bytes), imm(0), imm(0)});
  }
  void zero_stages() {
    const Plan& P = p_plan_;
    const std::pair<int64_t, int64_t> stages[] = {{P.ub_stage_q, P.bq * P.Dp * 2}, {P.ub_stage_k, P.bk * P.Dp * 2}, {P.ub_stage_v, P.bk * P.Ep * 2}};
    for (const auto& [at_, bytes] : stages)
      if (at_ >= 0)
        op(Opcode::Vdup, {type(DType::F16), at(Buffer::UB, at_), Operand::float_(0), imm((bytes + bytes_per_repeat_ - 1) / bytes_per_repeat_), imm(1),
                          imm(repeat_blocks_)});
  }

  void load_kv(int64_t kb) {
    const Plan& P = p_plan_;
    const int s = l1_slot(kb), cols = int(block_cols(kb));
    const int64_t sj = a_.k.stride(a_.key.var), vj = a_.v.stride(a_.key.var);
    to_l1(P.l1_k[s], at(Buffer::GM, kb * P.bk * sj * 2, kK), cols, P.D, P.Dp, sj, P.ub_stage_k);
    to_l1(P.l1_v[s], at(Buffer::GM, kb * P.bk * vj * 2, kV), cols, P.E, P.Ep, vj, P.ub_stage_v, P.bk);
  }
  // S(kb) = Q Kᵀ into L0C slot kb % 2
  void scores(int64_t kb) {
    const Plan& P = p_plan_;
    const int s = kb % 2, f = int(m_.cube_f16.m0);
    const int64_t n = block_cols(kb);
    for (int64_t k0 = 0; k0 < n; k0 += P.pk) {  // a piece: Kᵀ's columns k0.. into L0B, their scores' column blocks
      const int64_t pn = std::min(P.pk, n - k0), l0b = l0b_region(P.l0b_k[s]);
      op(Opcode::Load2d, {type(DType::F16), at(Buffer::L0B, l0b), at(Buffer::L1, P.l1_k[l1_slot(kb)] + k0 / f * m_.cube_f16.b_fractal_bytes()), imm(P.Dp / f), imm(pn / f), imm(n / f),
                          imm(1), imm(0)});
      op(Opcode::Mmad, {type(DType::F16), at(Buffer::L0C, P.l0c_s[s] + k0 / f * P.bq * f * 4), at(Buffer::L0A, P.l0a_q), at(Buffer::L0B, l0b),
                        imm(P.bq), imm(P.Dp), imm(pn), imm(1)});
    }
  }
  // The L0B region of the next load: the plan's slot, or in pieces the half after the last one.
  int l0b_turn_ = 0;
  int64_t l0b_region(int64_t slot) {
    if (p_plan_.l0b != Plan::L0b::Pieces) return slot;
    return p_plan_.l0b_k[l0b_turn_++ % 2];
  }
  // The L1 slot of key block kb's K, V and P: a group in flight and the next one loading.
  int l1_slot(int64_t kb) const { return int(kb % (2 * p_plan_.group)); }
  // Key block kb's score tile in UB (P f16 over it when the group has two).
  int64_t tile_of(int64_t kb) const { return kb % 2 == 0 ? p_plan_.ub_s : p_plan_.ub_s2; }

  // The steps and the masks on key block kb's score tile.
  void tile_steps(int64_t kb) {
    const Plan& P = p_plan_;
    const int f = int(m_.cube_f16.m0);
    const int64_t cols = block_cols(kb), nb = cols / f, tile = P.bq * cols, ub = tile_of(kb);
    if (a_.causal_offset) op(Opcode::Sub, {reg(kDiag), imm(kb * P.bk - *a_.causal_offset), reg(kI0)});
    // the block's last key kb bk + cols - 1 against the first row's diagonal i0 + c (i0 >= 0 where
    // the query block is not known statically: a decode's keys are all visible)
    const int64_t first_row = cur_qb_ < 0 ? 0 : cur_qb_ * P.bq;
    mask_needed_ = a_.causal_offset && kb * P.bk + cols - 1 > first_row + *a_.causal_offset;
    for (const kernel::AttentionExpr& step : a_.steps) {
      const int64_t chunk = step_chunk(*step.expr, tile);
      for (int64_t c0 = 0; c0 < tile; c0 += chunk) {
        const int64_t n = std::min(chunk, tile - c0);
        diag_region_ = a_.causal_offset ? P.ub_diag + c0 * 4 : -1;
        cur_kb_ = kb, cur_c0_ = c0;
        evaluate(step, {{"score", Value{false, 0, ub + c0 * 4, DType::F32}}}, n, ub + c0 * 4, DType::F32);
      }
    }
    diag_region_ = -1;
    if (const int64_t valid = block_keys(kb) % f; valid != 0) {  // keys past T: -inf
      uint64_t lo = 0;
      for (int64_t l = 0; l < m_.vector_lanes(DType::F32) && l < 64; ++l)
        if (l % f >= valid) lo |= uint64_t{1} << l;
      mask_lanes(lo);
      op(Opcode::Vdup, {type(DType::F32), at(Buffer::UB, ub + (nb - 1) * cb_elems() * 4), Operand::float_(-INFINITY), imm(cb_rep()), imm(1),
                        imm(repeat_blocks_)});
      mask_all();
    }
  }

  // The vector work on group g's score tiles (key blocks kb0 .. kb1 - 1 of the unit's nkb) up to
  // their P in L0A, and their P V accumulated into one L0C region; the next group's K and V
  // loaded and its scores computed meanwhile.
  void softmax(int64_t g, int64_t nkb) {
    const Plan& P = p_plan_;
    const int f = int(m_.cube_f16.m0);
    const int64_t kb0 = g * P.group, kb1 = std::min(nkb, kb0 + P.group), next = std::min(nkb, kb1 + P.group);
    // The next group's loads first (S dispatches in program order and stalls on a full vector
    // queue); its scores before this group's moves where they take other L0C slots (one block a
    // group), else after them.
    for (int64_t kb = kb1; kb < next; ++kb) {
      load_kv(kb);
      if (P.group == 1) scores(kb);
    }
    for (int64_t kb = kb0; kb < kb1; ++kb)
      op(Opcode::MovL0c, {type(DType::F32), at(Buffer::UB, tile_of(kb)), at(Buffer::L0C, P.l0c_s[kb % 2]), imm(P.bq / f * (block_cols(kb) / f)), imm(0)});
    if (P.group > 1)
      for (int64_t kb = kb1; kb < next; ++kb) scores(kb);
    for (int64_t kb = kb0; kb < kb1; ++kb) tile_steps(kb);
    const bool first = g == 0;
    const int s = int(g % 2);
    const int64_t m_old = P.ub_m[1 - s], m_new = P.ub_m[s];
    std::vector<int64_t> blocks;  // every column block of the group's tiles
    const int64_t cb = cb_elems() * 4;
    for (int64_t kb = kb0; kb < kb1; ++kb)
      for (int64_t c = 0; c < block_cols(kb) / f; ++c) blocks.push_back(tile_of(kb) + c * cb);
    fold_columns(Opcode::Vmax, P.ub_tmp, blocks);
    row_reduce(Opcode::Vcmax, first ? m_new : P.ub_bm, P.ub_tmp);
    if (!first) {
      vec2(Opcode::Vmax, m_new, m_old, P.ub_bm, vec_rep(P.bq));
      vec2(Opcode::Vsub, P.ub_c[s], m_old, m_new, vec_rep(P.bq));
      vec1(Opcode::Vexp, P.ub_c[s], P.ub_c[s], vec_rep(P.bq));
    }
    row_broadcast(P.ub_bc, m_new);
    for (const int64_t b : blocks) vec2(Opcode::Vsub, b, b, P.ub_bc, cb_rep());
    for (int64_t kb = kb0; kb < kb1; ++kb) {
      const int64_t tile = P.bq * block_cols(kb), p = P.ub_p[kb % 2];
      // p = exp(x) with x = logit - m <= 0 rounded to f16 first, computed on f16 lanes (twice the
      // f32 lanes a repeat): p's absolute error from x's rounding is at most max_x e^x |x| 2^-11 =
      // e^-1 2^-11, below p's own rounding to f16 for the cube (2^-11 at p = 1); -inf and the causal
      // -1e30 become -inf in f16, p = 0. (In place over a group's tile: each lane is read before
      // the narrower result lands, at or below it.)
      conv(DType::F16, DType::F32, p, tile_of(kb), tile);
      vec1(Opcode::Vexp, p, p, repeats(tile, DType::F16), DType::F16);
    }
    // P(kb) to L0A; V(kb) to L0B; P V into L0C, the group's blocks accumulated
    for (int64_t kb = kb0; kb < kb1; ++kb) {
      const int64_t cols = block_cols(kb), tile = P.bq * cols;
      const int l1 = l1_slot(kb), sl = int(kb % 2);
      op(Opcode::DmaOut, {at(Buffer::L1, P.l1_p[l1]), at(Buffer::UB, P.ub_p[sl]), imm(1), imm(tile * 2), imm(0), imm(0)});
      for (int64_t k0 = 0; k0 < cols; k0 += P.pk) {  // a piece: P's columns and V's rows k0..
        const int64_t pn = std::min(P.pk, cols - k0), l0a = P.l0a_p[sl] + P.bq * k0 * 2, l0b = l0b_region(P.l0b_v[sl]);
        op(Opcode::Load2d, {type(DType::F16), at(Buffer::L0A, l0a), at(Buffer::L1, P.l1_p[l1] + P.bq * k0 * 2), imm(P.bq / f), imm(pn / f), imm(1),
                            imm(P.bq / f), imm(0)});
        op(Opcode::Load2d, {type(DType::F16), at(Buffer::L0B, l0b), at(Buffer::L1, P.l1_v[l1] + k0 / f * m_.cube_f16.b_fractal_bytes()), imm(pn / f), imm(P.Ev / f), imm(1),
                            imm(P.bk / f), imm(1)});
        op(Opcode::Mmad, {type(DType::F16), at(Buffer::L0C, P.l0c_o[s]), at(Buffer::L0A, l0a), at(Buffer::L0B, l0b), imm(P.bq), imm(pn), imm(P.Ev),
                          imm(kb == kb0 && k0 == 0 ? 1 : 0)});
      }
    }
  }
  // acc = acc c + P V (group g)
  void accumulate(int64_t g) {
    const Plan& P = p_plan_;
    const int s = int(g % 2), f = int(m_.cube_f16.m0);
    const int64_t fr = P.bq / f * (P.Ev / f);
    if (g == 0) {
      op(Opcode::MovL0c, {type(DType::F32), at(Buffer::UB, P.ub_acc), at(Buffer::L0C, P.l0c_o[s]), imm(fr), imm(0)});
      return;
    }
    row_broadcast(P.ub_bcc, P.ub_c[s]);
    const int64_t cb = cb_elems() * 4;
    for (int64_t c = 0; c < P.Ev / f; ++c) vec2(Opcode::Vmul, P.ub_acc + c * cb, P.ub_acc + c * cb, P.ub_bcc, cb_rep());
    op(Opcode::MovL0c, {type(DType::F32), at(Buffer::UB, P.ub_pv), at(Buffer::L0C, P.l0c_o[s]), imm(fr), imm(0)});
    vec2(Opcode::Vadd, P.ub_acc, P.ub_acc, P.ub_pv, vec_rep(P.bq * P.Ev));
  }

  // One unit over its first nkb key blocks; `rows` valid query rows, 0: from kI0 in a register.
  void unit_body(int64_t nkb, int64_t rows) {
    const Plan& P = p_plan_;
    const int f = int(m_.cube_f16.m0);
    to_l1(P.l1_q, at(Buffer::GM, 0, kQ), P.bq, P.D, P.Dp, a_.q.stride(a_.query.var), P.ub_stage_q, 0, P.fold_scale);
    op(Opcode::Load2d, {type(DType::F16), at(Buffer::L0A, P.l0a_q), at(Buffer::L1, P.l1_q), imm(P.bq / f), imm(P.Dp / f), imm(1), imm(P.bq / f), imm(0)});
    for (int64_t kb = 0; kb < std::min(nkb, P.group); ++kb) {
      load_kv(kb);
      scores(kb);
    }
    const int64_t groups = (nkb + P.group - 1) / P.group;
    for (int64_t g = 0; g < groups; ++g) {
      softmax(g, nkb);
      if (g > 0) accumulate(g - 1);  // the cube's P·V of group g - 1 ran while the vector did group g
    }
    accumulate(groups - 1);
    epilogue(rows);
  }

  void epilogue(int64_t rows) {
    const Plan& P = p_plan_;
    const int64_t f = m_.cube_f16.n0, cb = cb_elems() * 4, osz = dtype_bytes(a_.out.dtype);
    const int64_t l = P.ub_acc + P.Ep / f * cb;  // the row sums, across the 16 columns of the last block
    for (int64_t c = 0; c < P.Ep / f; ++c) {
      const int64_t o = P.ub_acc + c * cb, dst = P.ub_out + c * cb_elems() * osz;
      if (a_.normalise_first) vec2(Opcode::Vdiv, o, o, l, cb_rep());
      const Value O{false, 0, o, DType::F32}, Z{false, 0, l, DType::F32};
      if (a_.epilogue.expr) {
        evaluate(a_.epilogue, {{"O", O}, {"Z", Z}}, cb_elems(), dst, a_.out.dtype);
      } else if (a_.out.dtype == DType::F32) {
        vscalar(Opcode::Vmuls, dst, o, Operand::float_(1), cb_rep());
      } else {
        conv(a_.out.dtype, DType::F32, dst, o, cb_elems());
      }
    }
    const int64_t tail = P.S - (P.nqb - 1) * P.bq;
    if (rows > 0 || tail == P.bq || P.nqb == 1) {
      store(imm(rows > 0 ? rows : tail));
      return;
    }
    // the unit's valid rows: bq + (S - i0 < bq) x (S - i0 - bq), in a register (arithmetic, no
    // loop of one or no trip)
    op(Opcode::Sub, {reg(kRows), imm(P.S - P.bq), reg(kI0)});
    op(Opcode::Slt, {reg(kT1), reg(kRows), imm(0)});
    op(Opcode::Mul, {reg(kRows), reg(kRows), reg(kT1)});
    op(Opcode::Add, {reg(kRows), reg(kRows), imm(P.bq)});
    store(reg(kRows));
  }
  void store(Operand rows) {
    const Plan& P = p_plan_;
    const int64_t f = m_.cube_f16.n0, osz = dtype_bytes(a_.out.dtype), row = a_.out.stride(a_.query.var) * osz;
    for (int64_t c = 0; c < P.Ep / f; ++c) {
      const int64_t cols = std::min(f, P.E - c * f), burst = cols * osz;
      op(Opcode::DmaOut, {at(Buffer::GM, c * f * osz, kOut), at(Buffer::UB, P.ub_out + c * cb_elems() * osz), rows, imm(burst),
                          imm(f * osz - burst), imm(row - burst)});
    }
  }

  void notes() {
    const Plan& P = p_plan_;
    out_.notes.push_back(fmt::format("fused attention (online softmax): {} batch point(s) x {} query block(s) of {} rows over {} core(s); "
                                     "{} key block(s) of {} keys; head {} value {}{}{}",
                                     P.batch, P.nqb, P.bq, P.cores, P.nkb, P.bk, P.D, P.E,
                                     !a_.causal_offset ? std::string()
                                     : P.sections ? fmt::format(", causal (j <= i + {}): a section per query block, the key blocks above its diagonal skipped",
                                                                *a_.causal_offset)
                                                  : fmt::format(", causal (j <= i + {}): every key block computed and masked", *a_.causal_offset),
                                     P.fold_scale ? fmt::format("; the scores' scale {:.6g} folded into Q (once per query block)", q_scale_) : std::string()));
    out_.notes.push_back(fmt::format("per key block: cube Q·Kᵀ into L0C, UB steps / row max (vcmax) / exp, P f16 -> L1 -> L0A, cube P·[V | ones] "
                                     "(the row sums), {}; L0B {}, L0A P slots {}; no {} x {} scores in GM",
                                     P.group == 2 ? "two key blocks a group: one row max, their P·V accumulated in L0C, the context rescaled in UB once a group, one group behind"
                                                  : "context rescaled in UB one block behind",
                                     P.l0b == Plan::L0b::TwoSlots ? "K and V in two slots" : P.l0b == Plan::L0b::OneSlot ? "K and V in one slot"
                                     : P.l0b == Plan::L0b::Pieces ? fmt::format("two halves K and V take in turn, pieces of {} keys", P.pk)
                                                                  : std::string("one region K and V take in turn"),
                                     P.l0a_p_slots, P.S, P.T));
  }

  const kernel::Attention& a_;
  NpuKernel& out_;
  Plan p_plan_;
};

}  // namespace

std::string why_not_attention(const kernel::Kernel& k, const isa::Hierarchy& target) {
  if (!k.attention) return "kernel " + k.name + ": no fused attention record";
  NpuKernel unused;
  return AttentionEmitter(k, isa::npu_machine(target), unused).why_not();
}

NpuKernel emit_attention(const kernel::Kernel& k, const isa::Hierarchy& target) {
  TESSEL_CHECK(k.attention, "emit_attention: the kernel has no attention record");
  NpuKernel out;
  AttentionEmitter emitter(k, isa::npu_machine(target), out);
  if (std::string why = emitter.why_not(); !why.empty()) throw UserError(why);
  emitter.emit();
  return out;
}

}  // namespace tessel::emit_npu
