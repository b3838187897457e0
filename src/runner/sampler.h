// Turns a row of logits into the next token. Deterministic for a given seed:
// each request owns its Sampler and its random stream.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "common/sampling_params.h"

namespace kvlm {

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // Picks a token from logits[0..n). `history` is the sequence so far (prompt
  // and output), used by the penalties. Order as llama.cpp's default chain:
  // logit bias, penalties, top-k, top-p, min-p, temperature, draw.
  // `draft`: a proposed token (speculative decoding, one-hot proposal). The
  // draw tries it first: it comes out with its probability p(draft), and
  // otherwise the draw falls on the other candidates in proportion to theirs
  // (the residual distribution). That is the rejection-sampling rule with a
  // deterministic proposal: the token follows the same distribution as
  // without a draft, and it still takes exactly one draw. Greedy: the argmax.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history,
                 std::optional<int32_t> draft = std::nullopt);

  const SamplingParams& params() const { return params_; }
  // Advances the random stream past `n` calls of sample(), as if they had
  // been made (a resumed generation continues its seed's stream): a call
  // that samples (temperature > 0) draws one number; a greedy one draws none.
  void skip_draws(int64_t n);

 private:
  struct Candidate {
    int32_t id;
    float logit;
    float p;
  };
  double draw();  // uniform in [0, 1): the one use of rng_ per sampling call
  // The steps of sample(), in its order; each works on candidates_.
  void load_candidates(std::span<const float> logits);  // one per id, logit biased
  void apply_penalties(std::span<const int32_t> history);
  int32_t argmax_candidate() const;  // over the changed logits, by id
  void keep_top_k();                 // sorts candidates_ by logit, most likely first
  void keep_top_p_and_min_p();       // needs candidates_ sorted and p at temperature 1
  void softmax(float temperature);   // candidates_[0] has the largest logit
  int32_t draw_candidate(std::optional<int32_t> draft);
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<Candidate> candidates_;  // scratch, reused
};

// Index of the largest value (first on ties).
int32_t argmax(std::span<const float> values);

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.f;
};

// What a request with logprobs gets for each generated token: the chosen
// token's log-probability and the num_top most likely tokens (most likely
// first; ties by lower id).
struct SampledLogprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;
};

// Log-probabilities under the model's own distribution, log_softmax(logits):
// before the logit bias, penalties, temperature and truncation of the
// sampler, as OpenAI and vLLM report them. num_top is clamped to the vocab.
SampledLogprobs token_logprobs(std::span<const float> logits, int32_t token, int32_t num_top);

}  // namespace kvlm
