// Parallel-loop checker (contract in check_parallel.h). The kernel IR is executed as it stands:
// every node visited in order, every element access recorded in order against each active
// parallel loop, so the access count, the budget's prefix and the first conflict are those of a
// direct walk of the tree. For speed (the large conformance instances record the whole 50M-access
// budget) the walk never looks a name up per access: variables live in numbered slots, each Expr
// is compiled once into a flat program over them, each node's accesses are resolved once to a
// storage and its dimensions, and each parallel loop instance keeps its elements in one
// open-addressing table.
#include "compiler/kernel/check_parallel.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

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

// (storage, index) -> Access, linear probing, grown at half load.
class ElementTable {
 public:
  Access& at(int64_t storage, int64_t index) {
    if ((used_ + 1) * 2 > slots_.size()) grow();
    const size_t mask = slots_.size() - 1;
    for (size_t h = hash(storage, index) & mask;; h = (h + 1) & mask) {
      Slot& s = slots_[h];
      if (!s.full) {
        s = Slot{storage, index, Access{}, true};
        ++used_;
        return s.access;
      }
      if (s.storage == storage && s.index == index) return s.access;
    }
  }

 private:
  struct Slot {
    int64_t storage = 0, index = 0;
    Access access;
    bool full = false;
  };
  static size_t hash(int64_t storage, int64_t index) {
    uint64_t x = uint64_t(index) * 0x9E3779B97F4A7C15ull ^ uint64_t(storage) * 0xC2B2AE3D27D4EB4Full;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    return size_t(x ^ (x >> 29));
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 64 : old.size() * 2, Slot{});
    const size_t mask = slots_.size() - 1;
    for (const Slot& o : old) {
      if (!o.full) continue;
      size_t h = hash(o.storage, o.index) & mask;
      while (slots_[h].full) h = (h + 1) & mask;
      slots_[h] = o;
    }
  }
  std::vector<Slot> slots_;
  size_t used_ = 0;
};

// Integer expressions compiled over variable slots (Expr::evaluate's semantics, names resolved once).
class Program {
 public:
  int slot(const std::string& name) {
    auto [it, fresh] = slot_of_.emplace(name, int(names_.size()));
    if (fresh) {
      names_.push_back(name);
      values_.push_back(0);
      bound_.push_back(0);
    }
    return it->second;
  }
  void set(int s, int64_t v) {
    values_[size_t(s)] = v;
    bound_[size_t(s)] = 1;
  }
  // The root op of `e` (compiled on first use; `e` must outlive the checker).
  int compile(const Expr& e) {
    auto it = root_of_.find(&e);
    if (it != root_of_.end()) return it->second;
    const int r = add(e);
    root_of_.emplace(&e, r);
    return r;
  }
  int64_t eval(int op) const {
    const Op& o = ops_[size_t(op)];
    switch (o.kind) {
      case ExprKind::Int: return o.value;
      case ExprKind::Var:
        TESSEL_CHECK(bound_[size_t(o.value)], "kernel IR: variable '" + names_[size_t(o.value)] +
                                                  "' is unbound (build_kernel must bind it)");
        return values_[size_t(o.value)];
      case ExprKind::Add: return eval(o.a) + eval(o.b);
      case ExprKind::Sub: return eval(o.a) - eval(o.b);
      case ExprKind::Mul: return eval(o.a) * eval(o.b);
      case ExprKind::Neg: return -eval(o.a);
      case ExprKind::FloorDiv: return floor_div(eval(o.a), eval(o.b));
      case ExprKind::Mod: {
        const int64_t a = eval(o.a), b = eval(o.b);
        return a - b * floor_div(a, b);
      }
      case ExprKind::Min: return std::min(eval(o.a), eval(o.b));
      case ExprKind::Max: return std::max(eval(o.a), eval(o.b));
      case ExprKind::Lt: return eval(o.a) < eval(o.b);
      case ExprKind::Le: return eval(o.a) <= eval(o.b);
      case ExprKind::Eq: return eval(o.a) == eval(o.b);
      case ExprKind::Ge: return eval(o.a) >= eval(o.b);
      case ExprKind::Gt: return eval(o.a) > eval(o.b);
      case ExprKind::And: return eval(o.a) && eval(o.b);
      case ExprKind::Or: return eval(o.a) || eval(o.b);
      case ExprKind::Select: return eval(o.a) ? eval(o.b) : eval(o.c);
    }
    return 0;
  }

 private:
  struct Op {
    ExprKind kind = ExprKind::Int;
    int64_t value = 0;  // Int: the value; Var: the slot
    int a = -1, b = -1, c = -1;
  };
  static int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
  }
  int add(const Expr& e) {
    Op o{e.kind, e.kind == ExprKind::Var ? int64_t(slot(e.name)) : e.value};
    int* arg[3] = {&o.a, &o.b, &o.c};
    for (size_t i = 0; i < e.args.size() && i < 3; ++i) *arg[i] = add(e.args[i]);
    ops_.push_back(o);
    return int(ops_.size()) - 1;
  }
  std::vector<Op> ops_;
  std::unordered_map<const Expr*, int> root_of_;
  std::unordered_map<std::string, int> slot_of_;
  std::vector<std::string> names_;
  std::vector<int64_t> values_;
  std::vector<char> bound_;
};

// Where an access lands: a global tensor or a buffer, with its dimensions and (buffers) the
// compiled offsets of its box.
struct Place {
  int64_t storage = -1;         // -1: unresolved (`error` says why, raised when it is used)
  std::vector<int64_t> dims;    // tensor shape or buffer extents
  std::vector<int> offsets;     // buffers: compiled offset per dimension
  std::string error;
};

// One access of a Compute node: its place and compiled coordinates.
struct Site {
  const Place* place = nullptr;
  std::vector<int> coords;
  bool write = false;
};

struct NodeInfo {
  std::vector<int> exprs;               // Loop: lo, hi; Let: value; If: cond; Matmul: m0 n0 k0 em en ek
  int var = -1;                         // Loop / Let: the slot
  std::vector<std::pair<int, int>> domain;  // Compute: (slot, index expr) assigned in order
  std::vector<Site> sites;              // Compute: accesses in order; Matmul: c, a, b
};

struct ActiveLoop {
  const Node* loop;
  bool buffers_shared;      // buffer accesses count (threads of one block would share them)
  int64_t iteration = 0;
  ElementTable elements;
};

struct Checker {
  const Kernel& k;
  int64_t budget;
  ParallelCheck out;
  Program prog;
  std::vector<ActiveLoop*> active;
  std::map<std::string, int> tensor_index;
  std::map<const ir::AffineExpr*, Expr> converted;
  std::map<std::pair<std::string, int>, std::unique_ptr<Place>> places;
  std::unordered_map<const Node*, NodeInfo> infos;
  int frag_m, frag_n, frag_k;
  std::vector<int64_t> scratch;

  explicit Checker(const Kernel& kk, int64_t b) : k(kk), budget(b) {
    for (size_t i = 0; i < k.tensors.size(); ++i) tensor_index[k.tensors[i].name] = int(i);
    frag_m = prog.slot("frag_m");
    frag_n = prog.slot("frag_n");
    frag_k = prog.slot("frag_k");
  }

  int64_t eval(int op) { return prog.eval(op); }

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
      Access& x = a->elements.at(storage, index);
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

  // Tensor `t` in buffer `b` (-1: the global tensor), resolved once.
  const Place* place(const std::string& t, int b) {
    auto& p = places[{t, b}];
    if (p) return p.get();
    p = std::make_unique<Place>();
    if (b >= 0) {
      const Buffer& buf = k.buffers.at(size_t(b));
      p->storage = kBuffers + b;
      p->dims = buf.extents;
      for (const Expr& e : buf.offset) p->offsets.push_back(prog.compile(e));
    } else if (const GlobalTensor* gt = k.find_tensor(t)) {
      p->storage = tensor_index.at(t);
      p->dims = gt->shape;
    } else {
      p->error = "check_parallel: tensor " + t + " is neither global nor bound (kernel pass)";
    }
    return p.get();
  }

  // Linear index of global coordinates `g` in `p` (buffers: relative to the box's current origin).
  int64_t linear(const Place& p, const int64_t* g, size_t n) {
    TESSEL_CHECK(p.storage >= 0, p.error);
    int64_t lin = 0;
    if (p.storage >= kBuffers) {
      for (size_t d = 0; d < n; ++d) lin = lin * p.dims[d] + (g[d] - eval(p.offsets[d]));
    } else {
      for (size_t d = 0; d < n; ++d) lin = lin * p.dims[d] + g[d];
    }
    return lin;
  }

  void touch(const Site& s) {
    scratch.resize(s.coords.size());
    for (size_t d = 0; d < s.coords.size(); ++d) scratch[d] = eval(s.coords[d]);
    record(s.place->storage, linear(*s.place, scratch.data(), scratch.size()), s.write);
  }

  Site site(const std::string& t, const std::vector<ir::AffineExpr>& idx, const std::map<std::string, int>& binding, bool write) {
    auto b = binding.find(t);
    Site s{place(t, b == binding.end() ? -1 : b->second), {}, write};
    for (const auto& e : idx) {
      auto it = converted.find(&e);
      if (it == converted.end())
        it = converted.emplace(&e, from_affine(e, k.sizes, [](const std::string& n) { return Expr::var("i_" + n); })).first;
      s.coords.push_back(prog.compile(it->second));
    }
    return s;
  }

  void read_sites(const ir::Expr& e, const std::map<std::string, int>& binding, std::vector<Site>* sites) {
    if (e.kind == ir::ExprKind::Access) sites->push_back(site(e.name, e.indices, binding, false));
    for (const auto& a : e.args) read_sites(*a, binding, sites);
  }

  NodeInfo compile_compute(const Node& n) {
    NodeInfo info;
    const ir::Statement& s = k.function->statements.at(n.statement);
    size_t j = 0;
    for (const auto& v : s.domain)
      if (!n.init || !v.is_reduction) info.domain.emplace_back(prog.slot("i_" + v.name), prog.compile(n.indices.at(j++)));
    if (!n.init) {
      read_sites(*s.rhs, n.binding, &info.sites);
      if (s.reduction != ir::Reduction::None) info.sites.push_back(site(s.output, s.out_indices, n.binding, false));
    }
    info.sites.push_back(site(s.output, s.out_indices, n.binding, true));
    return info;
  }

  NodeInfo compile_matmul(const MatmulOp& m) {
    NodeInfo info;
    for (const Expr* e : {&m.m0, &m.n0, &m.k0, &m.em, &m.en, &m.ek}) info.exprs.push_back(prog.compile(*e));
    auto operand = [&](int b, const std::string& t, const std::vector<Expr>& coords, bool write) {
      Site s{place(t, b), {}, write};
      for (const Expr& c : coords) s.coords.push_back(prog.compile(c));
      return s;
    };
    info.sites = {operand(m.c, m.c_tensor, m.c_coords, false), operand(m.a, m.a_tensor, m.a_coords, false),
                  operand(m.b, m.b_tensor, m.b_coords, false), operand(m.c, m.c_tensor, m.c_coords, true)};
    return info;
  }

  NodeInfo compile_node(const Node& n) {
    NodeInfo info;
    switch (n.kind) {
      case NodeKind::Loop:
        info.exprs = {prog.compile(n.lo), prog.compile(n.hi)};
        info.var = prog.slot(n.var);
        break;
      case NodeKind::Let:
        info.exprs = {prog.compile(n.value)};
        info.var = prog.slot(n.var);
        break;
      case NodeKind::If: info.exprs = {prog.compile(n.cond)}; break;
      case NodeKind::Compute: return compile_compute(n);
      case NodeKind::Matmul: return compile_matmul(n.matmul);
      case NodeKind::Copy: {
        const bool out_copy = n.dst < 0;
        const Buffer& b = k.buffers.at(size_t(out_copy ? n.src : n.dst));
        info.sites.push_back(Site{place(n.tensor, b.id), {}, true});
        info.sites.push_back(Site{place(n.tensor, -1), {}, false});
        if (!out_copy && n.src >= 0) info.sites.push_back(Site{place(n.tensor, n.src), {}, false});
        break;
      }
      case NodeKind::Block: break;
    }
    return info;
  }

  const NodeInfo& info(const Node& n) {
    auto it = infos.find(&n);
    if (it == infos.end()) it = infos.emplace(&n, compile_node(n)).first;
    return it->second;
  }

  void compute(const NodeInfo& info) {
    for (const auto& [s, e] : info.domain) prog.set(s, eval(e));
    for (const Site& s : info.sites) touch(s);
  }

  // Every element of the buffer's box in row-major order, clamped to the tensor where it is global
  // (out copies record only elements inside it; in copies read the source inside it and the
  // source box, and write every element of the box).
  void copy(const Node& n, const NodeInfo& info) {
    const bool out_copy = n.dst < 0;
    const Place& box = *info.sites[0].place;
    const Place& global = *info.sites[1].place;
    const Place* src = info.sites.size() > 2 ? info.sites[2].place : nullptr;
    const size_t r = box.dims.size();
    std::vector<int64_t> o(r), so, g(r), x(r, 0);
    for (size_t d = 0; d < r; ++d) o[d] = eval(box.offsets[d]);
    if (src)
      for (size_t d = 0; d < r; ++d) so.push_back(eval(src->offsets[d]));
    for (size_t d = 0; d < r; ++d)
      if (box.dims[d] <= 0) return;
    const int64_t box_storage = box.storage;
    for (int64_t box_index = 0;; ++box_index) {
      for (size_t d = 0; d < r; ++d) g[d] = o[d] + x[d];
      bool inside = global.storage >= 0;
      for (size_t d = 0; inside && d < r; ++d) inside = g[d] >= 0 && g[d] < global.dims[d];
      if (out_copy) {
        if (inside) {
          record(box_storage, box_index, false);
          record(global.storage, linear(global, g.data(), r), true);
        }
      } else {
        if (inside) {
          bool in_src = true;
          for (size_t d = 0; src && in_src && d < r; ++d) in_src = g[d] - so[d] >= 0 && g[d] - so[d] < src->dims[d];
          if (in_src && src) {
            int64_t lin = 0;
            for (size_t d = 0; d < r; ++d) lin = lin * src->dims[d] + (g[d] - so[d]);
            record(src->storage, lin, false);
          } else if (in_src) {
            record(global.storage, linear(global, g.data(), r), false);
          }
        }
        record(box_storage, box_index, true);
      }
      size_t d = r;
      while (d > 0 && ++x[d - 1] == box.dims[d - 1]) x[--d] = 0;
      if (d == 0) return;
    }
  }

  void matmul(const NodeInfo& info) {
    int64_t v[6];
    for (int i = 0; i < 6; ++i) v[i] = eval(info.exprs[size_t(i)]);
    const auto [m0, n0, k0, em, en, ek] = v;
    for (int64_t i = 0; i < em; ++i)
      for (int64_t j = 0; j < en; ++j) {
        prog.set(frag_m, m0 + i);
        prog.set(frag_n, n0 + j);
        touch(info.sites[0]);
        for (int64_t q = 0; q < ek; ++q) {
          prog.set(frag_k, k0 + q);
          touch(info.sites[1]);
          touch(info.sites[2]);
        }
        touch(info.sites[3]);
      }
  }

  void run(const Node& n) {
    if (n.kind == NodeKind::Block) {
      for (const auto& c : n.children) run(*c);
      return;
    }
    const NodeInfo& in = info(n);
    switch (n.kind) {
      case NodeKind::Block: return;
      case NodeKind::Let: prog.set(in.var, eval(in.exprs[0])); return;
      case NodeKind::If: {
        for (const auto& c : eval(in.exprs[0]) ? n.children : n.else_children) run(*c);
        return;
      }
      case NodeKind::Compute: compute(in); return;
      case NodeKind::Copy: copy(n, in); return;
      case NodeKind::Matmul: matmul(in); return;
      case NodeKind::Loop: {
        const int64_t lo = eval(in.exprs[0]), hi = eval(in.exprs[1]);
        ActiveLoop mine{&n, !n.rebinds_buffers, 0, {}};
        if (n.parallel) {
          active.push_back(&mine);
          ++out.loops;
        }
        for (int64_t v = lo; v < hi; v += n.step) {
          prog.set(in.var, v);
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
