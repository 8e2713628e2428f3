#include "compiler/tune/progress.h"

#include <ostream>

#include <fmt/format.h>

namespace tessel::tune {

namespace {

std::string clock_text(double s) {
  if (!(s >= 0) || s > 1e7) return "?";
  const int t = int(s + 0.5);
  return t >= 3600 ? fmt::format("{}:{:02d}:{:02d}", t / 3600, t / 60 % 60, t % 60) : fmt::format("{}:{:02d}", t / 60, t % 60);
}

}  // namespace

Progress::Progress(std::string label, int total, bool enabled, bool terminal, std::ostream& os)
    : label_(std::move(label)), total_(total), enabled_(enabled), terminal_(terminal), os_(os),
      t0_(std::chrono::steady_clock::now()), last_(t0_) {}

std::string Progress::text(const std::string& label, int done, int total, int fresh, const std::string& best,
                           double elapsed_s) {
  const double rate = elapsed_s > 0 && fresh > 0 ? fresh / elapsed_s : 0;
  const std::string eta = done >= total ? "0:00" : rate > 0 ? clock_text((total - done) / rate) : "?";
  return fmt::format("{}: {}/{}  best {}  {}/s  ETA {}", label, done, total, best.empty() ? "-" : best,
                     rate > 0 ? fmt::format("{:.3g}", rate) : "-", eta);
}

void Progress::update(int done, int fresh, const std::string& best) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  const std::string line = text(label_, done, total_, fresh, best, std::chrono::duration<double>(now - t0_).count());
  if (!terminal_) {
    if (done != last_done_) os_ << line << "\n" << std::flush;
    last_done_ = done;
    return;
  }
  if (open_ && done < total_ && now - last_ < std::chrono::milliseconds(200)) return;
  last_ = now;
  os_ << "\r" << line << "   " << std::flush;
  open_ = true;
}

void Progress::finish() {
  if (enabled_ && terminal_ && open_) os_ << "\n" << std::flush;
  open_ = false;
}

}  // namespace tessel::tune
