// llama.cpp's slot routes on kvlm serve (docs/slots.md): GET /slots
// shows what each slot ran; a slot saved, the server restarted and the file
// restored, the same request finds its prompt cached and answers
// bit-identically to a cold run; erase drops the blocks; the refusals (no
// --slot-save-path, names with a folder, corrupt files, another model's or
// KV type's file) are 400s that load nothing, and the pool is whole after.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm::slots_server_test {

using Json = nlohmann::json;

struct Answer {
  int status = 0;
  Json body;
};

Answer post(const test::ServerProcess& server, const std::string& path, const Json& body) {
  httplib::Client c("127.0.0.1", server.port());
  c.set_read_timeout(120);
  auto r = c.Post(path, body.is_null() ? "" : body.dump(), "application/json");
  if (!r) return {};
  const bool json = !r->body.empty() && (r->body[0] == '{' || r->body[0] == '[');
  return {r->status, json ? Json::parse(r->body) : Json(r->body)};
}

Answer slot_action(const test::ServerProcess& server, int id, const std::string& action, const Json& body = Json()) {
  return post(server, "/slots/" + std::to_string(id) + "?action=" + action, body);
}

Json get_slots(const test::ServerProcess& server) {
  httplib::Client c("127.0.0.1", server.port());
  auto r = c.Get("/slots");
  EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
  return r && r->status == 200 ? Json::parse(r->body) : Json();
}

// A prompt of several KV blocks (stories260K's blocks are 16 tokens).
std::string long_prompt() {
  std::string p;
  for (int i = 0; i < 8; ++i) p += "Once upon a time there was a little dog who liked the sun. ";
  return p;
}

struct Completion {
  Json tokens;    // the generated ids
  Json logprobs;  // their log-probabilities, as the server printed them
  int64_t cached = -1;
};

// A greedy completion of the long prompt, with its ids and logprobs.
Completion complete(const test::ServerProcess& server) {
  const Json body = {{"prompt", long_prompt()}, {"max_tokens", 12}, {"temperature", 0},
                     {"logprobs", 0},           {"return_token_ids", true}};
  const Answer a = post(server, "/v1/completions", body);
  EXPECT_EQ(a.status, 200) << a.body;
  if (a.status != 200) return {};
  return {a.body["choices"][0]["token_ids"], a.body["choices"][0]["logprobs"]["token_logprobs"],
          a.body["usage"]["prompt_tokens_details"].value("cached_tokens", int64_t{-1})};
}

// The README's invariant: no block held once every request has ended.
void expect_pool_whole(const test::ServerProcess& server) {
  for (int i = 0; i < 250 && test::server_metric(server, "kvlm_kv_blocks_used") != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(test::server_metric(server, "kvlm_kv_blocks_used"), 0);
}

std::vector<std::string> serve_args(const std::string& dir, const std::string& model = "models/stories260K.gguf") {
  std::vector<std::string> args = {"-m", test::shared_path(model), "-t", "1", "--max-seqs", "3"};
  if (!dir.empty()) args.insert(args.end(), {"--slot-save-path", dir});
  return args;
}

void flush(const test::ServerProcess& server) {
  const Answer a = post(server, "/flush_cache", Json());
  EXPECT_EQ(a.status, 200) << a.body;
}

TEST(Slots, ListsOneSlotPerSequenceAndWhatEachRan) {
  test::ServerProcess server(serve_args(""));
  const Json idle = get_slots(server);
  ASSERT_TRUE(idle.is_array() && idle.size() == 3) << idle.dump();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(idle[i].value("id", -1), i);
    EXPECT_EQ(idle[i].value("id_task", 0), -1);
    EXPECT_EQ(idle[i].value("is_processing", true), false);
    EXPECT_GT(idle[i].value("n_ctx", 0), 0);
    EXPECT_EQ(idle[i].value("n_tokens", -1), 0);
  }
  complete(server);
  const Json after = get_slots(server);
  EXPECT_GT(after[0].value("n_tokens", 0), 64) << "the prompt and the output";
  EXPECT_GT(after[0].value("n_cached_tokens", 0), 0);
  EXPECT_EQ(after[0].value("n_cached_tokens", 1) % 16, 0) << "whole blocks";
  EXPECT_EQ(after[1].value("n_tokens", -1), 0) << "the lowest free slot ran it";
  expect_pool_whole(server);
}

TEST(Slots, RestoredAfterARestartTheSameRequestIsCachedAndBitIdentical) {
  const std::string dir = test::temp_path("slots-restart");
  int64_t saved_tokens = 0, saved_kv = 0;
  Completion cold;
  {
    test::ServerProcess first(serve_args(dir));
    cold = complete(first);
    EXPECT_EQ(cold.cached, 0);
    const Answer saved = slot_action(first, 0, "save", {{"filename", "story.bin"}});
    ASSERT_EQ(saved.status, 200) << saved.body;
    EXPECT_EQ(saved.body.value("id_slot", -1), 0);
    EXPECT_EQ(saved.body.value("filename", ""), "story.bin");
    saved_tokens = saved.body.value("n_saved", int64_t{0});
    saved_kv = saved.body.value("n_saved_kv_tokens", int64_t{0});
    EXPECT_GT(saved_kv, 0);
    EXPECT_GT(saved.body.value("n_written", 0), 0);
    EXPECT_TRUE(saved.body["timings"].contains("save_ms"));
    EXPECT_EQ(std::filesystem::file_size(dir + "/story.bin"), saved.body.value("n_written", uint64_t{0}));
    expect_pool_whole(first);
  }
  test::ServerProcess second(serve_args(dir));
  const Answer restored = slot_action(second, 1, "restore", {{"filename", "story.bin"}});
  ASSERT_EQ(restored.status, 200) << restored.body;
  EXPECT_EQ(restored.body.value("n_restored", int64_t{0}), saved_tokens);
  EXPECT_EQ(restored.body.value("n_restored_kv_tokens", int64_t{0}), saved_kv);
  EXPECT_GT(restored.body.value("n_read", 0), 0);
  const Json slots = get_slots(second);
  EXPECT_EQ(slots[1].value("n_tokens", int64_t{0}), saved_tokens);
  EXPECT_EQ(slots[1].value("n_cached_tokens", int64_t{0}), saved_kv);
  const Completion warm = complete(second);
  EXPECT_GT(warm.cached, 0) << "the restored blocks serve the prompt";
  EXPECT_EQ(warm.tokens, cold.tokens);
  EXPECT_EQ(warm.logprobs, cold.logprobs) << "the restored KV is the cold run's, bit for bit";
  expect_pool_whole(second);
}

TEST(Slots, EraseDropsTheSlotsBlocks) {
  test::ServerProcess server(serve_args(""));
  complete(server);
  EXPECT_GT(complete(server).cached, 0);
  const Answer erased = slot_action(server, 0, "erase");
  ASSERT_EQ(erased.status, 200) << erased.body;
  EXPECT_GT(erased.body.value("n_erased", 0), 0);
  EXPECT_GT(erased.body.value("n_erased_blocks", 0), 0);
  EXPECT_EQ(get_slots(server)[0].value("n_tokens", -1), 0);
  EXPECT_EQ(complete(server).cached, 0) << "nothing of the erased chain is cached";
  expect_pool_whole(server);
}

TEST(Slots, SaveAndRestoreNeedTheFlag) {
  test::ServerProcess server(serve_args(""));
  complete(server);
  for (const char* action : {"save", "restore"}) {
    const Answer a = slot_action(server, 0, action, {{"filename", "x.bin"}});
    EXPECT_EQ(a.status, 400) << action;
    EXPECT_NE(a.body.dump().find("--slot-save-path"), std::string::npos) << a.body;
  }
  EXPECT_EQ(slot_action(server, 0, "erase").status, 200) << "erase needs no folder";
}

TEST(Slots, NamesWithAFolderBadIdsAndActionsAreRefused) {
  const std::string dir = test::temp_path("slots-names");
  test::ServerProcess server(serve_args(dir));
  complete(server);
  for (const char* name : {"../x.bin", "a/b.bin", "..", ".", "", "x\\y.bin", "/etc/passwd", "a..b"}) {
    const Answer a = slot_action(server, 0, "save", {{"filename", name}});
    EXPECT_EQ(a.status, 400) << name;
    EXPECT_EQ(a.body["error"].value("param", ""), "filename") << a.body;
  }
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(dir).parent_path() / "x.bin"));
  EXPECT_EQ(slot_action(server, 0, "save", Json::object()).status, 400) << "no filename";
  EXPECT_EQ(slot_action(server, 3, "save", {{"filename", "x.bin"}}).status, 400) << "--max-seqs 3: slots 0-2";
  EXPECT_EQ(slot_action(server, 0, "delete").status, 400);
  EXPECT_EQ(slot_action(server, 0, "restore", {{"filename", "missing.bin"}}).status, 404);
  expect_pool_whole(server);
}

TEST(Slots, CorruptFilesAreRefusedLoadNothingAndTheServerAnswers) {
  const std::string dir = test::temp_path("slots-corrupt");
  test::ServerProcess server(serve_args(dir));
  const Completion cold = complete(server);
  ASSERT_EQ(slot_action(server, 0, "save", {{"filename", "good.bin"}}).status, 200);
  const std::string good = test::read_file(dir + "/good.bin");
  std::string flipped = good;
  flipped[good.size() / 2] = static_cast<char>(flipped[good.size() / 2] ^ 0x04);
  const std::pair<std::string, std::string> bad[] = {
      {"truncated.bin", good.substr(0, good.size() / 2)}, {"flipped.bin", flipped}, {"empty.bin", ""}};
  flush(server);
  for (const auto& [name, bytes] : bad) {
    std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
    const Answer a = slot_action(server, 0, "restore", {{"filename", name}});
    EXPECT_EQ(a.status, 400) << name << ": " << a.body;
    EXPECT_NE(a.body.dump().find("slot file"), std::string::npos) << a.body;
  }
  const Completion after = complete(server);
  EXPECT_EQ(after.cached, 0) << "nothing of a refused file was loaded";
  EXPECT_EQ(after.tokens, cold.tokens);
  expect_pool_whole(server);
}

TEST(Slots, FilesOfAnotherModelOrKvTypeAreRefused) {
  const std::string dir = test::temp_path("slots-foreign");
  {
    test::ServerProcess other(serve_args(dir, "models/synth-tiny-F32.gguf"));
    complete(other);
    ASSERT_EQ(slot_action(other, 0, "save", {{"filename", "other-model.bin"}}).status, 200);
  }
  {
    std::vector<std::string> args = serve_args(dir);
    args.insert(args.end(), {"--kv-type", "f32"});
    test::ServerProcess f32(args);
    complete(f32);
    ASSERT_EQ(slot_action(f32, 0, "save", {{"filename", "f32.bin"}}).status, 200);
  }
  test::ServerProcess server(serve_args(dir));
  for (const char* name : {"other-model.bin", "f32.bin"}) {
    const Answer a = slot_action(server, 0, "restore", {{"filename", name}});
    EXPECT_EQ(a.status, 400) << name << ": " << a.body;
    EXPECT_NE(a.body.dump().find("another model"), std::string::npos) << a.body;
  }
  EXPECT_EQ(complete(server).cached, 0);
  expect_pool_whole(server);
}

}  // namespace kvlm::slots_server_test
