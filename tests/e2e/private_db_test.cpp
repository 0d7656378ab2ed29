// The private MariaDB of scripts/db: its buffer pool asks the kernel for transparent huge pages
// (scripts/db-huge-pages.c), and CHANGEFLOW_DB_HUGE_PAGES=0 leaves it in the default pages. Judged
// from the server's own mappings in /proc, not from the script's word: a mapping the size of the
// buffer pool carries the `hg` flag (madvise(MADV_HUGEPAGE) was applied) exactly when asked. The flag
// is set whatever the machine's huge-page setting is (`always`, `madvise` or `never`), so the check
// holds on any kernel built with transparent huge pages; on one without them the test is skipped.

#include "tests/support/process.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

using namespace changeflow::testing;

namespace {
/// The largest mapping of a process, and the largest of those madvise(MADV_HUGEPAGE) marked (`hg` in
/// its VmFlags), in kB, from /proc/PID/smaps (each mapping's Size line comes before its VmFlags line).
struct mappings_summary {
  std::uint64_t largest_kb = 0;
  std::uint64_t largest_marked_kb = 0;
};

mappings_summary summarize_mappings(const std::string& pid) {
  std::ifstream in("/proc/" + pid + "/smaps");
  mappings_summary out;
  std::uint64_t size_kb = 0;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Size:", 0) == 0) {
      std::istringstream(line.substr(5)) >> size_kb;
    } else if (line.rfind("VmFlags:", 0) == 0) {
      bool marked = (line + " ").find(" hg ") != std::string::npos;
      if (size_kb > out.largest_kb) out.largest_kb = size_kb;
      if (marked && size_kb > out.largest_marked_kb) out.largest_marked_kb = size_kb;
      size_kb = 0;
    }
  }
  return out;
}

/// A scripts/db server of this test alone, on a free port, stopped when the object goes.
class private_db {
 public:
  private_db(const std::string& dir, const std::string& env) : dir_(dir), port_(std::to_string(free_port())) {
    started_ = run(env + " " + source_dir() + "/scripts/db start --dir " + dir_ + " --port " + port_) == 0;
  }
  ~private_db() { (void)run(source_dir() + "/scripts/db stop --dir " + dir_ + " --port " + port_); }
  private_db(const private_db&) = delete;
  private_db& operator=(const private_db&) = delete;

  bool started() const { return started_; }
  std::string pid() const {
    std::ifstream in(dir_ + "/mysqld.pid");
    std::string p;
    in >> p;
    return p;
  }

 private:
  static int run(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); }
  std::string dir_;
  std::string port_;
  bool started_ = false;
};

constexpr std::uint64_t pool_kb = 128 * 1024;
}  // namespace

TEST(PrivateDb, TheBufferPoolAsksForHugePagesUnlessTurnedOff) {
  if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled"))
    GTEST_SKIP() << "a kernel without transparent huge pages";
  auto dir = make_temp_dir("cf-private-db") + "/db";
  {
    private_db db(dir, "CHANGEFLOW_DB_BUFFER_POOL=128M");
    ASSERT_TRUE(db.started()) << "scripts/db start failed; see " << dir << "/error.log";
    auto seen = summarize_mappings(db.pid());
    ASSERT_GE(seen.largest_kb, pool_kb) << "no mapping as large as the buffer pool: /proc was not read";
    EXPECT_GE(seen.largest_marked_kb, pool_kb) << "the buffer pool's mapping is not marked for huge pages";
  }
  {
    private_db db(dir, "CHANGEFLOW_DB_BUFFER_POOL=128M CHANGEFLOW_DB_HUGE_PAGES=0");
    ASSERT_TRUE(db.started()) << "scripts/db start failed; see " << dir << "/error.log";
    auto seen = summarize_mappings(db.pid());
    ASSERT_GE(seen.largest_kb, pool_kb) << "no mapping as large as the buffer pool: /proc was not read";
    EXPECT_EQ(seen.largest_marked_kb, 0u) << "a mapping is marked for huge pages although they were turned off";
  }
}
