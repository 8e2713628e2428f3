// Simulator measurements in forked children: each child compiles one configuration, emits the NPU
// program, inserts (pruned) syncs, simulates it timing-only and writes one line back through a
// pipe. Children start from the parent's state (the parsed function) and exit with _exit, so no
// SystemC kernel outlives a measurement and runs never share one.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <sstream>

#include "compiler/emit_npu/emit_npu.h"
#include "compiler/npu_sync/sync_insertion.h"
#include "compiler/tune/measure.h"
#include "isa/base/error.h"

namespace tessel::tune {

namespace {

class NpuSimMeasurer : public Measurer {
 public:
  NpuSimMeasurer(const ir::Function& f, const CompileOptions& base, SimulateFn simulate, int jobs, double timeout_s)
      : f_(f), base_(base), simulate_(std::move(simulate)), jobs_(std::max(1, jobs)), timeout_s_(timeout_s) {}
  std::string name() const override { return "npu-sim"; }
  std::string unit() const override { return "cycles"; }

  std::vector<Measurement> measure(const std::vector<tile::TileSpec>& specs) override {
    std::vector<Measurement> out(specs.size());
    struct Child {
      pid_t pid;
      int fd;
      size_t index;
      std::string data;
      std::chrono::steady_clock::time_point t0;
      bool killed = false;
    };
    std::vector<Child> running;
    size_t next = 0;
    while (next < specs.size() || !running.empty()) {
      while (next < specs.size() && int(running.size()) < jobs_) {
        int fds[2];
        TESSEL_CHECK(pipe(fds) == 0, "tune: pipe() failed");
        const auto t0 = std::chrono::steady_clock::now();
        pid_t pid = fork();
        TESSEL_CHECK(pid >= 0, "tune: fork() failed");
        if (pid == 0) {
          close(fds[0]);
          const std::string line = run_one(specs[next]);
          size_t done = 0;
          while (done < line.size()) {
            ssize_t w = write(fds[1], line.data() + done, line.size() - done);
            if (w <= 0) break;
            done += size_t(w);
          }
          close(fds[1]);
          _exit(0);
        }
        close(fds[1]);
        running.push_back({pid, fds[0], next, "", t0, false});
        ++next;
      }
      std::vector<pollfd> pfds;
      for (const auto& c : running) pfds.push_back({c.fd, POLLIN, 0});
      poll(pfds.data(), pfds.size(), 500);
      for (auto& c : running)
        if (timeout_s_ > 0 && !c.killed &&
            std::chrono::duration<double>(std::chrono::steady_clock::now() - c.t0).count() > timeout_s_) {
          kill(c.pid, SIGKILL);  // its pipe closes: collected below as a failed measurement
          c.killed = true;
        }
      for (size_t i = 0; i < running.size();) {
        Child& c = running[i];
        char buf[4096];  // not hardware: pipe read buffer
        ssize_t n = (pfds.size() > i && (pfds[i].revents & (POLLIN | POLLHUP | POLLERR))) ? read(c.fd, buf, sizeof buf) : -2;
        if (n > 0) {
          c.data.append(buf, size_t(n));
          ++i;
          continue;
        }
        if (n == -2) {
          ++i;
          continue;
        }
        close(c.fd);
        int status = 0;
        waitpid(c.pid, &status, 0);
        Measurement& m = out[c.index];
        m.key = specs[c.index].axes.empty() ? "default" : specs[c.index].to_string();
        m.unit = unit();
        m.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - c.t0).count();
        parse(c.data, status, m);
        if (c.killed) m.error = "timed out after " + std::to_string(int(timeout_s_)) + " s (compile + simulation)";
        landed(c.index, m);
        running.erase(running.begin() + long(i));
        pfds.erase(pfds.begin() + long(i));
      }
    }
    return out;
  }

 private:
  // "ok CYCLES ENERGY_PJ PIPE=BUSY ..." or "error MESSAGE"
  std::string run_one(const tile::TileSpec& spec) {
    try {
      CompileOptions o = base_;
      if (spec.axes.empty()) o.tile.reset();  // no tile: the target's own tile policy
      else o.tile = spec.to_string();
      auto c = compile(f_, o);
      const emit_npu::NpuKernel k = emit_npu::emit_npu(c->kernel, c->hierarchy);
      const npu_sync::SyncResult s = npu_sync::insert_syncs(k.program, c->hierarchy, {npu_sync::SyncMode::Pruned, -1});
      const SimSummary r = simulate_(s.program, c->hierarchy);
      std::ostringstream line;
      line.precision(17);
      line << "ok " << r.cycles << " " << r.energy_pj;
      for (const auto& [pipe, busy] : r.pipe_busy_cycles) line << " " << pipe << "=" << busy;
      return line.str() + "\n";
    } catch (const std::exception& e) {
      std::string msg = e.what();
      for (char& ch : msg)
        if (ch == '\n') ch = ' ';
      return "error " + msg + "\n";
    }
  }

  static void parse(const std::string& data, int status, Measurement& m) {
    if (data.rfind("ok ", 0) == 0) {
      m.ok = true;
      std::istringstream in(data.substr(3));
      in >> m.cost >> m.energy_pj;
      for (std::string field; in >> field;)
        if (const size_t eq = field.find('='); eq != std::string::npos)
          m.pipe_busy_cycles[field.substr(0, eq)] = std::stod(field.substr(eq + 1));
    } else if (data.rfind("error ", 0) == 0) {
      m.error = data.substr(6);
      while (!m.error.empty() && m.error.back() == '\n') m.error.pop_back();
    } else {
      m.error = WIFSIGNALED(status) ? "measurement process died with signal " + std::to_string(WTERMSIG(status))
                                    : "measurement process wrote no result";
    }
  }

  const ir::Function& f_;
  CompileOptions base_;
  SimulateFn simulate_;
  int jobs_;
  double timeout_s_;
};

}  // namespace

std::unique_ptr<Measurer> make_npu_sim_measurer(const ir::Function& f, const CompileOptions& base, SimulateFn simulate,
                                                int jobs, double timeout_s) {
  return std::make_unique<NpuSimMeasurer>(f, base, std::move(simulate), jobs, timeout_s);
}

}  // namespace tessel::tune
