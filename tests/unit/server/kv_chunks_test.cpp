// KV chunks in requests (docs/kv-chunks.md), before the engine: the marks
// each API takes (chat's kv_chunk parts and messages, Anthropic's
// cache_control, Responses' marked items, completions' kv_chunks spans and
// their refusals), the prompt rendered and tokenized in pieces so each
// chunk's ids are its own standalone tokenization, requests without marks
// tokenized exactly as before, kv_blend_recompute, and the chunk metrics.
// stories260K's vocabulary with a small template and Qwen2.5's.
#include <gtest/gtest.h>

#include "chat/chat_prompt.h"
#include "chat/chat_template.h"
#include "common/mapped_file.h"
#include "engine/engine.h"
#include "model/gguf.h"
#include "server/metrics_text.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"
#include "wire/anthropic/messages.h"
#include "wire/openai/chat_render.h"
#include "wire/openai/kv_chunks.h"
#include "wire/responses/responses.h"

namespace kvlm::openai {
namespace {

using Ids = std::vector<int32_t>;

const Tokenizer& stories() {
  static const std::unique_ptr<Tokenizer> tok = [] {
    auto gguf = GgufFile::open(test::shared_path("models/stories260K.gguf"));
    return Tokenizer::from_metadata(gguf->metadata());
  }();
  return *tok;
}

// Each message on a line of its own, its role in brackets, content trimmed.
const ChatTemplate& plain_template() {
  static const std::unique_ptr<ChatTemplate> t = ChatTemplate::parse(
      "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content | trim }}\n{% endfor %}"
      "{% if add_generation_prompt %}[assistant]{% endif %}");
  return *t;
}

ChatRequest chat(const Json& body) {
  auto v = parse_chat_request(body);
  if (const auto* e = std::get_if<RequestError>(&v)) ADD_FAILURE() << e->message;
  return std::get<ChatRequest>(v);
}

const RequestError* completion_error(const Json& body) {
  static std::variant<CompletionRequest, RequestError> v;
  v = parse_completion_request(body);
  return std::get_if<RequestError>(&v);
}

Ids span_ids(const PieceIds& p, size_t i) {
  const IdSpan s = p.chunks.at(i);
  return Ids(p.ids.begin() + s.begin, p.ids.begin() + s.end);
}

const std::string kDoc1 = "Lily found a shiny stone by the river. She took it home to show her mom.";
const std::string kDoc2 = "Ben had a little boat. Every day he sailed it on the pond with his dog.";

Json user_with_docs(const std::string& a, const std::string& b) {
  return Json::array({Json{{"type", "text"}, {"text", "Read these stories."}},
                      Json{{"type", "text"}, {"text", a}, {"kv_chunk", true}},
                      Json{{"type", "text"}, {"text", b}, {"kv_chunk", true}},
                      Json{{"type", "text"}, {"text", "Who has a dog?"}}});
}

TEST(KvChunks, ChatPartsAndMessagesAreMarked) {
  const ChatRequest r = chat(Json{
      {"messages", Json::array({Json{{"role", "system"}, {"content", "Be kind."}, {"kv_chunk", true}},
                                Json{{"role", "user"}, {"content", user_with_docs(kDoc1, kDoc2)}}})}});
  ASSERT_EQ(r.kv_chunks.size(), 3u);
  EXPECT_EQ(r.kv_chunks[0].message, 0u);
  EXPECT_EQ(r.kv_chunks[0].text, "Be kind.");
  EXPECT_EQ(r.kv_chunks[1].message, 1u);
  EXPECT_EQ(r.kv_chunks[1].text, kDoc1);
  EXPECT_EQ(r.kv_chunks[2].text, kDoc2);
  // The template never sees the marks: parts are joined as before.
  EXPECT_FALSE(r.messages[0].contains("kv_chunk"));
  EXPECT_EQ(r.messages[1]["content"], "Read these stories.\n" + kDoc1 + "\n" + kDoc2 + "\nWho has a dog?");
  // A mark that is not a boolean names its field.
  auto bad = parse_chat_request(Json{
      {"messages", Json::array({Json{{"role", "user"},
                                     {"content", Json::array({Json{{"type", "text"}, {"text", "x"}, {"kv_chunk", 1}}})}}})}});
  ASSERT_TRUE(std::holds_alternative<RequestError>(bad));
  EXPECT_EQ(std::get<RequestError>(bad).param, "messages[0].content[0].kv_chunk");
}

TEST(KvChunks, ChatWithoutMarksTokenizesAsBefore) {
  const Json messages = Json::array({Json{{"role", "system"}, {"content", "Be kind."}},
                                     Json{{"role", "user"}, {"content", "Once upon a time " + kDoc1}}});
  const ChatRequest r = chat(Json{{"messages", messages}});
  const PieceIds p = render_chat_prompt_pieces(stories(), plain_template(), r);
  EXPECT_TRUE(p.chunks.empty());
  EXPECT_EQ(p.ids, encode_chat(stories(), plain_template(), r.messages, true));
  EXPECT_EQ(render_chat_prompt(stories(), plain_template(), r), p.ids);
}

TEST(KvChunks, ChatChunkIdsAreTheirStandaloneTokenization) {
  const PieceIds ab = render_chat_prompt_pieces(
      stories(), plain_template(), chat(Json{{"messages", Json::array({Json{{"role", "user"}, {"content", user_with_docs(kDoc1, kDoc2)}}})}}));
  // The same documents in the other order, after another conversation.
  const PieceIds ba = render_chat_prompt_pieces(
      stories(), plain_template(),
      chat(Json{{"messages", Json::array({Json{{"role", "user"}, {"content", "Hello!"}},
                                          Json{{"role", "assistant"}, {"content", "Hi. What shall we read?"}},
                                          Json{{"role", "user"}, {"content", user_with_docs(kDoc2, kDoc1)}}})}}));
  ASSERT_EQ(ab.chunks.size(), 2u);
  ASSERT_EQ(ba.chunks.size(), 2u);
  const Ids doc1 = encode_chunk(stories(), kDoc1), doc2 = encode_chunk(stories(), kDoc2);
  EXPECT_EQ(span_ids(ab, 0), doc1);
  EXPECT_EQ(span_ids(ab, 1), doc2);
  EXPECT_EQ(span_ids(ba, 0), doc2);
  EXPECT_EQ(span_ids(ba, 1), doc1);
  EXPECT_NE(ab.chunks[0].begin, ba.chunks[1].begin);
  EXPECT_EQ(ab.ids.at(0), stories().bos_id());  // one BOS: the template's
  EXPECT_NE(ab.ids.at(1), stories().bos_id());
}

TEST(KvChunks, AChunkTheTemplateDoesNotRenderIsSkipped) {
  // Templates trim: a chunk with spaces around is found without them.
  const std::string padded = "  " + kDoc1 + "\n\n";
  const ChatRequest r = chat(Json{{"messages", Json::array({Json{{"role", "user"}, {"content", padded}, {"kv_chunk", true}},
                                                            Json{{"role", "user"}, {"content", "b"}}})}});
  const PieceIds p = render_chat_prompt_pieces(stories(), plain_template(), r);
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(span_ids(p, 0), encode_chunk(stories(), kDoc1));
  // A template that leaves the message out: no chunk, the prompt as before.
  const auto drops = ChatTemplate::parse("{% for m in messages %}{% if m.role != 'user' %}{{ m.content }}{% endif %}{% endfor %}");
  ChatRequest only = chat(Json{{"messages", Json::array({Json{{"role", "system"}, {"content", "Hi."}},
                                                          Json{{"role", "user"}, {"content", kDoc1}, {"kv_chunk", true}}})}});
  const PieceIds q = render_chat_prompt_pieces(stories(), *drops, only);
  EXPECT_TRUE(q.chunks.empty());
  EXPECT_EQ(q.ids, encode_chat(stories(), *drops, only.messages, true));
}

TEST(KvChunks, QwenTemplateChunks) {
  const auto qwen = ChatTemplate::parse(read_file_bytes(test::shared_path("templates/Qwen-Qwen2.5-7B-Instruct.jinja")));
  const ChatRequest r = chat(Json{{"messages", Json::array({Json{{"role", "user"}, {"content", user_with_docs(kDoc1, kDoc2)}}})}});
  const PieceIds p = render_chat_prompt_pieces(stories(), *qwen, r);
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(span_ids(p, 0), encode_chunk(stories(), kDoc1));
  EXPECT_EQ(span_ids(p, 1), encode_chunk(stories(), kDoc2));
}

TEST(KvChunks, AnthropicCacheControlIsTheSameHint) {
  const Json cc = {{"type", "ephemeral"}};
  const Json body = {
      {"max_tokens", 8},
      {"system", Json::array({Json{{"type", "text"}, {"text", "Be kind."}, {"cache_control", cc}}})},
      {"messages",
       Json::array({Json{{"role", "user"},
                         {"content", Json::array({Json{{"type", "tool_result"}, {"tool_use_id", "t1"}, {"content", kDoc2},
                                                       {"cache_control", cc}},
                                                  Json{{"type", "text"}, {"text", kDoc1}, {"cache_control", cc}},
                                                  Json{{"type", "text"}, {"text", "Who has a dog?"}}})}}})}};
  auto converted = anthropic::chat_body(body);
  ASSERT_TRUE(std::holds_alternative<Json>(converted));
  const ChatRequest r = chat(std::get<Json>(converted));
  ASSERT_EQ(r.kv_chunks.size(), 3u);
  EXPECT_EQ(r.kv_chunks[0].text, "Be kind.");
  EXPECT_EQ(r.kv_chunks[1].text, kDoc2);  // the tool result, as a tool message
  EXPECT_EQ(r.messages[1]["role"], "tool");
  EXPECT_EQ(r.kv_chunks[2].text, kDoc1);
  EXPECT_EQ(r.messages[2]["content"], kDoc1 + "\nWho has a dog?");
  // Without cache_control the chat body is what it always was.
  const Json plain = {{"max_tokens", 8}, {"system", "Be kind."},
                      {"messages", Json::array({Json{{"role", "user"},
                                                     {"content", Json::array({Json{{"type", "text"}, {"text", "a"}},
                                                                              Json{{"type", "text"}, {"text", "b"}}})}}})}};
  const Json same = std::get<Json>(anthropic::chat_body(plain));
  EXPECT_EQ(same["messages"], Json::parse(R"([{"role":"system","content":"Be kind."},{"role":"user","content":"a\nb"}])"));
}

TEST(KvChunks, ResponsesMarkedItems) {
  const Json body = {{"input", Json::array({Json{{"role", "user"}, {"content", kDoc1}, {"kv_chunk", true}},
                                            Json{{"type", "function_call_output"}, {"call_id", "c"}, {"output", kDoc2},
                                                 {"kv_chunk", true}}})},
                     {"kv_blend_recompute", 0.3}};
  auto v = responses::read_request(body, [](const std::string&) { return std::optional<Json>(); });
  ASSERT_TRUE(std::holds_alternative<responses::Request>(v));
  const responses::Request& req = std::get<responses::Request>(v);
  EXPECT_EQ(req.chat["kv_blend_recompute"], 0.3);
  Json chat_body = req.chat;
  chat_body["messages"] = req.input;
  const ChatRequest r = chat(chat_body);
  ASSERT_EQ(r.kv_chunks.size(), 2u);
  EXPECT_EQ(r.kv_chunks[0].text, kDoc1);
  EXPECT_EQ(r.kv_chunks[1].text, kDoc2);
}

TEST(KvChunks, CompletionSpansInCharactersAndTokens) {
  // "é" is two bytes: character offsets become byte offsets.
  auto v = parse_completion_request(Json{{"prompt", "é ab cd"}, {"kv_chunks", Json::parse("[[2, 4], [5, 7]]")}});
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(v)) << std::get<RequestError>(v).message;
  EXPECT_EQ(std::get<CompletionRequest>(v).kv_chunks, (std::vector<PromptSpan>{{3, 5}, {6, 8}}));
  v = parse_completion_request(Json{{"prompt", Json::array({1, 2, 3, 4})}, {"kv_chunks", Json::parse("[[1, 3]]")}});
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(v));
  EXPECT_EQ(std::get<CompletionRequest>(v).kv_chunks, (std::vector<PromptSpan>{{1, 3}}));
  // Up to the prompt's end; no spans, no chunks.
  EXPECT_FALSE(completion_error(Json{{"prompt", "abc"}, {"kv_chunks", Json::parse("[[0, 3]]")}}));
  EXPECT_FALSE(completion_error(Json{{"prompt", "abc"}, {"kv_chunks", Json::array()}}));
}

TEST(KvChunks, CompletionSpansAreValidated) {
  const std::pair<Json, const char*> bad[] = {
      {Json{{"prompt", "abcdef"}, {"kv_chunks", "0-3"}}, "list of [begin, end]"},
      {Json{{"prompt", "abcdef"}, {"kv_chunks", Json::parse("[[0, 1, 2]]")}}, "'kv_chunks[0]' must be [begin, end]"},
      {Json{{"prompt", "abcdef"}, {"kv_chunks", Json::parse("[[-1, 2]]")}}, "integers >= 0"},
      {Json{{"prompt", "abcdef"}, {"kv_chunks", Json::parse("[[0.5, 2]]")}}, "integers >= 0"},
      {Json{{"prompt", "abcdef"}, {"kv_chunks", Json::parse("[[3, 3]]")}}, "begin must be below end"},
      {Json{{"prompt", "abcdef"}, {"kv_chunks", Json::parse("[[0, 3], [2, 4]]")}}, "ascending and not overlap"},
      {Json{{"prompt", "abcdef"}, {"kv_chunks", Json::parse("[[3, 4], [0, 2]]")}}, "ascending and not overlap"},
      {Json{{"prompt", "abcdef"}, {"kv_chunks", Json::parse("[[0, 7]]")}}, "past the prompt's 6 characters"},
      {Json{{"prompt", "éé"}, {"kv_chunks", Json::parse("[[0, 3]]")}}, "past the prompt's 2 characters"},
      {Json{{"prompt", Json::array({5, 6})}, {"kv_chunks", Json::parse("[[0, 3]]")}}, "past the prompt's 2 tokens"},
      {Json{{"prompt", Json::array({"ab", "cd"})}, {"kv_chunks", Json::parse("[[0, 1]]")}}, "one prompt"},
      {Json{{"prompt", "abcdef"}, {"suffix", "x"}, {"kv_chunks", Json::parse("[[0, 1]]")}}, "'suffix'"},
  };
  for (const auto& [body, words] : bad) {
    const RequestError* e = completion_error(body);
    ASSERT_TRUE(e) << body;
    EXPECT_EQ(e->status, 400);
    EXPECT_EQ(e->param, "kv_chunks") << body;
    EXPECT_NE(e->message.find(words), std::string::npos) << e->message;
  }
}

TEST(KvChunks, CompletionPromptPieces) {
  const std::string text = "Question: " + kDoc1 + " Answer:";
  const size_t at = text.find(kDoc1);
  const PieceIds p = completion_prompt_pieces(stories(), text, std::vector<PromptSpan>{{at, at + kDoc1.size()}});
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(span_ids(p, 0), encode_chunk(stories(), kDoc1));
  EXPECT_EQ(p.ids.at(0), stories().bos_id());
  // No chunks: the prompt tokenized as always.
  EXPECT_EQ(completion_prompt_pieces(stories(), text, {}).ids, stories().encode(text, true, true));
  // Token-id prompts keep their ids; the spans are token offsets.
  const PieceIds ids = completion_prompt_pieces(stories(), Ids{1, 403, 407, 261}, std::vector<PromptSpan>{{1, 3}});
  EXPECT_EQ(ids.ids, (Ids{1, 403, 407, 261}));
  EXPECT_EQ(ids.chunks, (std::vector<IdSpan>{{1, 3}}));
}

TEST(KvChunks, BlendRecomputeIsAShare) {
  auto v = parse_chat_request(Json{{"messages", Json::parse(R"([{"role":"user","content":"x"}])")}, {"kv_blend_recompute", 0.25}});
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(v));
  EXPECT_EQ(std::get<ChatRequest>(v).options.kv_blend_recompute, 0.25);
  EXPECT_FALSE(chat(Json{{"messages", Json::parse(R"([{"role":"user","content":"x"}])")}}).options.kv_blend_recompute);
  for (const Json& share : {Json(1.5), Json(-0.1), Json("0.2")}) {
    const RequestError* e = completion_error(Json{{"prompt", "x"}, {"kv_blend_recompute", share}});
    ASSERT_TRUE(e) << share;
    EXPECT_EQ(e->param, "kv_blend_recompute");
  }
  const Json messages = {{"max_tokens", 4}, {"kv_blend_recompute", 1.0},
                         {"messages", Json::parse(R"([{"role":"user","content":"x"}])")}};
  EXPECT_EQ(std::get<Json>(anthropic::chat_body(messages))["kv_blend_recompute"], 1.0);
}

TEST(MetricsText, ExposesKvChunks) {
  EngineMetrics m;
  m.num_kv_chunk_lookups = 7;
  m.num_kv_chunk_hits = 5;
  m.num_kv_chunk_reused_tokens = 300;
  m.num_kv_chunk_recomputed_tokens = 45;
  const std::string text = prometheus_text(m, "m");
  EXPECT_EQ(test::metric_sample(text, "kvlm_kv_chunk_lookups_total"), 7);
  EXPECT_EQ(test::metric_sample(text, "kvlm_kv_chunk_hits_total"), 5);
  EXPECT_EQ(test::metric_sample(text, "kvlm_kv_chunk_reused_tokens_total"), 300);
  EXPECT_EQ(test::metric_sample(text, "kvlm_kv_chunk_recomputed_tokens_total"), 45);
  EXPECT_NE(text.find("# TYPE kvlm_kv_chunk_reused_tokens_total counter"), std::string::npos);
}

}  // namespace
}  // namespace kvlm::openai
