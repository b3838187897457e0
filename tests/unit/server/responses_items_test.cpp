// OpenAI Responses items without a server: the status of an item the token
// limit cut (whole and streamed).
#include <gtest/gtest.h>

#include "server/responses/responses.h"

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

}  // namespace
}  // namespace kvlm::responses
