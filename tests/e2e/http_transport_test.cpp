// What a new user's first curl commands meet at the transport: a JSON body
// sent as curl -d's default form Content-Type, a known route asked with the
// wrong method, and /metrics as Prometheus' own checker reads it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm::http_transport_test {

using Json = nlohmann::json;

struct Answer {
  int status = 0;
  std::string head, body;
};

// curl with `args` before the URL; headers (-D) and body apart.
Answer curl(const std::vector<std::string>& args, const std::string& url) {
  const std::string head_path = test::temp_dir() + "/http_transport_head_" + std::to_string(::getpid());
  std::vector<std::string> argv = {"curl", "-sS", "-D", head_path, "-w", "\n%{http_code}"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back(url);
  const test::CommandResult r = test::run_program(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const size_t nl = r.out.rfind('\n');
  return {std::stoi(r.out.substr(nl + 1)), test::read_file(head_path), r.out.substr(0, nl)};
}

class HttpTransportTest : public test::ServerSuite<HttpTransportTest> {
 public:
  static std::vector<std::string> server_args() {
    return {"-m", test::shared_path("models/stories260K.gguf"), "--chat-template-file", test::shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"), "-t", "1"};
  }
};

TEST_F(HttpTransportTest, AFormEncodedBodyOver8KiBIsReadAsJson) {
  // 20 KB of body (JSON with space between its tokens): httplib alone
  // would parse it as a form and answer 413.
  const std::string body = R"({"prompt": "Once upon a time",)" + std::string(20000, ' ') +
                           R"("max_tokens": 1, "temperature": 0})";
  // -d is --data-ascii: no Content-Type given, so curl sends application/x-www-form-urlencoded.
  const Answer a = curl({"-d", body}, server_->url() + "/v1/completions");
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(Json::parse(a.body)["choices"][0]["finish_reason"], "length");
  // A small one too, and a form body that is not JSON is a 400 naming JSON.
  EXPECT_EQ(curl({"-d", R"({"prompt":"Once","max_tokens":1})"}, server_->url() + "/v1/completions").status, 200);
  const Answer bad = curl({"-d", "prompt=Once&max_tokens=1"}, server_->url() + "/v1/completions");
  EXPECT_EQ(bad.status, 400) << bad.body;
}

TEST_F(HttpTransportTest, AKnownRouteWithTheWrongMethodIs405WithAllow) {
  struct Case {
    std::vector<std::string> args;
    std::string path, allow;
  };
  const std::vector<Case> cases = {
      {{}, "/v1/chat/completions", "Allow: POST"},  // GET
      {{"-X", "DELETE"}, "/v1/completions", "Allow: POST"},
      {{"-d", "{}"}, "/v1/models", "Allow: GET, HEAD"},
      {{"-d", "{}"}, "/metrics", "Allow: GET, HEAD"},
      {{"-X", "PUT", "-d", "{}"}, "/", "Allow: GET, HEAD"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path);
    const Answer a = curl(c.args, server_->url() + c.path);
    EXPECT_EQ(a.status, 405) << a.body;
    EXPECT_NE(a.head.find(c.allow + "\r\n"), std::string::npos) << a.head;
    const Json j = Json::parse(a.body);
    EXPECT_NE(j["error"]["message"].get<std::string>().find("not allowed"), std::string::npos) << a.body;
  }
  // An unknown path stays a 404.
  EXPECT_EQ(curl({}, server_->url() + "/v1/nothing").status, 404);
}

TEST_F(HttpTransportTest, PromtoolAcceptsMetrics) {
  if (!test::have_program("promtool")) GTEST_SKIP() << "promtool is not installed (Debian: prometheus)";
  // Some traffic first, so histograms and labelled counters have samples.
  ASSERT_EQ(curl({"-H", "Content-Type: application/json", "-d", R"({"prompt":"Once","max_tokens":2})"},
                 server_->url() + "/v1/completions").status, 200);
  const std::string text = test::metrics_text(*server_);
  ASSERT_FALSE(text.empty());
  const std::string path = test::write_temp_file("metrics_for_promtool.txt", text);
  // promtool reads the exposition on stdin; run it through sh for the redirect.
  const test::CommandResult r = test::run_program({"sh", "-c", "promtool check metrics < \"$0\" 2>&1", path});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out, "") << "promtool's findings:\n" << r.out;
  EXPECT_GT(test::metric_sample(text, "kvlm_kv_blocks_capacity"), 0);
}

}  // namespace kvlm::http_transport_test
