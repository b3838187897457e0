// The disk tier under SIGKILL: a record is whole and valid or
// absent after a kill at any moment of a write; a server restarted on a
// tier its killed predecessors wrote never answers from wrong KV (greedy
// outputs equal a cold run); with --kv-disk-fsync always a record's
// system calls come in the order a power loss needs (strace).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <regex>
#include <thread>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

extern char** environ;

namespace kvlm::kv_disk_crash_test {

using Json = nlohmann::json;
namespace fs = std::filesystem;

int rounds_from_env(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::max(1, std::atoi(v)) : fallback;
}

// `kvlm ARGS` started in the background with its output discarded.
pid_t spawn_kvlm(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {test::kvlm_binary()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, cargv[0], &actions, nullptr, cargv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

void kill_and_reap(pid_t pid) {
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
}

// "verified N records (...): G good, B bad" and the temporary-file line.
struct Verified {
  int exit_code = -1;
  long good = -1, bad = -1, temp = 0;
};
Verified verify(const std::string& dir) {
  const test::CommandResult r = test::run_kvlm({"kv", "verify", "--kv-disk", dir});
  Verified v;
  v.exit_code = r.exit_code;
  std::smatch m;
  if (std::regex_search(r.out, m, std::regex(R"((\d+) good, (\d+) bad)"))) {
    v.good = std::stol(m[1]);
    v.bad = std::stol(m[2]);
  }
  if (std::regex_search(r.out, m, std::regex(R"((\d+) temporary files)"))) v.temp = std::stol(m[1]);
  return v;
}

TEST(DiskTierCrash, WritesKilledAtRandomMomentsLeaveOnlyValidRecords) {
  // A write-heavy run: kvlm kv bench storing 16-block prefixes as fast as
  // it can, SIGKILLed 0-40 ms in (start-up included: some kills land before
  // the first write, most in the middle of one).
  const int rounds = rounds_from_env("KVLM_SIGKILL_ROUNDS", 200);
  const std::string dir = test::temp_dir() + "/disk-sigkill";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::mt19937 rng(42);
  const char* policies[] = {"none", "batch", "always"};
  long lost = 0, max_lost = 0, kept = 0;
  for (int i = 0; i < rounds; ++i) {
    const pid_t pid = spawn_kvlm({"kv", "bench", "--kv-disk", dir, "--kv-disk-fsync", policies[i % 3],
                                  "--prefix-tokens", "256", "--block-bytes", "16384", "--iterations", "1000000"});
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 40000));
    kill_and_reap(pid);
    const Verified v = verify(dir);
    ASSERT_EQ(v.exit_code, 0) << "round " << i << ": a killed write left a bad record";
    ASSERT_EQ(v.bad, 0);
    lost += v.temp;  // each orphaned temporary file is the one record its kill lost
    max_lost = std::max(max_lost, v.temp);
    kept = v.good;
    // The next process to open the tier removes the orphan; keep the
    // directory small for the next round.
    test::run_kvlm({"kv", "verify", "--kv-disk", dir, "--remove"});
    if (i % 20 == 19) test::run_kvlm({"kv", "clear", "--kv-disk", dir});
  }
  EXPECT_LE(max_lost, 1) << "one writer loses at most the record in flight";
  RecordProperty("rounds", rounds);
  RecordProperty("records_lost_per_kill", std::to_string(static_cast<double>(lost) / rounds));
  std::printf("%d kills: %ld records lost in all (%.2f per kill, at most %ld), %ld valid records at the last kill\n",
              rounds, lost, static_cast<double>(lost) / rounds, max_lost, kept);
}

std::string model() { return test::shared_path("models/stories260K.gguf"); }
std::string prompt(int variant) {
  return test::read_file(test::shared_path("text/tinystories_sample.txt")).substr(static_cast<size_t>(variant) * 700, 900);
}

// Greedy text of `prompt` from a server; empty when the server is gone.
std::optional<std::string> complete(int port, const std::string& text) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(30);
  const Json body = {{"prompt", text}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}};
  auto r = c.Post("/v1/completions", body.dump(), "application/json");
  if (!r || r->status != 200) return std::nullopt;
  return Json::parse(r->body)["choices"][0]["text"].get<std::string>();
}

TEST(DiskTierCrash, ServersKilledDuringWriteBackNeverServeWrongKv) {
  const int rounds = rounds_from_env("KVLM_SERVE_SIGKILL_ROUNDS", 12);
  const int num_prompts = 10;
  std::vector<std::string> want;
  {
    test::ServerProcess cold({"-m", model(), "-t", "1", "--no-prefix-cache"});
    for (int p = 0; p < num_prompts; ++p) want.push_back(complete(cold.port(), prompt(p)).value_or("<failed>"));
  }
  const std::string dir = test::temp_dir() + "/disk-serve-sigkill";
  fs::remove_all(dir);
  std::mt19937 rng(7);
  int answered = 0, wrong = 0, cut = 0, hits = 0;
  for (int i = 0; i < rounds; ++i) {
    test::ServerProcess s({"-m", model(), "-t", "1", "--kv-disk", dir, "--max-seqs", "4"});
    const int port = s.port();
    // Four clients, each a few prompts (earlier rounds wrote some of them);
    // the kill lands while they run and the I/O thread writes behind them.
    std::vector<std::future<void>> clients;
    std::mutex mu;
    for (int c = 0; c < 4; ++c) {
      const unsigned seed = rng();
      clients.push_back(std::async(std::launch::async, [&, seed] {
        std::mt19937 pick(seed);
        for (int k = 0; k < 3; ++k) {
          const int p = static_cast<int>(pick() % num_prompts);
          const auto got = complete(port, prompt(p));
          std::lock_guard<std::mutex> lock(mu);
          if (!got) {
            ++cut;  // in flight on the killed server (or sent after it died)
            return;
          }
          if (++answered; *got != want[p]) ++wrong;
        }
      }));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 400));
    hits += static_cast<int>(test::server_metric(s, R"(kvlm_kv_tier_hit_tokens_total{model_name="llama"})") > 0);
    s.send_signal(SIGKILL);
    for (auto& f : clients) f.get();
    s.wait();
    const Verified v = verify(dir);
    ASSERT_EQ(v.exit_code, 0) << "round " << i;
    ASSERT_EQ(v.bad, 0) << "round " << i;
  }
  // A last server: every prompt from what the killed ones left.
  test::ServerProcess last({"-m", model(), "-t", "1", "--kv-disk", dir});
  for (int p = 0; p < num_prompts; ++p) {
    ++answered;
    if (complete(last.port(), prompt(p)) != want[p]) ++wrong;
  }
  EXPECT_GT(test::server_metric(last, R"(kvlm_kv_tier_hit_tokens_total{model_name="llama"})"), 0)
      << "the killed servers' records were never used";
  EXPECT_EQ(wrong, 0);
  std::printf("%d kills: %d answers (all equal the cold run: %s), %d requests cut by a kill, %d rounds with disk hits\n",
              rounds, answered, wrong == 0 ? "yes" : "NO", cut, hits);
}

// The system calls of one record under --kv-disk-fsync always, in order:
// the bytes written, the file fsynced, renamed to its name, its directory
// fsynced; and nothing of the record written after its rename.
TEST(DiskTierCrash, AlwaysFsyncsTheFileThenRenamesThenFsyncsTheDirectory) {
  if (!test::have_program("strace")) GTEST_FAIL() << "strace (Debian's strace) is needed";
  const std::string dir = test::temp_dir() + "/disk-strace";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string log = test::temp_dir() + "/disk-strace.log";
  const test::CommandResult r = test::run_program(
      {"strace", "-f", "-e", "trace=openat,write,fsync,fdatasync,close,rename,renameat,renameat2", "-o", log,
       test::kvlm_binary(), "kv", "bench", "--kv-disk", dir, "--kv-disk-fsync", "always", "--prefix-tokens", "64",
       "--iterations", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(log);
  // Per record: the steps seen on its temporary file's descriptor, then on
  // the directory descriptor opened after its rename.
  const std::regex open_tmp(R"re(openat\(AT_FDCWD, "([^"]+\.kvr)\.tmp\.[0-9.]+", O_WRONLY.* = (\d+))re");
  const std::regex open_dir(R"re(openat\(AT_FDCWD, "([^"]+)", O_RDONLY\|O_CLOEXEC\|O_DIRECTORY\) = (\d+))re");
  const std::regex rename_re(R"re(rename(?:at2?)?\(.*"([^"]+\.kvr)\.tmp\.[0-9.]+",.*"([^"]+\.kvr)".* = 0)re");
  const std::regex call(R"re(^\d+ +(write|fsync|fdatasync|close)\((\d+))re");
  std::map<int, std::string> fd_record, fd_dir;  // open descriptors
  std::map<std::string, std::string> steps;      // record path -> "W F C R D" sequence
  std::string renamed_last;
  int num_records = 0;
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, open_tmp)) {
      fd_record[std::stoi(m[2])] = m[1];
    } else if (std::regex_search(line, m, open_dir)) {
      fd_dir[std::stoi(m[2])] = m[1];
    } else if (std::regex_search(line, m, rename_re)) {
      steps[m[2]] += "R";
      renamed_last = m[2];
      ++num_records;
    } else if (std::regex_search(line, m, call)) {
      const int fd = std::stoi(m[2]);
      const std::string what = m[1];
      if (fd_record.count(fd)) {
        steps[fd_record[fd]] += what == "write" ? "W" : what == "close" ? "C" : "F";
        if (what == "close") fd_record.erase(fd);
      } else if (fd_dir.count(fd) && what != "write") {
        // A directory fsync after a rename into it belongs to that record.
        if (what != "close" && !renamed_last.empty() && fs::path(renamed_last).parent_path() == fd_dir[fd])
          steps[renamed_last] += "D";
        if (what == "close") fd_dir.erase(fd);
      }
    }
  }
  ASSERT_EQ(num_records, 8) << "2 batches of 4 blocks";
  for (const auto& [record, seq] : steps)
    EXPECT_TRUE(std::regex_match(seq, std::regex("W+FCRD"))) << record << ": " << seq
        << " (W write, F fsync, C close, R rename, D directory fsync)";
}

}  // namespace kvlm::kv_disk_crash_test
