#include "compiler/poly/build_kernel.h"

#include "compiler/poly/isl_util.h"
#include "compiler/poly/parallelism.h"

#include <set>
#include "isa/base/error.h"

namespace tessel::poly {

namespace {

using kernel::Expr;
using kernel::Node;
using kernel::NodeKind;
using kernel::NodePtr;

struct Builder {
  const Scop& scop;
  const TiledProgram& tiled;
  const Promotion& pr;
  const Coincidence& coincidence;
  kernel::Kernel& k;
  int group = 0;  // whose AST is being converted

  NodePtr make(NodeKind kind) {
    auto n = std::make_shared<Node>();
    n->kind = kind;
    return n;
  }

  void copies(std::vector<NodePtr>& out, int group, TileLevel level, bool exit) {
    for (size_t i = 0; i < pr.placements.size(); ++i) {
      const Placement& p = pr.placements[i];
      const kernel::Buffer& b = pr.buffers[i];
      if (b.group != group || p.level != level) continue;
      if (exit ? !p.copy_out : !p.copy_in) continue;
      NodePtr c = make(NodeKind::Copy);
      c->tensor = b.tensor;
      if (exit) {
        c->src = b.id;
        c->dst = -1;
      } else {
        c->src = p.src;
        c->dst = b.id;
      }
      out.push_back(c);
    }
  }

  void lets(std::vector<NodePtr>& out, const std::vector<std::string>& names, const std::vector<Expr>& args,
            size_t from) {
    for (size_t i = from; i < names.size(); ++i) {
      NodePtr l = make(NodeKind::Let);
      l->var = names[i];
      l->value = args.at(i);
      k.let_vars.push_back(names[i]);
      out.push_back(l);
    }
  }

  void user(const AstNode& a, std::vector<NodePtr>& out) {
    const std::string& n = a.user_name;
    auto group_of_marker = [&](size_t prefix) { return std::stoi(n.substr(prefix)); };
    if (n.rfind("EnterP_g", 0) == 0 || n.rfind("ExitP_g", 0) == 0) {
      bool exit = n[0] == 'X' || n.rfind("Exit", 0) == 0;
      int g = group_of_marker(exit ? 7 : 8);
      const TiledGroup& tg = tiled.groups.at(g);
      if (!exit) lets(out, tg.origins(TileLevel::P), a.user_args, 0);
      copies(out, g, TileLevel::P, exit);
      return;
    }
    if (n.rfind("EnterR_g", 0) == 0) {
      int g = group_of_marker(8);
      const TiledGroup& tg = tiled.groups.at(g);
      lets(out, tg.origins(TileLevel::R), a.user_args, tg.group.tile_axes.size());
      copies(out, g, TileLevel::R, false);
      return;
    }
    if (n.rfind("EnterI_g", 0) == 0) {
      int g = group_of_marker(8);
      const TiledGroup& tg = tiled.groups.at(g);
      lets(out, tg.origins(TileLevel::I), a.user_args, tg.group.tile_axes.size() + tg.group.reduction_axes.size());
      copies(out, g, TileLevel::I, false);
      return;
    }
    if (n.rfind("Frag_g", 0) == 0) {
      int g = group_of_marker(6);
      out.push_back(fragment(tiled.groups.at(g)));
      return;
    }
    const ScopStatement& st = scop.find(n);
    NodePtr c = make(NodeKind::Compute);
    c->statement = st.statement;
    c->init = st.init;
    c->indices = a.user_args;
    int g = tiled.statement_group.at(n);
    const TiledGroup& tg = tiled.groups.at(g);
    c->binding = pr.binding.at(g);
    (void)tg;
    out.push_back(c);
  }

  NodePtr fragment(const TiledGroup& tg) {
    const MatmulMatch& mm = tg.match;
    const int g = tg.group.id;
    NodePtr n = make(NodeKind::Matmul);
    kernel::MatmulOp& op = n->matmul;
    op.statement = scop.statements.at(tg.group.anchor).statement;
    auto find_buffer = [&](const std::string& t, TileLevel level) {
      for (size_t i = 0; i < pr.placements.size(); ++i)
        if (pr.buffers[i].group == g && pr.buffers[i].tensor == t && pr.placements[i].level == level) return int(i);
      TESSEL_CHECK(false, "kernel: no buffer for " + t + " in group " + std::to_string(g) + " (promote must place it)");
      return -1;
    };
    op.a = find_buffer(mm.a, TileLevel::I);
    op.b = find_buffer(mm.b, TileLevel::I);
    op.c = find_buffer(mm.c, TileLevel::P);
    op.a_tensor = mm.a;
    op.b_tensor = mm.b;
    op.c_tensor = mm.c;
    op.a_layout = mm.a_layout;
    op.b_layout = mm.b_layout;
    auto axis = [&](const std::string& x, Expr& origin, Expr& extent, int64_t& tile) {
      Expr o = Expr::var(origin_var(g, x, false));
      Expr i = Expr::var(origin_var(g, x, true));
      origin = i;
      tile = tg.inner.at(x);
      Expr end = min_expr(o + Expr::integer(tg.outer.at(x)), Expr::integer(tg.hi.at(x)));
      extent = min_expr(Expr::integer(tile), end - i);
    };
    axis(mm.m, op.m0, op.em, op.tile_m);
    axis(mm.n, op.n0, op.en, op.tile_n);
    axis(mm.k, op.k0, op.ek, op.tile_k);
    auto coords = [&](const std::vector<ir::AffineExpr>& access) {
      std::vector<Expr> out;
      auto var = [&](const std::string& x) {
        return x == mm.m ? Expr::var("frag_m") : x == mm.n ? Expr::var("frag_n") : x == mm.k ? Expr::var("frag_k")
                                                                                 : Expr::var(origin_var(g, x, false));
      };
      for (const auto& a : access) out.push_back(kernel::from_affine(a, tiled.sizes, var));
      return out;
    };
    op.a_coords = coords(mm.a_access);
    op.b_coords = coords(mm.b_access);
    op.c_coords = coords(mm.c_access);
    op.img2col = mm.img2col;
    op.unit_m = mm.unit_m;
    op.unit_n = mm.unit_n;
    op.unit_k = mm.unit_k;
    op.in_type = mm.in_type;
    op.acc_type = mm.acc_type;
    return n;
  }

  // The scop statements (not markers or fragments) an AST subtree executes.
  void statements_under(const AstNode& a, std::set<std::string>& out) const {
    if (a.kind == AstNode::Kind::User && tiled.statement_group.count(a.user_name)) out.insert(a.user_name);
    for (const auto& c : a.children) statements_under(c, out);
    for (const auto& c : a.else_children) statements_under(c, out);
  }

  void convert(const AstNode& a, std::vector<NodePtr>& out) {
    switch (a.kind) {
      case AstNode::Kind::Block:
        for (const auto& c : a.children) convert(c, out);
        return;
      case AstNode::Kind::User:
        user(a, out);
        return;
      case AstNode::Kind::If: {
        NodePtr n = make(NodeKind::If);
        n->cond = a.if_cond;
        for (const auto& c : a.children) convert(c, n->children);
        for (const auto& c : a.else_children) convert(c, n->else_children);
        out.push_back(n);
        return;
      }
      case AstNode::Kind::For: {
        NodePtr n = make(NodeKind::Loop);
        n->var = a.iterator;
        n->lo = a.init;
        TESSEL_CHECK(a.inc.is_int() && a.inc.value > 0, "kernel: loop step is not a positive constant");
        n->step = a.inc.value;
        const Expr& c = a.cond;
        TESSEL_CHECK(c.args.size() == 2 && c.args[0].kind == kernel::ExprKind::Var && c.args[0].name == a.iterator &&
                         (c.kind == kernel::ExprKind::Le || c.kind == kernel::ExprKind::Lt),
                     "kernel: loop condition is not 'iterator <(=) bound'");
        n->hi = c.kind == kernel::ExprKind::Le ? c.args[1] + Expr::integer(1) : c.args[1];
        TESSEL_CHECK(a.iterator.size() > 1 && a.iterator[0] == 'c', "kernel: unexpected iterator name " + a.iterator);
        const int dim = std::stoi(a.iterator.substr(1));
        n->loop_kind = tiled.dim_kind(group, dim);
        n->axis = tiled.dim_axis(group, dim, &n->inner_tile);
        std::set<std::string> statements;
        statements_under(a, statements);
        n->parallel = coincidence.carries_none(group, dim, statements);
        for (const auto& ch : a.children) convert(ch, n->children);
        out.push_back(n);
        return;
      }
    }
  }
};

}  // namespace

kernel::Kernel build_kernel(const Scop& scop, const Dependences& deps, const TiledProgram& tiled,
                            const Promotion& promotion, const isa::Hierarchy& h) {
  kernel::Kernel k;
  k.name = scop.function->name;
  k.function = scop.function;
  k.sizes = tiled.sizes;
  k.tensors = promotion.tensors;
  k.buffers = promotion.buffers;
  k.target = h.name;
  const Coincidence coincidence(deps, tiled);
  Builder b{scop, tiled, promotion, coincidence, k, 0};
  k.body = b.make(NodeKind::Block);
  for (size_t g = 0; g < tiled.group_schedules.size(); ++g) {
    b.group = int(g);
    b.convert(build_ast(tiled.group_schedules[g], tiled.fixed_context), k.body->children);
  }
  mark_buffer_rebinding(k);
  return k;
}

}  // namespace tessel::poly
