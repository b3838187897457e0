// kvlm serve --kv-events-zmq over real sockets, read by an independent
// client (tests/py/kv_events_zmq_client.py: pyzmq and msgpack from
// tests/py/.venv, made by scripts/setup.sh). Every message is checked
// against what vLLM's readers (llm-d, Dynamo) rely on: three frames, the
// topic, seq counting by one, [ts, events, dp_rank], AllBlocksCleared
// first, parents published before their children, no hash stored twice
// while held, whole blocks whose token ids are the prompt's, removals once
// the small pool evicts. The replay socket must give back the same bytes.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kv/block_hash.h"
#include "support/test_support.h"

namespace kvlm::kv_events_zmq_test {

using Json = nlohmann::json;

constexpr int kBlockSize = 16;

std::string model_path() { return test::shared_path("models/stories260K.gguf"); }

// A loopback TCP port nothing listens on right now.
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

std::string endpoint(int port) { return fmt::format("tcp://127.0.0.1:{}", port); }

#ifdef KVLM_HAVE_ZMQ

// Prompts of ~200 tokens: three share their first ~100, one of them again
// under a cache salt, then four others, more than the 40-block pool holds.
Json prompts() {
  const std::string text = test::read_file(test::shared_path("text/tinystories_sample.txt"));
  Json p = Json::array();
  for (int v = 1; v <= 3; ++v) p.push_back({{"prompt", text.substr(0, 400) + text.substr(v * 2000, 300)}});
  p.push_back({{"prompt", p[0]["prompt"]}, {"cache_salt", "tenant-a"}});
  for (int v = 4; v <= 7; ++v) p.push_back({{"prompt", text.substr(v * 2000, 700)}});
  return p;
}

// Runs the client against `server`; its JSON (the test fails without it).
Json read_events(const test::ServerProcess& server, const std::vector<std::string>& socket_args) {
  const std::string python = std::string(KVLM_SOURCE_DIR) + "/tests/py/.venv/bin/python";
  EXPECT_TRUE(std::filesystem::exists(python)) << python << " is missing: run scripts/setup.sh";
  const std::string file = test::write_temp_file("zmq_prompts.json", prompts().dump());
  std::vector<std::string> argv = {python, std::string(KVLM_SOURCE_DIR) + "/tests/py/kv_events_zmq_client.py",
                                    "--server", server.url(), "--prompts", file};
  argv.insert(argv.end(), socket_args.begin(), socket_args.end());
  const test::CommandResult r = test::run_program(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err << server.err_so_far();
  return r.exit_code == 0 ? Json::parse(r.out) : Json::object();
}

// Each live message's frames and framing; seq counts by one from the first.
void check_frames(const Json& frames, const std::string& topic) {
  ASSERT_FALSE(frames.empty());
  for (size_t i = 0; i < frames.size(); ++i) {
    const Json& f = frames[i];
    ASSERT_EQ(f["num_parts"], 3) << f;
    EXPECT_EQ(f["topic"], topic);
    EXPECT_EQ(f["seq_len"], 8);
    if (i > 0) { EXPECT_EQ(f["seq"].get<uint64_t>(), frames[i - 1]["seq"].get<uint64_t>() + 1); }
    const Json& p = f["payload"];
    ASSERT_TRUE(p.is_array() && p.size() == 3) << p;
    EXPECT_TRUE(p[0].is_number_float()) << p[0];
    EXPECT_TRUE(p[1].is_array() && !p[1].empty()) << p;
    EXPECT_EQ(p[2], 0);
  }
}

// The replay from 0 has every message, in order, with the live ones' bytes.
void check_replay(const Json& out) {
  ASSERT_TRUE(out["replay_ended"].get<bool>());
  const Json& replay = out["replay"];
  std::map<uint64_t, std::string> live;
  for (const Json& f : out["frames"]) live[f["seq"].get<uint64_t>()] = f["raw"].get<std::string>();
  ASSERT_FALSE(replay.empty());
  for (size_t i = 0; i < replay.size(); ++i) {
    ASSERT_EQ(replay[i]["seq"], i);
    if (live.count(i)) { EXPECT_EQ(replay[i]["raw"], live[i]) << "seq " << i; }
  }
  EXPECT_GE(replay.size(), live.rbegin()->first + 1) << "the replay ends before the last live message";
}

// What applying every event of the whole stream (the replay) showed.
struct Applied {
  std::set<std::vector<int32_t>> prefixes_stored;  // each stored block's tokens from its chain's start
  size_t num_removed = 0;
  bool salted_chain = false;
};

void apply_stored(const Json& e, std::map<uint64_t, std::vector<int32_t>>& held, Applied& a) {
  ASSERT_TRUE(e.size() == 8 || e.size() == 9) << e;
  const Json& hashes = e[1];
  ASSERT_EQ(e[4], kBlockSize);
  ASSERT_EQ(e[3].size(), kBlockSize * hashes.size()) << e;
  EXPECT_TRUE(e[5].is_null() && e[7].is_null()) << "lora_id, lora_name: " << e;
  EXPECT_EQ(e[6], "CPU");
  std::vector<int32_t> chain;
  if (!e[2].is_null()) {
    ASSERT_TRUE(e[2].is_number_unsigned() && held.count(e[2].get<uint64_t>())) << "parent not published before: " << e;
    chain = held[e[2].get<uint64_t>()];
  }
  if (e.size() == 9) {
    ASSERT_TRUE(e[2].is_null()) << "extra_keys only on a chain's first blocks: " << e;
    EXPECT_EQ(e[8][0], Json::array({fmt::format("{:016x}", cache_salt_key("tenant-a"))}));
    a.salted_chain = true;
  }
  for (size_t i = 0; i < hashes.size(); ++i) {
    ASSERT_TRUE(hashes[i].is_number_unsigned()) << "a hash that is not an integer: " << hashes[i];
    for (size_t t = 0; t < kBlockSize; ++t) chain.push_back(e[3][i * kBlockSize + t].get<int32_t>());
    EXPECT_TRUE(held.emplace(hashes[i].get<uint64_t>(), chain).second) << "stored twice while held: " << hashes[i];
    a.prefixes_stored.insert(chain);
  }
}

Applied apply_all(const Json& replay) {
  Applied a;
  std::map<uint64_t, std::vector<int32_t>> held;  // hash -> its chain's tokens up to it
  for (const Json& m : replay) {
    const Json& events = m["payload"][1];
    if (m["seq"] == 0) { EXPECT_EQ(events, Json::array({Json::array({"AllBlocksCleared"})})); }
    for (const Json& e : events) {
      if (e[0] == "BlockStored") {
        apply_stored(e, held, a);
      } else if (e[0] == "BlockRemoved") {
        EXPECT_EQ(e.size(), 3u);
        EXPECT_EQ(e[2], "CPU");
        for (const Json& h : e[1]) {
          EXPECT_EQ(held.erase(h.get<uint64_t>()), 1u) << "removed a block never stored: " << h;
          ++a.num_removed;
        }
      } else {
        EXPECT_EQ(e, Json::array({"AllBlocksCleared"}));
        held.clear();
      }
    }
  }
  return a;
}

// The whole check of one server's stream.
void check_stream(const Json& out, const std::string& topic) {
  check_frames(out["frames"], topic);
  check_replay(out);
  const Applied a = apply_all(out["replay"]);
  EXPECT_GT(a.num_removed, 0u) << "the pool is smaller than the prompts: blocks must leave";
  EXPECT_TRUE(a.salted_chain);
  // Every full block of every prompt was stored with exactly its tokens.
  for (const Json& t : out["tokens"]) {
    const auto tokens = t.get<std::vector<int32_t>>();
    ASSERT_GT(tokens.size(), 4u * kBlockSize);
    for (size_t n = kBlockSize; n <= tokens.size(); n += kBlockSize)
      EXPECT_TRUE(a.prefixes_stored.count(std::vector<int32_t>(tokens.begin(), tokens.begin() + n)))
          << "the prompt's first " << n << " tokens were never stored";
  }
  // And nothing else: each stored chain is some prompt's beginning.
  for (const auto& chain : a.prefixes_stored) {
    bool found = false;
    for (const Json& t : out["tokens"]) {
      const auto tokens = t.get<std::vector<int32_t>>();
      found = found || (tokens.size() >= chain.size() && std::equal(chain.begin(), chain.end(), tokens.begin()));
    }
    EXPECT_TRUE(found) << "a stored chain of " << chain.size() << " tokens is no prompt's beginning";
  }
}

std::vector<std::string> server_args(std::vector<std::string> more) {
  std::vector<std::string> args = {"-m", model_path(), "-t", "1", "--ctx", "640", "--max-model-len", "512"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TEST(KvEventsZmq, ASubscriberSeesEveryBlockInVllmsFormat) {
  const int pub = free_port(), replay = free_port();
  test::ServerProcess server(server_args({"--kv-events-zmq", endpoint(pub), "--kv-events-zmq-replay",
                                          endpoint(replay), "--served-model-name", "stories"}));
  ASSERT_NE(server.port(), 0);
  const Json out = read_events(server, {"--sub", endpoint(pub), "--replay", endpoint(replay)});
  ASSERT_TRUE(out.contains("frames"));
  check_stream(out, fmt::format("kv@127.0.0.1:{}@stories", server.port()));
}

// The worker connects to a reader's bound SUB socket (a picker that binds),
// under a topic naming the address it advertises and the model it was told.
TEST(KvEventsZmq, TheWorkerConnectsToABoundSubscriber) {
  const int sub = free_port(), replay = free_port();
  test::ServerProcess server(server_args({"--kv-events-zmq-connect", endpoint(sub), "--kv-events-zmq-replay",
                                          endpoint(replay), "--kv-events-zmq-model", "org/tiny",
                                          "--advertise", "http://10.1.2.3:8000"}));
  ASSERT_NE(server.port(), 0);
  const Json out = read_events(server, {"--bind-sub", "--sub", endpoint(sub), "--replay", endpoint(replay)});
  ASSERT_TRUE(out.contains("frames"));
  check_stream(out, "kv@10.1.2.3:8000@org/tiny");
}

TEST(KvEventsZmq, AnEndpointItCannotBindFailsTheStart) {
  // A port something else listens on.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  const int taken = free_port();
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(taken));
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  const test::CommandResult r =
      test::run_kvlm({"serve", "-m", model_path(), "-t", "1", "--kv-events-zmq", endpoint(taken)});
  close(fd);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--kv-events-zmq " + endpoint(taken) + ": cannot bind"), std::string::npos) << r.err;
  const test::CommandResult alone =
      test::run_kvlm({"serve", "-m", model_path(), "--kv-events-zmq-replay", endpoint(free_port())});
  EXPECT_NE(alone.exit_code, 0);
  EXPECT_NE(alone.err.find("give one of them"), std::string::npos) << alone.err;
}

#else

TEST(KvEventsZmq, WithoutLibzmqTheFlagsSaySo) {
  const test::CommandResult r =
      test::run_kvlm({"serve", "-m", model_path(), "--kv-events-zmq", endpoint(free_port())});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("built without libzmq; install libzmq3-dev"), std::string::npos) << r.err;
}

#endif

}  // namespace kvlm::kv_events_zmq_test
