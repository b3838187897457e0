// Reranking: a query scored against documents by a reranker model (one
// forward pass per pair). Two APIs read into the same pairs:
// - POST /rerank, /v1/rerank (Jina's and Cohere's shape, as llama-server
//   answers it): {"query", "documents": [string | {"text"}], "top_n",
//   "return_documents"} -> {"model", "object": "list", "usage",
//   "results": [{"index", "relevance_score", "document"?}]}, best first;
// - POST /v1/score (vLLM's): {"text_1", "text_2"}, each a string or a list,
//   paired 1:1, 1:N or N:N -> {"id", "object": "list", "created", "model",
//   "data": [{"index", "object": "score", "score"}], "usage"}, in pair order.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "wire/openai/protocol.h"

namespace kvlm::llamacpp {

using Json = openai::Json;

struct RankPair {
  std::string query;
  std::string document;
};

struct RerankRequest {
  std::string model;               // "": the served model
  std::vector<RankPair> pairs;     // the query with each document, in the request's order
  std::optional<int64_t> top_n;    // unset: every document
  bool return_documents = false;   // llama-server never returns them; Cohere's default
};

struct ScoreRequest {
  std::string model;
  std::vector<RankPair> pairs;     // text_1[i] (or the one text_1) with text_2[i]
};

std::variant<RerankRequest, openai::RequestError> parse_rerank_request(const Json& body);
std::variant<ScoreRequest, openai::RequestError> parse_score_request(const Json& body);

// scores[i] is pairs[i]'s; num_tokens the prompt tokens of every pair.
Json rerank_body(const RerankRequest& r, const std::vector<float>& scores, const std::string& model,
                 int64_t num_tokens);
Json score_body(const std::vector<float>& scores, const std::string& model, int64_t num_tokens,
                const std::string& id, int64_t created);

}  // namespace kvlm::llamacpp
