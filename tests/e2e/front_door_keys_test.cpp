// API keys fail closed, in kvlm serve and kvlm router alike: every key flag
// that would turn a check off by mistake (an empty key, an empty metrics
// key, a key file that is empty, only comments, unreadable or unparsable)
// stops the start with exit 1 and the flag named; and a SIGHUP that finds
// the key file emptied keeps the keys in use (the old key still passes, no
// key is still a 401).
#include <gtest/gtest.h>

#include <csignal>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>

#include "support/test_support.h"

namespace kvlm::front_door_keys_test {

std::string model() { return test::shared_path("models/stories260K.gguf"); }

// The flags each command needs to reach its key checks, before `extra`.
std::vector<std::string> command_line(const std::string& command, const std::vector<std::string>& extra) {
  std::vector<std::string> args{command};
  if (command == "serve") {
    args.insert(args.end(), {"-m", model(), "-t", "1"});
  } else {
    args.insert(args.end(), {"--workers", "http://127.0.0.1:1", "--policy", "least-load"});
  }
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

struct StartError {
  std::vector<std::string> flags;
  std::string message;  // what stderr must contain
};

TEST(FrontDoorKeys, AKeyFlagThatWouldTurnAuthenticationOffStopsTheStart) {
  const std::string empty = test::write_temp_file("empty-keys.txt", "");
  const std::string comments = test::write_temp_file("comment-keys.txt", "# the keys are elsewhere\n\n   \n");
  const std::string bad = test::write_temp_file("bad-keys.txt", "sk-a rpm=lots\n");
  const std::vector<StartError> cases = {
      {{"--api-key", ""}, "--api-key \"\": an empty key"},
      {{"--api-key", "sk-a", "--api-key", ""}, "--api-key \"\": an empty key"},
      {{"--metrics-key", ""}, "--metrics-key \"\": an empty value"},
      {{"--api-key", "sk-a", "--metrics-key", ""}, "--metrics-key \"\": an empty value"},
      {{"--api-key-file", ""}, "--api-key-file \"\": an empty value"},
      {{"--api-key-file", empty}, "--api-key-file " + empty + ": holds no key"},
      {{"--api-key-file", comments}, "--api-key-file " + comments + ": holds no key"},
      {{"--api-key-file", "/nonexistent/keys.txt"}, "--api-key-file /nonexistent/keys.txt: cannot read it"},
      {{"--api-key-file", bad}, bad + " line 1: rpm must be a non-negative integer"},
  };
  for (const std::string command : {"serve", "router"}) {
    for (const StartError& c : cases) {
      // Under `timeout`: a server that starts after all (the bug) is killed
      // (exit 124) rather than waited for.
      std::vector<std::string> argv{"timeout", "30", test::kvlm_binary()};
      for (const std::string& arg : command_line(command, c.flags)) argv.push_back(arg);
      const auto r = test::run_program(argv);
      const std::string what = command + " " + testing::PrintToString(c.flags);
      EXPECT_EQ(r.exit_code, 1) << what << "\n" << r.err;
      EXPECT_NE(r.err.find(c.message), std::string::npos) << what << "\n" << r.err;
      EXPECT_EQ(r.err.find("listening on"), std::string::npos) << what;
    }
  }
}

int status_of(int port, const std::string& path, const std::string& key) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(30);
  httplib::Headers headers;
  if (!key.empty()) headers.emplace("Authorization", "Bearer " + key);
  const auto r = c.Get(path, headers);
  return r ? r->status : -1;
}

// Waits until the process has logged `text` `count` times (a SIGHUP's
// reload runs on its own thread).
bool wait_for_log(const test::ServerProcess& p, const std::string& text, int count) {
  for (int i = 0; i < 500; ++i) {
    const std::string err = p.err_so_far();
    int seen = 0;
    for (size_t at = err.find(text); at != std::string::npos; at = err.find(text, at + 1)) ++seen;
    if (seen >= count) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// /v1/status takes an API key in both commands and is answered by the
// process itself (the router's workers need not exist).
TEST(FrontDoorKeys, AReloadThatFindsNoKeyKeepsTheKeysInUse) {
  for (const std::string command : {"serve", "router"}) {
    const std::string file = test::write_temp_file(command + "-reload-keys.txt", "sk-old name=old\n");
    std::vector<std::string> args = command_line(command, {"--api-key-file", file});
    args.erase(args.begin());
    test::ServerProcess p(args, command);
    ASSERT_GT(p.port(), 0) << command;
    EXPECT_EQ(status_of(p.port(), "/v1/status", "sk-old"), 200) << command;
    EXPECT_EQ(status_of(p.port(), "/v1/status", ""), 401) << command;
    int num_refused = 0;
    for (const char* text : {"", "# emptied\n", "sk-new rpm=lots\n"}) {
      test::write_temp_file(command + "-reload-keys.txt", text);
      p.send_signal(SIGHUP);
      ASSERT_TRUE(wait_for_log(p, "API keys not reloaded (the keys in use stay)", ++num_refused))
          << command << " '" << text << "'\n" << p.err_so_far();
      EXPECT_EQ(status_of(p.port(), "/v1/status", "sk-old"), 200) << command << " '" << text << "'";
      EXPECT_EQ(status_of(p.port(), "/v1/status", ""), 401) << command << " '" << text << "'";
      EXPECT_EQ(status_of(p.port(), "/v1/status", "sk-new"), 401) << command << " '" << text << "'";
    }
    EXPECT_NE(p.err_so_far().find(file + ": holds no key"), std::string::npos) << p.err_so_far();
  }
}

}  // namespace kvlm::front_door_keys_test
