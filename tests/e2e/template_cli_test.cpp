// `kvlm template` through the real binary: a shared case rendered from a
// template file byte for byte (nothing added to stdout), the Gemma-2
// system-role refusal on stderr with a non-zero exit, BOS/EOS taken from a
// model's vocabulary, and clear errors for bad inputs.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace kvlm::template_cli_test {

using Json = nlohmann::ordered_json;

const Json& cases_file() {
  static const Json doc = Json::parse(test::read_file(test::shared_path("templates/cases.json")));
  return doc;
}

// The first case of cases.json for `tmpl` / `conversation` / `gen`.
const Json& find_case(const std::string& tmpl, const std::string& conversation, bool gen) {
  for (const Json& c : cases_file()["cases"]) {
    if (c["template"] == tmpl && c["conversation"] == conversation && c["add_generation_prompt"] == gen) return c;
  }
  throw std::runtime_error("no such case in cases.json: " + tmpl + "/" + conversation);
}

std::string messages_file(const std::string& conversation) {
  return test::write_temp_file("messages-" + conversation + ".json", cases_file()["conversations"][conversation].dump());
}

TEST(TemplateCli, RendersATemplateFileExactly) {
  const Json& c = find_case("Qwen-Qwen2.5-7B-Instruct", "system_user", true);
  auto r = test::run_kvlm({"template", "--template-file", test::shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"),
                           "--messages", messages_file("system_user"), "--add-generation-prompt",
                           "--eos-token", c["eos_token"].get<std::string>()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, c["expected"].get<std::string>());
  EXPECT_EQ(r.err, "");
}

TEST(TemplateCli, PassesBosAndEosTokens) {
  const Json& c = find_case("meta-llama-Llama-3.1-8B-Instruct", "multi_turn", false);
  auto r = test::run_kvlm({"template", "--template-file",
                           test::shared_path("templates/meta-llama-Llama-3.1-8B-Instruct.jinja"), "--messages",
                           messages_file("multi_turn"), "--bos-token", c["bos_token"].get<std::string>(),
                           "--eos-token", c["eos_token"].get<std::string>()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, c["expected"].get<std::string>());
}

TEST(TemplateCli, GemmaRefusesASystemRoleWithTheTemplatesMessage) {
  const Json& c = find_case("google-gemma-2-2b-it", "system_user", true);
  auto r = test::run_kvlm({"template", "--template-file", test::shared_path("templates/google-gemma-2-2b-it.jinja"),
                           "--messages", messages_file("system_user"), "--add-generation-prompt"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "kvlm template: error: " + c["error"].get<std::string>() + "\n");
}

TEST(TemplateCli, TakesBosAndEosFromTheModel) {
  // stories260K's vocabulary has <s> and </s> as its BOS / EOS tokens.
  std::string tmpl = test::write_temp_file("bos-eos.jinja", "{{ bos_token }}|{{ eos_token }}|{{ messages|length }}");
  auto r = test::run_kvlm({"template", "-m", test::shared_path("models/stories260K.gguf"), "--template-file", tmpl,
                           "--messages", messages_file("multi_turn")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "<s>|</s>|3");
  auto overridden = test::run_kvlm({"template", "-m", test::shared_path("models/stories260K.gguf"), "--template-file",
                                    tmpl, "--messages", messages_file("multi_turn"), "--bos-token", "[B]"});
  EXPECT_EQ(overridden.out, "[B]|</s>|3");
}

TEST(TemplateCli, ModelWithoutATemplateIsAClearError) {
  auto r = test::run_kvlm({"template", "-m", test::shared_path("models/stories260K.gguf"), "--messages",
                           messages_file("user_only")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("no tokenizer.chat_template"), std::string::npos) << r.err;
}

TEST(TemplateCli, RequestObjectPassesToolsToTheTemplate) {
  // {"messages": [...], "tools": [...]}: keys besides messages become template variables.
  std::string request = test::write_temp_file("request.json", R"J({"messages": [{"role": "user", "content": "hi"}],
      "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]})J");
  auto r = test::run_kvlm({"template", "--template-file", test::shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"),
                           "--messages", request});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\"}}}\n</tools>"),
            std::string::npos)
      << r.out;
}

TEST(TemplateCli, ToolsFileRendersACallRoundTrip) {
  // A call and its result in the history, as the openai client sends them
  // back (arguments as JSON text, content null).
  const std::string messages = test::write_temp_file("tool_round_trip.json", R"J([
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
       "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature_c\": 21}"}])J");
  const std::string tools = test::write_temp_file("tools.json",
      R"J([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])J");
  // Qwen renders tools itself; the arguments reach it as an object (tojson spacing proves it).
  auto r = test::run_kvlm({"template", "--template-file", test::shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"),
                           "--messages", messages, "--tools", tools, "--add-generation-prompt"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                       "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n{\"temperature_c\": 21}\n</tool_response>"),
            std::string::npos) << r.out;
  // Gemma-2 knows no tools and refuses a system role: the description goes
  // into the first user turn, the call and its result become plain turns.
  r = test::run_kvlm({"template", "--template-file", test::shared_path("templates/google-gemma-2-2b-it.jinja"),
                      "--messages", messages, "--tools", tools, "--add-generation-prompt"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("<start_of_turn>user\nYou can call these tools"), 0u) << r.out;
  EXPECT_NE(r.out.find("<start_of_turn>model\n{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}]}"
                       "<end_of_turn>\n<start_of_turn>user\n{\"tool_response\":"),
            std::string::npos) << r.out;
  // A tools file that is not an array is refused.
  auto bad = test::run_kvlm({"template", "--template-file", test::shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja"),
                             "--messages", messages, "--tools", test::write_temp_file("tools_obj.json", "{}")});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("must hold a JSON array of tools"), std::string::npos) << bad.err;
}

TEST(TemplateCli, BadInputsAreClearErrors) {
  std::string tmpl = test::write_temp_file("ok.jinja", "{{ messages[0].content }}");
  auto bad_json = test::run_kvlm({"template", "--template-file", tmpl, "--messages", test::write_temp_file("bad.json", "[{")});
  EXPECT_NE(bad_json.exit_code, 0);
  EXPECT_NE(bad_json.err.find("not valid JSON"), std::string::npos) << bad_json.err;

  auto not_array = test::run_kvlm({"template", "--template-file", tmpl, "--messages", test::write_temp_file("obj.json", "{\"a\": 1}")});
  EXPECT_NE(not_array.exit_code, 0);
  EXPECT_NE(not_array.err.find("must hold a JSON array"), std::string::npos) << not_array.err;

  auto syntax = test::run_kvlm({"template", "--template-file", test::write_temp_file("bad.jinja", "ok\n{% if %}"), "--messages",
                                messages_file("user_only")});
  EXPECT_NE(syntax.exit_code, 0);
  EXPECT_EQ(syntax.err,
            "kvlm template: error: template syntax error at line 2, column 7: expected an expression, got end of "
            "statement block\n");

  auto neither = test::run_kvlm({"template", "--messages", messages_file("user_only")});
  EXPECT_NE(neither.exit_code, 0);
}

}  // namespace kvlm::template_cli_test
