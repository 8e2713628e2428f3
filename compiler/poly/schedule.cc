#include "compiler/poly/schedule.h"

#include <chrono>
#include <optional>
#include <sstream>
#include <vector>

namespace tessel::poly {

namespace {

// A reduction's dependences on itself only order its associative updates: like Tensor
// Comprehensions, the scheduler may reorder them (validity keeps every other dependence).
isl::union_map without_reduction_self(const Scop& scop, const isl::union_map& d) {
  isl::union_map kept = isl::union_map::empty(d.ctx());
  d.foreach_map([&](isl::map m) {
    const std::string src = m.domain_tuple_id().name();
    const bool self = src == m.range_tuple_id().name();
    if (!(self && scop.function->statements[scop.find(src).statement].reduction != ir::Reduction::None))
      kept = kept.unite(isl::union_map(m));
  });
  return kept;
}

const char* strategy_name(FusionStrategy f) {
  switch (f) {
    case FusionStrategy::Max: return "maximal fusion";
    case FusionStrategy::Conservative: return "incremental clustering";
    case FusionStrategy::None: return "no fusion";
  }
  return "?";
}

// One isl scheduler call under the quota and a deadline of `seconds`; nullopt (and why) when it hits
// either. The context's quota, error and abort flag are cleared on return.
std::optional<isl::schedule> try_schedule(const isl::schedule_constraints& sc, const SchedulerOptions& o,
                                          double seconds, std::string* why) {
  isl::ctx ctx = sc.ctx();
  apply_scheduler_options(ctx, o);
  set_operation_quota(ctx, o.max_operations);
  struct ClearQuota {  // also when compute_schedule throws something else
    isl::ctx ctx;
    ~ClearQuota() { set_operation_quota(ctx, 0); }
  } clear{ctx};
  std::ostringstream reason;
  reason.precision(2);
  {
    IslDeadline deadline(ctx, seconds);
    try {
      return sc.compute_schedule();
    } catch (const isl::exception_quota&) {
      reason << "hit its operation quota (" << o.max_operations << " operations)";
    } catch (const isl::exception_abort&) {
      reason << "ran past its time limit (" << seconds << " s)";
    }
  }
  reset_last_error(ctx);
  *why = reason.str() + " with " + strategy_name(o.fusion);
  return std::nullopt;
}

}  // namespace

ScheduleResult compute_schedule(const Scop& scop, const Dependences& deps, const SchedulerOptions& options) {
  isl::union_map validity = without_reduction_self(scop, deps.all());
  isl::schedule_constraints sc = isl::schedule_constraints::on_domain(scop.domain)
                                     .set_context(scop.context)
                                     .set_validity(validity)
                                     .set_proximity(validity)
                                     .set_coincidence(without_reduction_self(scop, deps.flow));
  std::vector<SchedulerOptions> attempts = {options};
  if (options.fusion == FusionStrategy::Max) {
    attempts.push_back(options);
    attempts.back().fusion = FusionStrategy::Conservative;
  }
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  ScheduleResult r;
  std::vector<std::string> whys;
  for (size_t i = 0; i < attempts.size() && !r.schedule.get(); ++i) {
    // the time left, shared evenly by the attempts still to come
    const double spent = std::chrono::duration<double>(Clock::now() - start).count();
    const double seconds = options.max_seconds > 0 ? (options.max_seconds - spent) / double(attempts.size() - i) : 0;
    std::string why;
    if (options.max_seconds > 0 && seconds <= 0) break;
    if (auto s = try_schedule(sc, attempts[i], seconds, &why)) r.schedule = *s;
    else whys.push_back(why);
  }
  std::string joined;
  for (const auto& w : whys) joined += (joined.empty() ? "" : ", then ") + w;
  if (!r.schedule.get()) {
    r.fell_back = true;
    r.warning = "isl scheduler " + joined + "; falling back to the statement order";
    r.schedule = schedule_from_map(scop.domain, scop.program_order);
  } else if (!whys.empty()) {
    r.relaxed = true;
    r.warning = "isl scheduler " + joined + "; scheduled with " + strategy_name(FusionStrategy::Conservative);
  }
  r.map = r.schedule.map();
  return r;
}

}  // namespace tessel::poly
