// GET /v1/kv/events over real HTTP (kvlm serve --kv-events): a reader sees
// the hashes of exactly the prompt blocks a request cached, and the ones a
// full pool dropped again; a new reader's snapshot is their net set; a
// reader that comes back to the same process continues after its last batch.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "kv/block_hash.h"
#include "support/test_support.h"

namespace kvlm::kv_events_server_test {

using Json = nlohmann::json;

// Reads the events stream on a thread of its own until destroyed.
class EventsReader {
 public:
  EventsReader(int port, const std::string& query = "") {
    thread_ = std::thread([this, port, query] {
      httplib::Client c("127.0.0.1", port);
      c.set_read_timeout(30);
      std::string buffer;
      c.Get("/v1/kv/events" + query, [&](const char* data, size_t n) {
        buffer.append(data, n);
        for (size_t end; (end = buffer.find("\n\n")) != std::string::npos; buffer.erase(0, end + 2)) {
          const std::string event = buffer.substr(0, end);
          if (event.rfind("data: ", 0) != 0) continue;
          std::lock_guard lock(mu_);
          lines_.push_back(Json::parse(event.substr(6)));
        }
        return !stop_;
      });
    });
  }
  ~EventsReader() {
    stop_ = true;
    thread_.join();  // ends at the next line (load lines come every second at least)
  }
  // The lines of `type` so far, waiting up to 10 s until `ready` holds for them.
  std::vector<Json> wait(const std::string& type, const std::function<bool(const std::vector<Json>&)>& ready) {
    std::vector<Json> got;
    for (int i = 0; i < 1000; ++i) {
      got.clear();
      {
        std::lock_guard lock(mu_);
        for (const Json& l : lines_)
          if (l["type"] == type) got.push_back(l);
      }
      if (ready(got)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return got;
  }

 private:
  std::mutex mu_;
  std::vector<Json> lines_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::vector<int32_t> tokenize(int port, const std::string& text) {
  httplib::Client c("127.0.0.1", port);
  auto r = c.Post("/tokenize", Json{{"content", text}}.dump(), "application/json");
  EXPECT_TRUE(r && r->status == 200);
  return r ? Json::parse(r->body)["tokens"].get<std::vector<int32_t>>() : std::vector<int32_t>{};
}

void complete(int port, const std::string& prompt) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(30);
  auto r = c.Post("/v1/completions", Json{{"prompt", prompt}, {"max_tokens", 1}}.dump(), "application/json");
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
}

std::string story(int variant) {
  return test::read_file(test::shared_path("text/tinystories_sample.txt")).substr(variant * 2000, 700);
}

std::set<std::string> hex_set(const std::vector<BlockHash>& hashes) {
  std::set<std::string> out;
  for (const BlockHash& h : hashes) out.insert(block_hash_hex(h));
  return out;
}

std::set<std::string> all_of(const std::vector<Json>& lines, const char* key) {
  std::set<std::string> out;
  for (const Json& l : lines)
    for (const Json& h : l[key]) out.insert(h.get<std::string>());
  return out;
}

TEST(KvEventsServer, AReaderSeesExactlyTheBlocksCachedAndDropped) {
  // A pool of 40 blocks: two ~200-token prompts fit, the third drops blocks.
  test::ServerProcess server({"-m", test::shared_path("models/stories260K.gguf"), "-t", "1", "--kv-events", "--ctx",
                              "640", "--max-model-len", "512"});
  EventsReader reader(server.port());
  const std::vector<Json> first = reader.wait("snapshot", [](auto& v) { return !v.empty(); });
  ASSERT_EQ(first.size(), 1u);
  EXPECT_TRUE(first[0]["hashes"].empty());
  EXPECT_EQ(first[0]["block_size"], 16);
  EXPECT_TRUE(first[0]["shared_tier"].is_null());

  // The prompt's full blocks are cached: their chain hashes, in order.
  const std::vector<int32_t> tokens = tokenize(server.port(), story(0));
  ASSERT_GT(tokens.size(), 64u);
  complete(server.port(), story(0));
  const std::set<std::string> want = hex_set(hash_full_blocks(tokens, 16));
  std::vector<Json> events = reader.wait("events", [&](auto& v) { return all_of(v, "stored").size() >= want.size(); });
  EXPECT_EQ(all_of(events, "stored"), want);
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i]["seq"], first[0]["seq"].get<uint64_t>() + i + 1);

  // More prompts than the pool holds: some of the first one's blocks leave.
  for (int v = 1; v <= 3; ++v) complete(server.port(), story(v));
  events = reader.wait("events", [](auto& v) { return !all_of(v, "removed").empty(); });
  ASSERT_FALSE(all_of(events, "removed").empty());

  // A new reader's snapshot is the net set as of its seq: the first
  // reader's events up to that seq, applied in order (the first wait may
  // have returned before the last prompt's events arrived).
  EventsReader later(server.port());
  const std::vector<Json> snap = later.wait("snapshot", [](auto& v) { return !v.empty(); });
  ASSERT_EQ(snap.size(), 1u);
  const uint64_t seq = snap[0]["seq"];
  events = reader.wait("events", [&](auto& v) { return !v.empty() && v.back()["seq"].template get<uint64_t>() >= seq; });
  std::set<std::string> net;
  for (const Json& e : events) {
    if (e["seq"].get<uint64_t>() > seq) break;
    for (const Json& h : e.value("removed", Json::array())) {
      EXPECT_TRUE(net.count(h.get<std::string>())) << "removed a hash not cached: " << h;
      net.erase(h.get<std::string>());
    }
    for (const Json& h : e.value("stored", Json::array())) net.insert(h.get<std::string>());
  }
  EXPECT_EQ(all_of(snap, "hashes"), net);
  // One that says where it was gets no snapshot, only what came after.
  EventsReader resumed(server.port(), "?instance=" + snap[0]["instance"].get<std::string>() +
                                          "&since=" + std::to_string(seq));
  complete(server.port(), story(5));
  const std::vector<Json> more = resumed.wait("events", [](auto& v) { return !v.empty(); });
  ASSERT_FALSE(more.empty());
  EXPECT_EQ(more[0]["seq"], seq + 1);
  EXPECT_TRUE(resumed.wait("snapshot", [](auto&) { return true; }).empty());
  // Load lines say what the engine holds.
  const std::vector<Json> load = resumed.wait("load", [](auto& v) { return !v.empty(); });
  ASSERT_FALSE(load.empty());
  EXPECT_EQ(load.back()["kv_blocks_total"], 40);
}

TEST(KvEventsServer, OffUnlessAsked) {
  test::ServerProcess server({"-m", test::shared_path("models/stories260K.gguf"), "-t", "1"});
  httplib::Client c("127.0.0.1", server.port());
  auto r = c.Get("/v1/kv/events");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_NE(r->body.find("--kv-events"), std::string::npos) << r->body;
}

}  // namespace kvlm::kv_events_server_test
