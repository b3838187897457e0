// ChatTemplate against real templates: every case of ../shared/templates/
// cases.json (six models' templates rendered by Python's Jinja2 the way
// Hugging Face applies them) must render byte for byte, and the cases with
// `error` must fail with exactly the template's raise_exception message.
// Plus the public API's contract: context variables, key order, the clock.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "support/test_support.h"
#include "chat/chat_template.h"

namespace kvlm {
namespace {

using Json = nlohmann::ordered_json;

const Json& cases_file() {
  static const Json doc = Json::parse(test::read_file(test::shared_path("templates/cases.json")));
  return doc;
}

struct SharedCase {
  size_t index;
  std::string name;  // for the test's name: template_conversation_gen
};

std::vector<SharedCase> all_cases() {
  std::vector<SharedCase> out;
  const Json& cases = cases_file()["cases"];
  for (size_t i = 0; i < cases.size(); ++i) {
    std::string name = cases[i]["template"].get<std::string>() + "_" + cases[i]["conversation"].get<std::string>() +
                       (cases[i]["add_generation_prompt"].get<bool>() ? "_gen" : "");
    for (char& c : name) {
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    }
    out.push_back(SharedCase{i, name});
  }
  return out;
}

class SharedCases : public ::testing::TestWithParam<SharedCase> {};

TEST_P(SharedCases, RendersLikeJinja2) {
  const Json& c = cases_file()["cases"][GetParam().index];
  std::string source = test::read_file(test::shared_path("templates/" + c["template"].get<std::string>() + ".jinja"));
  ChatTemplateInputs in;
  in.messages = cases_file()["conversations"][c["conversation"].get<std::string>()];
  in.add_generation_prompt = c["add_generation_prompt"].get<bool>();
  in.bos_token = c["bos_token"].get<std::string>();
  in.eos_token = c["eos_token"].get<std::string>();
  std::tm date{};
  date.tm_year = 2026 - 1900;
  date.tm_mon = 10;
  date.tm_mday = 29;
  in.now = date;
  auto tmpl = ChatTemplate::parse(source);
  if (c.contains("error")) {
    try {
      std::string out = tmpl->render(in);
      FAIL() << "rendered instead of failing: " << out;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_EQ(std::string(e.what()), c["error"].get<std::string>());
    }
  } else {
    EXPECT_EQ(tmpl->render(in), c["expected"].get<std::string>());
  }
}

INSTANTIATE_TEST_SUITE_P(CasesJson, SharedCases, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<SharedCase>& info) { return info.param.name; });

TEST(SharedCasesFile, HasAllThirtySixCases) {
  // Guards against a truncated cases.json silently shrinking the suite above.
  EXPECT_EQ(cases_file()["cases"].size(), 36u);
}

// Tool calling through a real template: tools serialised with HF's tojson
// (key order as sent, no HTML escaping, non-ASCII kept), an assistant tool
// call and a tool response. Expected output rendered by Python's Jinja2.
TEST(ChatTemplateTools, QwenToolCallingMatchesJinja2) {
  ChatTemplateInputs in;
  Json request = Json::parse(R"J({"messages": [{"role": "user", "content": "Weather in Zürich?"},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich"}}}]},
      {"role": "tool", "content": "{\"temp\": 21}"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather <now> & later",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]})J");
  in.messages = request["messages"];
  in.extra = Json{{"tools", request["tools"]}};
  in.add_generation_prompt = true;
  in.eos_token = "<|im_end|>";
  std::string source = test::read_file(test::shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"));
  EXPECT_EQ(ChatTemplate::parse(source)->render(in),
            R"J(<|im_start|>system
You are Qwen, created by Alibaba Cloud. You are a helpful assistant.

# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{"type": "function", "function": {"name": "get_weather", "description": "Weather <now> & later", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
<|im_start|>user
Weather in Zürich?<|im_end|>
<|im_start|>assistant
<tool_call>
{"name": "get_weather", "arguments": {"city": "Zürich"}}
</tool_call><|im_end|>
<|im_start|>user
<tool_response>
{"temp": 21}
</tool_response><|im_end|>
<|im_start|>assistant
)J");
}

// ---- the API's own contract ----

std::string render(std::string_view source, ChatTemplateInputs in) { return ChatTemplate::parse(source)->render(in); }

TEST(ChatTemplate, PassesMessagesTokensAndGenerationFlag) {
  ChatTemplateInputs in;
  in.messages = Json::parse(R"([{"role": "user", "content": "hi"}])");
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  in.add_generation_prompt = true;
  EXPECT_EQ(render("{{ bos_token }}{{ messages[0].content }}{{ eos_token }}{{ add_generation_prompt }}", in),
            "<s>hi</s>True");
}

TEST(ChatTemplate, ToolsAndDocumentsAreNoneUnlessGiven) {
  // Hugging Face always passes tools= and documents=, None when absent, so
  // `tools is defined` is true and `tools is none` is true.
  ChatTemplateInputs in;
  EXPECT_EQ(render("{{ tools is defined }} {{ tools is none }} {{ documents is none }}", in), "True True True");
  in.extra = Json::parse(R"({"tools": [{"name": "f"}], "enable_thinking": false})");
  EXPECT_EQ(render("{{ tools[0].name }} {{ enable_thinking }}", in), "f False");
}

TEST(ChatTemplate, ExtraOverridesDefaults) {
  ChatTemplateInputs in;
  in.bos_token = "<s>";
  in.extra = Json::parse(R"({"bos_token": "[BOS]"})");
  EXPECT_EQ(render("{{ bos_token }}", in), "[BOS]");
}

TEST(ChatTemplate, KeepsClientKeyOrder) {
  // Python dicts keep insertion order; so must we, for tojson and .items().
  ChatTemplateInputs in;
  in.extra = Json::parse(R"({"tool": {"type": "function", "name": "f", "args": {"z": 1, "a": 2}}})");
  EXPECT_EQ(render("{{ tool|tojson }}|{% for k, v in tool.items() %}{{ k }},{% endfor %}", in),
            R"({"type": "function", "name": "f", "args": {"z": 1, "a": 2}}|type,name,args,)");
}

TEST(ChatTemplate, StrftimeNowUsesTheInjectedDate) {
  ChatTemplateInputs in;
  std::tm date{};
  date.tm_year = 2026 - 1900;
  date.tm_mon = 10;
  date.tm_mday = 29;
  in.now = date;
  EXPECT_EQ(render("{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d') }}|{{ strftime_now('%A %j') }}", in),
            "29 Nov 2026|2026-11-29|Sunday 333");
}

TEST(ChatTemplate, StrftimeNowDefaultsToTheClock) {
  ChatTemplateInputs in;
  std::string year = render("{{ strftime_now('%Y') }}", in);
  ASSERT_EQ(year.size(), 4u);
  EXPECT_GE(std::stoi(year), 2024);
}

TEST(ChatTemplate, RaiseExceptionMessageIsVerbatim) {
  try {
    render("{% if messages|length == 0 %}{{ raise_exception('No messages: ' ~ 0) }}{% endif %}", {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_STREQ(e.what(), "No messages: 0");
  }
}

TEST(ChatTemplate, SyntaxErrorNamesLineAndColumn) {
  try {
    ChatTemplate::parse("line one\n{% if x %}\n  {{ 1 + }}\n{% endif %}");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_STREQ(e.what(), "template syntax error at line 3, column 10: expected an expression, got end of print statement");
  }
}

TEST(ChatTemplate, RuntimeErrorNamesLineAndColumn) {
  try {
    render("{% for m in messages %}\n{{ m.content + 1 }}{% endfor %}",
           ChatTemplateInputs{Json::parse(R"([{"content": "x"}])"), false, "", "", Json::object(), std::nullopt});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_STREQ(e.what(), "template error at line 2, column 14: can only concatenate str (not \"int\") to str");
  }
}

TEST(ChatTemplate, ExtraMustBeAnObject) {
  ChatTemplateInputs in;
  in.extra = Json::array();
  EXPECT_THROW(render("x", in), Error);
}

TEST(ChatTemplate, ParsedTemplateRendersConcurrently) {
  // A parsed template is immutable: renders on several threads must not interfere.
  auto tmpl = ChatTemplate::parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + m.k %}{% endfor %}{{ ns.n }}");
  std::vector<std::thread> threads;
  std::vector<std::string> results(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      ChatTemplateInputs in;
      for (int i = 0; i <= t * 10; ++i) in.messages.push_back(Json{{"k", i}});
      for (int rep = 0; rep < 50; ++rep) results[t] = tmpl->render(in);
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 8; ++t) EXPECT_EQ(results[t], std::to_string((t * 10) * (t * 10 + 1) / 2));
}

}  // namespace
}  // namespace kvlm
