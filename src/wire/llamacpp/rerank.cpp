#include "wire/llamacpp/rerank.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "wire/openai/fields.h"

namespace kvlm::llamacpp {
namespace {

using openai::field;
using openai::invalid_field;

// A document is a string or, as Jina and Cohere also take it, {"text": ...}.
std::string document_text(const Json& d, const std::string& where) {
  if (d.is_string()) return d.get<std::string>();
  if (d.is_object()) {
    const Json* t = field(d, "text");
    if (t && t->is_string()) return t->get<std::string>();
  }
  invalid_field(where, fmt::format("'{}' must be a string or an object with a string 'text'", where));
}

// text_1 / text_2: a string, or a non-empty list of strings.
std::vector<std::string> texts(const Json& body, const char* key) {
  const Json* v = field(body, key);
  if (v && v->is_string()) return {v->get<std::string>()};
  if (!v || !v->is_array() || v->empty())
    invalid_field(key, fmt::format("'{}' must be a string or a non-empty list of strings", key));
  std::vector<std::string> out;
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) invalid_field(key, fmt::format("'{}[{}]' must be a string", key, i));
    out.push_back((*v)[i].get<std::string>());
  }
  return out;
}

std::string model_field(const Json& body) { return openai::string_field(body, "model").value_or(""); }

Json usage(int64_t num_tokens) { return {{"prompt_tokens", num_tokens}, {"total_tokens", num_tokens}}; }

}  // namespace

std::variant<RerankRequest, openai::RequestError> parse_rerank_request(const Json& body) {
  return openai::validated<RerankRequest>([&] {
    if (!body.is_object()) invalid_field("body", "the request body must be a JSON object");
    RerankRequest r;
    r.model = model_field(body);
    const Json* q = field(body, "query");
    if (!q || !q->is_string()) invalid_field("query", "'query' must be a string");
    const Json* docs = field(body, "documents");
    if (!docs || !docs->is_array() || docs->empty())
      invalid_field("documents", "'documents' must be a non-empty array of strings");
    for (size_t i = 0; i < docs->size(); ++i)
      r.pairs.push_back({q->get<std::string>(), document_text((*docs)[i], fmt::format("documents[{}]", i))});
    r.top_n = openai::integer_field(body, "top_n", 1, INT32_MAX);
    r.return_documents = openai::bool_field(body, "return_documents").value_or(false);
    return r;
  });
}

std::variant<ScoreRequest, openai::RequestError> parse_score_request(const Json& body) {
  return openai::validated<ScoreRequest>([&] {
    if (!body.is_object()) invalid_field("body", "the request body must be a JSON object");
    ScoreRequest r;
    r.model = model_field(body);
    const std::vector<std::string> a = texts(body, "text_1"), b = texts(body, "text_2");
    // vLLM's pairings: one text_1 against every text_2, or item by item.
    if (a.size() > 1 && a.size() != b.size())
      invalid_field("text_2", fmt::format("text_1 has {} texts and text_2 {}: the pairs are 1:1, 1:N or N:N",
                                          a.size(), b.size()));
    for (size_t i = 0; i < b.size(); ++i) r.pairs.push_back({a.size() == 1 ? a[0] : a[i], b[i]});
    return r;
  });
}

Json rerank_body(const RerankRequest& r, const std::vector<float>& scores, const std::string& model,
                 int64_t num_tokens) {
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), size_t{0});
  // Best first; equal scores keep the documents' order.
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return scores[x] > scores[y]; });
  if (r.top_n && static_cast<size_t>(*r.top_n) < order.size()) order.resize(static_cast<size_t>(*r.top_n));
  Json results = Json::array();
  for (size_t i : order) {
    Json e = {{"index", i}, {"relevance_score", scores[i]}};
    if (r.return_documents) e["document"] = {{"text", r.pairs[i].document}};
    results.push_back(std::move(e));
  }
  return {{"model", model}, {"object", "list"}, {"usage", usage(num_tokens)}, {"results", std::move(results)}};
}

Json score_body(const std::vector<float>& scores, const std::string& model, int64_t num_tokens,
                const std::string& id, int64_t created) {
  Json data = Json::array();
  for (size_t i = 0; i < scores.size(); ++i) data.push_back({{"index", i}, {"object", "score"}, {"score", scores[i]}});
  Json u = usage(num_tokens);
  u["completion_tokens"] = 0;
  return {{"id", id}, {"object", "list"}, {"created", created}, {"model", model}, {"data", std::move(data)},
          {"usage", std::move(u)}};
}

}  // namespace kvlm::llamacpp
