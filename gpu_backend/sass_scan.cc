#include "gpu_backend/sass_scan.h"

#include <cstring>

#include "isa/base/error.h"

namespace tessel::gpu {
namespace {

// Tensor-core opcodes: low 12 bits of the first 64-bit word of a 128-bit SASS instruction.
struct TensorOpcode {
  uint16_t opcode;
  const char* mnemonic;
  int min_sm, max_sm;
};
// Checked with `cuobjdump -sass` (CUDA 13.0) on WMMA kernels compiled by NVRTC; tests/gpu cross-checks
// whenever cuobjdump is on PATH.
constexpr TensorOpcode kTensorOpcodes[] = {
    {0x23c, "HMMA", 75, 90},  // HMMA.1688 / HMMA.16816 (f16, bf16 inputs)
    {0x237, "IMMA", 75, 90},  // IMMA.8816 / IMMA.16832 (s8, u8 inputs)
    {0x9f0, "HGMMA", 90, 90},  // HGMMA.64xNx16 (wgmma.mma_async, sm_90a): one per wgmma in the PTX
};

// TMA copies (cp.async.bulk.tensor, sm_90): checked with `cuobjdump -sass` (CUDA 12.x on the GPU
// machine) on a persistent /ws convolution kernel: tiled loads UTMALDG.2D (0x5b4), im2col loads
// UTMALDG.4D.IM2COL (0x3b4); no other instruction of that kernel had either opcode. Tiled stores
// UTMASTG.2D (0x3b5, encoding 0x...73b5) on a /ts GEMM kernel (docs/results/tma_store_sass_h200.txt).
constexpr TensorOpcode kCopyOpcodes[] = {
    {0x5b4, "UTMALDG", 90, 90},
    {0x3b4, "UTMALDG", 90, 90},
    {0x3b5, "UTMASTG", 90, 90},
};

constexpr int kMinSm = 75, kMaxSm = 90;

constexpr uint16_t kEmCuda = 190;
constexpr uint32_t kShtNobits = 8;

template <class T>
T read_le(const std::vector<uint8_t>& b, size_t offset, const char* what) {
  if (offset + sizeof(T) > b.size())
    throw UserError(std::string("CUBIN is truncated (reading ") + what + " at byte " + std::to_string(offset) + " of " +
                    std::to_string(b.size()) + ")");
  T v;
  std::memcpy(&v, b.data() + offset, sizeof(T));
  return v;
}

struct Section {
  std::string name;
  uint32_t type;
  uint64_t offset, size;
};

struct Elf {
  int sm = 0;
  std::vector<Section> sections;
};

// The SM version in a CUDA ELF's e_flags: bits 0..7 in the classic ABI (EF_CUDA_SM), bits 8..15 in
// the ABI version 2 headers newer toolkits write (EI_ABIVERSION >= 7 at byte 8).
int sm_from_flags(uint32_t flags, uint8_t abi_version) {
  return abi_version >= 7 ? int((flags >> 8) & 0xff) : int(flags & 0xff);
}

Elf parse_elf(const std::vector<uint8_t>& b) {
  if (b.size() < 64 || std::memcmp(b.data(), "\x7f" "ELF", 4) != 0)
    throw UserError("not a CUBIN: the bytes do not start with an ELF header");
  if (b[4] != 2 || b[5] != 1) throw UserError("not a CUBIN: expected a 64-bit little-endian ELF");
  if (read_le<uint16_t>(b, 18, "e_machine") != kEmCuda) throw UserError("not a CUBIN: ELF machine is not EM_CUDA (190)");
  Elf e;
  e.sm = sm_from_flags(read_le<uint32_t>(b, 48, "e_flags"), b[8]);
  const uint64_t shoff = read_le<uint64_t>(b, 40, "e_shoff");
  const uint16_t shentsize = read_le<uint16_t>(b, 58, "e_shentsize");
  const uint16_t shnum = read_le<uint16_t>(b, 60, "e_shnum");
  const uint16_t shstrndx = read_le<uint16_t>(b, 62, "e_shstrndx");
  if (shentsize < 64 || shstrndx >= shnum) throw UserError("CUBIN has a malformed section header table");
  const auto header = [&](uint16_t i) { return shoff + uint64_t(i) * shentsize; };
  const uint64_t strtab_off = read_le<uint64_t>(b, header(shstrndx) + 24, "section names offset");
  const uint64_t strtab_size = read_le<uint64_t>(b, header(shstrndx) + 32, "section names size");
  if (strtab_off + strtab_size > b.size()) throw UserError("CUBIN is truncated (section names)");
  for (uint16_t i = 0; i < shnum; ++i) {
    Section s;
    const uint32_t name_off = read_le<uint32_t>(b, header(i), "sh_name");
    s.type = read_le<uint32_t>(b, header(i) + 4, "sh_type");
    s.offset = read_le<uint64_t>(b, header(i) + 24, "sh_offset");
    s.size = read_le<uint64_t>(b, header(i) + 32, "sh_size");
    if (name_off < strtab_size) {
      const char* p = reinterpret_cast<const char*>(b.data() + strtab_off + name_off);
      s.name.assign(p, strnlen(p, strtab_size - name_off));
    }
    if (s.type != kShtNobits && s.offset + s.size > b.size())
      throw UserError("CUBIN is truncated (section " + s.name + ")");
    e.sections.push_back(std::move(s));
  }
  return e;
}

template <class F>
void for_each_text_section(const std::vector<uint8_t>& b, const Elf& e, F&& f) {
  if (e.sm < kMinSm || e.sm > kMaxSm)
    throw UserError("CUBIN is for sm_" + std::to_string(e.sm) + "; the SASS scanner knows sm_" +
                    std::to_string(kMinSm) + " to sm_" + std::to_string(kMaxSm));
  for (const Section& s : e.sections) {
    if (s.name.rfind(".text.", 0) != 0 || s.type == kShtNobits) continue;
    if (s.size % 16 != 0)
      throw UserError("CUBIN section " + s.name + " is " + std::to_string(s.size) +
                      " bytes, not a whole number of 128-bit instructions");
    f(s);
  }
}

uint16_t opcode_at(const std::vector<uint8_t>& b, uint64_t offset) {
  uint16_t low;
  std::memcpy(&low, b.data() + offset, 2);
  return low & 0xfff;
}

}  // namespace

uint64_t SassScan::tensor_op_count() const {
  uint64_t n = 0;
  for (const auto& [name, count] : tensor_ops) n += count;
  return n;
}

SassScan scan_cubin(const std::vector<uint8_t>& cubin) {
  const Elf e = parse_elf(cubin);
  SassScan scan;
  scan.sm = e.sm;
  for_each_text_section(cubin, e, [&](const Section& s) {
    scan.kernels.push_back(s.name.substr(6));
    for (uint64_t at = s.offset; at < s.offset + s.size; at += 16) {
      ++scan.instructions;
      const uint16_t op = opcode_at(cubin, at);
      for (const TensorOpcode& t : kTensorOpcodes)
        if (t.opcode == op && e.sm >= t.min_sm && e.sm <= t.max_sm) ++scan.tensor_ops[t.mnemonic];
      for (const TensorOpcode& t : kCopyOpcodes)
        if (t.opcode == op && e.sm >= t.min_sm && e.sm <= t.max_sm) ++scan.copy_ops[t.mnemonic];
    }
  });
  return scan;
}

std::map<std::string, std::vector<uint16_t>> cubin_opcodes(const std::vector<uint8_t>& cubin) {
  const Elf e = parse_elf(cubin);
  std::map<std::string, std::vector<uint16_t>> out;
  for_each_text_section(cubin, e, [&](const Section& s) {
    auto& ops = out[s.name.substr(6)];
    for (uint64_t at = s.offset; at < s.offset + s.size; at += 16) ops.push_back(opcode_at(cubin, at));
  });
  return out;
}

bool cubin_has_tensor_core_ops(const std::vector<uint8_t>& cubin) { return scan_cubin(cubin).tensor_op_count() > 0; }
uint64_t cubin_tensor_core_op_count(const std::vector<uint8_t>& cubin) { return scan_cubin(cubin).tensor_op_count(); }

}  // namespace tessel::gpu
