// Embedding requests (GenerateRequest::pooling): the final hidden states of
// their prompt rows, taken from each step as the runner computes them, and
// pooled when the request finishes.
#include <cmath>

#include "common/assert.h"
#include "engine/engine.h"
#include "engine/engine_live.h"
#include "model/model.h"
#include "runner/model_runner.h"

namespace kvlm {

void Engine::collect_hidden(const SchedulerOutput& out) {
  const std::span<const float> hidden = runner_->hidden();
  const auto dim = static_cast<size_t>(model_->config().dim);
  size_t row = 0;
  for (const ScheduledSeq& s : out.seqs) {
    if (s.num_hidden_rows == 0) continue;
    Live& live = *live_.at(s.id);
    // A preempted request computes its prompt again from the start.
    if (s.num_computed == 0 || live.pooling == Pooling::kLast) {
      live.hidden_sum.assign(dim, 0.0);
      live.num_hidden_rows = 0;
    }
    for (int32_t r = 0; r < s.num_hidden_rows; ++r, ++row) {
      KVLM_ASSERT((row + 1) * dim <= hidden.size(), "a hidden row for every one asked");
      const float* h = &hidden[row * dim];
      for (size_t i = 0; i < dim; ++i) live.hidden_sum[i] += h[i];
      ++live.num_hidden_rows;
    }
  }
}

std::vector<float> Engine::pooled_embedding(const Live& live) {
  KVLM_ASSERT(live.num_hidden_rows > 0, "an embedding request pools at least one row");
  std::vector<double> v = live.hidden_sum;
  for (double& x : v) x /= live.num_hidden_rows;
  if (live.normalize) {
    double ss = 0;
    for (double x : v) ss += x * x;
    // A zero vector stays zero rather than becoming NaN.
    const double scale = ss > 0 ? 1.0 / std::sqrt(ss) : 0.0;
    for (double& x : v) x *= scale;
  }
  return {v.begin(), v.end()};
}

Pooling choose_pooling(const ModelConfig& model, std::string_view flag) {
  if (flag == "mean") return Pooling::kMean;
  if (flag == "last") return Pooling::kLast;
  if (!flag.empty()) throw_error(ErrorCode::kInvalidArgument, "--pooling must be mean or last, got '{}'", flag);
  // llama.cpp's pooling_type: 0 none (per-token vectors: pooled here as for
  // a model that says nothing), 1 mean, 2 cls, 3 last, 4 rank.
  switch (model.pooling_type) {
    case 1:
      return Pooling::kMean;
    case -1:
    case 0:
    case 3:
      return Pooling::kLast;
    default:
      throw_error(ErrorCode::kUnsupported,
                  "the model's pooling_type {} ({}) is not one kvlm has; give --pooling mean or --pooling last",
                  model.pooling_type, model.pooling_type == 2 ? "cls" : "rank or unknown");
  }
}

}  // namespace kvlm
