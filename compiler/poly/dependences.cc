#include "compiler/poly/dependences.h"

#include "compiler/poly/isl_util.h"

namespace tessel::poly {

namespace {

isl::union_map flow_of(const isl::union_map& sink, const isl::union_map& source, const isl::union_map& order,
                       bool must) {
  isl::union_access_info info(sink);
  info = must ? info.set_must_source(source) : info.set_may_source(source);
  info = info.set_schedule_map(order);
  isl::union_flow flow = info.compute_flow();
  return flow.may_dependence().coalesce();
}

}  // namespace

Dependences compute_dependences(const Scop& scop) {
  Dependences d;
  isl::union_map reads = scop.reads.intersect_domain(scop.domain);
  isl::union_map writes = scop.writes.intersect_domain(scop.domain);
  d.flow = flow_of(reads, writes, scop.program_order, true);
  d.anti = flow_of(writes, reads, scop.program_order, false);
  d.output = flow_of(writes, writes, scop.program_order, false);
  // a statement instance never depends on itself (the update reads then writes its element)
  d.anti = d.anti.subtract(isl::union_map(isl::union_set(scop.domain).identity()));
  return d;
}

bool respects(const isl::union_map& schedule, const isl::union_map& deps) {
  if (deps.is_empty()) return true;
  isl::union_map in_time = deps.apply_domain(schedule).apply_range(schedule);
  bool ok = true;
  in_time.foreach_map([&](isl::map m) {
    if (!m.is_subset(lex_lt_map(m.domain().space()))) ok = false;
  });
  return ok;
}

}  // namespace tessel::poly
