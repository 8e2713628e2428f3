// Kernel IR: the target-neutral loop tree the polyhedral core produces and the ONLY input of the
// emitters (c, npu, cuda). Documented for emitter authors in compiler/kernel/README.md.
//
// A Kernel is one compiled tensor Function at fixed sizes:
//   - `tensors`: the global tensors (inputs, outputs, and locals that must live in global memory
//     because they cross fused groups), with concrete shapes, in argument order (inputs, outputs)
//     followed by global temporaries;
//   - `buffers`: on-chip buffers, each placed at a hierarchy level by role (stage, operand_a,
//     operand_b, accumulator, vector), holding a box of one tensor: `extents` per tensor dimension,
//     row-major in tensor-dimension order; element (g_0..g_r) of the tensor lives at buffer index
//     (g_d - offset_d) where `offset` is an Expr over the kernel's scalar variables;
//   - `body`: a tree of Nodes (Block, Loop, If, Let, Copy, Compute, Matmul).
//
// Scalar variables are either loop iterators (Loop::var) or Let-bound names (tile origins). Every
// Expr is integer arithmetic over them (sizes are already bound to constants).
//
// Loops carry a LoopKind: ParallelCores (outer tile loops: blocks / AI cores), ParallelWithinCore
// (operand-level tile loops: warps / units), Sequential, Unrolled; the kind says where a loop sits
// in the tiling, `parallel` whether its iterations are independent (proved, not assumed).
//
// Copy moves the box of a buffer between a level and its source (global tensor or another buffer)
// clamped to the tensor's bounds; elements of the destination box outside the tensor are zero.
// Compute evaluates one tensor-IR statement instance (or its reduction init) with every tensor
// access redirected to the buffer bound for that tensor (or the global tensor). Matmul is a matched
// intrinsic: an operand-level tile C[m0:m0+em, n0:n0+en] += A * B over k0:k0+ek, built from the
// matrix unit's fragment shape (e.g. 16x16x16), with A/B identified and their majorness.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/ir/tensor_ir.h"
#include "compiler/kernel/attention.h"
#include "compiler/kernel/contraction.h"
#include "compiler/tile/tile_spec.h"
#include "isa/base/dtype.h"
#include "isa/hierarchy.h"

namespace tessel::kernel {

// X(enumerator, spelling, arity)
#define TESSEL_KEXPR_KINDS(X) \
  X(Int, "int", 0)            \
  X(Var, "var", 0)            \
  X(Add, "+", 2)              \
  X(Sub, "-", 2)              \
  X(Mul, "*", 2)              \
  X(Neg, "neg", 1)            \
  X(FloorDiv, "floordiv", 2)  \
  X(Mod, "mod", 2)            \
  X(Min, "min", 2)            \
  X(Max, "max", 2)            \
  X(Lt, "<", 2)               \
  X(Le, "<=", 2)              \
  X(Eq, "==", 2)              \
  X(Ge, ">=", 2)              \
  X(Gt, ">", 2)               \
  X(And, "&&", 2)             \
  X(Or, "||", 2)              \
  X(Select, "select", 3)

enum class ExprKind : uint8_t {
#define TESSEL_X(e, s, a) e,
  TESSEL_KEXPR_KINDS(TESSEL_X)
#undef TESSEL_X
};
const char* expr_kind_spelling(ExprKind k);

// Integer expression over scalar variables (value type; small trees).
struct Expr {
  ExprKind kind = ExprKind::Int;
  int64_t value = 0;        // Int
  std::string name;         // Var
  std::vector<Expr> args;   // operators

  static Expr integer(int64_t v);
  static Expr var(const std::string& n);
  static Expr make(ExprKind k, std::vector<Expr> args);
  bool is_int() const { return kind == ExprKind::Int; }
  // Value with the given variables bound (missing variable: InternalError).
  int64_t evaluate(const std::map<std::string, int64_t>& vars) const;
  std::string to_string() const;
};
Expr operator+(const Expr& a, const Expr& b);
Expr operator-(const Expr& a, const Expr& b);
Expr min_expr(const Expr& a, const Expr& b);

// A tensor-IR index expression (quasi-affine, ir::AffineExpr) as an integer Expr: size parameters
// bound from `sizes`, each index replaced by `index_var(name)`, each division term
// floor(num / d) as FloorDiv(num, d). Exact for negative numerators (FloorDiv rounds down).
Expr from_affine(const ir::AffineExpr& e, const std::map<std::string, int64_t>& sizes,
                 const std::function<Expr(const std::string&)>& index_var);
// The division terms of `e` alone (sum of coeff * FloorDiv), Int 0 when it has none.
Expr division_terms(const ir::AffineExpr& e, const std::map<std::string, int64_t>& sizes,
                    const std::function<Expr(const std::string&)>& index_var);

// C-family text of an integer expression, shared by the C and CUDA emitters. Floor division and
// modulo call `tessel_floordiv` / `tessel_mod`, which the emitted prelude defines; the spelling
// says how constants are written and what the min/max helpers are called.
struct CIntSpelling {
  std::string (*literal)(int64_t value);
  const char* min_fn;
  const char* max_fn;
};
std::string to_c(const Expr& e, const CIntSpelling& spelling);

// X(enumerator, spelling)
#define TESSEL_LOOP_KINDS(X)                        \
  X(ParallelCores, "parallel_cores")                \
  X(ParallelWithinCore, "parallel_within_core")     \
  X(Sequential, "sequential")                       \
  X(Unrolled, "unrolled")

enum class LoopKind : uint8_t {
#define TESSEL_X(e, s) e,
  TESSEL_LOOP_KINDS(TESSEL_X)
#undef TESSEL_X
};
const char* loop_kind_name(LoopKind k);

struct GlobalTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  ir::TensorKind kind = ir::TensorKind::Input;
  bool temporary = false;  // a Local materialised in global memory between fused groups
  // The shape the user's function declares, where poly::collapse_indices merged dimensions (the
  // same row-major bytes): runners accept inputs and give outputs in it. Empty: `shape`.
  std::vector<int64_t> declared_shape;
  const std::vector<int64_t>& user_shape() const { return declared_shape.empty() ? shape : declared_shape; }
};

struct Buffer {
  int id = 0;
  std::string name;          // "A_L1_g0": unique, a C identifier
  std::string tensor;        // the tensor whose box it holds
  DType dtype = DType::F32;
  isa::Role role = isa::Role::Vector;
  std::string level;         // level name in the hierarchy ("L0A", "shared")
  std::vector<int64_t> extents;  // box size per tensor dimension
  std::vector<Expr> offset;      // global coordinates of element 0 (over Let vars in scope)
  int group = 0;             // fused group that owns it
  bool double_buffered = false;
  int64_t elements() const;
  int64_t bytes() const;
};

enum class Layout : uint8_t { RowMajor, ColMajor };
const char* layout_name(Layout l);

#define TESSEL_KNODE_KINDS(X) \
  X(Block, "block")           \
  X(Loop, "loop")             \
  X(If, "if")                 \
  X(Let, "let")               \
  X(Copy, "copy")             \
  X(Compute, "compute")       \
  X(Matmul, "matmul")

enum class NodeKind : uint8_t {
#define TESSEL_X(e, s) e,
  TESSEL_KNODE_KINDS(TESSEL_X)
#undef TESSEL_X
};
const char* node_kind_name(NodeKind k);

// Matched matmul fragment (target-neutral): C[m, n] += A[m, k] * B[k, n] on operand-level tiles.
struct MatmulOp {
  int statement = -1;           // tensor-IR statement it implements
  int a = -1, b = -1, c = -1;   // buffer ids: operand_a, operand_b, accumulator
  std::string a_tensor, b_tensor, c_tensor;
  Layout a_layout = Layout::RowMajor;  // RowMajor: A is [m][k] in memory; ColMajor: [k][m]
  Layout b_layout = Layout::RowMajor;  // RowMajor: B is [k][n]; ColMajor: [n][k]
  Expr m0, n0, k0;              // global coordinates of the fragment tile's origin
  Expr em, en, ek;              // extents (≤ tile sizes; smaller on partial tiles)
  int64_t tile_m = 0, tile_n = 0, tile_k = 0;  // operand-level tile sizes
  int unit_m = 16, unit_n = 16, unit_k = 16;   // the matrix unit's fragment shape
  DType in_type = DType::F16, acc_type = DType::F32;
  // Global tensor coordinates of A[m, k], B[k, n], C[m, n] as Exprs over the variables "frag_m",
  // "frag_n", "frag_k" (global indices of the three axes) and Let-bound tile origins: for plain
  // GEMMs (frag_m, frag_k) etc.; for convolutions the img2col view, e.g. A = X(g_n_o, g_p_o +
  // g_r_o, frag_m + g_s_o, frag_k). Index buffers with them (element = coordinate - offset).
  std::vector<Expr> a_coords, b_coords, c_coords;
  bool img2col = false;  // an input coordinate combines m or k with another axis
};

struct Node;
using NodePtr = std::shared_ptr<Node>;

struct Node {
  NodeKind kind = NodeKind::Block;
  std::vector<NodePtr> children;  // Block, Loop body, If then
  std::vector<NodePtr> else_children;  // If

  // Loop: for (var = lo; var < hi; var += step)
  std::string var;
  Expr lo, hi;
  int64_t step = 1;
  LoopKind loop_kind = LoopKind::Sequential;
  std::string axis;       // tile loops: the index name they tile ("m"); empty for point loops
  bool inner_tile = false;  // tile loops: operand-level (true) or stage-level (false)
  // The polyhedral core proved that no two iterations of this loop touch the same tensor element
  // with at least one write, for equal values of the enclosing loops (no dependence is carried by
  // its schedule dimension; compiler/poly/parallelism.h). Only such loops may have their
  // iterations run concurrently. Emitters read these two facts, never set them.
  bool parallel = false;
  // The loop's body places some buffer's box anew each iteration (binds a Let its offset reads):
  // iterations that share the buffers (threads of one block, units of one core) conflict in it.
  // Iterations of the outer ParallelCores loops do not: each core / block has its own buffers.
  bool rebinds_buffers = false;

  Expr cond;  // If
  // Let: var = value
  Expr value;

  // Copy: dst buffer <- src (buffer id, or -1: the global tensor); `out` copies dst back to global
  // (src then is the buffer and dst is -1).
  int src = -1, dst = -1;
  std::string tensor;

  // Compute: statement index into the Function, index values for its domain indices (in order),
  // init (reduction identity instead of the update), and where each tensor lives (-1: global).
  int statement = -1;
  std::vector<Expr> indices;
  bool init = false;
  std::map<std::string, int> binding;

  MatmulOp matmul;  // Matmul
};

struct Kernel {
  std::string name;
  const ir::Function* function = nullptr;  // statements referenced by Compute (owned by caller)
  std::map<std::string, int64_t> sizes;
  std::vector<GlobalTensor> tensors;
  std::vector<Buffer> buffers;
  std::vector<std::string> let_vars;  // every Let-bound name (declared once by emitters)
  NodePtr body;
  std::string target;  // hierarchy name the buffers were placed for
  // The user's tile spec (--tile), absent without one: read by the target tile policies that plan
  // a mapping beyond the loop tree (the NPU convolution, compiler/tile/npu_conv_plan.h).
  std::optional<tile::TileSpec> user_tile;
  // The GPU plan given as text (--tile in the GPU form "128x128x64/64x64/ks1/st4/wg/ws", or from
  // the tuning database), empty for the tile policy's own choice: the CUDA emitter carries it out
  // or refuses it with the reason (emit_cuda::TcConfig, tile_policy.h config_obstacle).
  std::string gpu_plan;
  // The contraction the polyhedral core matched (compiler/poly/contraction.h, pass "contraction"),
  // or nullopt with `no_contraction` saying why nothing matched.
  std::optional<Contraction> contraction;
  std::string no_contraction;
  // The softmax fused into the contraction that consumes it (compiler/poly/online_softmax.h, pass
  // "online_softmax"): the kernel is that one-pass computation, `body` is empty and `buffers` too
  // (no loop tree: the emitters lower the record; no S x S tensor is among `tensors`).
  std::optional<Attention> attention;

  const GlobalTensor* find_tensor(const std::string& n) const;
};

// Text form (`--print-kernel`, `--dump-after=kernel`).
std::string to_string(const Kernel& k);

// Visit every node in pre-order.
void for_each_node(const NodePtr& root, const std::function<void(const Node&, int depth)>& fn);

}  // namespace tessel::kernel
