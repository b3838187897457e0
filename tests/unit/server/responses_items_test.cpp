// OpenAI Responses items without a server: the status of an item the token
// limit cut (whole and streamed), item references read from a lookup, input
// items as listed and their pages, and the store's item index (memory).
#include <gtest/gtest.h>

#include "server/response_store.h"
#include "wire/responses/input_items.h"
#include "wire/responses/responses.h"

namespace kvlm::responses {
namespace {

AnswerEnd ended(AnswerEnd::Reason r) {
  AnswerEnd e;
  e.reason = r;
  return e;
}

ResponseWriter writer() { return ResponseWriter("resp_1", "m", 0, Json::object(), nullptr); }

std::vector<std::string> statuses(const Json& output) {
  std::vector<std::string> out;
  for (const Json& item : output) out.push_back(item.value("status", "-"));
  return out;
}

TEST(ResponsesItems, TheItemTheTokenLimitCutIsIncomplete) {
  ChoiceAnswer text{"", "Once upon", {}};
  EXPECT_EQ(statuses(writer().whole(text, ended(AnswerEnd::Reason::kLength), {})["output"]),
            (std::vector<std::string>{"incomplete"}));
  EXPECT_EQ(statuses(writer().whole(text, ended(AnswerEnd::Reason::kStop), {})["output"]),
            (std::vector<std::string>{"completed"}));
  // A call cut in its arguments: the message before it is whole.
  ChoiceAnswer call{"", "Let me see.", {AnsweredCall{"call_1", "get_weather", R"({"city": "Pa)"}}};
  const Json cut = writer().whole(call, ended(AnswerEnd::Reason::kLength), {});
  EXPECT_EQ(cut["status"], "incomplete");
  EXPECT_EQ(statuses(cut["output"]), (std::vector<std::string>{"completed", "incomplete"}));
  // Thinking cut before any answer: the empty message is the cut item.
  ChoiceAnswer thinking{"Hmm", "", {}};
  EXPECT_EQ(statuses(writer().whole(thinking, ended(AnswerEnd::Reason::kLength), {})["output"]),
            (std::vector<std::string>{"-", "incomplete"}));
}

// The events' data of an SSE text, in order.
std::vector<Json> events_of(const std::string& sse) {
  std::vector<Json> out;
  for (size_t pos = 0; (pos = sse.find("data: ", pos)) != std::string::npos;) {
    const size_t end = sse.find('\n', pos);
    out.push_back(Json::parse(sse.substr(pos + 6, end - pos - 6)));
    pos = end;
  }
  return out;
}

TEST(ResponsesItems, AStreamSaysWhichItemWasCutInItsDoneEventAndItsFinalResponse) {
  ResponseWriter w = writer();
  std::string sse = w.stream_start({});
  ChoiceAnswer so_far{"", "Let me see.", {AnsweredCall{"call_1", "get_weather", ""}}};
  sse += w.stream_piece(ChoiceDelta{"", "Let me see.", {}}, so_far);
  sse += w.stream_piece(ChoiceDelta{"", "", {ToolCallDelta{0, "get_weather", R"({"ci)"}}}, so_far);
  so_far.calls[0].arguments = R"({"ci)";
  sse += w.stream_end(so_far, ended(AnswerEnd::Reason::kLength), {});
  std::vector<std::string> done;
  Json final_response;
  for (const Json& e : events_of(sse)) {
    if (e["type"] == "response.output_item.done") done.push_back(e["item"]["status"]);
    if (e["type"] == "response.incomplete") final_response = e["response"];
  }
  EXPECT_EQ(done, (std::vector<std::string>{"completed", "incomplete"}));
  ASSERT_TRUE(final_response.is_object()) << sse;
  EXPECT_EQ(statuses(final_response["output"]), (std::vector<std::string>{"completed", "incomplete"}));
}

TEST(ResponsesItems, ItemReferencesAreReadFromTheLookupAndAnUnknownOneIsA404) {
  const Json stored = {{"type", "message"}, {"id", "msg_a"}, {"status", "completed"}, {"role", "assistant"},
                       {"content", Json::array({Json{{"type", "output_text"}, {"text", "Hi there."}}})}};
  const ItemLookup lookup = [&](const std::string& id) -> std::optional<Json> {
    if (id == "msg_a") return stored;
    return std::nullopt;
  };
  const Json body = {{"input", Json::array({Json{{"role", "user"}, {"content", "Hello"}},
                                            Json{{"type", "item_reference"}, {"id", "msg_a"}},
                                            Json{{"role", "user"}, {"content", "And?"}}})}};
  auto read = read_request(body, lookup);
  ASSERT_TRUE(std::holds_alternative<Request>(read)) << std::get<openai::RequestError>(read).message;
  const Request& r = std::get<Request>(read);
  ASSERT_EQ(r.input.size(), 3u);
  EXPECT_EQ(r.input[1], (Json{{"role", "assistant"}, {"content", "Hi there."}}));
  ASSERT_EQ(r.input_items.size(), 3u);
  EXPECT_EQ(r.input_items[1], stored);  // listed under its own id
  EXPECT_EQ(r.input_items[0]["content"][0], (Json{{"type", "input_text"}, {"text", "Hello"}}));
  EXPECT_EQ(r.input_items[0]["id"].get<std::string>().rfind("msg_", 0), 0u);

  const Json unknown = {{"input", Json::array({Json{{"type", "item_reference"}, {"id", "msg_zz"}}})}};
  auto refused = read_request(unknown, lookup);
  ASSERT_TRUE(std::holds_alternative<openai::RequestError>(refused));
  const auto& e = std::get<openai::RequestError>(refused);
  EXPECT_EQ(e.status, 404);
  EXPECT_EQ(e.type, "invalid_request_error");
  EXPECT_EQ(e.param, "input[0].id");
  EXPECT_NE(e.message.find("msg_zz"), std::string::npos);
}

TEST(ResponsesItems, ListedItemsGetIdsOfTheirKindWhateverIdTheyCameWith) {
  EXPECT_EQ(listed_item({{"type", "function_call_output"}, {"call_id", "c"}, {"output", "x"}})["id"]
                .get<std::string>().rfind("fco_", 0), 0u);
  const Json call = listed_item({{"type", "function_call"}, {"id", "msg_a"}, {"call_id", "c"}, {"name", "f"}});
  EXPECT_EQ(call["id"].get<std::string>().rfind("fc_", 0), 0u);
  EXPECT_EQ(call["status"], "completed");
  const Json assistant = listed_item({{"role", "assistant"}, {"content", "Hi"}});
  EXPECT_EQ(assistant["type"], "message");
  EXPECT_EQ(assistant["content"][0]["type"], "output_text");
}

Json items_named(int n) {
  Json items = Json::array();
  for (int i = 0; i < n; ++i) items.push_back({{"id", "i" + std::to_string(i)}});
  return items;
}

std::vector<std::string> ids_of(const Json& page) {
  std::vector<std::string> out;
  for (const Json& item : page["data"]) out.push_back(item["id"]);
  return out;
}

TEST(ResponsesItems, InputItemPagesGoBothWays) {
  const Json items = items_named(5);
  InputItemsQuery q;
  q.limit = 2;
  Json page = std::get<Json>(input_items_page(items, q));  // desc by default
  EXPECT_EQ(ids_of(page), (std::vector<std::string>{"i4", "i3"}));
  EXPECT_EQ(page["first_id"], "i4");
  EXPECT_EQ(page["last_id"], "i3");
  EXPECT_EQ(page["has_more"], true);
  q.after = "i1";
  page = std::get<Json>(input_items_page(items, q));
  EXPECT_EQ(ids_of(page), (std::vector<std::string>{"i0"}));
  EXPECT_EQ(page["has_more"], false);
  q.ascending = true;
  q.after = "i2";
  page = std::get<Json>(input_items_page(items, q));
  EXPECT_EQ(ids_of(page), (std::vector<std::string>{"i3", "i4"}));
  EXPECT_EQ(page["has_more"], false);
  q.after = "nope";
  EXPECT_TRUE(std::holds_alternative<openai::RequestError>(input_items_page(items, q)));
  EXPECT_TRUE(std::holds_alternative<openai::RequestError>(read_input_items_query("0", "", "")));
  EXPECT_TRUE(std::holds_alternative<openai::RequestError>(read_input_items_query("101", "", "")));
  EXPECT_TRUE(std::holds_alternative<openai::RequestError>(read_input_items_query("", "up", "")));
  const auto ok = read_input_items_query("100", "asc", "i1");
  ASSERT_TRUE(std::holds_alternative<InputItemsQuery>(ok));
  EXPECT_EQ(std::get<InputItemsQuery>(ok).limit, 100u);
}

ResponseStore::Stored stored(const std::string& output_id, const std::string& input_id, const std::string& owner) {
  ResponseStore::Stored s;
  s.response = {{"output", Json::array({Json{{"id", output_id}, {"type", "message"}}})}};
  s.messages = Json::array();
  s.input_items = Json::array({Json{{"id", input_id}, {"type", "message"}}});
  s.owner = owner;
  return s;
}

TEST(ResponsesItems, TheStoreFindsEveryItemOfAResponseUntilItGoes) {
  ResponseStore store(2);
  store.put("resp_1", stored("msg_1", "msg_in1", "team-a"));
  ASSERT_TRUE(store.find_item("msg_1"));
  EXPECT_EQ(store.find_item("msg_1")->owner, "team-a");
  EXPECT_EQ(store.find_item("msg_in1")->item["id"], "msg_in1");
  // An item given again in a later response stays its first response's.
  store.put("resp_2", stored("msg_2", "msg_1", ""));
  EXPECT_EQ(store.find_item("msg_1")->owner, "team-a");
  EXPECT_TRUE(store.erase("resp_1"));
  EXPECT_FALSE(store.find_item("msg_1"));
  EXPECT_FALSE(store.find_item("msg_in1"));
  EXPECT_TRUE(store.find_item("msg_2"));
  // Past its capacity the oldest response goes, and its items with it.
  store.put("resp_3", stored("msg_3", "msg_in3", ""));
  store.put("resp_4", stored("msg_4", "msg_in4", ""));
  EXPECT_FALSE(store.find_item("msg_2"));
  EXPECT_TRUE(store.find_item("msg_4"));
  EXPECT_TRUE(ResponseStore::readable("", "team-b"));
  EXPECT_TRUE(ResponseStore::readable("team-a", "team-a"));
  EXPECT_FALSE(ResponseStore::readable("team-a", "team-b"));
  EXPECT_FALSE(ResponseStore::readable("team-a", ""));
}

}  // namespace
}  // namespace kvlm::responses
