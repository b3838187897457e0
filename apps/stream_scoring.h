// Scores a text as a stream through the engine: each chunk of the tokenized
// text is one request whose prompt log-probabilities are computed while its
// KV policy (if any) drops tokens, exactly as a long generation would see
// them. Chunks run concurrently (results do not depend on batching).
// Used by `kvlm perplexity --kv-budget` and `kvlm bench kv`.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "engine/engine.h"

namespace kvlm::apps {

struct StreamScore {
  double nll_sum = 0;        // over the scored positions
  double nll_sq_sum = 0;
  int64_t num_scored = 0;
  int64_t num_evaluated = 0;  // prompt tokens run through the model
  double seconds = 0;
  int32_t peak_resident_tokens = 0;  // most KV tokens one sequence held
  std::vector<float> nll;            // each scored position's, in chunk order (runs of the same text line up)

  double perplexity() const;
  double perplexity_error() const;  // one standard error, as llama.cpp prints it
  // Mean |nll - ref.nll| over the positions: how far this run's predictions
  // moved from a reference run of the same text and chunks (bench kv: the
  // full cache of the first KV type). Meaningful where perplexity is not, on
  // random-weight models. Throws Error(kInvalidArgument) if they differ in length.
  double mean_abs_nll_delta(const StreamScore& ref) const;
};

// llama.cpp's method: non-overlapping chunks of n_ctx tokens (BOS first in
// each when the vocabulary adds one), the second half of each chunk scored.
// budget: nullopt = unbounded. max_chunks 0 = all. Throws kvlm::Error.
StreamScore score_stream(Engine& engine, const std::vector<int32_t>& tokens, int32_t n_ctx, int32_t max_chunks,
                         const std::optional<KvBudget>& budget);

// The same over chunks [first_chunk, first_chunk + num_chunks) of the text,
// each chunk with its own budget (the oracle's carries the chunk's trace).
using ChunkBudget = std::function<std::optional<KvBudget>(int32_t chunk)>;
StreamScore score_chunks(Engine& engine, const std::vector<int32_t>& tokens, int32_t n_ctx, int32_t first_chunk,
                         int32_t num_chunks, const ChunkBudget& budget_of);

// Chunks a text of num_tokens yields (at most max_chunks when > 0).
int32_t num_stream_chunks(size_t num_tokens, int32_t n_ctx, int32_t max_chunks);

}  // namespace kvlm::apps
