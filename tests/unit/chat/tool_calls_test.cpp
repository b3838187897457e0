// Tool-call parsers on outputs written the way each model family documents
// them (Qwen2.5 / Hermes 2 Pro function-calling docs, Meta's Llama 3.1 model
// card prompt format, Mistral's v3 tokenizer docs, DeepSeek-R1's template),
// and on malformed ones, which must come back as plain content.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "chat/tool_call_stream.h"
#include "chat/tool_calls.h"
#include "chat/tool_prompt.h"

namespace kvlm {
namespace {

using Json = nlohmann::ordered_json;

// name(arguments) for each call, to compare in one line.
std::vector<std::string> calls_of(const ParsedToolCalls& p) {
  std::vector<std::string> out;
  for (const ToolCall& c : p.calls) out.push_back(c.name + Json::parse(c.arguments).dump());
  return out;
}

using V = std::vector<std::string>;

TEST(ToolCallFormat, DetectedFromTheTemplateSource) {
  EXPECT_EQ(detect_tool_call_format("{{- '\\n<tool_call>\\n{\"name\": \"' }}"), ToolCallFormat::kHermes);
  EXPECT_EQ(detect_tool_call_format("{{- \"[TOOL_CALLS][\" }}"), ToolCallFormat::kMistral);
  EXPECT_EQ(detect_tool_call_format("{{'<｜Assistant｜><｜tool▁calls▁begin｜>'}}"), ToolCallFormat::kDeepSeek);
  EXPECT_EQ(detect_tool_call_format("{{- \"<|python_tag|>\" + tool_call.name }}"), ToolCallFormat::kLlama3);
  EXPECT_EQ(detect_tool_call_format("<|start_header_id|> {{ '\"parameters\": ' }}"), ToolCallFormat::kLlama3);
  EXPECT_EQ(detect_tool_call_format("{{ '<start_of_turn>' + role }}"), ToolCallFormat::kGeneric);
  EXPECT_TRUE(template_renders_tools("{%- if tools %}"));
  EXPECT_FALSE(template_renders_tools("{{ messages[0]['content'] }}"));
}

TEST(ToolCallParse, Hermes) {
  // Qwen2.5's documented reply: text, then one call per tag pair.
  ParsedToolCalls p = parse_tool_calls(ToolCallFormat::kHermes,
      "I'll check both cities.\n<tool_call>\n{\"name\": \"get_current_temperature\", \"arguments\": "
      "{\"location\": \"San Francisco, CA, USA\", \"unit\": \"celsius\"}}\n</tool_call>\n<tool_call>\n"
      "{\"name\": \"get_current_temperature\", \"arguments\": {\"location\": \"Paris, France\"}}\n</tool_call>");
  EXPECT_EQ(calls_of(p), (V{R"(get_current_temperature{"location":"San Francisco, CA, USA","unit":"celsius"})",
                            R"(get_current_temperature{"location":"Paris, France"})"}));
  EXPECT_EQ(p.content, "I'll check both cities.\n\n");
  // Arguments as JSON text, no arguments, and an unclosed last call (stopped at EOS).
  p = parse_tool_calls(ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}\n</tool_call>"
                                                "<tool_call>{\"name\": \"now\"}");
  EXPECT_EQ(calls_of(p), (V{R"(f{"a":1})", "now{}"}));
  EXPECT_EQ(p.content, "");
}

TEST(ToolCallParse, Llama3) {
  // Meta's JSON-based tool calling: the whole reply is the call.
  ParsedToolCalls p = parse_tool_calls(ToolCallFormat::kLlama3,
      "{\"name\": \"get_current_conditions\", \"parameters\": {\"location\": \"San Francisco, CA\", \"unit\": \"Fahrenheit\"}}");
  EXPECT_EQ(calls_of(p), (V{R"(get_current_conditions{"location":"San Francisco, CA","unit":"Fahrenheit"})"}));
  EXPECT_EQ(p.content, "");
  p = parse_tool_calls(ToolCallFormat::kLlama3, "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}");
  EXPECT_EQ(calls_of(p), (V{R"(get_weather{"city":"Oslo"})"}));
  // A built-in tool in Python syntax.
  p = parse_tool_calls(ToolCallFormat::kLlama3, "<|python_tag|>brave_search.call(query=\"current weather in Menlo Park\")");
  EXPECT_EQ(calls_of(p), (V{R"(brave_search{"query":"current weather in Menlo Park"})"}));
  p = parse_tool_calls(ToolCallFormat::kLlama3, "<|python_tag|>wolfram_alpha.call(query=\"2+2\", n=3)");
  EXPECT_EQ(calls_of(p), (V{R"(wolfram_alpha{"query":"2+2","n":3})"}));
  // Two calls separated by ';' (Llama 3.2).
  p = parse_tool_calls(ToolCallFormat::kLlama3, R"({"name": "a", "parameters": {}}; {"name": "b", "parameters": {"x": 1}})");
  EXPECT_EQ(calls_of(p), (V{"a{}", R"(b{"x":1})"}));
}

TEST(ToolCallParse, Mistral) {
  ParsedToolCalls p = parse_tool_calls(ToolCallFormat::kMistral,
      "[TOOL_CALLS][{\"name\": \"get_current_weather\", \"arguments\": {\"location\": \"Paris, France\", \"format\": \"celsius\"}}, "
      "{\"name\": \"get_time\", \"arguments\": {}}]");
  EXPECT_EQ(calls_of(p), (V{R"(get_current_weather{"location":"Paris, France","format":"celsius"})", "get_time{}"}));
  EXPECT_EQ(p.content, "");
  // With text before, a space after the marker, and the id Nemo sometimes echoes.
  p = parse_tool_calls(ToolCallFormat::kMistral, "Let me see. [TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"a\": [1, 2]}, \"id\": \"abcDEF123\"}]");
  EXPECT_EQ(calls_of(p), (V{R"(f{"a":[1,2]})"}));
  EXPECT_EQ(p.content, "Let me see. ");
}

TEST(ToolCallParse, DeepSeek) {
  const std::string call = "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"location\": \"Tokyo\"}\n```<｜tool▁call▁end｜>";
  ParsedToolCalls p = parse_tool_calls(ToolCallFormat::kDeepSeek,
      "<think>\nThe user wants the weather.\n</think>\n\n<｜tool▁calls▁begin｜>" + call + "\n" + call + "<｜tool▁calls▁end｜>");
  EXPECT_EQ(calls_of(p), (V{R"(get_weather{"location":"Tokyo"})", R"(get_weather{"location":"Tokyo"})"}));
  EXPECT_EQ(p.content, "<think>\nThe user wants the weather.\n</think>\n\n");
  // The distills' habit: no outer begin token, no end token at EOS.
  p = parse_tool_calls(ToolCallFormat::kDeepSeek, call);
  EXPECT_EQ(calls_of(p), (V{R"(get_weather{"location":"Tokyo"})"}));
}

TEST(ToolCallParse, Generic) {
  ParsedToolCalls p = parse_tool_calls(ToolCallFormat::kGeneric,
      "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lima\"}}]}");
  EXPECT_EQ(calls_of(p), (V{R"(get_weather{"city":"Lima"})"}));
  p = parse_tool_calls(ToolCallFormat::kGeneric, "  {\"tool_call\": {\"name\": \"f\", \"arguments\": {}}}\n");
  EXPECT_EQ(calls_of(p), (V{"f{}"}));
  p = parse_tool_calls(ToolCallFormat::kGeneric, "{\"response\": \"It is sunny.\"}");
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, "It is sunny.");
  p = parse_tool_calls(ToolCallFormat::kGeneric, "It is sunny.");
  EXPECT_EQ(p.content, "It is sunny.");
}

TEST(ToolCallParse, MalformedOutputIsPlainContent) {
  struct Case {
    ToolCallFormat f;
    std::string text;
  };
  const std::vector<Case> cases = {
      {ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}\n</tool_call>"},  // unbalanced
      {ToolCallFormat::kHermes, "<tool_call>\n{\"arguments\": {}}\n</tool_call>"},                         // no name
      {ToolCallFormat::kHermes, "<tool_call>\n{\"name\": 7, \"arguments\": {}}\n</tool_call>"},            // name not a string
      {ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": [1]}\n</tool_call>"},       // args not an object
      {ToolCallFormat::kHermes, "<tool_call>{\"name\": \"f\"} trailing words</tool_call>"},
      {ToolCallFormat::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": tru}}</tool_call>"},  // not JSON
      {ToolCallFormat::kHermes, "<tool_call>" + std::string(100, '[') + std::string(100, ']') + "</tool_call>"},  // too deep
      {ToolCallFormat::kLlama3, "{\"name\": \"f\", \"parameters\": {}} and some words"},
      {ToolCallFormat::kLlama3, "{\"city\": \"Paris\"}"},
      {ToolCallFormat::kLlama3, "<|python_tag|>print('hi')"},
      {ToolCallFormat::kLlama3, "<|python_tag|>brave_search.call(query=)"},
      {ToolCallFormat::kMistral, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}"},  // cut off
      {ToolCallFormat::kMistral, "[TOOL_CALLS][]"},
      {ToolCallFormat::kMistral, "[TOOL_CALLS][{\"name\": \"f\"}] more text"},
      {ToolCallFormat::kDeepSeek, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\": 1}\n"},
      {ToolCallFormat::kDeepSeek, "<｜tool▁calls▁begin｜><｜tool▁calls▁end｜>"},
      {ToolCallFormat::kGeneric, "{\"tool_calls\": [{\"name\": \"\"}]}"},
      {ToolCallFormat::kGeneric, "{\"tool_calls\": \"f\"}"},
      {ToolCallFormat::kGeneric, "{\"tool_calls\": ["},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    const ParsedToolCalls p = parse_tool_calls(c.f, c.text);
    EXPECT_TRUE(p.calls.empty());
    EXPECT_EQ(p.content, c.text);
  }
}

// Streams `pieces` through a ToolCallStream; the content sent at each
// piece, the call pieces sent ("index name args", name empty after a
// call's first), then what finish() gave.
struct Streamed {
  std::vector<std::string> sent;
  std::vector<std::string> pieces;
  ToolCallEnd end;
};
Streamed stream(ToolCallFormat f, const std::vector<std::string>& pieces, bool parallel = true, bool cut = false) {
  ToolCallStream s(f, parallel);
  Streamed out;
  auto take = [&](const std::vector<ToolCallDelta>& calls) {
    for (const ToolCallDelta& d : calls) out.pieces.push_back(std::to_string(d.index) + " " + d.name + " " + d.arguments);
  };
  for (const std::string& p : pieces) {
    ToolCallUpdate u = s.push(p);
    out.sent.push_back(u.content);
    take(u.calls);
  }
  out.end = s.finish(cut);
  take(out.end.rest.calls);
  return out;
}

TEST(ToolCallStream, ContentFlowsAndACallIsSentOnceItsArgumentsBegin) {
  const Streamed s = stream(ToolCallFormat::kHermes, {"Sure", ", one moment.", "\n<tool", "_call>\n{\"name\": \"f\", ",
                                                      "\"arguments\": {}}\n</tool_call>"});
  EXPECT_EQ(s.sent, (V{"Sure", ", one moment.", "\n", "", ""}));  // "<tool" is held: it may be a marker
  EXPECT_EQ(s.pieces, (V{"0 f {}"}));
  EXPECT_EQ(s.end.calls.size(), 1u);
  EXPECT_EQ(s.end.rest.content, "");
}

TEST(ToolCallStream, ArgumentsStreamInPiecesThatAddUpToTheCall) {
  // As OpenAI streams them: the name once, then the arguments as written
  // (compacted), so the pieces join to the answer's arguments.
  const Streamed s = stream(ToolCallFormat::kHermes,
                            {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\"", ": \"Par",
                             "is\", \"days\": 1", "2}}\n</tool_call>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}",
                             "\n</tool_call>"});
  EXPECT_EQ(s.pieces, (V{R"(0 get_weather {"city")", R"(0  :"Par)", R"(0  is","days":1)", R"(0  2})", "1 f {}"}));
  ASSERT_EQ(s.end.calls.size(), 2u);
  EXPECT_EQ(s.end.calls[0].arguments, R"({"city":"Paris","days":12})");
  // Every format whose arguments are an object streams them; JSON text in a
  // string is sent whole.
  const Streamed m = stream(ToolCallFormat::kMistral, {"[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": ", "1}}]"});
  EXPECT_EQ(m.pieces, (V{R"(0 a {"x":)", "0  1}"}));
  const Streamed t = stream(ToolCallFormat::kHermes, {"<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\"", ": 1}\"}"});
  EXPECT_EQ(t.pieces, (V{R"(0 f {"a":1})"}));
}

TEST(ToolCallStream, HeldTextThatIsNoCallIsSentAfterAll) {
  Streamed s = stream(ToolCallFormat::kHermes, {"a <", "b> c"});
  EXPECT_EQ(s.sent, (V{"a ", "<b> c"}));
  EXPECT_EQ(s.end.rest.content, "");
  // A broken call is plain content, sent at the end.
  s = stream(ToolCallFormat::kMistral, {"[TOOL_CALLS]", "[{\"name\": "});
  EXPECT_EQ(s.sent, (V{"", ""}));
  EXPECT_TRUE(s.end.calls.empty());
  EXPECT_EQ(s.end.rest.content, "[TOOL_CALLS][{\"name\": ");
  // Llama 3: a reply that starts with words is content at once.
  s = stream(ToolCallFormat::kLlama3, {" ", "Hello", " there"});
  EXPECT_EQ(s.sent, (V{"", " Hello", " there"}));
  // Generic: {"response": ...} comes back as its text.
  s = stream(ToolCallFormat::kGeneric, {"{\"response\": ", "\"Hi\"}"});
  EXPECT_EQ(s.sent, (V{"", ""}));
  EXPECT_EQ(s.end.rest.content, "Hi");
}

TEST(ToolCallStream, ACallSentStaysACallWhenTheRestSpoilsTheParse) {
  const Streamed s = stream(ToolCallFormat::kHermes, {"<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1", " oops"});
  EXPECT_EQ(s.pieces, (V{R"(0 f {"a":1)", "0  oops"}));
  ASSERT_EQ(s.end.calls.size(), 1u);
  EXPECT_EQ(s.end.calls[0].arguments, R"({"a":1oops)");
}

TEST(ToolCallStream, NotParallelKeepsTheFirstCall) {
  const Streamed s = stream(ToolCallFormat::kMistral,
                            {R"([TOOL_CALLS][{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}])"}, false);
  ASSERT_EQ(s.end.calls.size(), 1u);
  EXPECT_EQ(s.end.calls[0].name, "a");
  EXPECT_EQ(s.pieces, (V{"0 a {}"}));
}

TEST(ToolCallParse, Pythonic) {
  // Llama 3.2's zero-shot form: a list of calls with keyword arguments.
  EXPECT_EQ(detect_tool_call_format("[func_name1(params_name1=params_value1, params_name2=params_value2...)]"),
            ToolCallFormat::kPythonic);
  ParsedToolCalls p = parse_tool_calls(ToolCallFormat::kPythonic,
      R"([get_weather(city="San Francisco", days=3, metric=True), get_time(), f(a=[1, 'x'], b={'k': None}, c=-2.5)])");
  EXPECT_EQ(calls_of(p), (V{R"(get_weather{"city":"San Francisco","days":3,"metric":true})", "get_time{}",
                            R"(f{"a":[1,"x"],"b":{"k":null},"c":-2.5})"}));
  EXPECT_EQ(p.content, "");
  // Llama 3.2 writes it under its JSON template too.
  p = parse_tool_calls(ToolCallFormat::kLlama3, " [get_weather(city='Oslo')]");
  EXPECT_EQ(calls_of(p), (V{R"(get_weather{"city":"Oslo"})"}));
  for (const char* text : {"[get_weather(city=)]", "[1, 2, 3]", "[f()] and words", "[f(x)]", "Sure [f()]"}) {
    SCOPED_TRACE(text);
    p = parse_tool_calls(ToolCallFormat::kPythonic, text);
    EXPECT_TRUE(p.calls.empty());
    EXPECT_EQ(p.content, text);
  }
  // Cut: the calls so far, the last one's arguments so far.
  Streamed s = stream(ToolCallFormat::kPythonic, {"[f(a=1), get_w", "eather(city=\"Par"}, true, /*cut=*/true);
  ASSERT_EQ(s.end.calls.size(), 2u);
  EXPECT_EQ(s.end.calls[1].name, "get_weather");
  EXPECT_EQ(s.end.calls[1].arguments, "{");
  EXPECT_TRUE(parse_cut_tool_calls(ToolCallFormat::kPythonic, "[get_we").name_cut);
  s = stream(ToolCallFormat::kPythonic, {"[f(", "a=1, ", "b=2)]"});
  EXPECT_EQ(s.pieces, (V{"0 f {", R"(0  "a":1)", R"(0  ,"b":2})"}));
}

// A cut output: its content, its calls as name + arguments so far, and
// whether the last name is cut.
struct Cut {
  std::string content;
  V calls;
  bool name_cut;
};
Cut cut(ToolCallFormat f, std::string_view text) {
  const CutToolCalls c = parse_cut_tool_calls(f, text);
  V calls;
  for (const ToolCall& t : c.calls) calls.push_back(t.name + "|" + t.arguments);
  return {c.content, calls, c.name_cut};
}

TEST(CutToolCalls, TheCallCutGivesItsNameAndArgumentsSoFar) {
  Cut c = cut(ToolCallFormat::kHermes, "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa");
  EXPECT_EQ(c.content, "Sure.\n");
  EXPECT_EQ(c.calls, (V{"get_weather|{\"city\":\"Pa"}));
  EXPECT_FALSE(c.name_cut);
  // Calls in full come first; a cut inside the name says so.
  c = cut(ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>\n"
                                   "<tool_call>\n{\"name\": \"get_w");
  EXPECT_EQ(c.calls, (V{"f|{\"a\":1}", "get_w|"}));
  EXPECT_TRUE(c.name_cut);
  EXPECT_EQ(c.content, "\n");
  // Before the name began: no call, and the markup is not content.
  c = cut(ToolCallFormat::kHermes, "<tool_call>\n{\"na");
  EXPECT_TRUE(c.calls.empty());
  EXPECT_EQ(c.content, "");
  c = cut(ToolCallFormat::kHermes, "Hi <tool_ca");
  EXPECT_EQ(c.content, "Hi ");
  c = cut(ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_");
  EXPECT_EQ(c.calls, (V{"f|{}"}));
  EXPECT_EQ(c.content, "");
}

TEST(CutToolCalls, EveryFormat) {
  Cut c = cut(ToolCallFormat::kMistral, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"arguments\": {\"x");
  EXPECT_EQ(c.calls, (V{"a|{}", "b|{\"x"}));
  c = cut(ToolCallFormat::kLlama3, "{\"name\": \"f\", \"parameters\": {\"k\": [1, ");
  EXPECT_EQ(c.calls, (V{"f|{\"k\":[1,"}));
  c = cut(ToolCallFormat::kLlama3, "<|python_tag|>{\"name\": \"f\"");
  EXPECT_EQ(c.calls, (V{"f|"}));
  c = cut(ToolCallFormat::kLlama3, "{\"answer\": \"not a ca");  // JSON that is no call
  EXPECT_TRUE(c.calls.empty());
  EXPECT_EQ(c.content, "{\"answer\": \"not a ca");
  c = cut(ToolCallFormat::kGeneric, "{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {\"q\": \"x\\u00");
  EXPECT_EQ(c.calls, (V{"f|{\"q\":\"x\\u00"}));
  c = cut(ToolCallFormat::kGeneric, "{\"response\": \"Hello \\\"wor");
  EXPECT_TRUE(c.calls.empty());
  EXPECT_EQ(c.content, "Hello \"wor");
  c = cut(ToolCallFormat::kDeepSeek, "ok<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get\n```json\n{\"a\"");
  EXPECT_EQ(c.content, "ok");
  EXPECT_EQ(c.calls, (V{"get|{\"a\""}));
  // Whole arguments before their fence is closed: the fence is markup.
  c = cut(ToolCallFormat::kDeepSeek, "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get\n```json\n{\"a\": 1}\n``");
  EXPECT_EQ(c.calls, (V{"get|{\"a\":1}"}));
  c = cut(ToolCallFormat::kDeepSeek, "<｜tool▁call▁begin｜>function<｜tool▁sep｜>ge");
  EXPECT_EQ(c.calls, (V{"ge|"}));
  EXPECT_TRUE(c.name_cut);
  // Plain text cut is plain content.
  c = cut(ToolCallFormat::kMistral, "Just words");
  EXPECT_EQ(c.content, "Just words");
  EXPECT_TRUE(c.calls.empty());
}

TEST(CutToolCalls, StreamSendsWhatWasHeld) {
  ToolCallStream s(ToolCallFormat::kHermes, /*parallel=*/true, {"find", "fetch"});
  EXPECT_EQ(s.push("Hi ").content, "Hi ");
  const ToolCallUpdate u = s.push("<tool_call>\n{\"name\": \"fetch\", \"arguments\": {\"a\": ");
  EXPECT_EQ(u.content, "");
  ASSERT_EQ(u.calls.size(), 1u);
  EXPECT_EQ(u.calls[0].arguments, "{\"a\":");
  s.push("1}}</tool_call><tool_call>{\"name\": \"fi");
  const ToolCallEnd end = s.finish(/*cut=*/true);
  EXPECT_EQ(end.rest.content, "");
  ASSERT_EQ(end.calls.size(), 2u);  // the cut name completed to the one tool it begins
  EXPECT_EQ(end.calls[0].arguments, "{\"a\":1}");
  EXPECT_EQ(end.calls[1].name, "find");
  EXPECT_EQ(end.calls[1].arguments, "");
}

TEST(ToolPrompt, ArgumentsBecomeObjectsExceptForDeepSeek) {
  const Json messages = Json::parse(R"([{"role": "user", "content": "hi"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
       "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "42"}])");
  EXPECT_EQ(template_messages(ToolCallFormat::kHermes, messages)[1]["tool_calls"][0]["function"]["arguments"],
            Json::parse(R"({"a": 1})"));
  EXPECT_EQ(template_messages(ToolCallFormat::kDeepSeek, messages)[1]["tool_calls"][0]["function"]["arguments"],
            "{\"a\": 1}");
}

TEST(ToolPrompt, DescriptionGoesIntoTheSystemOrTheFirstUserMessage) {
  const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  const std::string text = tools_system_prompt(ToolCallFormat::kGeneric, tools);
  EXPECT_NE(text.find("get_weather"), std::string::npos);
  EXPECT_NE(text.find("{\"tool_calls\": [{\"name\": \"TOOL_NAME\", \"arguments\": {ARGUMENTS}}]}"), std::string::npos) << text;
  const Json one = Json::parse(R"([{"role": "user", "content": "hi"}])");
  Json m = with_tools_prompt(one, "T", true);
  EXPECT_EQ(m, Json::parse(R"([{"role": "system", "content": "T"}, {"role": "user", "content": "hi"}])"));
  m = with_tools_prompt(Json::parse(R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}])"), "T", true);
  EXPECT_EQ(m[0]["content"], "T\n\nBe brief.");
  m = with_tools_prompt(one, "T", false);
  EXPECT_EQ(m, Json::parse(R"([{"role": "user", "content": "T\n\nhi"}])"));
}

TEST(ToolPrompt, PlainToolMessagesForTemplatesWithoutThem) {
  const Json messages = Json::parse(R"([{"role": "user", "content": "hi"},
      {"role": "assistant", "content": null, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}},
        {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "one"},
      {"role": "tool", "tool_call_id": "c2", "content": "two"}])");
  const Json m = plain_tool_messages(ToolCallFormat::kGeneric, messages);
  ASSERT_EQ(m.size(), 3u) << m.dump();
  EXPECT_EQ(m[1], Json::parse(R"({"role": "assistant", "content":
      "{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {\"a\":1}}, {\"name\": \"g\", \"arguments\": {}}]}"})"));
  EXPECT_EQ(m[2]["role"], "user");
  EXPECT_EQ(m[2]["content"], "{\"tool_response\":{\"tool_call_id\":\"c1\",\"content\":\"one\"}}\n"
                             "{\"tool_response\":{\"tool_call_id\":\"c2\",\"content\":\"two\"}}");
  EXPECT_FALSE(m[2].contains("tool_results"));
  // The whole preparation: a template with tool messages keeps them.
  const ToolPromptMessages p = tool_prompt_messages("{{ message.tool_calls }}<tool_call>", messages, nullptr, true);
  EXPECT_EQ(p.messages.size(), 4u);
  EXPECT_FALSE(p.without_system);
}

}  // namespace
}  // namespace kvlm
