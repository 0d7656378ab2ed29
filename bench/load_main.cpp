// changeflow-load: the benchmark driver. Never part of the test suite; no assertions.
//
//   changeflow-load flow   --port P --n N --c C [--wait-mode poll|longpoll|db] [--poll-interval-ms 50]
//                          [--wait-ms 20000] [--rate R] [--tag X] [--timeout-s S] [--request-timeout-s 30]
//                          [--keyed 0|1] [--service-pid S] [--db-pid D] [--sim-pid M] [--sim-port Q] DB
//       the standard workload's client side: C clients (one event loop, a connection each), each
//       submits a change (unique subject/target) and learns its completion as a client does, then
//       submits the next, until N changes are terminal. poll: GET /api/v1/changes/{id} every 50 ms; longpoll: GET
//       /api/v1/changes/{id}?wait=<ms> until terminal; db: no client reads, progress read from the
//       database in bulk (the old driver). Prints throughput, latency (database and client view),
//       CPU per process, SQL statements and fsyncs per change (SHOW GLOBAL STATUS deltas over the
//       load window), callback -> commit (the service's changeflow_callback_commit_seconds), RSS.
//   changeflow-load hold   --port P --n N --c C [--threads T] [--tag X] [--wait-phase APPROVAL_SENT] DB
//       submits N changes and waits until all sit in the waiting phase; writes their ids to --ids FILE.
//   changeflow-load raw    --conns K --seconds S --shape raw|repo|repo-phase DB
//       the limit: a prepared guarded-UPDATE + commit loop on K connections (raw), and the persistence
//       layer's own transition() on K connections, within one phase (repo) or across phases
//       (repo-phase: the binding's phase moves too).
//   changeflow-load committed --conns K --actors A --seconds S [--phase 0|1] [--group-max 64] [--committers 1] DB
//       the same transitions as repo (repo-phase with --phase 1), carried as the service carries them:
//       A actors each keep one in flight through the service's transition_committer (group commit)
//       on a pool of K connections and are told their outcome by message.
//   changeflow-load texts  --n N [--rounds R] --db-pid PID DB
//       one 15-statement transaction sent N times as separate statements of one text, then N times
//       as one compound statement, R rounds: time and CPU (mariadbd, this process) per text.
//   DB = --db-host H --db-port P [--db-user U] [--db-password W] --db-name NAME
//
// Output: human-readable lines plus `key=value` lines (prefixed "kv ") that bench/run turns into
// bench/RESULTS.md.

#include "persistence/bench_repo.hpp"
#include "persistence/db_pool.hpp"
#include "persistence/operation_repo.hpp"
#include "persistence/transition_committer.hpp"
#include "workflow/status.hpp"
#include "workflow/transitions.hpp"

#include <caf/all.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace changeflow;
using clock_type = std::chrono::steady_clock;

namespace {

// ---------------------------------------------------------------------------------------------
// Arguments

struct args {
  std::map<std::string, std::string> kv;
  std::string get(const std::string& k, const std::string& d = "") const {
    auto it = kv.find(k);
    return it == kv.end() ? d : it->second;
  }
  long long num(const std::string& k, long long d) const {
    auto it = kv.find(k);
    return it == kv.end() ? d : std::stoll(it->second);
  }
};

args parse(int argc, char** argv, int from) {
  args a;
  for (int i = from; i < argc; ++i) {
    std::string k = argv[i];
    if (k.rfind("--", 0) != 0 || i + 1 >= argc) {
      std::cerr << "changeflow-load: bad argument " << k << "\n";
      std::exit(2);
    }
    a.kv[k.substr(2)] = argv[++i];
  }
  return a;
}

persistence::db_settings db_from(const args& a) {
  persistence::db_settings s;
  s.host = a.get("db-host", "127.0.0.1");
  s.port = static_cast<int>(a.num("db-port", 3306));
  s.user = a.get("db-user", "changeflow");
  s.password = a.get("db-password", "changeflow");
  s.database = a.get("db-name", "changeflow");
  s.read_timeout_ms = 60000;
  return s;
}

void kv(const std::string& k, const std::string& v) {
  std::cout << "kv " << k << "=" << v << "\n";
}
void kv(const std::string& k, double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.3f", v);
  kv(k, std::string(b));
}

// ---------------------------------------------------------------------------------------------
// /proc readings: CPU time (utime+stime) and peak/current RSS of another process.

double cpu_ms(long pid) {
  if (pid <= 0) return 0;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(f, line);
  auto close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  std::vector<std::string> fields;
  while (rest >> field) fields.push_back(field);
  // After "pid (comm) " the state is field 3; utime/stime are fields 14/15 -> indices 11/12 here.
  if (fields.size() < 13) return 0;
  double ticks = std::stod(fields[11]) + std::stod(fields[12]);
  return ticks * 1000.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
}

/// Context switches (voluntary + involuntary) of every thread of `pid` so far: each is a thread that
/// blocked or was preempted, i.e. a hand-off or a wait. Threads that ended meanwhile are not counted
/// (the service's and the database's threads live as long as the process).
long context_switches(long pid) {
  if (pid <= 0) return 0;
  long total = 0;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream f(task.path() / "status");
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0 || line.rfind("nonvoluntary_ctxt_switches:", 0) == 0)
        total += std::stol(line.substr(line.find(':') + 1));
    }
  }
  return total;
}

long status_kb(long pid, const std::string& key) {
  if (pid <= 0) return 0;
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stol(line.substr(key.size() + 1));
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// HTTP/1.1 on a keep-alive connection, enough for JSON requests and answers with Content-Length:
// the blocking client below and the flow's event loop write and read the same way.

std::string request_bytes(const std::string& method, const std::string& target, const std::string& body,
                          const std::string& idempotency_key = "") {
  std::string req = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n";
  if (!idempotency_key.empty()) req += "Idempotency-Key: " + idempotency_key + "\r\n";
  if (!body.empty()) req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  req += "\r\n" + body;
  return req;
}

// One whole answer at the front of `in`: its status and body, consumed from `in`.
bool take_answer(std::string& in, int& status, std::string& body, bool& close_after) {
  auto end = in.find("\r\n\r\n");
  if (end == std::string::npos) return false;
  std::string head = in.substr(0, end);
  std::transform(head.begin(), head.end(), head.begin(), [](unsigned char ch) { return std::tolower(ch); });
  std::size_t length = 0;
  if (auto p = head.find("content-length:"); p != std::string::npos) length = std::stoul(head.substr(p + 15));
  if (in.size() < end + 4 + length) return false;
  status = head.size() > 12 ? std::atoi(head.c_str() + 9) : 0;
  close_after = head.find("connection: close") != std::string::npos;
  body = in.substr(end + 4, length);
  in.erase(0, end + 4 + length);
  return true;
}

class http_conn {
 public:
  explicit http_conn(int port) : port_(port) {}
  ~http_conn() { drop(); }

  // Returns the status (0 on transport failure) and fills body.
  int call(const std::string& method, const std::string& target, const std::string& body, std::string& out) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (fd_ < 0 && !connect_now()) continue;
      if (!send_all(request_bytes(method, target, body))) {
        drop();
        continue;
      }
      int status = read_response(out);
      if (status == 0) {
        drop();
        continue;
      }
      return status;
    }
    return 0;
  }

 private:
  bool connect_now() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) return false;
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    timeval tv{30, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port_));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      drop();
      return false;
    }
    buf_.clear();
    return true;
  }
  void drop() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool send_all(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      auto n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  bool fill() {
    char tmp[16384];
    auto n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) return false;
    buf_.append(tmp, static_cast<size_t>(n));
    return true;
  }
  int read_response(std::string& out) {
    int status = 0;
    bool close_after = false;
    while (!take_answer(buf_, status, out, close_after)) {
      if (!fill()) return 0;
    }
    if (close_after) drop();
    return status;
  }

  int port_;
  int fd_ = -1;
  std::string buf_;
};

// ---------------------------------------------------------------------------------------------
// Statistics

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  auto idx = static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(idx, v.size() - 1)];
}

void report_latency(const std::string& name, const std::vector<double>& ms) {
  std::printf("%-28s n=%zu p50=%.1f ms p95=%.1f ms p99=%.1f ms max=%.1f ms\n", name.c_str(), ms.size(),
              percentile(ms, 50), percentile(ms, 95), percentile(ms, 99), percentile(ms, 100));
  kv(name + ".n", std::to_string(ms.size()));
  kv(name + ".p50_ms", percentile(ms, 50));
  kv(name + ".p95_ms", percentile(ms, 95));
  kv(name + ".p99_ms", percentile(ms, 99));
  kv(name + ".max_ms", percentile(ms, 100));
}

// ---------------------------------------------------------------------------------------------
// Database: a failed read or write ends the run; main() reports it like any other failure.

struct database_error : std::runtime_error {
  int code;
  explicit database_error(const persistence::db_error& e) : std::runtime_error(e.message), code(e.code) {}
};

template <class T>
T checked(persistence::db_result<T> r) {
  if (!r.ok()) throw database_error(r.error);
  return std::move(r.value);
}

// ---------------------------------------------------------------------------------------------
// Submission: T threads, each with one keep-alive connection; a change may be submitted only while
// fewer than C submitted changes are unfinished (`finished` is fed by the database poller).

// Submission i of a paced run (`rate` per second from `start`; 0 = unpaced) waits for its slot.
void pace(clock_type::time_point start, double rate, long i) {
  if (rate > 0)
    std::this_thread::sleep_until(
        start + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(double(i) / rate)));
}

// The body of change i of a run: its own subject, target and file.
std::string change_body(const std::string& tag, long i) {
  std::string key = tag + "-" + std::to_string(i);
  return R"({"subject":")" + key + R"(","target":"t-)" + key + R"(","title":"bench )" + key +
         R"(","files":[{"path":"config/)" + key + R"(.yaml","content":"value: 1\n"}]})";
}

struct submitter {
  int port;
  long n;
  long c;
  std::string tag;
  std::atomic<long> next{0};
  std::atomic<long> accepted{0};
  std::atomic<long> rejected{0};
  std::atomic<long> finished{0};
  std::atomic<bool> stop{false};
  double rate = 0;  // submissions per second; 0 = as fast as the in-flight cap allows
  clock_type::time_point start = clock_type::now();
  std::mutex mu;
  std::vector<std::string> ids;
  std::vector<std::string> sample_errors;

  void run_thread() {
    http_conn conn(port);
    std::string out;
    for (;;) {
      long i = next.fetch_add(1);
      if (i >= n) return;
      while (!stop && accepted.load() - finished.load() >= c) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (stop) return;
      pace(start, rate, i);
      const std::string body = change_body(tag, i);
      int status = conn.call("POST", "/api/v1/changes", body, out);
      if (status == 202 && out.find("\"ACCEPTED\"") != std::string::npos) {
        accepted.fetch_add(1);
        auto p = out.find("\"operationId\":\"");
        if (p != std::string::npos) {
          std::lock_guard<std::mutex> g(mu);
          ids.push_back(out.substr(p + 15, 36));
        }
      } else {
        rejected.fetch_add(1);
        std::lock_guard<std::mutex> g(mu);
        if (sample_errors.size() < 5) sample_errors.push_back(std::to_string(status) + " " + out.substr(0, 200));
      }
    }
  }
};

bool is_failed_phase(const std::string& p) {
  return p == "CREATE_FAILED" || p == "HANDLE_FAILED" || p == "REJECTED" || p == "CLOSED";
}

// Submits and waits; `done_phase` empty = any terminal phase counts as finished.
struct drive_result {
  double wall_s = 0;
  double submit_s = 0;
  long validated = 0;
  long failed = 0;
  bool timed_out = false;
};

drive_result drive(submitter& sub, persistence::session db, int threads, const std::string& wait_phase, long timeout_s,
                   long poll_ms) {
  drive_result r;
  auto t0 = clock_type::now();
  sub.start = t0;
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back([&] { sub.run_thread(); });
  std::atomic<bool> submitted_all{false};
  std::thread joiner([&] {
    for (auto& t : pool) t.join();
    r.submit_s = std::chrono::duration<double>(clock_type::now() - t0).count();
    submitted_all = true;
  });
  auto deadline = t0 + std::chrono::seconds(timeout_s);
  long last_print = -1;
  for (;;) {
    auto counts = checked(persistence::bench_phase_counts(db, sub.tag));
    long done = 0, failed = 0, target = 0;
    for (auto& [p, k] : counts) {
      if (is_failed_phase(p)) failed += k;
      if (p == wait_phase) target += k;
    }
    done = target + failed;
    sub.finished = done;
    r.validated = target;
    r.failed = failed;
    if (done / 1000 != last_print) {
      last_print = done / 1000;
      std::fprintf(stderr, "  progress: %ld/%ld %s, %ld failed, %ld rejected\n", target, sub.n, wait_phase.c_str(),
                   failed, sub.rejected.load());
    }
    if (submitted_all && done + sub.rejected.load() >= sub.n) break;
    if (clock_type::now() > deadline) {
      r.timed_out = true;
      sub.stop = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(poll_ms));
  }
  r.wall_s = std::chrono::duration<double>(clock_type::now() - t0).count();
  joiner.join();
  return r;
}

// ---------------------------------------------------------------------------------------------
// flow: the standard workload's client side

// SHOW GLOBAL STATUS counters read around the load window (whole server; only the service under
// test uses this MariaDB during the window).
const std::vector<std::string> status_names = {
    "Questions", "Com_select", "Com_insert", "Com_insert_select", "Com_update", "Com_update_multi", "Com_delete",
    "Com_delete_multi", "Com_begin", "Com_commit", "Com_rollback", "Com_stmt_execute", "Com_stmt_prepare",
    "Com_set_option", "Innodb_os_log_fsyncs", "Innodb_data_fsyncs", "Binlog_commits", "Binlog_group_commits",
    // Pages the flow needed that were not in the buffer pool (read from disk), and all page reads:
    // where a flow on a large database pays for its history.
    "Innodb_buffer_pool_reads", "Innodb_buffer_pool_read_requests",
    // Rows the server read for the flow (by key, by range and by scan): a read whose rows grow with
    // the history shows here first.
    "Rows_read", "Rows_tmp_read", "Handler_read_key", "Handler_read_next", "Handler_read_rnd_next"};

// The first "phase":"X" of a status document is the change's own phase (its keys come out sorted;
// the timeline follows under "timeline").
std::string phase_in(const std::string& body) {
  auto p = body.find("\"phase\":\"");
  if (p == std::string::npos) return "";
  p += 9;
  auto e = body.find('"', p);
  return e == std::string::npos ? "" : body.substr(p, e - p);
}

bool terminal_phase(const std::string& p) {
  auto ph = workflow::parse_phase(p);
  return ph && workflow::is_terminal(*ph);
}

// changeflow_callback_commit_seconds from /metrics: cumulative counts per route and bucket bound
// (2xx answers only).
using histogram_counts = std::map<std::string, std::map<double, double>>;

histogram_counts scrape_callback_histogram(int port) {
  histogram_counts out;
  http_conn conn(port);
  std::string body;
  if (conn.call("GET", "/metrics", "", body) != 200) return out;
  std::istringstream in(body);
  std::string line;
  auto label = [](const std::string& l, const std::string& name) {
    auto p = l.find(name + "=\"");
    if (p == std::string::npos) return std::string();
    p += name.size() + 2;
    return l.substr(p, l.find('"', p) - p);
  };
  while (std::getline(in, line)) {
    if (line.rfind("changeflow_callback_commit_seconds_bucket{", 0) != 0) continue;
    auto status = label(line, "status");
    if (status.empty() || status[0] != '2') continue;
    auto le = label(line, "le");
    double bound = le == "+Inf" ? INFINITY : std::stod(le);
    out[label(line, "route")][bound] += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return out;
}

// Percentile (ms) of the observations between two scrapes: linear within the bucket.
double histogram_percentile(const std::map<double, double>& before, const std::map<double, double>& after, double p,
                            double& count) {
  std::vector<std::pair<double, double>> cum;  // bound, count in window
  for (auto& [bound, c] : after) {
    auto it = before.find(bound);
    cum.emplace_back(bound, c - (it == before.end() ? 0 : it->second));
  }
  count = cum.empty() ? 0 : cum.back().second;
  if (count <= 0) return 0;
  double rank = p / 100.0 * count, lower = 0, below = 0;
  for (auto& [bound, c] : cum) {
    if (c >= rank) {
      if (std::isinf(bound)) return lower * 1000;
      double in_bucket = c - below;
      double frac = in_bucket > 0 ? (rank - below) / in_bucket : 1;
      return (lower + (bound - lower) * frac) * 1000;
    }
    lower = std::isinf(bound) ? lower : bound;
    below = c;
  }
  return lower * 1000;
}

// The client side of the standard workload: C clients, each with its own keep-alive connection,
// one change at a time (submit, then wait for it the way clients wait), until N changes are
// terminal. All C clients run on ONE thread around epoll, as load generators such as wrk do: a
// thread per client spent two context switches per read (the wake for the poll tick and the wake
// for the answer), and the driver shares the machine with what it measures.
struct client_loop {
  int port;
  long n;
  long c;
  std::string tag;
  std::string mode;  // poll | longpoll
  long poll_interval_ms = 50;
  long wait_ms = 20000;  // the service answers ?wait= up to 25 s
  double rate = 0;
  bool keyed = false;  // each submission carries an Idempotency-Key, as the API asks clients to
  clock_type::time_point start;
  clock_type::time_point deadline;
  std::atomic<long> next{0}, accepted{0}, rejected{0}, validated{0}, failed{0}, reads{0}, read_errors{0};
  std::atomic<long> early_answers{0};  // longpoll: non-terminal answers, phase unchanged, before the poll interval
  std::atomic<bool> timed_out{false};
  std::mutex mu;
  std::vector<double> client_ms;  // submit sent -> the client saw VALIDATED
  std::vector<std::string> sample_errors;

  void error(const std::string& e) {
    std::lock_guard<std::mutex> g(mu);
    if (sample_errors.size() < 5) sample_errors.push_back(e);
  }

  enum class stage { submit, read, done };
  struct client {
    int fd = -1;
    stage at = stage::submit;
    long index = -1;
    std::string request;  // the request in flight (sent again once on a fresh connection if the old one closed)
    int sends = 0;
    bool awaiting = false;  // a request is out and its answer has not come
    clock_type::time_point sent_at;
    std::string in;  // bytes of the answer so far
    std::string target, waited, last_phase;
    clock_type::time_point t0, next_poll, asked;
  };
  struct due {
    clock_type::time_point at;
    std::size_t who;
    bool operator>(const due& o) const { return at > o.at; }
  };

  std::chrono::seconds request_timeout{30};  // longer than the longest wait the service allows (25 s)
  int ep = -1;
  std::vector<client> clients;
  std::priority_queue<due, std::vector<due>, std::greater<due>> timers;
  long live = 0;

  void close_conn(client& cl) {
    if (cl.fd >= 0) ::close(cl.fd);  // closing removes it from the epoll set
    cl.fd = -1;
    cl.in.clear();
  }

  bool connect_conn(client& cl, std::size_t who) {
    cl.fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (cl.fd < 0) return false;
    int one = 1;
    ::setsockopt(cl.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = who;
    if (::connect(cl.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::epoll_ctl(ep, EPOLL_CTL_ADD, cl.fd, &ev) != 0) {
      close_conn(cl);
      return false;
    }
    return true;
  }

  // Sends the client's request (the socket is blocking for writes: a request is a few hundred
  // bytes into an empty loopback buffer). A connection the server closed since the last answer
  // is replaced once, as the blocking client did.
  void send_request(std::size_t who) {
    auto& cl = clients[who];
    cl.in.clear();
    while (cl.sends < 2) {
      ++cl.sends;
      if (cl.fd < 0 && !connect_conn(cl, who)) continue;
      std::size_t off = 0;
      while (off < cl.request.size()) {
        auto k = ::send(cl.fd, cl.request.data() + off, cl.request.size() - off, MSG_NOSIGNAL);
        if (k <= 0) break;
        off += static_cast<std::size_t>(k);
      }
      if (off == cl.request.size()) {
        cl.awaiting = true;
        cl.sent_at = clock_type::now();
        return;
      }
      close_conn(cl);
    }
    answered(who, 0, "");
  }

  void ask(std::size_t who, const std::string& method, const std::string& target, const std::string& body,
           const std::string& idempotency_key = "") {
    auto& cl = clients[who];
    cl.request = request_bytes(method, target, body, idempotency_key);
    cl.sends = 0;
    send_request(who);
  }

  void submit_next(std::size_t who) {
    auto& cl = clients[who];
    long i = next.fetch_add(1);
    if (i >= n) {
      cl.at = stage::done;
      close_conn(cl);
      --live;
      return;
    }
    cl.index = i;
    cl.at = stage::submit;
    if (rate > 0) {
      auto slot =
          start + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(double(i) / rate));
      if (slot > clock_type::now()) {
        timers.push({slot, who});
        return;
      }
    }
    submit_now(who);
  }

  void submit_now(std::size_t who) {
    auto& cl = clients[who];
    cl.t0 = clock_type::now();
    ask(who, "POST", "/api/v1/changes", change_body(tag, cl.index),
        keyed ? tag + "-" + std::to_string(cl.index) : std::string());
  }

  void read_now(std::size_t who) {
    auto& cl = clients[who];
    cl.asked = clock_type::now();
    ask(who, "GET", mode == "poll" ? cl.target : cl.waited, "");
  }

  // Poll mode: every poll interval; a read answered later than that is followed by the next at
  // once (one read at a time per client, no backlog of missed ticks).
  void read_on_tick(std::size_t who) {
    auto& cl = clients[who];
    cl.next_poll = std::max(cl.next_poll + std::chrono::milliseconds(poll_interval_ms), clock_type::now());
    timers.push({cl.next_poll, who});
  }

  void answered(std::size_t who, int status, const std::string& body) {
    auto& cl = clients[who];
    cl.awaiting = false;
    if (cl.at == stage::submit) {
      auto p = body.find("\"operationId\":\"");
      if (status != 202 || body.find("\"ACCEPTED\"") == std::string::npos || p == std::string::npos) {
        rejected.fetch_add(1);
        error("submit " + std::to_string(status) + " " + body.substr(0, 200));
        submit_next(who);
        return;
      }
      accepted.fetch_add(1);
      cl.target = "/api/v1/changes/" + body.substr(p + 15, 36);
      cl.waited = cl.target + "?wait=" + std::to_string(wait_ms);
      cl.next_poll = cl.t0;
      cl.last_phase.clear();
      cl.at = stage::read;
      if (mode == "poll")
        read_on_tick(who);
      else
        read_now(who);
      return;
    }
    reads.fetch_add(1);
    if (status != 200) {
      read_errors.fetch_add(1);
      error("read " + std::to_string(status) + " " + body.substr(0, 200));
      timers.push({clock_type::now() + std::chrono::milliseconds(poll_interval_ms), who});
      return;
    }
    auto phase = phase_in(body);
    if (terminal_phase(phase)) {
      if (phase == "VALIDATED") {
        validated.fetch_add(1);
        std::lock_guard<std::mutex> g(mu);
        client_ms.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - cl.t0).count());
      } else {
        failed.fetch_add(1);
        error("ended in " + phase);
      }
      submit_next(who);
      return;
    }
    if (mode == "poll") {
      read_on_tick(who);
      return;
    }
    // A long poll answered before the poll interval with the phase unchanged: the server did not
    // wait (it may not know ?wait=). Never spin: wait out the poll interval, as a poll would.
    bool unchanged = phase == cl.last_phase;
    cl.last_phase = phase;
    if (unchanged && clock_type::now() - cl.asked < std::chrono::milliseconds(poll_interval_ms)) {
      early_answers.fetch_add(1);
      timers.push({cl.asked + std::chrono::milliseconds(poll_interval_ms), who});
      return;
    }
    read_now(who);
  }

  void readable(std::size_t who) {
    auto& cl = clients[who];
    if (cl.fd < 0) return;
    char tmp[16384];
    for (;;) {
      auto k = ::recv(cl.fd, tmp, sizeof tmp, MSG_DONTWAIT);
      if (k > 0) {
        cl.in.append(tmp, static_cast<std::size_t>(k));
        if (static_cast<std::size_t>(k) == sizeof tmp) continue;
        break;
      }
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (k < 0 && errno == EINTR) continue;
      // Closed (or failed) before a whole answer: the request goes again on a fresh connection once.
      // An idle connection the server closed is only dropped; the next request opens another.
      close_conn(cl);
      if (cl.awaiting) send_request(who);
      return;
    }
    if (!cl.awaiting) {  // bytes nobody asked for: the connection cannot be trusted with the next request
      close_conn(cl);
      return;
    }
    int status = 0;
    bool close_after = false;
    std::string body;
    if (!take_answer(cl.in, status, body, close_after)) return;
    if (close_after) close_conn(cl);
    answered(who, status, body);
  }

  void run() {
    ep = ::epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) throw std::runtime_error("epoll_create1 failed");
    clients.resize(static_cast<std::size_t>(std::min(c, n)));
    live = static_cast<long>(clients.size());
    for (std::size_t i = 0; i < clients.size(); ++i) submit_next(i);
    std::vector<epoll_event> events(256);
    auto next_sweep = clock_type::now() + std::chrono::seconds(1);
    while (live > 0) {
      auto now = clock_type::now();
      // An answer that does not come within the request timeout: the request goes again on a fresh
      // connection once, then counts as failed (as the blocking client's receive timeout did).
      if (now >= next_sweep) {
        next_sweep = now + std::chrono::seconds(1);
        for (std::size_t who = 0; who < clients.size(); ++who) {
          auto& cl = clients[who];
          if (!cl.awaiting || now - cl.sent_at < request_timeout) continue;
          cl.awaiting = false;
          close_conn(cl);
          send_request(who);
        }
      }
      if (now > deadline) {
        timed_out = true;
        break;
      }
      while (!timers.empty() && timers.top().at <= now) {
        auto who = timers.top().who;
        timers.pop();
        auto& cl = clients[who];
        if (cl.at == stage::submit)
          submit_now(who);
        else if (cl.at == stage::read)
          read_now(who);
      }
      timespec wait{1, 0};
      if (!timers.empty()) {
        auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(timers.top().at - clock_type::now()).count();
        left = std::clamp<long long>(left, 0, 1'000'000'000LL);
        wait = timespec{static_cast<time_t>(left / 1'000'000'000LL), static_cast<long>(left % 1'000'000'000LL)};
      }
      int k = ::epoll_pwait2(ep, events.data(), static_cast<int>(events.size()), &wait, nullptr);
      if (k < 0 && errno != EINTR) throw std::runtime_error("epoll_pwait2 failed");
      for (int j = 0; j < k; ++j) readable(static_cast<std::size_t>(events[static_cast<std::size_t>(j)].data.u64));
    }
    for (auto& cl : clients) close_conn(cl);
    ::close(ep);
  }
};

int cmd_flow(const args& a) {
  persistence::db_context db(db_from(a));
  const std::string mode = a.get("wait-mode", "poll");
  const std::string tag = a.get("tag", "flow");
  const long n = a.num("n", 2000), c = a.num("c", 200);
  const int port = static_cast<int>(a.num("port", 8080));
  const long timeout_s = a.num("timeout-s", 1800);
  long service_pid = a.num("service-pid", 0), db_pid = a.num("db-pid", 0), sim_pid = a.num("sim-pid", 0);
  long self_pid = static_cast<long>(::getpid());
  const bool binlog = checked(persistence::bench_variable(db, "log_bin")) == "1";

  auto hist0 = scrape_callback_histogram(port);
  long events0 = static_cast<long>(checked(persistence::bench_event_count(db)));
  // Last statement of this connection before the window: the window's only statement of ours is
  // the closing SHOW GLOBAL STATUS (mode db adds its progress queries, 10 per second).
  auto status0 = checked(persistence::bench_global_status(db, status_names));
  double svc_cpu0 = cpu_ms(service_pid), db_cpu0 = cpu_ms(db_pid), sim_cpu0 = cpu_ms(sim_pid),
         self_cpu0 = cpu_ms(self_pid);
  long svc_cs0 = context_switches(service_pid), db_cs0 = context_switches(db_pid);

  long validated = 0, failed = 0, rejected = 0, reads = 0, read_errors = 0, early_answers = 0;
  bool timed_out = false;
  double wall_s = 0;
  std::vector<double> client_ms;
  std::vector<std::string> errors;
  if (mode == "db") {
    submitter sub;
    sub.port = port;
    sub.n = n;
    sub.c = c;
    sub.tag = tag;
    sub.rate = static_cast<double>(a.num("rate", 0));
    auto r = drive(sub, db, static_cast<int>(a.num("threads", 8)), "VALIDATED", timeout_s, a.num("db-poll-ms", 100));
    validated = r.validated;
    failed = r.failed;
    rejected = sub.rejected.load();
    timed_out = r.timed_out;
    wall_s = r.wall_s;
    errors = sub.sample_errors;
  } else {
    client_loop loop;
    loop.port = port;
    loop.n = n;
    loop.c = c;
    loop.tag = tag;
    loop.mode = mode;
    loop.poll_interval_ms = a.num("poll-interval-ms", 50);
    loop.wait_ms = a.num("wait-ms", 20000);
    loop.request_timeout = std::chrono::seconds(a.num("request-timeout-s", 30));
    loop.rate = static_cast<double>(a.num("rate", 0));
    loop.keyed = a.num("keyed", 0) != 0;
    loop.start = clock_type::now();
    loop.deadline = loop.start + std::chrono::seconds(timeout_s);
    std::thread runner([&] {
      try {
        loop.run();
      } catch (const std::exception& e) {
        loop.error(e.what());
        loop.timed_out = true;
      }
    });
    std::thread progress([&] {
      long last = -1;
      while (loop.validated + loop.failed + loop.rejected < n && !loop.timed_out) {
        long done = loop.validated + loop.failed;
        if (done / 500 != last) {
          last = done / 500;
          std::fprintf(stderr, "  progress: %ld/%ld VALIDATED, %ld failed, %ld rejected\n", loop.validated.load(), n,
                       loop.failed.load(), loop.rejected.load());
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
    });
    runner.join();
    wall_s = std::chrono::duration<double>(clock_type::now() - loop.start).count();
    loop.timed_out = loop.timed_out || loop.validated + loop.failed + loop.rejected < n;
    progress.join();
    validated = loop.validated;
    failed = loop.failed;
    rejected = loop.rejected;
    reads = loop.reads;
    read_errors = loop.read_errors;
    early_answers = loop.early_answers;
    timed_out = loop.timed_out;
    client_ms = loop.client_ms;
    errors = loop.sample_errors;
  }

  double svc_cpu = cpu_ms(service_pid) - svc_cpu0, db_cpu = cpu_ms(db_pid) - db_cpu0,
         sim_cpu = cpu_ms(sim_pid) - sim_cpu0, self_cpu = cpu_ms(self_pid) - self_cpu0;
  long svc_cs = context_switches(service_pid) - svc_cs0, db_cs = context_switches(db_pid) - db_cs0;
  auto status1 = checked(persistence::bench_global_status(db, status_names));
  auto hist1 = scrape_callback_histogram(port);
  long events = static_cast<long>(checked(persistence::bench_event_count(db))) - events0;
  auto latencies = checked(persistence::bench_flow_latencies(db, tag));
  const double per = validated > 0 ? 1.0 / double(validated) : 0.0;

  std::printf("flow (%s): %ld submitted, %ld VALIDATED, %ld failed, %ld rejected%s in %.2f s\n", mode.c_str(), n,
              validated, failed, rejected, timed_out ? " (DID NOT FINISH within the safety timeout)" : "", wall_s);
  std::printf("changes/s %.1f  transitions/s %.1f  (%ld operation_event rows, %.1f per change)\n",
              double(validated) / wall_s, double(events) / wall_s, events, double(events) * per);
  report_latency("e2e", latencies.e2e_ms);
  if (!client_ms.empty()) report_latency("client", client_ms);
  if (reads > 0)
    std::printf("status reads: %ld (%.1f per change, %ld not 200)\n", reads, double(reads) * per, read_errors);
  if (mode == "longpoll")
    std::printf("long polls answered early with the phase unchanged (the server did not wait): %ld\n", early_answers);
  report_latency("approval_cb_to_commit_db", latencies.approval_cb_to_commit_ms);
  report_latency("deploy_cb_to_commit_db", latencies.deploy_cb_to_commit_ms);
  for (auto& [route, after] : hist1) {
    std::string kind = route.substr(route.rfind('/') + 1);
    double count = 0;
    double p50 = histogram_percentile(hist0[route], after, 50, count);
    double p99 = histogram_percentile(hist0[route], after, 99, count);
    std::printf("%s callback arrival -> reply after commit (2xx, service histogram): n=%.0f p50=%.1f ms p99=%.1f ms\n",
                kind.c_str(), count, p50, p99);
    kv(kind + "_cb_http.n", count);
    kv(kind + "_cb_http.p50_ms", p50);
    kv(kind + "_cb_http.p99_ms", p99);
  }
  auto delta = [&](const std::string& k) -> double {
    auto b = status0.find(k), e = status1.find(k);
    if (b == status0.end() || e == status1.end()) return 0;
    return double(e->second - b->second);
  };
  // The closing SHOW GLOBAL STATUS is itself a statement: not the service's.
  double questions = delta("Questions") - 1;
  // Statements of a kind, whatever their form: an INSERT ... SELECT and an UPDATE or DELETE of a
  // join count under their own server counters.
  const auto of_kind = [&delta](const std::string& kind) {
    double n = delta("Com_" + kind);
    if (kind == "insert") n += delta("Com_insert_select");
    if (kind == "update" || kind == "delete") n += delta("Com_" + kind + "_multi");
    return n;
  };
  double fsyncs =
      delta("Innodb_os_log_fsyncs") + delta("Innodb_data_fsyncs") + (binlog ? delta("Binlog_group_commits") : 0);
  std::printf(
      "SQL per change: %.1f statements (Questions): %.1f SELECT, %.1f INSERT, %.1f UPDATE, %.1f DELETE, %.1f BEGIN, "
      "%.1f COMMIT, %.1f ROLLBACK, %.1f EXECUTE, %.1f SET\n",
      questions * per, delta("Com_select") * per, of_kind("insert") * per, of_kind("update") * per,
      of_kind("delete") * per, delta("Com_begin") * per, delta("Com_commit") * per, delta("Com_rollback") * per,
      delta("Com_stmt_execute") * per, delta("Com_set_option") * per);
  std::printf("fsyncs per change: %.2f (redo log %.2f + data files %.2f%s)\n", fsyncs * per,
              delta("Innodb_os_log_fsyncs") * per, delta("Innodb_data_fsyncs") * per,
              binlog ? (" + binlog group commits " + std::to_string(delta("Binlog_group_commits") * per)).c_str()
                     : ", binlog off");
  std::printf("buffer pool per change: %.2f pages read from disk, %.0f page reads in all\n",
              delta("Innodb_buffer_pool_reads") * per, delta("Innodb_buffer_pool_read_requests") * per);
  std::printf(
      "rows read per change: %.1f of tables, %.1f of temporary tables; handler reads: %.1f by key, %.1f next in an "
      "index, %.1f in a scan\n",
      delta("Rows_read") * per, delta("Rows_tmp_read") * per, delta("Handler_read_key") * per,
      delta("Handler_read_next") * per, delta("Handler_read_rnd_next") * per);
  long hwm = status_kb(service_pid, "VmHWM");
  std::printf(
      "CPU per change: changeflowd %.2f ms + mariadbd %.2f ms = %.2f ms; sim %.2f ms, driver %.2f ms; "
      "changeflowd peak RSS %.1f MiB\n",
      svc_cpu * per, db_cpu * per, (svc_cpu + db_cpu) * per, sim_cpu * per, self_cpu * per, hwm / 1024.0);
  std::printf("hand-offs per change (context switches of all threads): changeflowd %.1f, mariadbd %.1f\n",
              double(svc_cs) * per, double(db_cs) * per);
  for (auto& e : errors) std::printf("  error sample: %s\n", e.c_str());
  kv("flow.mode", mode);
  kv("flow.n", std::to_string(n));
  kv("flow.c", std::to_string(c));
  kv("flow.validated", std::to_string(validated));
  kv("flow.failed", std::to_string(failed));
  kv("flow.rejected", std::to_string(rejected));
  kv("flow.finished", timed_out ? "no" : "yes");
  kv("flow.wall_s", wall_s);
  kv("flow.changes_per_s", double(validated) / wall_s);
  kv("flow.events", std::to_string(events));
  kv("flow.transitions_per_s", double(events) / wall_s);
  kv("flow.events_per_change", double(events) * per);
  kv("flow.reads_per_change", double(reads) * per);
  kv("flow.longpoll_early_answers", std::to_string(early_answers));
  kv("flow.service_hwm_kb", std::to_string(hwm));
  kv("flow.service_cpu_ms_per_change", svc_cpu * per);
  kv("flow.db_cpu_ms_per_change", db_cpu * per);
  kv("flow.cpu_ms_per_change", (svc_cpu + db_cpu) * per);
  kv("flow.sim_cpu_ms_per_change", sim_cpu * per);
  kv("flow.driver_cpu_ms_per_change", self_cpu * per);
  kv("flow.service_ctxsw_per_change", double(svc_cs) * per);
  kv("flow.db_ctxsw_per_change", double(db_cs) * per);
  kv("flow.sql_per_change", questions * per);
  kv("flow.select_per_change", delta("Com_select") * per);
  for (auto k : {"insert", "update", "delete", "begin", "commit", "rollback"})
    kv(std::string("flow.") + k + "_per_change", of_kind(k) * per);
  kv("flow.fsyncs_per_change", fsyncs * per);
  kv("flow.log_fsyncs_per_change", delta("Innodb_os_log_fsyncs") * per);
  kv("flow.data_fsyncs_per_change", delta("Innodb_data_fsyncs") * per);
  kv("flow.binlog", binlog ? "on" : "off");
  kv("flow.pool_disk_reads_per_change", delta("Innodb_buffer_pool_reads") * per);
  kv("flow.pool_read_requests_per_change", delta("Innodb_buffer_pool_read_requests") * per);
  kv("flow.rows_read_per_change", delta("Rows_read") * per);
  kv("flow.tmp_rows_read_per_change", delta("Rows_tmp_read") * per);
  kv("flow.handler_read_key_per_change", delta("Handler_read_key") * per);
  kv("flow.handler_read_next_per_change", delta("Handler_read_next") * per);
  kv("flow.handler_read_rnd_next_per_change", delta("Handler_read_rnd_next") * per);
  return 0;
}

// ---------------------------------------------------------------------------------------------
// hold

int cmd_hold(const args& a) {
  persistence::db_context db(db_from(a));
  submitter sub;
  sub.port = static_cast<int>(a.num("port", 8080));
  sub.n = a.num("n", 10000);
  sub.c = a.num("c", 1000000000);  // waiting operations never finish: no in-flight cap
  sub.tag = a.get("tag", "hold");
  std::string wait_phase = a.get("wait-phase", "APPROVAL_SENT");
  auto r =
      drive(sub, db, static_cast<int>(a.num("threads", 8)), wait_phase, a.num("timeout-s", 900), a.num("poll-ms", 250));
  std::printf("hold: %ld submitted, %ld in %s, %ld failed, %ld rejected%s in %.2f s (%.0f submits/s)\n", sub.n,
              r.validated, wait_phase.c_str(), r.failed, sub.rejected.load(), r.timed_out ? " (TIMED OUT)" : "",
              r.wall_s, double(sub.n) / r.wall_s);
  for (auto& e : sub.sample_errors) std::printf("  error sample: %s\n", e.c_str());
  kv("hold.waiting", std::to_string(r.validated));
  kv("hold.failed", std::to_string(r.failed));
  kv("hold.rejected", std::to_string(sub.rejected.load()));
  kv("hold.wall_s", r.wall_s);
  kv("hold.submits_per_s", double(sub.n) / r.wall_s);
  if (auto file = a.get("ids"); !file.empty()) {
    std::ofstream f(file, std::ios::app);
    for (auto& id : sub.ids) f << id << "\n";
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// raw / repo / repo-phase: the database's guarded-commit limit and the persistence layer's distance
// from it, on K connections for S seconds. Each connection owns its rows: no lock waits by design,
// so the figure is the commit rate, not a contention artefact.

// A legal cycle of the transition table so repo transitions can run forever on the same rows: the
// shortest one within one phase, or with `phase_change` the shortest that crosses phases (its
// trigger then also moves the binding's phase, as about half of a real flow's transitions do).
// Entering BATCH_WAITING is left out: it is the batch admission, a transaction of two statements
// that always commits alone, and the standard flow never enters it.
std::vector<workflow::step> legal_cycle(bool phase_change) {
  using workflow::step;
  const auto usable = [](step s) { return s != step::BATCH_WAITING; };
  const auto edge = [&](step a, step b) {
    return usable(b) && workflow::is_allowed(a, b, workflow::actor_kind::workflow) &&
           (phase_change || workflow::phase_of(a) == workflow::phase_of(b));
  };
  const auto crosses = [](const std::vector<step>& path) {
    for (std::size_t i = 0; i < path.size(); ++i)
      if (workflow::phase_of(path[i]) != workflow::phase_of(path[(i + 1) % path.size()])) return true;
    return false;
  };
  // Depth-first from each start, paths of at most `length` steps that come back to it.
  std::vector<step> path;
  std::function<bool(std::size_t)> extend = [&](std::size_t length) -> bool {
    if (path.size() > 1 || (path.size() == 1 && edge(path[0], path[0]))) {
      if (edge(path.back(), path.front()) && (!phase_change || crosses(path))) return true;
    }
    if (path.size() == length) return false;
    for (auto next : workflow::all_steps) {
      if (std::find(path.begin(), path.end(), next) != path.end() || !edge(path.back(), next)) continue;
      path.push_back(next);
      if (extend(length)) return true;
      path.pop_back();
    }
    return false;
  };
  for (std::size_t length = 1; length <= 6; ++length) {
    for (auto s : workflow::all_steps) {
      if (!usable(s)) continue;
      path.assign(1, s);
      if (extend(length)) return path;
    }
  }
  return {};
}

// texts: the same 15-statement transaction sent as separate statements of one text and as one
// compound statement, in alternating rounds on one connection; per text: wall time, and the CPU of
// mariadbd (--db-pid) and of this process (the client's side of the exchange).
int cmd_texts(const args& a) {
  persistence::db_context db(db_from(a));
  const long n = a.num("n", 2000), rounds = a.num("rounds", 3), db_pid = a.num("db-pid", 0);
  const long self_pid = static_cast<long>(::getpid());
  checked(persistence::bench_reset_raw_table(db));
  std::vector<std::string> ids;
  for (int i = 0; i < 12; ++i) {
    ids.push_back("t" + std::to_string(i));
    checked(persistence::bench_insert_raw_row(db, ids.back()));
  }
  for (long r = 0; r < rounds; ++r) {
    for (bool compound : {false, true}) {
      const double db0 = cpu_ms(db_pid), self0 = cpu_ms(self_pid);
      const auto t0 = clock_type::now();
      const auto landed = checked(persistence::bench_text_loop(db, ids, compound, n));
      const double wall_ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
      const char* form = compound ? "compound" : "statements";
      std::printf("kv texts.%s.r%ld.us_per_text=%.1f\n", form, r, wall_ms * 1000 / double(n));
      std::printf("kv texts.%s.r%ld.db_cpu_us_per_text=%.1f\n", form, r, (cpu_ms(db_pid) - db0) * 1000 / double(n));
      std::printf("kv texts.%s.r%ld.client_cpu_us_per_text=%.1f\n", form, r,
                  (cpu_ms(self_pid) - self0) * 1000 / double(n));
      std::printf("kv texts.%s.r%ld.updates_landed=%lld of %ld\n", form, r, static_cast<long long>(landed), n * 6);
    }
  }
  return 0;
}

// Ids for bench rows: group `group`, `count` of them, distinct from any earlier run's.
std::vector<std::string> bench_ids(int group, int count) {
  std::vector<std::string> out;
  char buf[64];
  for (int i = 0; i < count; ++i) {
    std::snprintf(
        buf, sizeof buf, "b%07d-%04d-0000-0000-%012lld", group, i,
        static_cast<long long>(std::chrono::system_clock::now().time_since_epoch().count() % 1000000000000LL));
    out.emplace_back(buf);
  }
  return out;
}

// Real operations (with their binding) standing at `at`, the start of a legal cycle; setup only,
// not timed. bench_delete_repo_rows removes them (subject "rawbench-...").
std::vector<std::string> make_cycle_rows(persistence::db_context& setup, int group, int count, workflow::step at) {
  auto ids = bench_ids(group, count);
  for (const auto& id : ids) {
    persistence::new_operation op;
    op.operation_id = id;
    op.subject_id = "rawbench-" + id;
    op.target_key = "t";
    op.title = "raw bench";
    auto r = persistence::create_operation(setup, op);
    if (!r.ok()) throw std::runtime_error("create_operation failed: " + r.error.message);
    checked(persistence::bench_set_step(setup, id, at));
  }
  return ids;
}

/// The next transition of a row on `cycle`: from the step at `pos` to the one after it.
persistence::transition_request cycle_request(const std::string& id, std::int64_t version,
                                              const std::vector<workflow::step>& cycle, std::size_t pos) {
  persistence::transition_request req;
  req.operation_id = id;
  req.expected_version = version;
  req.from = cycle[pos % cycle.size()];
  req.to = cycle[(pos + 1) % cycle.size()];
  req.cause = "bench";
  req.actor = "workflow";
  req.instance_id = "bench";
  return req;
}

std::string cycle_text(const std::vector<workflow::step>& cycle) {
  std::string out;
  for (auto s : cycle) out += std::string(out.empty() ? "" : " <-> ") + std::string(workflow::to_string(s));
  return out;
}

int cmd_raw(const args& a) {
  auto settings = db_from(a);
  const int conns = static_cast<int>(a.num("conns", 4));
  const double seconds = static_cast<double>(a.num("seconds", 5));
  const std::string shape = a.get("shape", "raw");
  const int rows_per_conn = 8;
  persistence::db_context setup(settings);
  auto cycle = legal_cycle(shape == "repo-phase");
  if (shape != "raw" && cycle.empty()) {
    std::cerr << "no legal transition cycle in the table\n";
    return 1;
  }
  checked(persistence::bench_reset_raw_table(setup));
  // Rows: bench_raw for raw; real operations (with binding) for repo and repo-phase.
  std::vector<std::vector<std::string>> ids(static_cast<size_t>(conns));
  for (int c = 0; c < conns; ++c) {
    if (shape == "raw") {
      ids[static_cast<size_t>(c)] = bench_ids(c, rows_per_conn);
      for (const auto& id : ids[static_cast<size_t>(c)]) checked(persistence::bench_insert_raw_row(setup, id));
    } else {
      ids[static_cast<size_t>(c)] = make_cycle_rows(setup, c, rows_per_conn, cycle[0]);
    }
  }
  std::atomic<long> total{0}, failures{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int c = 0; c < conns; ++c) {
    threads.emplace_back([&, c] {
      persistence::db_context conn(settings);
      auto& mine = ids[static_cast<size_t>(c)];
      long n = 0, bad = 0;
      if (shape == "raw") {
        auto loop = persistence::bench_raw_loop(conn, mine, stop);
        n = loop.transactions;
        bad = loop.guard_misses;
        if (loop.error) std::cerr << "raw loop: " << loop.error->message << " (" << loop.error->code << ")\n";
      } else {  // repo / repo-phase: persistence::transition() as the service calls it
        std::vector<std::int64_t> version(mine.size(), 1);
        std::vector<size_t> pos(mine.size(), 0);
        for (size_t k = 0; !stop; ++k) {
          size_t i = k % mine.size();
          auto r = persistence::transition(conn, cycle_request(mine[i], version[i], cycle, pos[i]));
          if (r.ok()) {
            version[i] = r.value;
            ++pos[i];
          } else {
            ++bad;
          }
          ++n;
        }
      }
      total += n;
      failures += bad;
    });
  }
  auto t0 = clock_type::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  double el = std::chrono::duration<double>(clock_type::now() - t0).count();
  double rate = double(total.load()) / el;
  std::printf("%s: %d connections, %ld transactions in %.2f s = %.0f tx/s (%ld guard misses)%s\n", shape.c_str(), conns,
              total.load(), el, rate, failures.load(), shape == "raw" ? "" : (", cycle " + cycle_text(cycle)).c_str());
  kv(shape + ".conns", std::to_string(conns));
  kv(shape + ".tx_per_s", rate);
  kv(shape + ".guard_misses", std::to_string(failures.load()));
  // Leave no bench rows behind in the operation table (the rehydrator would pick them up).
  if (shape != "raw") checked(persistence::bench_delete_repo_rows(setup));
  return 0;
}

// committed: the same transitions as `repo` (or `repo-phase` with --phase 1), carried the way the
// service carries them: A actors (CAF, one scheduler thread with work sharing, as changeflowd runs)
// each own one row and keep one transition in flight; it goes to the service's
// transition_committer (groups of up to --group-max on a pool of K connections, --committers jobs
// at a time), whose completion tells the actor by message, and the actor submits the next. The
// rate counts committed transitions over S seconds after a one-second warm-up: the transitions
// themselves, without the external calls, HTTP and clients of the standard flow on the same cores.
using next_atom = caf::atom_constant<caf::atom("next")>;
using retry_atom = caf::atom_constant<caf::atom("retry")>;

struct committed_run {
  persistence::transition_committer* committer = nullptr;
  std::vector<workflow::step> cycle;
  std::atomic<bool> stop{false};
  std::atomic<long> committed{0}, misses{0}, refused{0};
};

caf::behavior committed_actor(caf::event_based_actor* self, committed_run* run, std::string id) {
  struct row_state {
    std::int64_t version = 1;
    std::size_t pos = 0;
  };
  auto st = std::make_shared<row_state>();
  auto submit = [self, run, id, st] {
    auto handle = caf::actor_cast<caf::actor>(self);
    bool queued = run->committer->submit(
        cycle_request(id, st->version, run->cycle, st->pos),
        [handle](persistence::db_context&, const persistence::db_result<std::int64_t>& r,
                 const persistence::operation_row*) { caf::anon_send(handle, next_atom::value, r.ok(), r.value); });
    if (!queued) {
      ++run->refused;
      self->delayed_send(self, std::chrono::milliseconds(1), retry_atom::value);
    }
  };
  submit();
  return {
      [=](next_atom, bool ok, std::int64_t version) {
        if (ok) {
          st->version = version;
          ++st->pos;
          ++run->committed;
        } else {
          ++run->misses;
        }
        if (run->stop) return self->quit();
        submit();
      },
      [=](retry_atom) {
        if (run->stop) return self->quit();
        submit();
      },
  };
}

int cmd_committed(const args& a) {
  auto settings = db_from(a);
  const int conns = static_cast<int>(a.num("conns", 4));
  const int actors = static_cast<int>(a.num("actors", 200));
  const double seconds = static_cast<double>(a.num("seconds", 5));
  const bool phase = a.num("phase", 0) != 0;
  const auto group_max = static_cast<std::size_t>(a.num("group-max", 64));
  const auto committers = static_cast<std::size_t>(a.num("committers", 1));
  const std::string name = phase ? "committed-phase" : "committed";
  persistence::db_context setup(settings);
  committed_run run;
  run.cycle = legal_cycle(phase);
  if (run.cycle.empty()) {
    std::cerr << "no legal transition cycle in the table\n";
    return 1;
  }
  auto ids = make_cycle_rows(setup, 9000000, actors, run.cycle[0]);
  auto pool = persistence::make_db_pool(settings, static_cast<std::size_t>(conns), 100000, "bench-db");
  persistence::transition_committer committer(*pool, group_max, committers, 100000);
  run.committer = &committer;
  double rate = 0;
  {
    caf::actor_system_config cfg;
    cfg.set("scheduler.max-threads", static_cast<std::size_t>(1));
    cfg.set("scheduler.policy", caf::atom("sharing"));
    caf::actor_system sys{cfg};
    for (const auto& id : ids) sys.spawn(committed_actor, &run, id);
    std::this_thread::sleep_for(std::chrono::seconds(1));  // warm-up: connections open, groups form
    const long n0 = run.committed.load();
    const auto groups0 = committer.stats().groups;
    const auto t0 = clock_type::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    const long n1 = run.committed.load();
    const auto groups1 = committer.stats().groups;
    const double el = std::chrono::duration<double>(clock_type::now() - t0).count();
    run.stop = true;  // each actor quits at its next answer; the system's destructor waits for them
    rate = double(n1 - n0) / el;
    const double per_group = groups1 > groups0 ? double(n1 - n0) / double(groups1 - groups0) : 0;
    std::printf(
        "%s: %d actors, %d connections, %ld transitions in %.2f s = %.0f tx/s, %.1f per group (%ld guard "
        "misses, %ld refused by a full queue), cycle %s\n",
        name.c_str(), actors, conns, n1 - n0, el, rate, per_group, run.misses.load(), run.refused.load(),
        cycle_text(run.cycle).c_str());
    kv(name + ".actors", std::to_string(actors));
    kv(name + ".conns", std::to_string(conns));
    kv(name + ".tx_per_s", rate);
    kv(name + ".per_group", per_group);
    kv(name + ".guard_misses", std::to_string(run.misses.load()));
  }
  checked(persistence::bench_delete_repo_rows(setup));
  return 0;
}

// lone: what one guarded transition costs when it commits alone, as every transition of a change
// that is the only one in flight does: one connection, one row on `repo`'s cycle, --n transitions
// timed from the call to its answer (persistence::transition(), one autocommitted statement and its
// fsync), first back to back, then each after a pause of --pause-us (the connection and the disk
// idle in between, as between the steps of a lone change, which wait for outbound calls). Then the
// row read by its key the same two ways, for the part of a commit that is the round trip alone.
int cmd_lone(const args& a) {
  auto settings = db_from(a);
  const long n = static_cast<long>(a.num("n", 200));
  const auto pause = std::chrono::microseconds(a.num("pause-us", 3000));
  persistence::db_context setup(settings);
  const auto cycle = legal_cycle(false);
  if (cycle.empty()) {
    std::cerr << "no legal transition cycle in the table\n";
    return 1;
  }
  const auto id = make_cycle_rows(setup, 9500000, 1, cycle[0]).front();
  persistence::db_context conn(settings);
  // `call` n times, each after `gap` (none: back to back), each timed from the call to its answer.
  const auto timed = [n](std::chrono::microseconds gap, const std::function<void()>& call) {
    std::vector<double> us;
    for (long i = 0; i < n; ++i) {
      if (gap.count() > 0) std::this_thread::sleep_for(gap);
      const auto t0 = clock_type::now();
      call();
      us.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
    }
    return us;
  };
  std::int64_t version = 1;
  std::size_t pos = 0;
  const auto commit = [&] {
    auto r = persistence::transition(conn, cycle_request(id, version, cycle, pos));
    if (!r.ok()) throw std::runtime_error("lone transition refused: " + r.error.message);
    version = r.value;
    ++pos;
  };
  // The same row read back by its key over the same connection: the round trip and a statement,
  // without a write and its flush.
  const auto read = [&] {
    auto r = persistence::load_operation(conn, id);
    if (!r.ok()) throw std::runtime_error("lone read failed: " + r.error.message);
  };
  const auto close = timed(std::chrono::microseconds(0), commit);
  const auto apart = timed(pause, commit);
  const auto read_close = timed(std::chrono::microseconds(0), read);
  const auto read_apart = timed(pause, read);
  std::printf(
      "lone: %ld guarded transitions committed alone on one connection: p50 %.0f us, p90 %.0f us back to back; "
      "p50 %.0f us, p90 %.0f us each after a %lld us pause\n",
      n, percentile(close, 50), percentile(close, 90), percentile(apart, 50), percentile(apart, 90),
      static_cast<long long>(pause.count()));
  kv("lone.n", std::to_string(n));
  kv("lone.pause_us", std::to_string(pause.count()));
  kv("lone.close.p50_us", percentile(close, 50));
  kv("lone.close.p90_us", percentile(close, 90));
  kv("lone.apart.p50_us", percentile(apart, 50));
  kv("lone.apart.p90_us", percentile(apart, 90));
  std::printf("lone: the row read by its key: p50 %.0f us back to back, p50 %.0f us each after the pause\n",
              percentile(read_close, 50), percentile(read_apart, 50));
  kv("lone.read_close.p50_us", percentile(read_close, 50));
  kv("lone.read_apart.p50_us", percentile(read_apart, 50));
  checked(persistence::bench_delete_repo_rows(setup));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: changeflow-load flow|hold|raw|committed|lone|texts --option value ...\n";
    return 2;
  }
  persistence::init_driver();
  std::string cmd = argv[1];
  auto a = parse(argc, argv, 2);
  try {
    if (cmd == "flow") return cmd_flow(a);
    if (cmd == "hold") return cmd_hold(a);
    if (cmd == "raw") return cmd_raw(a);
    if (cmd == "texts") return cmd_texts(a);
    if (cmd == "committed") return cmd_committed(a);
    if (cmd == "lone") return cmd_lone(a);
  } catch (const database_error& e) {
    std::cerr << "changeflow-load: database error " << e.code << ": " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "changeflow-load: " << e.what() << "\n";
    return 1;
  }
  std::cerr << "changeflow-load: unknown command " << cmd << "\n";
  return 2;
}
