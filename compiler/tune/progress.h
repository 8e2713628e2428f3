// The progress line of long commands (`tessel tune`, `tessel bench`; issue 18 item 5): steps done
// of the total, the best so far, the rate (steps this run per second) and the ETA. On a terminal
// one line rewritten in place with '\r' (at most every 200 ms, and at the end); otherwise a plain
// line per step, so that the log of a batch job shows every step. Written to a stream (stderr
// by the commands), never to the command's results on stdout.
#pragma once

#include <chrono>
#include <iosfwd>
#include <string>

namespace tessel::tune {

class Progress {
 public:
  // `terminal`: rewrite one line (isatty of the stream); `enabled` false: print nothing.
  Progress(std::string label, int total, bool enabled, bool terminal, std::ostream& os);
  // `done` steps of the total, `fresh` of them done by this run (the rate and ETA count only
  // those: resumed ones cost nothing), `best` the best so far as text ("" : none yet).
  void update(int done, int fresh, const std::string& best);
  void finish();  // ends a terminal line
  // The line's text: "LABEL: DONE/TOTAL  best BEST  RATE/s  ETA M:SS" (tests compare it).
  static std::string text(const std::string& label, int done, int total, int fresh, const std::string& best,
                          double elapsed_s);

 private:
  std::string label_;
  int total_;
  bool enabled_, terminal_;
  std::ostream& os_;
  std::chrono::steady_clock::time_point t0_, last_;
  bool open_ = false;  // a terminal line without its newline yet
  int last_done_ = -1;
};

}  // namespace tessel::tune
