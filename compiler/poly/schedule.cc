#include "compiler/poly/schedule.h"

namespace tessel::poly {

ScheduleResult compute_schedule(const Scop& scop, const Dependences& deps, const SchedulerOptions& options) {
  isl::ctx ctx = scop.context.ctx();
  apply_scheduler_options(ctx, options);
  ScheduleResult r;
  isl::union_map all = deps.all();
  isl::schedule_constraints sc = isl::schedule_constraints::on_domain(scop.domain)
                                     .set_context(scop.context)
                                     .set_validity(all)
                                     .set_proximity(all)
                                     .set_coincidence(deps.flow);
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
