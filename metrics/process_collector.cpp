#include "metrics/process_collector.hpp"

#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace changeflow::metrics {
namespace {
prometheus::MetricFamily gauge_family(const std::string& name, const std::string& help, double v,
                                      prometheus::MetricType type = prometheus::MetricType::Gauge) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  prometheus::ClientMetric m;
  if (type == prometheus::MetricType::Counter) {
    m.counter.value = v;
  } else {
    m.gauge.value = v;
  }
  f.metric.push_back(m);
  return f;
}

double boot_time_seconds() {
  std::ifstream in("/proc/stat");
  std::string key;
  while (in >> key) {
    if (key == "btime") {
      double v = 0;
      in >> v;
      return v;
    }
    std::string rest;
    std::getline(in, rest);
  }
  return 0;
}
}  // namespace

std::vector<prometheus::MetricFamily> collect_process_metrics() {
  std::vector<prometheus::MetricFamily> out;
  std::ifstream in("/proc/self/stat");
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto close_paren = content.rfind(')');
  if (close_paren == std::string::npos) return out;
  std::istringstream fields(content.substr(close_paren + 2));
  std::vector<std::string> f;
  std::string tok;
  while (fields >> tok) f.push_back(tok);
  // Field numbers (1-based in proc(5)) minus 3 give indexes here: state is field 3 -> index 0.
  if (f.size() < 22) return out;
  double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  double utime = std::stod(f[11]), stime = std::stod(f[12]);
  double threads = std::stod(f[17]);
  double starttime = std::stod(f[19]);
  double vsize = std::stod(f[20]);
  double rss = std::stod(f[21]) * page;
  out.push_back(gauge_family("process_cpu_seconds_total", "User and system CPU time spent in seconds.",
                             (utime + stime) / ticks, prometheus::MetricType::Counter));
  out.push_back(gauge_family("process_resident_memory_bytes", "Resident memory size in bytes.", rss));
  out.push_back(gauge_family("process_virtual_memory_bytes", "Virtual memory size in bytes.", vsize));
  out.push_back(gauge_family("process_threads", "Number of OS threads.", threads));
  out.push_back(gauge_family("process_start_time_seconds", "Start time of the process since unix epoch.",
                             boot_time_seconds() + starttime / ticks));
  int fds = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d)) ++fds;
    closedir(d);
    fds -= 2;
  }
  out.push_back(gauge_family("process_open_fds", "Number of open file descriptors.", fds));
  return out;
}

}  // namespace changeflow::metrics
