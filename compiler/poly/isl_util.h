// The isl boundary: helpers over isl's C API that isl/cpp.h lacks, each saying who owns what.
//
// Everything else in compiler/poly uses isl/cpp.h objects only. Here:
//   - IslContext owns one isl_ctx (isl_ctx_alloc / isl_ctx_free) for one compilation; declare it
//     before any isl object that uses it so it is destroyed last;
//   - scheduler options, the operation quota (isl_options_set_*, isl_ctx_set_max_operations) and
//     a wall-clock deadline (isl_ctx_abort from a watchdog thread, isl_ctx_resume after);
//   - conversion of an isl AST (isl_ast_node, borrowed through the cpp object's .get()) and of
//     quasi-affine expressions (isl_aff, borrowed) into plain C++ trees the kernel IR builder reads.
#pragma once

#include <isl/cpp.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "compiler/kernel/kernel_ir.h"

namespace tessel::poly {

// The version string of the linked isl library.
std::string isl_version_string();

// Owns an isl_ctx; isl errors raise isl::exception (cpp.h's ISL_ON_ERROR_CONTINUE + checks).
class IslContext {
 public:
  IslContext();
  ~IslContext();
  IslContext(const IslContext&) = delete;
  IslContext& operator=(const IslContext&) = delete;
  isl::ctx ctx() const { return ctx_; }

 private:
  isl::ctx ctx_;
};

enum class FusionStrategy { Max, Conservative, None };

struct SchedulerOptions {
  int max_constant_term = 4;     // bound on constant terms of schedule rows (-1: unbounded)
  int max_coefficient = 2;       // bound on coefficients (-1: unbounded)
  FusionStrategy fusion = FusionStrategy::Max;
  unsigned long max_operations = 2000000;  // isl operation quota for compute_schedule (0: none)
  // wall-clock bound on compute_schedule's isl calls together (0: none). The quota counts tableau
  // pivots, whose cost grows with the problem (about 0.5 ms each on a 7-d loss with 2,160-point
  // rows), so the quota alone does not bound the time.
  double max_seconds = 3.0;
};

// Applies the scheduler options to the context (isl_options_set_schedule_*).
void apply_scheduler_options(isl::ctx ctx, const SchedulerOptions& o);
// Sets / clears the operation quota and resets the counter (isl_ctx_set_max_operations).
void set_operation_quota(isl::ctx ctx, unsigned long max_operations);
// True when the last error on the context was the quota being hit (isl_ctx_last_error).
bool quota_was_hit(isl::ctx ctx);
void reset_last_error(isl::ctx ctx);

// While alive, aborts the isl computation running on `ctx` once `seconds` have passed: a watchdog
// thread calls isl_ctx_abort, which isl checks at every operation (each tableau pivot), so the call
// in progress fails within one pivot with isl_error_abort (isl::exception_abort). The destructor
// stops the watchdog and resumes the context (isl_ctx_resume) so it stays usable. seconds <= 0:
// no deadline. The flag is an int isl reads without synchronisation; a late read only delays the
// abort by one pivot.
class IslDeadline {
 public:
  IslDeadline(isl::ctx ctx, double seconds);
  ~IslDeadline();
  IslDeadline(const IslDeadline&) = delete;
  IslDeadline& operator=(const IslDeadline&) = delete;
  bool expired() const;

 private:
  isl::ctx ctx_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  bool expired_ = false;
  std::thread watchdog_;
};

// A plain AST mirroring isl_ast_node.
struct AstNode {
  enum class Kind { For, If, Block, User } kind = Kind::Block;
  std::string iterator;                 // For
  kernel::Expr init, cond, inc;         // For (cond mentions the iterator)
  kernel::Expr if_cond;                 // If
  std::vector<AstNode> children;        // Block; For body / If then (one child each, a Block or node)
  std::vector<AstNode> else_children;   // If
  std::string user_name;                // User: the statement's tuple name
  std::vector<kernel::Expr> user_args;  // User: its domain coordinates in loop iterators
};

// Generates an AST for a flat schedule map (isl_ast_build_node_from_schedule_map) under `context`
// and converts it. Borrowed inputs; the isl AST is freed before returning.
AstNode build_ast(const isl::union_map& schedule, const isl::set& context);

// A quasi-affine function as an integer expression: the i-th input dimension becomes
// Var(in_names[i]); parameters are replaced by `param_values`. Borrowed input.
kernel::Expr aff_to_expr(const isl::aff& aff, const std::vector<std::string>& in_names,
                         const std::map<std::string, int64_t>& param_values);

int64_t val_to_int(const isl::val& v);

// A schedule (tree) with one band equal to `order` over `domain` (isl_schedule_from_domain +
// isl_schedule_insert_partial_schedule; both inputs borrowed). `order` maps every statement to
// times of one common dimension.
isl::schedule schedule_from_map(const isl::union_set& domain, const isl::union_map& order);

// isl's text form of any cpp.h object (isl set notation).
template <class T>
std::string str(const T& x) {
  std::ostringstream os;
  os << x;
  return os.str();
}

// { [a] -> [b] : a <<_lex b } on the given set space (isl_map_lex_lt takes a copy of the space).
isl::map lex_lt_map(const isl::space& set_space);

}  // namespace tessel::poly
