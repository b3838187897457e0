#include "apps/stream_scoring.h"

#include <chrono>
#include <cmath>
#include <memory>

#include "common/error.h"
#include "engine/request_stream.h"
#include "tokenizer/tokenizer.h"

namespace kvlm::apps {

double StreamScore::perplexity() const { return num_scored ? std::exp(nll_sum / num_scored) : 0; }

double StreamScore::perplexity_error() const {
  if (num_scored < 2) return 0;
  const double mean = nll_sum / num_scored, var = nll_sq_sum / num_scored - mean * mean;
  return var > 0 ? perplexity() * std::sqrt(var / (num_scored - 1)) : 0;
}

double StreamScore::mean_abs_nll_delta(const StreamScore& ref) const {
  if (nll.size() != ref.nll.size())
    throw_error(ErrorCode::kInvalidArgument, "runs of {} and {} scored positions do not compare", nll.size(),
                ref.nll.size());
  double sum = 0;
  for (size_t i = 0; i < nll.size(); ++i) sum += std::abs(static_cast<double>(nll[i]) - ref.nll[i]);
  return nll.empty() ? 0 : sum / static_cast<double>(nll.size());
}

int32_t num_stream_chunks(size_t num_tokens, int32_t n_ctx, int32_t max_chunks) {
  auto n = static_cast<int32_t>(num_tokens / static_cast<size_t>(n_ctx));
  return max_chunks > 0 ? std::min(n, max_chunks) : n;
}

StreamScore score_stream(Engine& engine, const std::vector<int32_t>& tokens, int32_t n_ctx, int32_t max_chunks,
                         const std::optional<KvBudget>& budget) {
  const int32_t num_chunks = num_stream_chunks(tokens.size(), n_ctx, max_chunks);
  return score_chunks(engine, tokens, n_ctx, 0, num_chunks, [&](int32_t) { return budget; });
}

StreamScore score_chunks(Engine& engine, const std::vector<int32_t>& tokens, int32_t n_ctx, int32_t first_chunk,
                         int32_t num_chunks, const ChunkBudget& budget_of) {
  if (num_chunks <= 0 || first_chunk < 0 || first_chunk + num_chunks > num_stream_chunks(tokens.size(), n_ctx, 0))
    throw_error(ErrorCode::kInvalidArgument, "the text has {} tokens: chunks {}..{} of {} do not fit", tokens.size(),
                first_chunk, first_chunk + num_chunks, n_ctx);
  const Tokenizer& tok = engine.tokenizer();
  StreamScore score;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int32_t c = first_chunk; c < first_chunk + num_chunks; ++c) {
    GenerateRequest g;
    g.prompt_tokens.assign(tokens.begin() + static_cast<ptrdiff_t>(c) * n_ctx,
                           tokens.begin() + static_cast<ptrdiff_t>(c + 1) * n_ctx);
    if (auto bos = tok.bos_id(); bos && tok.add_bos()) g.prompt_tokens[0] = *bos;
    g.max_tokens = 1;
    g.ignore_eos = true;
    g.prompt_logprobs = true;
    g.logprobs = 0;
    g.kv_budget = budget_of(c).value_or(KvBudget{});
    streams.push_back(engine.submit(std::move(g)));
  }
  const int32_t first = n_ctx / 2;
  for (auto& stream : streams) {
    std::vector<SampledLogprobs> lp;
    while (auto ev = stream->next()) {
      if (ev->error) throw *ev->error;
      if (!ev->prompt_logprobs.empty()) lp = std::move(ev->prompt_logprobs);
    }
    // lp[j] is the log-probability of prompt token j + 1 (row j predicts it).
    if (lp.size() != static_cast<size_t>(n_ctx - 1))
      throw_error(ErrorCode::kInternal, "expected {} prompt log-probabilities, got {}", n_ctx - 1, lp.size());
    for (int32_t j = first; j < n_ctx - 1; ++j) {
      const double v = -static_cast<double>(lp[static_cast<size_t>(j)].chosen.logprob);
      score.nll_sum += v;
      score.nll_sq_sum += v * v;
      score.nll.push_back(static_cast<float>(v));
      ++score.num_scored;
    }
    score.num_evaluated += n_ctx;
    score.peak_resident_tokens = std::max(score.peak_resident_tokens, stream->stats().peak_resident_tokens);
  }
  score.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return score;
}

}  // namespace kvlm::apps
