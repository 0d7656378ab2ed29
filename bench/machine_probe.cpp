// changeflow-machine-probe [DIR] — how fast this machine is right now, in five fixed pieces of work,
// printed as key=value lines. bench/run runs it on the quiet machine before and after each flow, so a
// flow that ran slow can be set beside what the machine itself did in the same minutes: the same
// build's flows move by a third from one minute to the next on a shared two-core virtual machine.
//
//   compute_ns  one step of an integer loop that stays in registers (the core's speed)
//   memory_ns   one load of a chain of dependent loads through 32 MB (the memory's latency)
//   syscall_ns  one system call that does no work (getppid)
//   wake_us     one round trip of a byte between two threads on different cores, through two pipes:
//               two wake-ups of a sleeping thread on the other core (what a hand-off costs)
//   fsync_us    one 4 KB write and fdatasync of a file in DIR (default .), the median of 100: the
//               durable commit's floor on that file system (skipped when DIR cannot take a file)
//
// Each figure is the median of a few repeats. The probe takes about a second; it is never run
// while a flow runs (it would slow the flow and measure the flow's contention, not the machine's).
//
// changeflow-machine-probe --during — runs beside a flow until SIGTERM or SIGINT, then prints what it
// saw. Every 50 ms it does a small fixed piece of work (50,000 steps of the integer loop, 1,000 loads
// of a chain through 8 MB, 200 system calls that do no work; about 0.5 ms, 1 % of one core) and times it by the CPU time of its
// own thread, not by the clock on the wall: waiting for a core while the flow's processes hold both
// does not count, so what it measures is what one unit of work cost in CPU time at that moment.
// A virtual machine whose host takes its cores away without reporting steal time (this machine's
// /proc/stat shows none) charges that time to whatever ran, and the canary's work then costs more
// CPU time, as the flow's does.
//
//   during_samples             how many times the work ran
//   during_compute_ns, _p90, _mean   CPU time per loop step: the median, the 90th percentile and the
//                              mean (the mean and the p90 move when part of the flow ran slow)
//   during_memory_ns, _p90     CPU time per dependent load, the same
//   during_syscall_ns, _p90    CPU time per system call (getppid), the median and the 90th percentile:
//                              on a virtual machine the kernel's entry and exit, and the hypervisor's
//                              part in them, move with the host's load more than a loop does
//   during_wall_over_cpu       the work's wall time over its CPU time, the median: 1 when it was never
//                              taken off its core mid-way
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <ctime>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using steady = std::chrono::steady_clock;

double ns_since(steady::time_point t0) {
  return static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(steady::now() - t0).count());
}

/// The value at fraction `p` of the sorted samples (0.5: the median), or -1 when there are none.
double percentile(std::vector<double> v, double p) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1))];
}

double median(std::vector<double> v) {
  return percentile(std::move(v), 0.5);
}

/// One key=value line; a negative value (not measured) prints as n/a.
void put(const char* key, double value, const char* format) {
  if (value < 0) {
    std::printf("%s=n/a\n", key);
    return;
  }
  std::printf("%s=", key);
  std::printf(format, value);
  std::printf("\n");
}

/// `steps` rounds of an integer mix that stays in registers; the result keeps the loop from being
/// optimised away.
std::uint64_t mix(std::uint64_t x, std::uint64_t steps) {
  for (std::uint64_t i = 0; i < steps; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x *= 0x2545f4914f6cdd1dull;
  }
  return x;
}

/// One cycle through `bytes` of slots in a random order (Sattolo's shuffle): each load's address is
/// the value of the load before it.
std::vector<std::uint32_t> random_cycle(std::size_t bytes, std::uint64_t seed) {
  std::vector<std::uint32_t> next(bytes / sizeof(std::uint32_t));
  std::iota(next.begin(), next.end(), 0u);
  std::uint64_t x = seed;
  for (std::size_t i = next.size() - 1; i > 0; --i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::swap(next[i], next[x % i]);
  }
  return next;
}

double compute_ns() {
  constexpr std::uint64_t steps = 10'000'000;
  volatile std::uint64_t sink = 0;
  std::vector<double> runs;
  for (int r = 0; r < 3; ++r) {
    auto t0 = steady::now();
    sink = sink + mix(0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(r), steps);
    runs.push_back(ns_since(t0) / steps);
  }
  return median(runs);
}

double memory_ns() {
  const auto next = random_cycle(32u * 1024 * 1024, 0x9e3779b97f4a7c15ull);
  constexpr std::size_t loads = 400'000;
  std::vector<double> runs;
  std::uint32_t at = 0;
  for (int r = 0; r < 3; ++r) {
    auto t0 = steady::now();
    for (std::size_t i = 0; i < loads; ++i) at = next[at];
    runs.push_back(ns_since(t0) / loads);
  }
  volatile std::uint32_t sink = at;
  (void)sink;
  return median(runs);
}

double syscall_ns() {
  constexpr int calls = 100'000;
  std::vector<double> runs;
  for (int r = 0; r < 3; ++r) {
    auto t0 = steady::now();
    for (int i = 0; i < calls; ++i) (void)syscall(SYS_getppid);
    runs.push_back(ns_since(t0) / calls);
  }
  return median(runs);
}

bool pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

/// Microseconds per round trip, or a negative number when the machine has one core or the pipes fail.
double wake_us() {
  if (std::thread::hardware_concurrency() < 2) return -1;
  int ping[2], pong[2];
  if (pipe(ping) != 0) return -1;
  if (pipe(pong) != 0) {
    close(ping[0]);
    close(ping[1]);
    return -1;
  }
  constexpr int trips = 5000;
  std::thread echo([&] {
    (void)pin(1);
    char c;
    while (read(ping[0], &c, 1) == 1) {
      if (write(pong[1], &c, 1) != 1) break;
    }
  });
  cpu_set_t original;
  const bool had_mask = pthread_getaffinity_np(pthread_self(), sizeof original, &original) == 0;
  const bool pinned = pin(0);
  std::vector<double> runs;
  char c = 'x';
  bool whole = true;
  for (int r = 0; r < 3 && whole; ++r) {
    auto t0 = steady::now();
    for (int i = 0; i < trips && whole; ++i) {
      whole = write(ping[1], &c, 1) == 1 && read(pong[0], &c, 1) == 1;
    }
    runs.push_back(ns_since(t0) / trips / 1000);
  }
  close(ping[1]);  // a round trip cut short leaves the echo reading: the end of its pipe stops it
  echo.join();
  for (int fd : {ping[0], pong[0], pong[1]}) close(fd);
  if (had_mask) pthread_setaffinity_np(pthread_self(), sizeof original, &original);
  return pinned && whole ? median(runs) : -1;
}

/// Microseconds per 4 KB write + fdatasync in `dir`, or a negative number when no file can be made there.
double fsync_us(const std::string& dir) {
  std::string path = dir + "/.changeflow-machine-probe." + std::to_string(getpid());
  int fd = open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
  if (fd < 0) return -1;
  std::vector<char> page(4096, 'p');
  std::vector<double> each;
  for (int i = 0; i < 100; ++i) {
    auto t0 = steady::now();
    if (pwrite(fd, page.data(), page.size(), 0) != static_cast<ssize_t>(page.size()) || fdatasync(fd) != 0) break;
    each.push_back(ns_since(t0) / 1000);
  }
  close(fd);
  unlink(path.c_str());
  return each.size() == 100 ? median(each) : -1;
}

volatile std::sig_atomic_t stop_requested = 0;

void on_stop(int) {
  stop_requested = 1;
}

double thread_cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e9 + static_cast<double>(t.tv_nsec);
}

/// The canary beside a flow (see the top of the file); prints when stopped.
int during() {
  // Dies with the run that started it, even when that run is killed without its exit handler.
  const pid_t parent = getppid();
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) return 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  const auto next = random_cycle(8u * 1024 * 1024, 0x2545f4914f6cdd1dull);
  constexpr std::uint64_t steps = 50'000;
  constexpr std::size_t loads = 1'000;
  constexpr int calls = 200;
  std::vector<double> compute, memory, syscalls, stretch;
  std::uint32_t at = 0;
  volatile std::uint64_t sink = 0;
  timespec tick{};
  clock_gettime(CLOCK_MONOTONIC, &tick);
  while (!stop_requested) {
    tick.tv_nsec += 50'000'000;
    if (tick.tv_nsec >= 1'000'000'000) {
      tick.tv_nsec -= 1'000'000'000;
      ++tick.tv_sec;
    }
    while (!stop_requested && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &tick, nullptr) == EINTR) {
    }
    if (stop_requested) break;
    auto w0 = steady::now();
    double c0 = thread_cpu_ns();
    sink = sink + mix(0x9e3779b97f4a7c15ull + compute.size(), steps);
    double c1 = thread_cpu_ns();
    double w1 = ns_since(w0);
    for (std::size_t i = 0; i < loads; ++i) at = next[at];
    double c2 = thread_cpu_ns();
    for (int i = 0; i < calls; ++i) (void)syscall(SYS_getppid);
    double c3 = thread_cpu_ns();
    compute.push_back((c1 - c0) / steps);
    memory.push_back((c2 - c1) / loads);
    syscalls.push_back((c3 - c2) / calls);
    if (c1 > c0) stretch.push_back(w1 / (c1 - c0));
  }
  sink = sink + at;
  put("during_samples", static_cast<double>(compute.size()), "%.0f");
  put("during_compute_ns", median(compute), "%.3f");
  put("during_compute_ns_p90", percentile(compute, 0.9), "%.3f");
  put("during_compute_ns_mean",
      compute.empty() ? -1 : std::accumulate(compute.begin(), compute.end(), 0.0) / static_cast<double>(compute.size()),
      "%.3f");
  put("during_memory_ns", median(memory), "%.1f");
  put("during_memory_ns_p90", percentile(memory, 0.9), "%.1f");
  put("during_syscall_ns", median(syscalls), "%.0f");
  put("during_syscall_ns_p90", percentile(syscalls, 0.9), "%.0f");
  put("during_wall_over_cpu", median(stretch), "%.2f");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--during") return during();
  const std::string dir = argc > 1 ? argv[1] : ".";
  put("compute_ns", compute_ns(), "%.3f");
  put("memory_ns", memory_ns(), "%.1f");
  put("syscall_ns", syscall_ns(), "%.0f");
  put("wake_us", wake_us(), "%.2f");
  put("fsync_us", fsync_us(dir), "%.0f");
  return 0;
}
