#include "compiler/poly/schedule.h"

namespace tessel::poly {

ScheduleResult compute_schedule(const Scop& scop, const Dependences& deps, const SchedulerOptions& options) {
  isl::ctx ctx = scop.context.ctx();
  apply_scheduler_options(ctx, options);
  ScheduleResult r;
  // A reduction's dependences on itself only order its associative updates: like Tensor
  // Comprehensions, the scheduler may reorder them (validity keeps every other dependence).
  auto without_reduction_self = [&](const isl::union_map& d) {
    isl::union_map kept = isl::union_map::empty(d.ctx());
    d.foreach_map([&](isl::map m) {
      const std::string src = m.domain_tuple_id().name();
      const bool self = src == m.range_tuple_id().name();
      if (!(self && scop.function->statements[scop.find(src).statement].reduction != ir::Reduction::None))
        kept = kept.unite(isl::union_map(m));
    });
    return kept;
  };
  isl::union_map validity = without_reduction_self(deps.all());
  isl::schedule_constraints sc = isl::schedule_constraints::on_domain(scop.domain)
                                     .set_context(scop.context)
                                     .set_validity(validity)
                                     .set_proximity(validity)
                                     .set_coincidence(without_reduction_self(deps.flow));
  set_operation_quota(ctx, options.max_operations);
  struct ClearQuota {  // also when compute_schedule throws something else
    isl::ctx ctx;
    ~ClearQuota() { set_operation_quota(ctx, 0); }
  } clear{ctx};
  try {
    r.schedule = sc.compute_schedule();
  } catch (const isl::exception_quota&) {
    reset_last_error(ctx);
    set_operation_quota(ctx, 0);
    r.fell_back = true;
    r.warning = "isl scheduler hit its operation quota (" + std::to_string(options.max_operations) +
                " operations); falling back to the statement order";
  }
  set_operation_quota(ctx, 0);
  if (r.fell_back) {
    r.schedule = schedule_from_map(scop.domain, scop.program_order);
  }
  r.map = r.schedule.map();
  return r;
}

}  // namespace tessel::poly
