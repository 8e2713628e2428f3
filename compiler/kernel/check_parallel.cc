#include "compiler/kernel/check_parallel.h"

#include <fmt/format.h>

#include <functional>
#include <unordered_map>

#include "isa/base/error.h"

namespace tessel::kernel {

namespace {

// Element key: storage id (tensor index, or kBuffers + buffer id) and linear index.
constexpr int64_t kBuffers = 1 << 20;

struct Access {
  int64_t writer = -1;      // iteration that wrote it (-1: none yet)
  int64_t reader = -1;      // some iteration that read it
  bool many_readers = false;
};

struct ActiveLoop {
  const Node* loop;
  bool buffers_shared;      // buffer accesses count (threads of one block would share them)
  int64_t iteration = 0;
  std::unordered_map<int64_t, std::unordered_map<int64_t, Access>> elements;  // storage -> index -> access
};

struct Checker {
  const Kernel& k;
  int64_t budget;
  ParallelCheck out;
  std::map<std::string, int64_t> env;
  std::vector<ActiveLoop*> active;
  std::map<std::string, int> tensor_index;
  std::map<const ir::AffineExpr*, Expr> converted;

  explicit Checker(const Kernel& kk, int64_t b) : k(kk), budget(b) {
    for (size_t i = 0; i < k.tensors.size(); ++i) tensor_index[k.tensors[i].name] = int(i);
  }

  int64_t eval(const Expr& e) { return e.evaluate(env); }

  std::string storage_name(int64_t storage) {
    return storage >= kBuffers ? k.buffers.at(storage - kBuffers).name : k.tensors.at(storage).name;
  }

  void record(int64_t storage, int64_t index, bool write) {
    ++out.accesses;
    if (budget && out.accesses > budget) {
      out.complete = false;
      throw std::runtime_error("budget");
    }
    const bool is_buffer = storage >= kBuffers;
    for (ActiveLoop* a : active) {
      if (is_buffer && !a->buffers_shared) continue;
      Access& x = a->elements[storage][index];
      const int64_t it = a->iteration;
      const char* clash = nullptr;
      if (x.writer >= 0 && x.writer != it) clash = write ? "written" : "read";
      if (write && ((x.reader >= 0 && x.reader != it) || x.many_readers)) clash = "written";
      if (clash && !out.conflicts++)
        out.first_conflict = fmt::format("loop {} over [{}, {}): {} element {} written by one iteration and {} by iteration {}",
                                         a->loop->var, a->loop->lo.to_string(), a->loop->hi.to_string(), storage_name(storage),
                                         index, clash, it);
      if (write) x.writer = it;
      else if (x.reader < 0) x.reader = it;
      else if (x.reader != it) x.many_readers = true;
    }
  }

  // Storage and linear index of global coordinates `g` of tensor `t` in buffer `b` (-1: global).
  std::pair<int64_t, int64_t> locate(const std::string& t, int b, const std::vector<int64_t>& g) {
    int64_t lin = 0;
    if (b >= 0) {
      const Buffer& buf = k.buffers.at(b);
      for (size_t d = 0; d < g.size(); ++d) lin = lin * buf.extents[d] + (g[d] - eval(buf.offset[d]));
      return {kBuffers + b, lin};
    }
    const GlobalTensor* gt = k.find_tensor(t);
    TESSEL_CHECK(gt, "check_parallel: tensor " + t + " is neither global nor bound (kernel pass)");
    for (size_t d = 0; d < g.size(); ++d) lin = lin * gt->shape[d] + g[d];
    return {tensor_index.at(t), lin};
  }

  int64_t index_value(const ir::AffineExpr& e) {
    auto it = converted.find(&e);
    if (it == converted.end())
      it = converted.emplace(&e, from_affine(e, k.sizes, [](const std::string& n) { return Expr::var("i_" + n); })).first;
    return eval(it->second);
  }

  void access(const std::string& t, const std::vector<ir::AffineExpr>& idx, const std::map<std::string, int>& binding, bool write) {
    auto b = binding.find(t);
    std::vector<int64_t> g;
    for (const auto& e : idx) g.push_back(index_value(e));
    auto [s, i] = locate(t, b == binding.end() ? -1 : b->second, g);
    record(s, i, write);
  }

  void reads(const ir::Expr& e, const std::map<std::string, int>& binding) {
    if (e.kind == ir::ExprKind::Access) access(e.name, e.indices, binding, false);
    for (const auto& a : e.args) reads(*a, binding);
  }

  void compute(const Node& n) {
    const ir::Statement& s = k.function->statements.at(n.statement);
    size_t j = 0;
    for (const auto& v : s.domain)
      if (!n.init || !v.is_reduction) env["i_" + v.name] = eval(n.indices.at(j++));
    if (!n.init) {
      reads(*s.rhs, n.binding);
      if (s.reduction != ir::Reduction::None) access(s.output, s.out_indices, n.binding, false);
    }
    access(s.output, s.out_indices, n.binding, true);
  }

  // Every element of a box (extents, at origin `o`), clamped to the tensor where `clamp` is set.
  void box(const Buffer& b, const std::function<void(const std::vector<int64_t>&)>& fn) {
    std::vector<int64_t> o, g(b.extents.size());
    for (const auto& e : b.offset) o.push_back(eval(e));
    std::function<void(size_t)> walk = [&](size_t d) {
      if (d == g.size()) return fn(g);
      for (int64_t x = 0; x < b.extents[d]; ++x) {
        g[d] = o[d] + x;
        walk(d + 1);
      }
    };
    walk(0);
  }

  void copy(const Node& n) {
    const bool out_copy = n.dst < 0;
    const Buffer& b = k.buffers.at(out_copy ? n.src : n.dst);
    const GlobalTensor* t = k.find_tensor(n.tensor);
    box(b, [&](const std::vector<int64_t>& g) {
      bool inside = t != nullptr;
      for (size_t d = 0; inside && d < g.size(); ++d) inside = g[d] >= 0 && g[d] < t->shape[d];
      if (out_copy) {
        if (!inside) return;
        auto [bs, bi] = locate(n.tensor, b.id, g);
        record(bs, bi, false);
        auto [ts, ti] = locate(n.tensor, -1, g);
        record(ts, ti, true);
      } else {
        if (inside) {
          bool in_src = true;
          if (n.src >= 0) {
            const Buffer& sb = k.buffers.at(n.src);
            for (size_t d = 0; in_src && d < g.size(); ++d) {
              const int64_t rel = g[d] - eval(sb.offset[d]);
              in_src = rel >= 0 && rel < sb.extents[d];
            }
          }
          if (in_src) {
            auto [ss, si] = locate(n.tensor, n.src, g);
            record(ss, si, false);
          }
        }
        auto [ds, di] = locate(n.tensor, b.id, g);
        record(ds, di, true);
      }
    });
  }

  void matmul(const MatmulOp& m) {
    const int64_t m0 = eval(m.m0), n0 = eval(m.n0), k0 = eval(m.k0), em = eval(m.em), en = eval(m.en), ek = eval(m.ek);
    auto at = [&](int b, const std::string& t, const std::vector<Expr>& coords, bool write) {
      std::vector<int64_t> g;
      for (const auto& c : coords) g.push_back(eval(c));
      auto [s, i] = locate(t, b, g);
      record(s, i, write);
    };
    for (int64_t i = 0; i < em; ++i)
      for (int64_t j = 0; j < en; ++j) {
        env["frag_m"] = m0 + i;
        env["frag_n"] = n0 + j;
        at(m.c, m.c_tensor, m.c_coords, false);
        for (int64_t q = 0; q < ek; ++q) {
          env["frag_k"] = k0 + q;
          at(m.a, m.a_tensor, m.a_coords, false);
          at(m.b, m.b_tensor, m.b_coords, false);
        }
        at(m.c, m.c_tensor, m.c_coords, true);
      }
  }

  void run(const Node& n) {
    switch (n.kind) {
      case NodeKind::Block:
        for (const auto& c : n.children) run(*c);
        return;
      case NodeKind::Let: env[n.var] = eval(n.value); return;
      case NodeKind::If: {
        for (const auto& c : eval(n.cond) ? n.children : n.else_children) run(*c);
        return;
      }
      case NodeKind::Compute: compute(n); return;
      case NodeKind::Copy: copy(n); return;
      case NodeKind::Matmul: matmul(n.matmul); return;
      case NodeKind::Loop: {
        const int64_t lo = eval(n.lo), hi = eval(n.hi);
        ActiveLoop mine{&n, !n.rebinds_buffers, 0, {}};
        if (n.parallel) {
          active.push_back(&mine);
          ++out.loops;
        }
        for (int64_t v = lo; v < hi; v += n.step) {
          env[n.var] = v;
          mine.iteration = v;
          for (const auto& c : n.children) run(*c);
        }
        if (n.parallel) active.pop_back();
        return;
      }
    }
  }
};

}  // namespace

ParallelCheck check_parallel(const Kernel& k, int64_t max_accesses) {
  Checker c(k, max_accesses);
  try {
    if (k.body) c.run(*k.body);
  } catch (const std::runtime_error& e) {
    if (std::string(e.what()) != "budget") throw;
  }
  return c.out;
}

}  // namespace tessel::kernel
