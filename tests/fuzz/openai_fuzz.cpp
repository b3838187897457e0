// libFuzzer target: request bodies of the OpenAI routes (completions, chat,
// embeddings, tokenize, detokenize), parsed and validated the way the routes do it, minus
// HTTP. Any body must give a request or a 4xx RequestError naming a field,
// never a crash, an exception or a sanitizer report; what validates must hold
// the ranges the engine relies on.
//
//   scripts/fuzz.sh 60                     (builds and runs every target)
//   build-fuzz/fuzz/kvlm_fuzz_openai -dict=tests/fuzz/openai.dict CORPUS_DIR
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <type_traits>
#include <variant>

#include "common/error.h"
#include "wire/openai/json_text.h"
#include "wire/openai/protocol.h"

namespace {

using kvlm::openai::Json;
using kvlm::openai::RequestError;

// A refusal is a client error that names what was wrong and serializes.
void check_error(const RequestError& e) {
  if (e.status < 400 || e.status > 499 || e.message.empty()) std::abort();
  if (!e.param || e.param->empty()) std::abort();
  (void)kvlm::openai::dump_json(kvlm::openai::error_json(e));
}

void check_options(const kvlm::openai::GenerationOptions& o, bool chat) {
  const kvlm::SamplingParams& s = o.sampling;
  if (!(s.temperature >= 0.f && s.temperature <= 2.f)) std::abort();
  if (!(s.top_p > 0.f && s.top_p <= 1.f)) std::abort();
  if (o.n < 1 || o.n > kvlm::openai::kMaxChoices || o.best_of < o.n || o.best_of > kvlm::openai::kMaxChoices)
    std::abort();
  if (o.max_tokens && *o.max_tokens < (chat ? 1 : 0)) std::abort();  // completions: 0 scores the prompt
  if (o.kv_budget && *o.kv_budget < 0) std::abort();
  if (o.kv_sinks && *o.kv_sinks < 0) std::abort();
  if (o.kv_recent && *o.kv_recent < 0) std::abort();
}

// A request that parsed is then compiled, as the server does: a grammar
// the compiler refuses must be a 400 naming its field, and one it accepts
// must be there.
template <typename T>
void check_compiled(T request) {
  if (auto e = kvlm::openai::compile_grammars(request)) return check_error(*e);
  if (request.options.constraint_spec && !request.options.constraint) std::abort();
}

template <typename T, typename F>
void check(const std::variant<T, RequestError>& r, F&& on_ok) {
  if (const auto* e = std::get_if<RequestError>(&r)) return check_error(*e);
  on_ok(std::get<T>(r));
  if constexpr (std::is_same_v<T, kvlm::openai::CompletionRequest> || std::is_same_v<T, kvlm::openai::ChatRequest>)
    check_compiled(std::get<T>(r));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace oa = kvlm::openai;
  Json body;
  try {
    body = oa::parse_json(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const kvlm::Error&) {
    return 0;  // not JSON: the routes answer 400 before any field is read
  }
  check(oa::parse_completion_request(body), [](const oa::CompletionRequest& r) {
    check_options(r.options, /*chat=*/false);
    if (r.prompts.empty() || r.prompts.size() * static_cast<size_t>(r.options.best_of) >
                                 static_cast<size_t>(oa::kMaxCandidates))
      std::abort();
    for (const oa::Prompt& p : r.prompts) {
      if (const auto* text = std::get_if<std::string>(&p); text && text->empty()) std::abort();
      if (const auto* ids = std::get_if<std::vector<int32_t>>(&p)) {
        if (ids->empty()) std::abort();
        for (int32_t id : *ids)
          if (id < 0) std::abort();
      }
    }
  });
  check(oa::parse_chat_request(body), [](const oa::ChatRequest& r) {
    check_options(r.options, /*chat=*/true);
    if (!r.messages.is_array() || r.messages.empty() || !r.template_extra.is_object()) std::abort();
    for (const Json& m : r.messages) {
      if (!m.is_object() || !m.at("role").is_string()) std::abort();
      // Templates get the roles they know (developer as system, function as tool).
      if (m["role"] == "developer" || m["role"] == "function") std::abort();
      if (const auto c = m.find("content"); c != m.end() && !c->is_string() && !c->is_null()) std::abort();
    }
    (void)oa::dump_json(r.messages);
    (void)oa::dump_json(r.template_extra);
  });
  check(oa::parse_embeddings_request(body), [](const oa::EmbeddingsRequest& r) {
    if (r.inputs.empty() || r.inputs.size() > static_cast<size_t>(oa::kMaxEmbeddingInputs)) std::abort();
    for (const oa::Prompt& p : r.inputs) {
      if (const auto* text = std::get_if<std::string>(&p); text && text->empty()) std::abort();
      if (const auto* ids = std::get_if<std::vector<int32_t>>(&p); ids && ids->empty()) std::abort();
    }
  });
  check(oa::parse_tokenize_request(body), [](const oa::TokenizeRequest&) {});
  constexpr int32_t kVocab = 32000;
  check(oa::parse_detokenize_request(body, kVocab), [](const std::vector<int32_t>& ids) {
    for (int32_t id : ids)
      if (id < 0 || id >= kVocab) std::abort();
  });
  (void)oa::dump_json(body);
  return 0;
}
