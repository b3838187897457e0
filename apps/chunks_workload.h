// The workload of `kvlm bench chunks` (cmd_bench_chunks.cpp): RAG-shaped
// prompts. A pool of documents is cut from a text at sentence ends, one
// after another, each tokenized alone (no BOS), so a document's token ids
// are the same in every prompt that holds it. Each request is BOS, K documents of the pool in a
// random order (marked as KV chunks), a short tail and the continuation the
// benchmark scores.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "engine/engine.h"

namespace kvlm {
class Tokenizer;
}

namespace kvlm::apps {

// Where a request's tail and continuation come from.
enum class ChunksQuery {
  kDoc,   // a passage of one of the request's own documents: the model has to recall it
  kText,  // the start of a paragraph of the text after the pool's: unrelated to the documents
};

struct ChunksWorkloadSpec {
  int32_t num_docs = 32;
  int32_t doc_tokens = 128;           // a document ends at the first sentence end at or past this many tokens
  int32_t num_requests = 16;
  int32_t docs_per_request = 6;       // K, drawn without repeats
  int32_t tail_tokens = 16;
  int32_t continuation_tokens = 32;
  ChunksQuery query = ChunksQuery::kDoc;
  uint64_t seed = 1;
};

struct ChunksRequest {
  // BOS (when the vocabulary adds one), the documents, the tail, the continuation.
  std::vector<int32_t> tokens;
  std::vector<TokenSpan> chunks;    // the documents' spans of `tokens`, ascending
  std::vector<int32_t> doc_ids;     // the documents (indices into ChunksWorkload::docs), in prompt order
  int32_t continuation_begin = 0;   // index in `tokens` of the continuation's first token
};

struct ChunksWorkload {
  std::vector<std::vector<int32_t>> docs;  // each tokenized alone, no BOS
  std::optional<int32_t> bos;              // the BOS every prompt starts with, if any
  std::vector<ChunksRequest> requests;

  int32_t max_request_tokens() const;
  double mean_request_tokens() const;
  double mean_doc_tokens() const;
};

// The paragraphs of a text (separated by blank lines), each split into its
// sentences (a sentence ends at '.', '!' or '?', closing quotes included,
// before white space or the paragraph's end), trimmed; empty ones dropped.
std::vector<std::vector<std::string_view>> split_sentences(std::string_view text);

// Builds the pool and the requests; the same text, tokenizer and spec give
// the same workload. Throws Error(kInvalidArgument) for a spec that cannot
// work (K above the pool, a continuation longer than a document with
// ChunksQuery::kDoc) and for a text too short for it, saying how much it gave.
ChunksWorkload make_chunks_workload(std::string_view text, const Tokenizer& tokenizer, const ChunksWorkloadSpec& spec);

}  // namespace kvlm::apps
