// The read and the tile schedule of the window emitters: see window_plan.h.
#include "compiler/emit_npu/window_plan.h"

#include <algorithm>
#include <set>

#include "compiler/emit_npu/operands.h"

namespace tessel::emit_npu {

using npu::Opcode;
using npu::Operand;

std::string WindowPlan::match_read(const ir::Statement& s, const ir::Expr& x, bool strided) {
  const char* not_window = strided ? "reads are not strided windows at the output's indices"
                                   : "reads are not at the output's indices plus windows";
  X_ = x.name;
  // [N, P, Q, C], or [P, Q, C] (N = 1: the pipeline collapsed n with p where p has no window)
  const size_t rank = s.out_indices.size();
  if ((rank != 4 && rank != 3) || x.indices.size() != rank) return "not 3-d or 4-d";
  lead_ = 4 - static_cast<int>(rank);
  outs_.clear();
  for (const ir::AffineExpr& e : s.out_indices) {
    if (e.index_coeffs.size() != 1 || e.index_coeffs.begin()->second != 1 || !e.param_coeffs.empty() || e.constant || e.has_div())
      return "output indices are not plain";
    outs_.push_back(e.index_coeffs.begin()->first);
  }
  std::map<std::string, int64_t> ext;
  for (const ir::IndexVar& d : s.domain) {
    if (d.lo.evaluate({}, k_.sizes) != 0) return "an index not from 0";
    ext[d.name] = d.hi.evaluate({}, k_.sizes);
  }
  // dims n and c the output's, p and q the output's (times a stride) plus at most one window
  std::set<std::string> windows;
  int64_t* kdim[2] = {&KH_, &KW_};
  int64_t* stride[2] = {&sh_, &sw_};
  int64_t* offset[2] = {&oh_, &ow_};
  for (int d = 0; d < static_cast<int>(rank); ++d) {
    const ir::AffineExpr& e = x.indices[d];
    const int role = d + lead_;
    const bool spatial = role == 1 || role == 2;
    const int64_t own = e.index_coeffs.count(outs_[d]) ? e.index_coeffs.at(outs_[d]) : 0;
    if (!e.param_coeffs.empty() || e.has_div() || own < 1 || (!strided && (own != 1 || e.constant))) return not_window;
    if (e.index_coeffs.size() > (spatial ? 2u : 1u) || (!spatial && (e.constant || own != 1))) return not_window;
    if (!spatial) continue;
    *stride[role - 1] = own, *offset[role - 1] = e.constant;
    for (const auto& [v, coeff] : e.index_coeffs) {
      if (v == outs_[d]) continue;
      const ir::IndexVar* iv = s.find_index(v);
      if (coeff != 1 || !iv || !iv->is_reduction || !windows.insert(v).second)
        return strided ? "a window of dilation other than 1" : "a window of stride other than 1";
      *kdim[role - 1] = ext.at(v);
    }
  }
  for (const ir::IndexVar& d : s.domain)
    if (d.is_reduction && !windows.count(d.name)) return "a reduction that is not a window";
  const int lead = lead_;
  N_ = lead ? 1 : ext.at(outs_[0]), P_ = ext.at(outs_[1 - lead]), Q_ = ext.at(outs_[2 - lead]), C_ = ext.at(outs_[3 - lead]);
  return "";
}

std::string WindowPlan::bind_input() {
  const int lead = lead_;
  const size_t rank = outs_.size();
  const kernel::GlobalTensor* xt = k_.find_tensor(X_);
  if (!xt || xt->temporary || xt->kind != ir::TensorKind::Input || xt->shape.size() != rank) return "the read is not an input of its rank";
  Hin_ = xt->shape[1 - lead], Win_ = xt->shape[2 - lead];
  if ((!lead && xt->shape[0] < N_) || xt->shape[3 - lead] != C_) return "the read's shape";
  out_shape_ = lead ? std::vector<int64_t>{P_, Q_, C_} : std::vector<int64_t>{N_, P_, Q_, C_};
  return "";
}

std::vector<int64_t> WindowPlan::divisors(int64_t x) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i * i <= x; ++i)
    if (x % i == 0) d.push_back(i), d.push_back(x / i);
  std::sort(d.begin(), d.end());
  d.erase(std::unique(d.begin(), d.end()), d.end());
  return d;
}

NpuKernel WindowPlan::emit_window(int64_t tiles, uint8_t tmp, const std::function<void()>& setup,
                                  const std::function<std::string(int, int64_t)>& note) {
  NpuKernel out;
  npu::Program& p = begin_program(out);
  for (const npu::TensorBinding& t : p.tensors) gm_[t.name] = t.gm_offset;
  const int64_t per = (tiles + m_.cores - 1) / m_.cores, full = tiles / per, tail = tiles % per;
  p.cores = static_cast<int>(full + (tail > 0));
  setup();
  if (tail == 0) {
    op(Opcode::Mul, {reg(kBase), reg(npu::kRegCoreId), imm(per)});
    emit_tiles(per);
  } else {  // cores 0 .. full - 1 (a loop of one trip), then the last core (full - core_id == 0)
    op(Opcode::Loop, {reg(kCoreLoop), reg(npu::kRegCoreId), imm(full), imm(full)});
    op(Opcode::Mul, {reg(kBase), reg(npu::kRegCoreId), imm(per)});
    emit_tiles(per);
    op(Opcode::EndLoop, {});
    op(Opcode::Sub, {reg(tmp), imm(full), reg(npu::kRegCoreId)});
    op(Opcode::Loop, {reg(kCoreLoop), reg(tmp), imm(1), imm(1)});
    op(Opcode::Mov, {reg(kBase), imm(full * per)});
    emit_tiles(tail);
    op(Opcode::EndLoop, {});
  }
  p.add(Opcode::PipeBarrier, {Operand::pipe_(npu::Pipe::All)});
  out.notes.push_back(note(p.cores, per));
  npu::validate_program(p);
  return out;
}

void WindowPlan::tile_index(bool in_loop, int64_t d) {
  if (in_loop) {
    op(Opcode::Mul, {reg(kTile), reg(kPair), imm(2)});
    op(Opcode::Add, {reg(kTile), reg(kTile), reg(kBase)});
    op(Opcode::Add, {reg(kTile), reg(kTile), imm(d)});
  } else {
    op(Opcode::Add, {reg(kTile), reg(kBase), imm(d)});
  }
}

void WindowPlan::emit_tiles(int64_t count) {
  load(false, 0, 0);
  const int64_t pairs = (count - 1) / 2;
  if (pairs > 1) {
    op(Opcode::Loop, {reg(kPair), imm(0), imm(pairs), imm(1)});
    load(true, 1, 1);
    compute(true, 0, 0);
    load(true, 2, 0);
    compute(true, 1, 1);
    op(Opcode::EndLoop, {});
  }
  for (int64_t i = pairs > 1 ? 2 * pairs : 0; i < count; ++i) {
    if (i + 1 < count) load(false, i + 1, (i + 1) % 2);
    compute(false, i, i % 2);
  }
}

}  // namespace tessel::emit_npu
