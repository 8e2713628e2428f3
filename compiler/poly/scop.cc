#include "compiler/poly/scop.h"

#include <functional>

#include "isa/base/error.h"

namespace tessel::poly {

std::string param_prefix(const ir::Function& f) {
  std::string s = "[";
  for (size_t i = 0; i < f.params.size(); ++i) s += (i ? ", " : "") + f.params[i];
  return s + "] -> ";
}

const ScopStatement& Scop::find(const std::string& name) const {
  for (const auto& s : statements)
    if (s.name == name) return s;
  TESSEL_CHECK(false, "scop has no statement " + name);
  return statements.front();
}

namespace {

std::string tuple(const std::string& name, const std::vector<std::string>& dims) {
  std::string s = name + "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + dims[i];
  return s + "]";
}

std::string index_tuple(const std::string& name, const std::vector<ir::AffineExpr>& idx) {
  std::string s = name + "[";
  for (size_t i = 0; i < idx.size(); ++i) s += (i ? ", " : "") + idx[i].to_string();
  return s + "]";
}

std::string domain_constraints(const std::vector<ir::IndexVar>& vars) {
  std::string s;
  for (const auto& v : vars) {
    if (!s.empty()) s += " and ";
    s += v.lo.to_string() + " <= " + v.name + " < " + v.hi.to_string();
  }
  return s.empty() ? "true" : s;
}

void collect_accesses(const ir::Expr& e, std::vector<const ir::Expr*>& out) {
  if (e.kind == ir::ExprKind::Access) out.push_back(&e);
  for (const auto& a : e.args) collect_accesses(*a, out);
}

}  // namespace

Scop build_scop(isl::ctx ctx, const ir::Function& f) {
  Scop scop;
  scop.function = &f;
  const std::string P = param_prefix(f);
  std::string ctx_text = P + "{ : ";
  for (size_t i = 0; i < f.params.size(); ++i) ctx_text += (i ? " and " : "") + f.params[i] + " >= 1";
  ctx_text += f.params.empty() ? "true }" : " }";
  scop.context = isl::set(ctx, ctx_text);
  scop.reads = isl::union_map::empty(ctx);
  scop.writes = isl::union_map::empty(ctx);
  scop.tagged_reads = isl::union_map::empty(ctx);
  scop.tagged_writes = isl::union_map::empty(ctx);
  scop.program_order = isl::union_map::empty(ctx);
  scop.domain = isl::union_set::empty(ctx);

  size_t max_dims = 0;
  for (const auto& s : f.statements) max_dims = std::max(max_dims, s.domain.size());

  int position = 0;
  auto add_access = [&](const ScopStatement& st, const std::string& cons, const std::string& ref,
                        const std::string& tensor, const std::vector<ir::AffineExpr>& idx, bool write) {
    std::string dom = tuple(st.name, st.indices);
    isl::map m(ctx, P + "{ " + dom + " -> " + index_tuple(tensor, idx) + " : " + cons + " }");
    isl::map tagged(ctx, P + "{ [" + dom + " -> " + st.name + "_" + ref + "[]] -> " + index_tuple(tensor, idx) +
                             " : " + cons + " }");
    if (write) {
      scop.writes = scop.writes.unite(isl::union_map(m));
      scop.tagged_writes = scop.tagged_writes.unite(isl::union_map(tagged));
    } else {
      scop.reads = scop.reads.unite(isl::union_map(m));
      scop.tagged_reads = scop.tagged_reads.unite(isl::union_map(tagged));
    }
  };
  auto add_order = [&](const ScopStatement& st) {
    std::string range = "[" + std::to_string(position++);
    for (const auto& i : st.indices) range += ", " + i;
    for (size_t i = st.indices.size(); i < max_dims; ++i) range += ", 0";
    range += "]";
    isl::map m(ctx, P + "{ " + tuple(st.name, st.indices) + " -> " + range + " }");
    scop.program_order = scop.program_order.unite(isl::union_map(m));
  };

  for (size_t si = 0; si < f.statements.size(); ++si) {
    const ir::Statement& s = f.statements[si];
    const bool has_init = s.reduction != ir::Reduction::None && s.init;
    if (has_init) {
      ScopStatement init;
      init.name = s.name + "_init";
      init.statement = int(si);
      init.init = true;
      std::vector<ir::IndexVar> vars;
      for (const auto& v : s.domain)
        if (!v.is_reduction) {
          vars.push_back(v);
          init.indices.push_back(v.name);
        }
      std::string cons = domain_constraints(vars);
      init.domain = isl::set(ctx, P + "{ " + tuple(init.name, init.indices) + " : " + cons + " }");
      scop.domain = scop.domain.unite(isl::union_set(init.domain));
      add_access(init, cons, "W", s.output, s.out_indices, true);
      add_order(init);
      scop.statements.push_back(init);
    }
    ScopStatement st;
    st.name = s.name;
    st.statement = int(si);
    for (const auto& v : s.domain) st.indices.push_back(v.name);
    std::string cons = domain_constraints(s.domain);
    st.domain = isl::set(ctx, P + "{ " + tuple(st.name, st.indices) + " : " + cons + " }");
    scop.domain = scop.domain.unite(isl::union_set(st.domain));
    std::vector<const ir::Expr*> reads;
    collect_accesses(*s.rhs, reads);
    for (size_t r = 0; r < reads.size(); ++r)
      add_access(st, cons, "R" + std::to_string(r), reads[r]->name, reads[r]->indices, false);
    if (s.reduction != ir::Reduction::None) add_access(st, cons, "RW", s.output, s.out_indices, false);
    add_access(st, cons, "W", s.output, s.out_indices, true);
    add_order(st);
    scop.statements.push_back(st);
  }
  scop.domain = scop.domain.intersect_params(scop.context);
  return scop;
}

}  // namespace tessel::poly
