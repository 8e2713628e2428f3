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

#include <string>
#include <string_view>

namespace tessel {

// what: how the user named the path ("-o", "--report"); empty: just the path.
void write_file(const std::string& path, std::string_view bytes, const std::string& what = "");
void append_record(const std::string& path, std::string_view record, const std::string& what = "");
void replace_file(const std::string& path, std::string_view bytes, const std::string& what = "");

// Creates the parent directories of `path` (none: nothing); UserError naming the path on failure.
void make_parent_dirs(const std::string& path, const std::string& what = "");

}  // namespace tessel
