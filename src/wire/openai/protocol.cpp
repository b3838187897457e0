#include "wire/openai/protocol.h"

#include <cmath>
#include <random>

#include <fmt/format.h>

#include "tokenizer/unicode.h"
#include "wire/openai/fields.h"
#include "wire/openai/kv_chunks.h"
#include "wire/openai/response_format.h"
#include "wire/openai/tools.h"


namespace kvlm::openai {
namespace {

// Short names for the field readers of fields.h.
[[noreturn]] void invalid(const std::string& param, const std::string& message) { invalid_field(param, message); }
std::optional<double> number(const Json& b, const char* k, double lo, double hi) { return number_field(b, k, lo, hi); }
std::optional<int64_t> integer(const Json& b, const char* k, int64_t lo, int64_t hi) { return integer_field(b, k, lo, hi); }
std::optional<bool> boolean(const Json& b, const char* k) { return bool_field(b, k); }
std::optional<std::string> string(const Json& b, const char* k) { return string_field(b, k); }

// logit_bias keys are decimal token ids; anything else (a sign, spaces, an id
// past int32, which would wrap to a small id) is refused. Ids past the
// vocabulary are refused by the engine, which knows its size.
int32_t logit_bias_id(const std::string& key) {
  int64_t id = 0;
  bool ok = !key.empty() && key.size() <= 10;
  for (char c : key) {
    if (c < '0' || c > '9') ok = false;
    if (ok) id = id * 10 + (c - '0');
  }
  if (!ok || id > INT32_MAX)
    invalid("logit_bias", fmt::format("'logit_bias' key '{}' must be a token id (a decimal integer below 2^31)", key));
  return static_cast<int32_t>(id);
}

// n and best_of, after `stream` (best_of > n cannot stream: the pick needs
// every candidate's whole text, as OpenAI says).
void parse_choices(const Json& body, bool chat, GenerationOptions& o) {
  o.n = static_cast<int32_t>(integer(body, "n", 1, kMaxChoices).value_or(1));
  o.best_of = o.n;
  if (chat) {
    if (field(body, "best_of"))
      invalid_field("best_of", "'best_of' is only supported by /v1/completions", "unsupported_parameter");
    return;
  }
  if (auto b = integer(body, "best_of", 1, kMaxChoices)) {
    if (*b < o.n) invalid("best_of", fmt::format("'best_of' must be at least 'n' ({}), got {}", o.n, *b));
    o.best_of = static_cast<int32_t>(*b);
  }
  if (o.best_of > o.n && o.stream) invalid("best_of", "'best_of' greater than 'n' cannot be used with stream: true");
}

std::vector<int32_t> token_ids(const Json& a, const std::string& param = "prompt") {
  std::vector<int32_t> ids;
  for (const Json& x : a) ids.push_back(static_cast<int32_t>(integer_item(x, param, 0, INT32_MAX)));
  return ids;
}

// The router's extensions (GenerationOptions::return_token_ids and below),
// after `stream` and the choices.
void parse_router_fields(const Json& body, GenerationOptions& o) {
  o.return_token_ids = boolean(body, "return_token_ids").value_or(false);
  if (const Json* p = field(body, "prompt_token_ids")) {
    if (!p->is_array() || p->empty()) invalid("prompt_token_ids", "'prompt_token_ids' must be a non-empty array of token ids");
    o.prompt_token_ids = token_ids(*p, "prompt_token_ids");
  }
  if (const Json* r = field(body, "resume_token_ids")) {
    if (!r->is_array()) invalid("resume_token_ids", "'resume_token_ids' must be an array of token ids");
    o.resume_token_ids = token_ids(*r, "resume_token_ids");
    if (!o.resume_token_ids.empty() && !o.stream)
      invalid("resume_token_ids", "'resume_token_ids' resumes a stream: it needs stream: true");
    if (!o.resume_token_ids.empty() && o.best_of != 1)
      invalid("resume_token_ids", "'resume_token_ids' resumes one choice: n and best_of must be 1");
  }
}

// logit_bias: token ids (as strings) to numbers in [-100, 100].
void parse_logit_bias(const Json& body, SamplingParams& s) {
  const Json* bias = field(body, "logit_bias");
  if (!bias) return;
  if (!bias->is_object()) invalid("logit_bias", "'logit_bias' must map token ids to numbers");
  for (const auto& [key, value] : bias->items()) {
    const int32_t id = logit_bias_id(key);
    if (!value.is_number())
      invalid("logit_bias", fmt::format("'logit_bias' value for token {} must be a number", key));
    const double b = value.get<double>();
    if (!(b >= -100.0 && b <= 100.0))
      invalid("logit_bias", fmt::format("'logit_bias' value for token {} must be between -100 and 100", key));
    s.logit_bias.emplace_back(id, static_cast<float>(b));
  }
}

// The sampling fields, with OpenAI's defaults: plain sampling at
// temperature 1. GenerationOptions::given records which the request set, so
// the model's own defaults can fill the rest.
void parse_sampling(const Json& body, GenerationOptions& o) {
  SamplingParams& s = o.sampling;
  const auto temperature = number(body, "temperature", 0, 2);
  const auto top_p = number(body, "top_p", 0, 1);
  const auto top_k = integer(body, "top_k", -1, 1 << 20);
  const auto min_p = number(body, "min_p", 0, 1);
  const auto repetition_penalty = number(body, "repetition_penalty", 0.01, 10);
  s.temperature = static_cast<float>(temperature.value_or(1.0));
  s.top_p = static_cast<float>(top_p.value_or(1.0));
  if (s.top_p <= 0.f) invalid("top_p", "'top_p' must be greater than 0");
  s.top_k = static_cast<int32_t>(top_k.value_or(0));
  s.min_p = static_cast<float>(min_p.value_or(0.0));
  s.repetition_penalty = static_cast<float>(repetition_penalty.value_or(1.0));
  o.given = {temperature.has_value(), top_p.has_value(), top_k.has_value(), min_p.has_value(),
             repetition_penalty.has_value()};
  s.frequency_penalty = static_cast<float>(number(body, "frequency_penalty", -2, 2).value_or(0.0));
  s.presence_penalty = static_cast<float>(number(body, "presence_penalty", -2, 2).value_or(0.0));
  if (auto seed = integer(body, "seed", INT64_MIN, INT64_MAX)) {
    s.seed = static_cast<uint64_t>(*seed);
  } else {
    s.seed = std::random_device{}();
  }
  parse_logit_bias(body, s);
}

// stop: a string or an array of strings.
void parse_stop(const Json& body, GenerationOptions& o) {
  const Json* stop = field(body, "stop");
  if (!stop) return;
  if (stop->is_string()) {
    o.stop.push_back(stop->get<std::string>());
  } else if (stop->is_array()) {
    for (const Json& x : *stop) {
      if (!x.is_string()) invalid("stop", "'stop' must be a string or an array of strings");
      o.stop.push_back(x.get<std::string>());
    }
  } else {
    invalid("stop", "'stop' must be a string or an array of strings");
  }
}

void parse_stream(const Json& body, GenerationOptions& o) {
  o.stream = boolean(body, "stream").value_or(false);
  if (const Json* so = field(body, "stream_options")) {
    if (!so->is_object()) invalid("stream_options", "'stream_options' must be an object");
    if (!o.stream) invalid("stream_options", "'stream_options' is only allowed with stream: true");
    o.include_usage = boolean(*so, "include_usage").value_or(false);
  }
}

void parse_logprobs(const Json& body, bool chat, GenerationOptions& o) {
  if (chat) {
    // Chat: logprobs is a switch and top_logprobs the count, which needs the switch.
    const bool on = boolean(body, "logprobs").value_or(false);
    const auto top = integer(body, "top_logprobs", 0, kMaxLogprobs);
    if (top && !on) invalid("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    if (on) o.logprobs = static_cast<int32_t>(top.value_or(0));
  } else {
    if (auto n = integer(body, "logprobs", 0, kMaxLogprobs)) o.logprobs = static_cast<int32_t>(*n);
  }
}

// kvlm's KV budget extensions (docs/kv-budgets.md).
void parse_kv_budget(const Json& body, GenerationOptions& o) {
  if (auto n = integer(body, "kv_budget", 0, 1 << 30)) o.kv_budget = static_cast<int32_t>(*n);
  if (auto name = string(body, "kv_policy")) {
    o.kv_policy = parse_kv_policy(*name);
    if (name->starts_with("learned:")) {
      o.kv_policy = KvPolicyKind::kLearned;
      o.kv_learned_name = name->substr(8);
    }
    if (!o.kv_policy)
      invalid("kv_policy", fmt::format("'kv_policy' must be one of: {}, learned:NAME", kv_policy_names()));
  }
  if (auto n = integer(body, "kv_sinks", 0, 1 << 20)) o.kv_sinks = static_cast<int32_t>(*n);
  if (auto n = integer(body, "kv_recent", 0, 1 << 30)) o.kv_recent = static_cast<int32_t>(*n);
  o.kv_shift = boolean(body, "kv_shift");
  o.kv_blend_recompute = number(body, "kv_blend_recompute", 0, 1);
}

// The fields are read in a fixed order, so a request with several bad ones
// is always refused for the same one.
GenerationOptions parse_options(const Json& body, bool chat) {
  if (!body.is_object()) invalid("body", "the request body must be a JSON object");
  GenerationOptions o;
  o.model = string(body, "model").value_or("");
  parse_sampling(body, o);
  const char* max_key = chat && field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  // Completions take 0: the prompt alone, scored with echo and logprobs.
  if (auto n = integer(body, max_key, chat ? 1 : 0, 1 << 30)) o.max_tokens = static_cast<int32_t>(*n);
  parse_stop(body, o);
  parse_stream(body, o);
  parse_choices(body, chat, o);
  parse_logprobs(body, chat, o);
  o.ignore_eos = boolean(body, "ignore_eos").value_or(false);
  o.speculative = boolean(body, "speculative").value_or(true);
  o.cache_salt = string(body, "cache_salt");
  parse_kv_budget(body, o);
  parse_router_fields(body, o);
  o.constraint_spec = parse_constraint(body);
  return o;
}

// The roles a message may have. `developer` (OpenAI's newer name for the
// system role) reaches the template as `system`, which templates know;
// `function` (a legacy function's result) as a `tool` message.
std::string checked_role(const Json& m, const std::string& where) {
  const Json* role = field(m, "role");
  if (!role || !role->is_string()) invalid(where + ".role", fmt::format("'{}.role' must be a string", where));
  const std::string r = role->get<std::string>();
  for (const char* known : {"system", "user", "assistant", "tool", "function", "developer"})
    if (r == known) return r;
  invalid_field(where + ".role",
                fmt::format("'{}.role' must be one of system, developer, user, assistant, tool, function; got '{}'",
                            where, r),
                "invalid_value");
}

// Text parts joined with newlines (as vLLM does), other part types refused;
// the parts marked as KV chunks (kv_chunks.h) into `chunks`, when given.
std::string joined_parts(const Json& parts, const std::string& where, size_t message,
                         std::vector<ChatRequest::KvChunk>* chunks) {
  std::string text;
  for (size_t j = 0; j < parts.size(); ++j) {
    const Json& part = parts[j];
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
      invalid(where + ".content", "only text content parts are supported");
    if (!text.empty()) text += "\n";
    const std::string& t = part["text"].get_ref<const std::string&>();
    text += t;
    if (part.contains("kv_chunk") && kv_chunk_mark(part, fmt::format("{}.content[{}]", where, j)) && chunks)
      chunks->push_back({message, t});
  }
  return text;
}

// Message content may be a string or an array of text parts (joined); a
// message or part marked `kv_chunk` adds its text to `chunks`.
Json normalize_messages(const Json& messages, std::vector<ChatRequest::KvChunk>& chunks) {
  if (!messages.is_array() || messages.empty())
    invalid("messages", "'messages' must be a non-empty array");
  Json out = Json::array();
  LegacyCalls legacy;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) invalid(where, fmt::format("'{}' must be an object", where));
    const std::string role = checked_role(m, where);
    check_message_tools(m, where);
    Json copy = legacy_function_message(m, where, legacy);
    if (role == "developer") copy["role"] = "system";
    // An assistant turn with neither text nor calls (content null) is empty text.
    if (role == "assistant" && !field(copy, "content") && !field(copy, "tool_calls")) copy["content"] = "";
    const bool whole_chunk = kv_chunk_mark(m, where);
    if (const Json* content = field(m, "content"); content && content->is_array()) {
      copy["content"] = joined_parts(*content, where, i, whole_chunk ? nullptr : &chunks);
    } else if (content && !content->is_string()) {
      invalid(where + ".content", fmt::format("'{}.content' must be a string or an array of parts", where));
    }
    if (copy.contains("kv_chunk")) copy.erase("kv_chunk");  // the template never sees the mark
    if (whole_chunk && copy.contains("content") && copy["content"].is_string())
      chunks.push_back({i, copy["content"].get<std::string>()});
    out.push_back(std::move(copy));
  }
  return out;
}

// One prompt's text or ids; `param` names it ("prompt", "prompt[2]").
Prompt one_prompt(const Json& p, const std::string& param) {
  if (p.is_string()) {
    if (p.get_ref<const std::string&>().empty()) invalid(param, fmt::format("'{}' is empty", param));
    return p.get<std::string>();
  }
  if (p.is_array() && !p.empty()) return token_ids(p, param);
  invalid(param, fmt::format("'{}' must be a string or a non-empty array of token ids", param));
}

// OpenAI's `prompt` (and the embeddings' `input`, named by `param`): a
// string, token ids, or a list of either.
std::vector<Prompt> prompts(const Json& prompt, const std::string& param = "prompt") {
  if (prompt.is_string()) return {one_prompt(prompt, param)};
  if (!prompt.is_array() || prompt.empty())
    invalid(param, fmt::format("'{}' must be a string, an array of token ids, or an array of strings or of token-id "
                               "arrays", param));
  if (prompt[0].is_number()) return {one_prompt(prompt, param)};
  std::vector<Prompt> out;
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (!prompt[i].is_string() && !prompt[i].is_array())
      invalid(param, fmt::format("a list '{}' must hold strings or token-id arrays", param));
    out.push_back(one_prompt(prompt[i], prompt.size() == 1 ? param : fmt::format("{}[{}]", param, i)));
  }
  return out;
}

}  // namespace

std::variant<CompletionRequest, RequestError> parse_completion_request(const Json& body) {
  return validated<CompletionRequest>([&] {
    CompletionRequest r;
    r.options = parse_options(body, /*chat=*/false);
    r.echo = boolean(body, "echo").value_or(false);
    if (r.echo && !r.options.resume_token_ids.empty())
      invalid("echo", "'echo' cannot be combined with 'resume_token_ids' (the prompt was sent already)");
    const Json* prompt = field(body, "prompt");
    if (!prompt) invalid("prompt", "'prompt' is required");
    r.prompts = prompts(*prompt);
    r.suffix = string(body, "suffix");
    if (r.suffix) {
      if (r.echo) invalid("suffix", "'suffix' cannot be combined with 'echo'");
      for (const Prompt& p : r.prompts)
        if (!std::holds_alternative<std::string>(p)) invalid("suffix", "'suffix' fills in after text prompts, not token ids");
    }
    if (r.prompts.size() > 1 && !r.options.resume_token_ids.empty())
      invalid("prompt", "'resume_token_ids' resumes one prompt's choice, not a list of prompts");
    if (r.prompts.size() * static_cast<size_t>(r.options.best_of) > static_cast<size_t>(kMaxCandidates))
      invalid_field("prompt", fmt::format("{} prompts of {} candidates each (n, best_of) are more than {}: split the request",
                                          r.prompts.size(), r.options.best_of, kMaxCandidates), "invalid_value");
    if (r.options.max_tokens == 0 && !r.options.resume_token_ids.empty())
      invalid("max_tokens", "'max_tokens' 0 generates nothing: there is no stream to resume");
    if (!r.options.max_tokens) r.options.max_tokens = 16;  // OpenAI's default for completions
    r.kv_chunks = parse_kv_chunk_spans(body, r.prompts, r.suffix.has_value());
    return r;
  });
}

namespace {

// The fields of a chat request that make its prompt (messages, tools, the
// template's extra variables), into `r`.
void parse_chat_fields(const Json& body, ChatRequest& r) {
  if (!body.is_object()) invalid("body", "the request body must be a JSON object");
  const Json* messages = field(body, "messages");
  if (!messages) invalid("messages", "'messages' is required");
  r.messages = normalize_messages(*messages, r.kv_chunks);
  r.template_extra = Json::object();
  parse_tools(body, r);
  // The kwargs are taken whole (they win over tools and documents): adding
  // them one by one walked every key before each (ordered_json), quadratic
  // in their number (80,000 took 9.3 s).
  if (const Json* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) invalid("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    r.template_extra = *kw;
  }
  // Hugging Face passes tools (and documents) to templates, not tool_choice.
  if (!r.tools.is_null() && !r.template_extra.contains("tools")) r.template_extra["tools"] = r.tools;
  if (const Json* v = field(body, "documents"); v && !r.template_extra.contains("documents"))
    r.template_extra["documents"] = *v;
}

// What chat may ask for that kvlm cannot give: audio output, web search.
// (Fields that only tune a service, such as store or service_tier, are
// ignored: docs/server.md "OpenAI's request fields".)
void refuse_unsupported_outputs(const Json& body) {
  if (field(body, "audio"))
    invalid_field("audio", "'audio' output is not supported: kvlm writes text only", "unsupported_parameter");
  if (const Json* m = field(body, "modalities")) {
    if (!m->is_array()) invalid_field("modalities", "'modalities' must be an array", "invalid_type");
    for (const Json& x : *m)
      if (x != "text")
        invalid_field("modalities", "'modalities' may only ask for \"text\": kvlm writes text only", "unsupported_value");
  }
  if (field(body, "web_search_options"))
    invalid_field("web_search_options", "'web_search_options': kvlm does not search the web", "unsupported_parameter");
}

// reasoning_format and thinking_budget (ChatRequest).
void parse_reasoning_fields(const Json& body, ChatRequest& r) {
  if (auto f = string(body, "reasoning_format")) {
    if (*f == "none") {
      r.separate_reasoning = false;
    } else if (*f == "separate" || *f == "deepseek" || *f == "auto") {
      r.separate_reasoning = true;
    } else {
      invalid_field("reasoning_format", "'reasoning_format' must be \"none\" or \"separate\"", "invalid_value");
    }
  }
  if (auto n = integer(body, "thinking_budget", 0, 1 << 30)) r.thinking_budget = static_cast<int32_t>(*n);
}

}  // namespace

std::variant<ChatRequest, RequestError> parse_chat_request(const Json& body) {
  return validated<ChatRequest>([&] {
    ChatRequest r;
    r.options = parse_options(body, /*chat=*/true);
    refuse_unsupported_outputs(body);
    parse_chat_fields(body, r);
    parse_reasoning_fields(body, r);
    return r;
  });
}

std::variant<ChatRequest, RequestError> parse_chat_prompt(const Json& body) {
  return validated<ChatRequest>([&] {
    ChatRequest r;
    parse_chat_fields(body, r);
    return r;
  });
}

std::variant<EmbeddingsRequest, RequestError> parse_embeddings_request(const Json& body) {
  return validated<EmbeddingsRequest>([&] {
    if (!body.is_object()) invalid("body", "the request body must be a JSON object");
    const Json* input = field(body, "input");
    if (!input) invalid("input", "'input' is required");
    EmbeddingsRequest r;
    r.inputs = prompts(*input, "input");
    if (r.inputs.size() > static_cast<size_t>(kMaxEmbeddingInputs))
      invalid_field("input", fmt::format("'input' holds {} inputs; at most {} are embedded in one request",
                                         r.inputs.size(), kMaxEmbeddingInputs), "invalid_value");
    r.model = string(body, "model").value_or("");
    const std::string format = string(body, "encoding_format").value_or("float");
    if (format != "float" && format != "base64")
      invalid("encoding_format", fmt::format("'encoding_format' must be 'float' or 'base64', got '{}'", format));
    r.base64 = format == "base64";
    // The model's vectors have one size; shortening them (Matryoshka
    // embeddings) would be a wrong vector for any model not trained for it.
    if (const Json* d = field(body, "dimensions"); d && !d->is_null())
      invalid_field("dimensions", "'dimensions' is not supported: the model's embeddings have one size",
                    "unsupported_parameter");
    (void)string(body, "user");  // accepted, as OpenAI does; it must be a string
    return r;
  });
}

std::variant<TokenizeRequest, RequestError> parse_tokenize_request(const Json& body) {
  return validated<TokenizeRequest>([&] {
    if (!body.is_object()) invalid("body", "the request body must be a JSON object");
    // vLLM names the text "prompt"; llama.cpp "content".
    auto content = field(body, "content") || !field(body, "prompt") ? string(body, "content") : string(body, "prompt");
    if (!content) invalid("content", "'content' (or 'prompt') must be a string");
    TokenizeRequest r;
    r.content = std::move(*content);
    r.add_special = boolean(body, "add_special").value_or(true);
    r.parse_special = boolean(body, "parse_special").value_or(true);
    r.with_pieces = boolean(body, "with_pieces").value_or(false);
    return r;
  });
}

std::variant<std::vector<int32_t>, RequestError> parse_detokenize_request(const Json& body, int32_t vocab_size) {
  return validated<std::vector<int32_t>>([&] {
    const Json* tokens = field(body, "tokens");
    if (!tokens || !tokens->is_array()) invalid("tokens", "'tokens' must be an array of token ids");
    std::vector<int32_t> ids;
    for (const Json& t : *tokens) ids.push_back(static_cast<int32_t>(integer_item(t, "tokens", 0, vocab_size - 1)));
    return ids;
  });
}

Json usage_json(const Usage& u) {
  return Json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"prompt_tokens_details", Json{{"cached_tokens", u.cached_tokens}}}};
}

namespace {
Json reason_json(const std::string& r) { return r.empty() ? Json(nullptr) : Json(r); }
}  // namespace

Json completion_choice(int32_t index, const std::string& text, const std::string& finish_reason, Json logprobs) {
  return Json{{"index", index}, {"text", text}, {"logprobs", std::move(logprobs)},
              {"finish_reason", reason_json(finish_reason)}};
}

Json chat_tool_calls_choice(int32_t index, const std::string& content, Json tool_calls, Json logprobs,
                            CallStyle style, bool cut) {
  Json message = {{"role", "assistant"}, {"content", content.empty() ? Json(nullptr) : Json(content)}};
  const bool legacy = style == CallStyle::kFunctionCall;
  if (legacy) {
    message["function_call"] = tool_calls.empty() ? Json(nullptr) : tool_calls[0]["function"];
  } else {
    message["tool_calls"] = std::move(tool_calls);
  }
  return Json{{"index", index},
              {"message", std::move(message)},
              {"logprobs", std::move(logprobs)},
              {"finish_reason", cut ? "length" : legacy ? "function_call" : "tool_calls"}};
}

Json chat_choice(int32_t index, const std::string& text, const std::string& finish_reason, Json logprobs) {
  return Json{{"index", index},
              {"message", Json{{"role", "assistant"}, {"content", text}}},
              {"logprobs", std::move(logprobs)},
              {"finish_reason", reason_json(finish_reason)}};
}

Json choices_response(const std::string& id, int64_t created, const std::string& model, bool chat, Json choices,
                      const Usage& usage) {
  return Json{{"id", id},
              {"object", chat ? "chat.completion" : "text_completion"},
              {"created", created},
              {"model", model},
              {"choices", std::move(choices)},
              {"usage", usage_json(usage)}};
}

Json completion_response(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                         const std::string& finish_reason, const Usage& usage, Json logprobs) {
  return choices_response(id, created, model, false,
                          Json::array({completion_choice(0, text, finish_reason, std::move(logprobs))}), usage);
}

Json chat_response(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                   const std::string& finish_reason, const Usage& usage, Json logprobs) {
  return choices_response(id, created, model, true, Json::array({chat_choice(0, text, finish_reason, std::move(logprobs))}),
                          usage);
}

Json completion_chunk(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                      const std::string& finish_reason, Json logprobs, int32_t index) {
  return Json{{"id", id},
              {"object", "text_completion"},
              {"created", created},
              {"model", model},
              {"choices", Json::array({completion_choice(index, text, finish_reason, std::move(logprobs))})}};
}

Json chat_chunk(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                const std::string& finish_reason, bool with_role, Json logprobs, int32_t index) {
  Json delta = Json::object();
  if (with_role) delta["role"] = "assistant";
  if (!text.empty() || finish_reason.empty()) delta["content"] = text;
  return Json{{"id", id},
              {"object", "chat.completion.chunk"},
              {"created", created},
              {"model", model},
              {"choices", Json::array({Json{{"index", index}, {"delta", delta}, {"logprobs", std::move(logprobs)},
                                            {"finish_reason", reason_json(finish_reason)}}})}};
}

Json chat_tool_calls_chunk(const std::string& id, int64_t created, const std::string& model, Json tool_calls,
                           int32_t index) {
  return Json{{"id", id},
              {"object", "chat.completion.chunk"},
              {"created", created},
              {"model", model},
              {"choices", Json::array({Json{{"index", index}, {"delta", Json{{"tool_calls", std::move(tool_calls)}}},
                                            {"logprobs", nullptr}, {"finish_reason", nullptr}}})}};
}

Json chat_function_call_chunk(const std::string& id, int64_t created, const std::string& model, Json function_call,
                              int32_t index) {
  return Json{{"id", id},
              {"object", "chat.completion.chunk"},
              {"created", created},
              {"model", model},
              {"choices", Json::array({Json{{"index", index}, {"delta", Json{{"function_call", std::move(function_call)}}},
                                            {"logprobs", nullptr}, {"finish_reason", nullptr}}})}};
}

std::string token_text(const std::string& bytes) {
  if (unicode::is_valid_utf8(bytes)) return bytes;
  std::string out = "bytes:";
  for (unsigned char c : bytes) out += fmt::format("\\x{:02x}", c);
  return out;
}

Json completion_logprobs(const std::vector<LogprobEntry>& entries, int64_t* offset) {
  Json tokens = Json::array(), token_logprobs = Json::array(), top_logprobs = Json::array(), offsets = Json::array();
  for (const LogprobEntry& e : entries) {
    tokens.push_back(token_text(e.chosen.bytes));
    if (e.text_offset) *offset = *e.text_offset;
    offsets.push_back(*offset);
    *offset += static_cast<int64_t>(e.chosen.bytes.size());
    if (std::isnan(e.chosen.logprob)) {  // nothing predicts an echoed prompt's first token
      token_logprobs.push_back(nullptr);
      top_logprobs.push_back(nullptr);
      continue;
    }
    token_logprobs.push_back(e.chosen.logprob);
    // As vLLM: the top tokens and the chosen one, keyed by their text.
    Json top = Json::object();
    for (const LogprobToken& t : e.top) top[token_text(t.bytes)] = t.logprob;
    top[token_text(e.chosen.bytes)] = e.chosen.logprob;
    top_logprobs.push_back(std::move(top));
  }
  return Json{{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top_logprobs},
              {"text_offset", offsets}};
}

namespace {
Json chat_token(const LogprobToken& t) {
  Json bytes = Json::array();
  for (unsigned char c : t.bytes) bytes.push_back(static_cast<int>(c));
  return Json{{"token", token_text(t.bytes)}, {"logprob", t.logprob}, {"bytes", bytes}};
}
}  // namespace

Json chat_logprobs(const std::vector<LogprobEntry>& entries) {
  Json content = Json::array();
  for (const LogprobEntry& e : entries) {
    Json c = chat_token(e.chosen);
    Json top = Json::array();
    for (const LogprobToken& t : e.top) top.push_back(chat_token(t));
    c["top_logprobs"] = std::move(top);
    content.push_back(std::move(c));
  }
  return Json{{"content", content}};
}

Json usage_chunk(const std::string& id, int64_t created, const std::string& model, bool chat, const Usage& usage) {
  return Json{{"id", id},
              {"object", chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", model},
              {"choices", Json::array()},
              {"usage", usage_json(usage)}};
}

Json error_json(const RequestError& e) {
  return Json{{"error", Json{{"message", e.message},
                             {"type", e.type},
                             {"param", e.param ? Json(*e.param) : Json(nullptr)},
                             {"code", e.code ? Json(*e.code) : Json(nullptr)}}}};
}

std::string new_id(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}-{:016x}{:08x}", prefix, rng(), static_cast<uint32_t>(rng()));
}

}  // namespace kvlm::openai
