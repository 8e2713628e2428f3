#include "isa/base/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "isa/base/error.h"

namespace tessel {
namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path, const std::string& reason) {
  throw UserError((what.empty() ? "" : what + " ") + path + ": cannot write: " + reason);
}

void write_fd(const std::string& path, std::string_view bytes, int flags, const std::string& what) {
  const int fd = ::open(path.c_str(), flags | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) fail(what, path, std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string reason = n < 0 ? std::strerror(errno) : "no progress";
      ::close(fd);
      fail(what, path, reason);
    }
    done += static_cast<size_t>(n);
  }
  // fsync: the data reached the device (EINVAL: a special file that cannot sync, e.g. a pipe)
  if (::fsync(fd) != 0 && errno != EINVAL && errno != EROFS) {
    const std::string reason = std::strerror(errno);
    ::close(fd);
    fail(what, path, reason);
  }
  if (::close(fd) != 0) fail(what, path, std::strerror(errno));
}

}  // namespace

void make_parent_dirs(const std::string& path, const std::string& what) {
  const auto parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(parent, ec);
  if (ec) fail(what, path, "its folder " + parent.string() + " cannot be created: " + ec.message());
}

void write_file(const std::string& path, std::string_view bytes, const std::string& what) {
  write_fd(path, bytes, O_CREAT | O_TRUNC, what);
}

void append_record(const std::string& path, std::string_view record, const std::string& what) {
  write_fd(path, record, O_CREAT | O_APPEND, what);
}

void replace_file(const std::string& path, std::string_view bytes, const std::string& what) {
  const std::string tmp = path + ".tmp";
  write_file(tmp, bytes, what);
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    fail(what, path, "renaming the new file over it failed");
  }
}

std::string read_bounded_file(const std::string& path, const std::string& what, uint64_t max_bytes) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw UserError(path + ": is a directory, not a " + what);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(path + ": cannot open " + what);
  std::string bytes;
  char chunk[64 * 1024];  // not hardware: the read buffer of the bounded reader
  while (in) {  // read at most max_bytes + 1: one byte past the limit is enough to refuse
    const uint64_t room = max_bytes + 1 - bytes.size();
    in.read(chunk, static_cast<std::streamsize>(std::min<uint64_t>(sizeof chunk, room)));
    bytes.append(chunk, static_cast<size_t>(in.gcount()));
    if (bytes.size() > max_bytes)
      throw UserError(path + ": " + what + " is larger than " + std::to_string(max_bytes) +
                      " bytes (no such file needs that much; is it the right file?)");
  }
  if (in.bad()) throw UserError(path + ": cannot read " + what);
  return bytes;
}

}  // namespace tessel
