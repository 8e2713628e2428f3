// The SIMT walk's printer (emit_simt.h): one group kernel's code from its kernel IR nodes, with
// the group's mapping (buffers and their pitch, boxes read or written straight from global memory,
// threads, index width) set by emit_simt before it prints. Element access, copies, matmul
// fragments, compute nests over threads and the block-uniform walk are in emit_simt.cc; reduction
// nests over thread groups in simt_reduction.cc. Internal to the SIMT emitter.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/emit_cuda/cuda_expr.h"
#include "compiler/emit_cuda/simt_loop_chain.h"
#include "compiler/emit_cuda/simt_mapping.h"
#include "compiler/kernel/divisibility.h"
#include "compiler/kernel/kernel_ir.h"
#include "isa/base/error.h"

namespace tessel::emit_cuda::simt {

struct ReductionShape;  // simt_reduction.cc
struct LaneMapping;

struct SimtEmitter {
  const kernel::Kernel& k;
  std::ostringstream& os;
  std::map<int, std::string> buffer_ptr;  // buffer id -> pointer name in the current kernel
  int reductions = 0;                     // reduction nests emitted (they use red_smem_)
  kernel::Divisors divisors;              // of the kernel's variables (box offsets' alignment)
  std::map<int, int64_t> pitch;           // buffer id -> elements between its rows, where padded
  std::set<int> direct;                   // copy-in boxes read straight from global (simt_direct_buffers)
  std::set<int> direct_out;               // copy-out boxes written straight to global (simt_direct_buffers)
  std::set<std::string> coherent;         // global tensors read through L2 (__ldcg): other blocks of the launch wrote them
  // the code runs in one block while the rest of the grid is done (simt_finalise.h): reduction
  // nests give every output its lanes at once and keep more loads in flight per lane. Set by
  // whoever emits a finalised group (group_code's `finalising`), never inferred.
  bool finalising = false;
  // reads of the update being printed that a thread holds in a lane vector (load_lane_vectors):
  // the access -> the local holding its `width` consecutive elements as an array of the stored
  // type, element u_ read from it
  std::map<const ir::Expr*, std::string> lane_vectors;
  int lane_vectors_made = 0;  // (their names are unique in the kernel)
  std::set<std::string> owned_loop_vars;  // see owner_stable
  const Node* pending_init = nullptr;     // an init nest right before the loop being emitted (sequence)
  bool init_folded = false;               // the loop's reduction nest took pending_init over
  bool barrier_left_to_loop = false;      // a nest left its closing barrier to the enclosing loop
  const ir::Statement* reading = nullptr;  // the statement whose right-hand side is being printed
  unsigned threads = kSimtThreads;        // of the block
  int64_t row_pitch(const kernel::Buffer& b) const {
    auto it = pitch.find(b.id);
    return it == pitch.end() ? b.extents.back() : it->second;
  }
  // Index arithmetic in 32 bits where every tensor, buffer and size fits (narrow_indices): 64-bit
  // division and remainder are long instruction sequences on the GPU.
  std::string ix = "long long", L = "LL";
  bool narrow = false;

  void set_narrow(bool n) {
    narrow = n;
    ix = n ? "int" : "long long";
    L = n ? "" : "LL";
  }
  std::string ie(const Expr& e) const {
    if (!narrow) return int_expr(e);
    static constexpr auto literal = [](int64_t v) { return "(" + std::to_string(v) + ")"; };
    return kernel::to_c(e, {+literal, "min", "max"});
  }

  const kernel::GlobalTensor& tensor(const std::string& n) {
    const auto* t = k.find_tensor(n);
    TESSEL_CHECK(t, "emit_cuda: tensor " + n + " is neither global nor bound to a buffer (promote must bind it)");
    return *t;
  }

  std::string linear(int buffer, const std::string& tname, const std::vector<std::string>& g);
  std::string storage(int buffer, const std::string& tname) { return buffer >= 0 ? buffer_ptr.at(buffer) : "t_" + tname; }

  // An index expression of the statement (quasi-affine: floor division and modulo by constants).
  std::string affine(const ir::AffineExpr& e) {
    return ie(kernel::from_affine(e, k.sizes, [](const std::string& i) { return Expr::var("i_" + i); }));
  }

  std::string access(const std::string& tname, const std::vector<ir::AffineExpr>& idx, const std::map<std::string, int>& binding);
  // An element of a copy-in box read from the tensor itself: zero outside the tensor, as the copy
  // would have filled it (folded padding reads there). A dim indexed by one index variable alone
  // is inside the tensor (its range is inferred from, or checked against, the dimension).
  std::string direct_read(const std::string& tname, const std::vector<ir::AffineExpr>& idx, const std::vector<std::string>& g);
  // direct_read's condition that the element lies inside the tensor ("" where it always does)
  std::string direct_inside(const std::string& tname, const std::vector<ir::AffineExpr>& idx, const std::vector<std::string>& g);

  // Whether the code so far ends with a block barrier (a second one right after it is redundant).
  bool after_barrier() const;

  // Binds i_<index> for the statement's domain indices the node gives (only `dims` when set).
  void bind_indices(const Node& n, const ir::Statement& s, const std::string& pad, const std::vector<size_t>* dims = nullptr);

  // The statement's right-hand side for one instance (its indices bound).
  std::string update_value(const Node& n, const ir::Statement& s);

  void compute(const Node& n, const std::string& pad);

  void copy(const Node& n, const std::string& pad);

  void matmul(const kernel::MatmulOp& m, const std::string& pad);


  // Declares n<i>_ / lo<i>_ and the flat trip count `total` of `dims`; then, inside a loop that sets
  // `flat`, decode_dims binds their variables and gives the condition that the iteration is real
  // (for dims counted by an upper bound; "true" otherwise).
  void count_dims(const std::vector<Dim>& dims, const std::string& tag, const std::string& pad);
  // The flat index is non-negative: with 32-bit indices it is decoded as unsigned, whose division
  // and remainder by a constant are a multiply-high and a shift (signed ones need sign fix-ups).
  // With `split` > 1 the innermost dim (an exact count n, a multiple of split) is decoded only to
  // its residue q_ in [0, n / split): the thread then runs the body for q_ + u * n / split, u in
  // [0, split) (open_split_loop), so one decoding serves `split` iterations and neighbouring
  // threads still touch neighbouring elements.
  std::string decode_dims(const std::vector<Dim>& dims, const std::string& tag, const std::string& flat, const std::string& pad,
                          int64_t split = 1);
  // floor(x / step) for x >= 0 (a point's distance from its first tile's origin)
  std::string tile_index(const std::string& x, int64_t step) const {
    if (narrow) return "(int)((unsigned)(" + x + ") / " + std::to_string(step) + "u)";
    return "((" + x + ") / " + std::to_string(step) + L + ")";
  }
  void tile_of_point(const Dim& d, const std::string& id, const std::string& pad);
  // The innermost dim's variable for the u-th of `split` iterations (decode_dims with split):
  // q_ + u * n / split, or with `contiguous` q_ * split + u (a thread's iterations side by side).
  std::string open_split_loop(const std::vector<Dim>& dims, const std::string& tag, int64_t split, const std::string& pad,
                              bool contiguous = false);
  // Lane vectors (simt_lane_vector.cc): a thread runs `width` consecutive iterations of the
  // innermost mapped dim (open_split_loop with contiguous) and reads each contiguous read of the
  // update once, as one 4-, 8- or 16-byte load. The width: the largest of 8, 4, 2 where the dims'
  // counts are exact, the innermost walks one statement index with unit step and is a multiple of
  // it, the block keeps an iteration for every thread, and every read whose last index walks that
  // statement index is aligned to it (rows and offsets multiples of the width, proven by the
  // kernel's divisors); 1 where none (or none such read) is.
  // With `store`, the update's output is one of them (an element-wise statement's vector store).
  int64_t lane_vector_width(const std::vector<Dim>& dims, const Node& update, const ir::Statement& s, bool store = false) const;
  // Opens a block at `pad` binding the innermost dim's first iteration of the thread's vector and
  // loading the update's contiguous reads into lane_vectors; the caller then opens the contiguous
  // split loop inside and closes the block after it (and clears lane_vectors).
  void load_lane_vectors(const std::vector<Dim>& dims, const std::string& tag, int64_t width, const Node& update,
                         const ir::Statement& s, const std::string& pad);
  // An element-wise compute nest whose innermost loop holds one statement (no lets on the way) as
  // lane vectors: its reads and its store `width` elements at once (parallel_region).
  void lane_vector_region(const std::vector<Dim>& dims, int64_t width, const Node& update, const std::string& pad);
  // The one element-wise compute of a chain's mapped levels that lane_vector_region can print, or
  // null: no lets on the way, the innermost mapped loop's only child.
  const Node* lane_vector_candidate(const std::vector<ChainLevel>& chain, size_t mapped) const;
  // How many iterations of the innermost mapped dim one thread runs per decoding: 4 or 2 where the
  // dims' counts are exact, the innermost is a multiple of it and the block still has an iteration
  // for every thread.
  int64_t inner_split(const std::vector<Dim>& dims) const;

  void thread_node(const Node& n, const std::string& pad);

  // The longest prefix of the chain whose loops threads may share, as dims with independent bounds.
  size_t thread_prefix(const std::vector<ChainLevel>& chain);

  void parallel_region(const std::vector<ChainLevel>& chain, size_t mapped, const std::string& pad);

  // A reduction nest: a loop chain down to one update, whose loops are either shared by threads
  // (the output's loops, O) or not (R: they walk the reduced elements of one output). O loops go
  // to groups of G threads (a warp or more), R loops run inside the group with the innermost
  // strided over its lanes; lanes combine by warp shuffles (xor butterfly, then warps in order
  // through shared memory), and lane 0 folds the result into the output once. The order is fixed
  // (deterministic) but is not the interpreter's: float sums are reassociated.
  //
  // With `outer` (a sequential loop whose body is Lets, copies that emit no code and this nest,
  // loop_private_candidate), the nest is emitted only when a thread owns each output over the whole
  // loop and a thread reduces an output alone (G = 1): the loop then runs inside the thread, around
  // the reduced loops, so an output's updates keep their order and its loads of every iteration
  // are in flight together; otherwise nothing is emitted and false returned.
  bool reduction_nest(const Node& root, const std::string& pad, const Node* outer = nullptr);
  // reduction_nest's pieces: the reduced loops into a lane's acc_, the lanes combined, the result
  // folded into the output
  void reduce_over_lanes(const ReductionShape& r, const LaneMapping& lanes, const Node* outer, const std::string& pad);
  void combine_lanes(const ReductionShape& r, const LaneMapping& lanes, const std::string& pad);
  void fold_into_output(const ReductionShape& r, const LaneMapping& lanes, bool fuse_init, const std::string& pad);
  // Outputs of a column reduction one thread reduces together (lanes.split): a lane vector of
  // consecutive ones (lane_vector_width, lanes.contiguous) or inner_split of the output dims; 1
  // where a let of the nest reads the innermost output variable.
  void column_split(const ReductionShape& r, LaneMapping& lanes) const;

  // Inside a sequential loop whose body is this reduction nest alone (owned_loop_vars: the loop's
  // variable and the lets of its body), a thread finds the same outputs in every iteration when
  // the output dims' bounds read none of those variables and the update reads no element of its
  // own output: then only it touches its outputs across iterations and the block barrier between
  // iterations can go (one after the loop instead), so a thread's loads of successive iterations
  // overlap.
  bool owner_stable(const std::vector<Dim>& odims, const ir::Statement& s, const Node& update) const;
  // Whether `init` (a nest of init statements) sets exactly the outputs a reduction nest with output
  // levels O updates, on the same loops: its chain is O's loops (same variables and bounds, no
  // lets) down to one init of the update's statement at the update's output indices.
  bool initialises(const Node& init, const std::vector<ChainLevel>& O, const Node& update, const std::vector<size_t>& out_dims);

  // Whether the output element and the O levels' lets read none of owned_loop_vars (so one
  // decoding of the outputs serves every iteration of the enclosing loop).
  bool outputs_private(const std::vector<ChainLevel>& O, const ir::Statement& s, const Node& update,
                       const std::vector<size_t>& out_dims) const;
  // The loop of a block-uniform walk whose body is Lets, copies of boxes read or written straight
  // from global memory (no code) and one loop nest: owner_stable may then leave the nest's barrier
  // to the end of the loop.
  std::set<std::string> loop_private_candidate(const Node& n) const;

  // Nodes in order; an init nest followed by a loop whose reduction nest runs inside the thread
  // (reduction_nest with `outer`) and initialises the same outputs is left out, the nest storing
  // its result instead of adding it to the identity. Tried by emitting the loop first: when it
  // does not take the init over, its text is dropped and both are emitted in order.
  void sequence(const std::vector<const Node*>& nodes, const std::string& pad);

  void uniform_node(const Node& n, const std::string& pad);
};

}  // namespace tessel::emit_cuda::simt
