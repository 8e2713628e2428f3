#include "compiler/poly/isl_util.h"

#include <chrono>

#include <isl/aff.h>
#include <isl/ast.h>
#include <isl/ast_build.h>
#include <isl/ctx.h>
#include <isl/options.h>
#include <isl/schedule.h>
#include <isl/val.h>
#include <isl/version.h>
#include <isl/ast_build.h>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>

#include "isa/base/error.h"

namespace tessel::poly {

std::string isl_version_string() {
  std::string v = isl_version();  // static string owned by isl, ends with a newline
  while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
  return v;
}

IslContext::IslContext() : ctx_(isl_ctx_alloc()) {
  // Errors become isl::exception (cpp.h checks the error state after each call); do not abort.
  isl_options_set_on_error(ctx_.get(), ISL_ON_ERROR_CONTINUE);
}

IslContext::~IslContext() { isl_ctx_free(ctx_.release()); }

void apply_scheduler_options(isl::ctx ctx, const SchedulerOptions& o) {
  isl_ctx* c = ctx.get();
  isl_options_set_schedule_max_constant_term(c, o.max_constant_term);
  isl_options_set_schedule_max_coefficient(c, o.max_coefficient);
  isl_options_set_schedule_outer_coincidence(c, 0);
  switch (o.fusion) {
    case FusionStrategy::Max:
      isl_options_set_schedule_serialize_sccs(c, 0);
      isl_options_set_schedule_whole_component(c, 1);
      break;
    case FusionStrategy::Conservative:
      isl_options_set_schedule_serialize_sccs(c, 0);
      isl_options_set_schedule_whole_component(c, 0);
      break;
    case FusionStrategy::None:
      isl_options_set_schedule_serialize_sccs(c, 1);
      isl_options_set_schedule_whole_component(c, 0);
      break;
  }
}

void set_operation_quota(isl::ctx ctx, unsigned long max_operations) {
  isl_ctx_set_max_operations(ctx.get(), max_operations);
  isl_ctx_reset_operations(ctx.get());
}

IslDeadline::IslDeadline(isl::ctx ctx, double seconds) : ctx_(ctx) {
  if (seconds <= 0) return;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  watchdog_ = std::thread([this, deadline] {
    std::unique_lock<std::mutex> lock(mutex_);
    if (wake_.wait_until(lock, deadline, [this] { return done_; })) return;
    expired_ = true;
    isl_ctx_abort(ctx_.get());
  });
}

IslDeadline::~IslDeadline() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
  }
  wake_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  isl_ctx_resume(ctx_.get());
}

bool IslDeadline::expired() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return expired_;
}

bool quota_was_hit(isl::ctx ctx) { return isl_ctx_last_error(ctx.get()) == isl_error_quota; }
void reset_last_error(isl::ctx ctx) { isl_ctx_reset_error(ctx.get()); }

int64_t val_to_int(const isl::val& v) {
  TESSEL_CHECK(v.is_int(), "isl value " + str(v) + " is not an integer");
  return isl_val_get_num_si(v.get());
}

isl::map lex_lt_map(const isl::space& set_space) { return isl::manage(isl_map_lex_lt(set_space.copy())); }

isl::schedule schedule_from_map(const isl::union_set& domain, const isl::union_map& order) {
  isl_schedule* s = isl_schedule_from_domain(domain.copy());
  isl_union_pw_multi_aff* upma = isl_union_pw_multi_aff_from_union_map(order.intersect_domain(domain).release());
  isl_multi_union_pw_aff* mupa = isl_multi_union_pw_aff_from_union_pw_multi_aff(upma);
  return isl::manage(isl_schedule_insert_partial_schedule(s, mupa));
}

namespace {

using kernel::Expr;
using kernel::ExprKind;

Expr convert_expr(isl_ast_expr* e);  // borrowed

Expr op_args(ExprKind k, isl_ast_expr* e) {
  std::vector<Expr> args;
  int n = isl_ast_expr_op_get_n_arg(e);
  for (int i = 0; i < n; ++i) {
    isl_ast_expr* a = isl_ast_expr_op_get_arg(e, i);
    args.push_back(convert_expr(a));
    isl_ast_expr_free(a);
  }
  // min/max with more than two operands fold left
  while ((k == ExprKind::Min || k == ExprKind::Max || k == ExprKind::Add || k == ExprKind::And ||
          k == ExprKind::Or) && args.size() > 2) {
    Expr l = Expr::make(k, {args[0], args[1]});
    args.erase(args.begin());
    args[0] = l;
  }
  return Expr::make(k, std::move(args));
}

Expr convert_expr(isl_ast_expr* e) {
  switch (isl_ast_expr_get_type(e)) {
    case isl_ast_expr_int: {
      isl_val* v = isl_ast_expr_int_get_val(e);
      int64_t x = isl_val_get_num_si(v);
      isl_val_free(v);
      return Expr::integer(x);
    }
    case isl_ast_expr_id: {
      isl_id* id = isl_ast_expr_id_get_id(e);
      std::string n = isl_id_get_name(id);
      isl_id_free(id);
      return Expr::var(n);
    }
    case isl_ast_expr_op:
      break;
    default:
      TESSEL_CHECK(false, "isl AST: unexpected expression kind");
  }
  switch (isl_ast_expr_op_get_type(e)) {
    case isl_ast_expr_op_add: return op_args(ExprKind::Add, e);
    case isl_ast_expr_op_sub: return op_args(ExprKind::Sub, e);
    case isl_ast_expr_op_mul: return op_args(ExprKind::Mul, e);
    case isl_ast_expr_op_minus: return op_args(ExprKind::Neg, e);
    case isl_ast_expr_op_min: return op_args(ExprKind::Min, e);
    case isl_ast_expr_op_max: return op_args(ExprKind::Max, e);
    case isl_ast_expr_op_fdiv_q:
    case isl_ast_expr_op_pdiv_q:
    case isl_ast_expr_op_div: return op_args(ExprKind::FloorDiv, e);
    case isl_ast_expr_op_pdiv_r:
    case isl_ast_expr_op_zdiv_r: return op_args(ExprKind::Mod, e);
    case isl_ast_expr_op_eq: return op_args(ExprKind::Eq, e);
    case isl_ast_expr_op_le: return op_args(ExprKind::Le, e);
    case isl_ast_expr_op_lt: return op_args(ExprKind::Lt, e);
    case isl_ast_expr_op_ge: return op_args(ExprKind::Ge, e);
    case isl_ast_expr_op_gt: return op_args(ExprKind::Gt, e);
    case isl_ast_expr_op_and:
    case isl_ast_expr_op_and_then: return op_args(ExprKind::And, e);
    case isl_ast_expr_op_or:
    case isl_ast_expr_op_or_else: return op_args(ExprKind::Or, e);
    case isl_ast_expr_op_select:
    case isl_ast_expr_op_cond: return op_args(ExprKind::Select, e);
    default:
      TESSEL_CHECK(false, "isl AST: unsupported operator in generated code");
  }
  return {};
}

std::vector<AstNode> convert_list(isl_ast_node_list* list);

AstNode convert_node(isl_ast_node* n) {  // borrowed
  AstNode out;
  switch (isl_ast_node_get_type(n)) {
    case isl_ast_node_for: {
      out.kind = AstNode::Kind::For;
      isl_ast_expr* it = isl_ast_node_for_get_iterator(n);
      out.iterator = convert_expr(it).name;
      isl_ast_expr_free(it);
      isl_ast_expr* init = isl_ast_node_for_get_init(n);
      out.init = convert_expr(init);
      isl_ast_expr_free(init);
      isl_ast_expr* cond = isl_ast_node_for_get_cond(n);
      out.cond = convert_expr(cond);
      isl_ast_expr_free(cond);
      isl_ast_expr* inc = isl_ast_node_for_get_inc(n);
      out.inc = convert_expr(inc);
      isl_ast_expr_free(inc);
      isl_ast_node* body = isl_ast_node_for_get_body(n);
      out.children.push_back(convert_node(body));
      isl_ast_node_free(body);
      break;
    }
    case isl_ast_node_if: {
      out.kind = AstNode::Kind::If;
      isl_ast_expr* cond = isl_ast_node_if_get_cond(n);
      out.if_cond = convert_expr(cond);
      isl_ast_expr_free(cond);
      isl_ast_node* t = isl_ast_node_if_get_then_node(n);
      out.children.push_back(convert_node(t));
      isl_ast_node_free(t);
      if (isl_ast_node_if_has_else_node(n) == isl_bool_true) {
        isl_ast_node* e = isl_ast_node_if_get_else_node(n);
        out.else_children.push_back(convert_node(e));
        isl_ast_node_free(e);
      }
      break;
    }
    case isl_ast_node_block: {
      out.kind = AstNode::Kind::Block;
      isl_ast_node_list* l = isl_ast_node_block_get_children(n);
      out.children = convert_list(l);
      isl_ast_node_list_free(l);
      break;
    }
    case isl_ast_node_user: {
      out.kind = AstNode::Kind::User;
      isl_ast_expr* call = isl_ast_node_user_get_expr(n);
      isl_ast_expr* fn = isl_ast_expr_op_get_arg(call, 0);
      out.user_name = convert_expr(fn).name;
      isl_ast_expr_free(fn);
      int nargs = isl_ast_expr_op_get_n_arg(call);
      for (int i = 1; i < nargs; ++i) {
        isl_ast_expr* a = isl_ast_expr_op_get_arg(call, i);
        out.user_args.push_back(convert_expr(a));
        isl_ast_expr_free(a);
      }
      isl_ast_expr_free(call);
      break;
    }
    default:
      TESSEL_CHECK(false, "isl AST: unexpected node kind (mark nodes are not generated from flat schedules)");
  }
  return out;
}

std::vector<AstNode> convert_list(isl_ast_node_list* list) {
  std::vector<AstNode> out;
  int n = isl_ast_node_list_n_ast_node(list);
  for (int i = 0; i < n; ++i) {
    isl_ast_node* c = isl_ast_node_list_get_ast_node(list, i);
    out.push_back(convert_node(c));
    isl_ast_node_free(c);
  }
  return out;
}

// value = num / den with num an integer expression.
Expr aff_numerator(isl_aff* aff, const std::vector<std::string>& in_names,
                   const std::map<std::string, int64_t>& params, int64_t* den_out) {
  isl_val* dv = isl_aff_get_denominator_val(aff);
  int64_t den = isl_val_get_num_si(dv);
  isl_val_free(dv);
  auto scaled = [&](isl_val* v) {  // v * den, integer; takes v
    v = isl_val_mul(v, isl_val_int_from_si(isl_aff_get_ctx(aff), den));
    int64_t x = isl_val_get_num_si(v);
    isl_val_free(v);
    return x;
  };
  Expr sum = Expr::integer(scaled(isl_aff_get_constant_val(aff)));
  int np = isl_aff_dim(aff, isl_dim_param);
  for (int i = 0; i < np; ++i) {
    int64_t c = scaled(isl_aff_get_coefficient_val(aff, isl_dim_param, i));
    if (!c) continue;
    std::string name = isl_aff_get_dim_name(aff, isl_dim_param, i);
    auto it = params.find(name);
    TESSEL_CHECK(it != params.end(), "aff_to_expr: size parameter " + name + " has no value");
    sum = sum + Expr::integer(c * it->second);
  }
  int ni = isl_aff_dim(aff, isl_dim_in);
  for (int i = 0; i < ni; ++i) {
    int64_t c = scaled(isl_aff_get_coefficient_val(aff, isl_dim_in, i));
    if (!c) continue;
    Expr v = Expr::var(in_names.at(i));
    sum = sum + (c == 1 ? v : Expr::make(kernel::ExprKind::Mul, {Expr::integer(c), v}));
  }
  int nd = isl_aff_dim(aff, isl_dim_div);
  for (int i = 0; i < nd; ++i) {
    int64_t c = scaled(isl_aff_get_coefficient_val(aff, isl_dim_div, i));
    if (!c) continue;
    isl_aff* d = isl_aff_get_div(aff, i);
    int64_t dden = 1;
    Expr dn = aff_numerator(d, in_names, params, &dden);
    isl_aff_free(d);
    Expr fl = dden == 1 ? dn : Expr::make(kernel::ExprKind::FloorDiv, {dn, Expr::integer(dden)});
    sum = sum + (c == 1 ? fl : Expr::make(kernel::ExprKind::Mul, {Expr::integer(c), fl}));
  }
  *den_out = den;
  return sum;
}

}  // namespace

namespace {

// AST generation is the costliest isl step of a tiled convolution (a 3x3 kernel's 25-dimension
// schedule: about a second), and a network repeats identical kernels (ResNet-50: 12 of its 16 3x3
// convolutions, each kernel's statements named S0, S1, ... by position). The AST is a function of
// the parameter-free schedule alone (default AST options, no context: isl_ast_build_alloc), so it
// is kept by that schedule's isl text for the process; bounded so a long tuning run stays small.
// TESSEL_NO_COMPILE_MEMO=1 turns it off (to compare outputs and times with and without it).
class AstMemo {
 public:
  std::optional<AstNode> find(const std::string& schedule) {
    if (off_) return std::nullopt;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = asts_.find(schedule);
    if (it == asts_.end()) return std::nullopt;
    return it->second;
  }
  void keep(const std::string& schedule, const AstNode& ast) {
    if (off_) return;
    std::lock_guard<std::mutex> lock(mutex_);
    if (asts_.size() >= kMaxEntries) asts_.clear();
    asts_.emplace(schedule, ast);
  }

 private:
  static constexpr size_t kMaxEntries = 256;
  const bool off_ = [] {
    const char* v = std::getenv("TESSEL_NO_COMPILE_MEMO");
    return v && std::string(v) == "1";
  }();
  std::mutex mutex_;
  std::map<std::string, AstNode> asts_;
};

AstMemo& ast_memo() {
  static AstMemo memo;
  return memo;
}

std::string union_map_text(isl_union_map* m) {
  char* s = isl_union_map_to_str(m);
  TESSEL_CHECK(s, "isl could not print the tiled schedule (tile pass)");
  std::string text(s);
  free(s);
  return text;
}

}  // namespace

AstNode build_ast(const isl::union_map& schedule, const isl::set& context) {
  // The sizes are fixed by the context: generate without parameters (faster, same code).
  isl_union_map* fixed = isl_union_map_intersect_params(schedule.copy(), context.copy());
  fixed = isl_union_map_project_out_all_params(fixed);
  TESSEL_CHECK(fixed, "isl could not fix the tiled schedule's parameters (tile pass)");
  const std::string key = union_map_text(fixed);
  if (std::optional<AstNode> known = ast_memo().find(key)) {
    isl_union_map_free(fixed);
    return *known;
  }
  isl_ast_build* build = isl_ast_build_alloc(context.ctx().get());
  isl_ast_node* root = isl_ast_build_node_from_schedule_map(build, fixed);
  isl_ast_build_free(build);
  TESSEL_CHECK(root, "isl AST generation failed for the tiled schedule (tile pass)");
  AstNode out = convert_node(root);
  isl_ast_node_free(root);
  ast_memo().keep(key, out);
  return out;
}

kernel::Expr aff_to_expr(const isl::aff& aff, const std::vector<std::string>& in_names,
                         const std::map<std::string, int64_t>& param_values) {
  int64_t den = 1;
  Expr num = aff_numerator(aff.get(), in_names, param_values, &den);
  if (den == 1) return num;
  return Expr::make(kernel::ExprKind::FloorDiv, {num, Expr::integer(den)});
}

}  // namespace tessel::poly
