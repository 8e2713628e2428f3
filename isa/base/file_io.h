// Writing output files so that a failure is never reported as success: every output tessel writes
// (programs, reports, traces, .npy, tuning logs, the best-config database) goes through here.
//
// write_file opens, writes all bytes (retrying short writes), flushes to the device (fsync) and
// closes, checking each step; append_record does the same in append mode with the record as one
// write() (O_APPEND: concurrent appenders never interleave inside a record); replace_file writes a
// temporary beside the target and renames it over (readers see the old or the new file, never a
// part). Errors are UserError "<what> <path>: cannot write: <reason>" (exit 1), including a
// parent directory that cannot be created (a file where a folder should be).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tessel {

// what: how the user named the path ("-o", "--report"); empty: just the path.
void write_file(const std::string& path, std::string_view bytes, const std::string& what = "");
void append_record(const std::string& path, std::string_view record, const std::string& what = "");
void replace_file(const std::string& path, std::string_view bytes, const std::string& what = "");

// Creates the parent directories of `path` (none: nothing); UserError naming the path on failure.
void make_parent_dirs(const std::string& path, const std::string& what = "");

// Reading input files whose size tessel does not control: at most `max_bytes` are read, so a huge file
// or a device that never ends (/dev/zero) fails fast instead of exhausting memory. UserError
// "<path>: cannot open <what>" / "<path>: <what> is larger than N bytes (...)" / a directory.
// `what` names the kind of file ("operator file (.tsl)", "hierarchy description").
std::string read_bounded_file(const std::string& path, const std::string& what, uint64_t max_bytes);

// The limits of the readers (no file of tessel's needs more than a few MB of text; the largest
// programs `tessel compile` writes, naive syncs of a big GEMM, are about 10 MB).
inline constexpr uint64_t kMaxDescriptionBytes = uint64_t(1) << 20;  // hierarchy descriptions, suites (YAML)
inline constexpr uint64_t kMaxOperatorBytes = uint64_t(16) << 20;    // .tsl
inline constexpr uint64_t kMaxProgramBytes = uint64_t(64) << 20;     // .npu text or binary

}  // namespace tessel
