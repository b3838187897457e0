// Anthropic's shapes outside the Messages body: errors on its routes
// (whoever made them) and its model list's pages.
#include <gtest/gtest.h>

#include "wire/anthropic/models.h"
#include "wire/http/front.h"

namespace kvlm::anthropic {
namespace {

http::Request request(const std::string& path, bool anthropic_client = false) {
  http::Request req;
  req.method = "GET";
  req.path = path;
  if (anthropic_client) req.headers.push_back({"anthropic-version", "2023-06-01"});
  return req;
}

// An OpenAI-style error answer, as a handler or the route table writes it.
http::Response openai_error(int status) {
  http::Response res;
  send_error(res, {status, "it failed", std::nullopt});
  return res;
}

TEST(AnthropicShapes, ErrorsOnItsRoutesAreAnthropicsWithItsStatusCodes) {
  const std::pair<int, const char*> cases[] = {{400, "invalid_request_error"}, {401, "authentication_error"},
                                               {404, "not_found_error"},       {413, "request_too_large"},
                                               {429, "rate_limit_error"},      {500, "api_error"}};
  for (const auto& [status, type] : cases) {
    http::Response res = openai_error(status);
    shape_error(request("/v1/messages/count_tokens"), res);
    EXPECT_EQ(res.status, status);
    const Json j = Json::parse(res.body);
    EXPECT_EQ(j["type"], "error") << res.body;
    EXPECT_EQ(j["error"]["type"], type) << res.body;
    EXPECT_EQ(j["error"]["message"], "it failed") << res.body;
  }
  http::Response busy = openai_error(503);
  shape_error(request("/v1/messages"), busy);
  EXPECT_EQ(busy.status, 529);
  EXPECT_EQ(Json::parse(busy.body)["error"]["type"], "overloaded_error");
}

TEST(AnthropicShapes, OtherRoutesAndAnswersAreLeftAsTheyAre) {
  for (const http::Request& req : {request("/v1/chat/completions"), request("/v1/messagesx"), request("/v1/models")}) {
    http::Response res = openai_error(503);
    const std::string before = res.body;
    shape_error(req, res);
    EXPECT_EQ(res.status, 503) << req.path;
    EXPECT_EQ(res.body, before) << req.path;
  }
  http::Response ok;
  ok.set_content(R"({"error": {"message": "not an error"}})", "application/json");
  shape_error(request("/v1/messages"), ok);
  EXPECT_EQ(ok.body, R"({"error": {"message": "not an error"}})");
  // The model routes are Anthropic's when an Anthropic client asks.
  http::Response missing = openai_error(404);
  shape_error(request("/v1/models/nope", true), missing);
  EXPECT_EQ(Json::parse(missing.body)["error"]["type"], "not_found_error");
}

TEST(AnthropicShapes, TheModelListPagesByItsIds) {
  const std::vector<std::string> ids = {"a", "b", "c"};
  Json page = std::get<Json>(model_page(ids, 0, request("/v1/models", true)));
  ASSERT_EQ(page["data"].size(), 3u);
  EXPECT_EQ(page["data"][0], (Json{{"type", "model"}, {"id", "a"}, {"display_name", "a"},
                                   {"created_at", "1970-01-01T00:00:00Z"}}));
  EXPECT_EQ(page["first_id"], "a");
  EXPECT_EQ(page["last_id"], "c");
  EXPECT_EQ(page["has_more"], false);
  http::Request after = request("/v1/models", true);
  after.query = "after_id=a&limit=1";
  page = std::get<Json>(model_page(ids, 0, after));
  EXPECT_EQ(page["first_id"], "b");
  EXPECT_EQ(page["has_more"], true);
  http::Request before = request("/v1/models", true);
  before.query = "before_id=c&limit=1";
  page = std::get<Json>(model_page(ids, 0, before));
  EXPECT_EQ(page["first_id"], "b");
  EXPECT_EQ(page["has_more"], true);
  http::Request bad = request("/v1/models", true);
  bad.query = "after_id=zz";
  EXPECT_TRUE(std::holds_alternative<openai::RequestError>(model_page(ids, 0, bad)));
}

}  // namespace
}  // namespace kvlm::anthropic
