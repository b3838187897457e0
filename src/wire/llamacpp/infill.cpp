#include "wire/llamacpp/infill.h"

#include <fmt/format.h>

#include "wire/openai/fields.h"
#include "wire/openai/json_text.h"

namespace kvlm::llamacpp {
namespace {

using openai::field;
using openai::invalid_field;

std::string text_field(const Json& body, const char* key) {
  const Json* v = field(body, key);
  if (!v) return {};
  if (!v->is_string()) invalid_field(key, fmt::format("'{}' must be a string", key));
  return v->get<std::string>();
}

std::vector<InfillChunk> extra_chunks(const Json& body) {
  std::vector<InfillChunk> out;
  const Json* extra = field(body, "input_extra");
  if (!extra) return out;
  if (!extra->is_array()) invalid_field("input_extra", "'input_extra' must be an array of {\"filename\", \"text\"}");
  for (size_t i = 0; i < extra->size(); ++i) {
    const Json& c = (*extra)[i];
    const std::string where = fmt::format("input_extra[{}]", i);
    if (!c.is_object()) invalid_field(where, fmt::format("'{}' must be an object", where));
    InfillChunk chunk;
    if (const Json* f = field(c, "filename")) {
      if (!f->is_string()) invalid_field(where + ".filename", fmt::format("'{}.filename' must be a string", where));
      chunk.filename = f->get<std::string>();
    }
    const Json* t = field(c, "text");
    if (!t || !t->is_string()) invalid_field(where + ".text", fmt::format("'{}.text' must be a string", where));
    chunk.text = t->get<std::string>();
    out.push_back(std::move(chunk));
  }
  return out;
}

// llama.cpp's option names -> OpenAI's, for parse_completion_request.
Json completion_body_of(const Json& body) {
  Json out = {{"prompt", "-"}};
  static const std::pair<const char*, const char*> kRenamed[] = {
      {"n_predict", "max_tokens"}, {"repeat_penalty", "repetition_penalty"}, {"repeat_last_n", "repeat_last_n"},
      {"temperature", "temperature"}, {"top_k", "top_k"}, {"top_p", "top_p"}, {"min_p", "min_p"},
      {"presence_penalty", "presence_penalty"}, {"frequency_penalty", "frequency_penalty"}, {"seed", "seed"},
      {"stop", "stop"}, {"stream", "stream"}, {"cache_salt", "cache_salt"}, {"model", "model"},
  };
  for (const auto& [from, to] : kRenamed)
    if (const Json* v = field(body, from)) out[to] = *v;
  // llama.cpp: n_predict -1 is "until the end"; OpenAI's fields have no such value.
  if (out.contains("max_tokens") && out["max_tokens"].is_number_integer() && out["max_tokens"].get<int64_t>() < 0)
    out.erase("max_tokens");
  return out;
}

const char* stop_type(const AnswerEnd& end) {
  if (end.reason == AnswerEnd::Reason::kLength) return "limit";
  return end.stop_string.empty() ? "eos" : "word";
}

std::string event(const Json& data) { return "data: " + openai::dump_json(data) + "\n\n"; }

}  // namespace

std::variant<InfillRequest, openai::RequestError> parse_infill_request(const Json& body) {
  return openai::validated<InfillRequest>([&] {
    if (!body.is_object()) invalid_field("body", "the request body must be a JSON object");
    InfillRequest r;
    r.input_prefix = text_field(body, "input_prefix");
    r.input_suffix = text_field(body, "input_suffix");
    if (const Json* p = field(body, "prompt"); p && !p->is_string())
      invalid_field("prompt", "'prompt' must be a string (the text typed at the gap)");
    r.prompt = text_field(body, "prompt");
    r.input_extra = extra_chunks(body);
    r.completion_body = completion_body_of(body);
    return r;
  });
}

Json InfillWriter::final_fields(const AnswerEnd& end, const AnswerUsage& usage) const {
  return Json{{"stop", true},
              {"model", model_},
              {"stop_type", stop_type(end)},
              {"stopping_word", end.stop_string},
              {"tokens_predicted", usage.completion_tokens},
              {"tokens_evaluated", usage.prompt_tokens},
              {"tokens_cached", usage.cached_tokens},
              {"truncated", false},
              {"index", 0}};
}

Json InfillWriter::whole(const ChoiceAnswer& a, const AnswerEnd& end, const AnswerUsage& usage) {
  Json out = {{"content", a.content}};
  out.update(final_fields(end, usage));
  return out;
}

std::string InfillWriter::stream_start(const AnswerUsage&) { return {}; }

std::string InfillWriter::stream_piece(const ChoiceDelta& piece, const ChoiceAnswer&) {
  if (piece.content.empty()) return {};
  return event(Json{{"content", piece.content}, {"stop", false}, {"index", 0}});
}

std::string InfillWriter::stream_end(const ChoiceAnswer&, const AnswerEnd& end, const AnswerUsage& usage) {
  Json last = {{"content", ""}};
  last.update(final_fields(end, usage));
  return event(last);
}

std::string InfillWriter::stream_error(const openai::RequestError& e) {
  return event(openai::error_json(e));
}

}  // namespace kvlm::llamacpp
