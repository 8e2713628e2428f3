// The race detector's memory is bounded by the program, not the run (npu_sim/race_detector.h): a
// core's local-buffer accesses are dropped once that core's pipes have seen them, even when other
// cores never synchronise; GM accesses that only their own core has seen are merged per instruction
// into a summary, which reports the same instruction pairs the accesses one by one would.
#include <doctest/doctest.h>

#include "npu_sim/race_detector.h"

using namespace tessel;
using namespace tessel::npu_sim;
using npu::Buffer;
using npu::Pipe;

namespace {

std::vector<Access> access(Buffer b, bool write, uint64_t begin, uint64_t end) {
  return {{b, write, {{begin, end}}, begin, end}};
}

SimRecord record_of(int instructions) {
  SimRecord r;
  for (int pc = 0; pc < instructions; ++pc) r.instruction_text.push_back("instruction " + std::to_string(pc));
  return r;
}

// Both cores' pipes drain and meet in a sync_all.
void sync_all(RaceDetector& d, int cores) {
  RaceDetector::Clock joined;
  for (int c = 0; c < cores; ++c) d.barrier_all(c), d.arrive_all(c, joined);
  for (int c = 0; c < cores; ++c) d.join_all(c, joined);
}

}  // namespace

TEST_CASE("a core's local-buffer accesses are dropped once its own pipes saw them, whatever other cores do") {
  SimRecord rec = record_of(4);
  RaceDetector d(2, rec);
  for (int i = 0; i < 5000; ++i) {
    auto w = access(Buffer::UB, true, uint64_t(i % 64) * 256, uint64_t(i % 64) * 256 + 256);
    d.on_accesses(0, Pipe::MTE2, 1, w);
    d.barrier_all(0);  // core 1 never synchronises with core 0
  }
  CHECK(d.retained() <= 1);
  CHECK(rec.races.empty());
}

TEST_CASE("GM writes seen by their own core are merged per instruction and still race with another core") {
  SimRecord rec = record_of(8);
  RaceDetector d(2, rec);
  for (int i = 0; i < 4000; ++i) {
    auto w = access(Buffer::GM, true, uint64_t(i) * 64, uint64_t(i) * 64 + 64);
    d.on_accesses(0, Pipe::MTE3, 7, w);
    d.barrier_all(0);
  }
  CHECK(d.retained() <= 2);  // one merged range [0, 256000) of pc 7 (4,000 entries before)
  auto far = access(Buffer::GM, false, 300000, 300064);
  d.on_accesses(1, Pipe::MTE2, 3, far);
  CHECK(rec.races.empty());
  auto near = access(Buffer::GM, false, 100000, 100004);
  d.on_accesses(1, Pipe::MTE2, 3, near);
  REQUIRE(rec.races.size() == 1);
  CHECK(rec.races[0].first.pc == 7);
  CHECK(rec.races[0].first.core == 0);
  CHECK(rec.races[0].first.write);
  CHECK(rec.races[0].second.pc == 3);
  CHECK(rec.races[0].second.core == 1);
  CHECK(rec.races[0].first.begin == 100000);
  CHECK(rec.races[0].first.end == 100004);
  // Core 0's own pipes saw the writes: its read of the same bytes is ordered, no race.
  auto own = access(Buffer::GM, false, 100000, 100004);
  d.on_accesses(0, Pipe::MTE2, 4, own);
  CHECK(rec.races.size() == 1);
}

TEST_CASE("after a sync_all nothing is retained, and only writes after it race") {
  SimRecord rec = record_of(10);
  RaceDetector d(2, rec);
  auto before = access(Buffer::GM, true, 0, 64);
  d.on_accesses(0, Pipe::MTE3, 2, before);
  d.barrier_all(0);
  sync_all(d, 2);
  CHECK(d.retained() == 0);
  auto after = access(Buffer::GM, true, 64, 128);
  d.on_accesses(0, Pipe::MTE3, 9, after);
  d.barrier_all(0);
  auto read = access(Buffer::GM, false, 0, 128);
  d.on_accesses(1, Pipe::MTE2, 5, read);
  REQUIRE(rec.races.size() == 1);
  CHECK(rec.races[0].first.pc == 9);
  CHECK(rec.races[0].first.begin == 64);
}

TEST_CASE("a sync_all that one core has not reached yet splits the summary: its earlier writes stay apart") {
  SimRecord rec = record_of(10);
  RaceDetector d(2, rec);
  auto first = access(Buffer::GM, true, 0, 64);
  d.on_accesses(0, Pipe::MTE3, 2, first);
  d.barrier_all(0);
  RaceDetector::Clock joined;
  d.arrive_all(0, joined);  // core 0 arrives; core 1 has not, so nobody has joined
  auto second = access(Buffer::GM, true, 64, 128);
  d.on_accesses(0, Pipe::MTE3, 2, second);
  d.barrier_all(0);
  d.barrier_all(1), d.arrive_all(1, joined);
  d.join_all(1, joined);  // core 1 now has seen the first write, not the second
  auto read = access(Buffer::GM, false, 0, 128);
  d.on_accesses(1, Pipe::MTE2, 5, read);
  REQUIRE(rec.races.size() == 1);
  CHECK(rec.races[0].first.begin == 64);  // the second write only: the first is ordered before the read
}
