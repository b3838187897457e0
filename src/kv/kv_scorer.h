// The learned KV policy's model (docs/kv-budgets.md "Learned policy"): a
// score per resident token from a few features, either linear or one hidden
// layer of tanh units, fitted in C++ on samples that `kvlm kv train-policy`
// records under the oracle. Pure arithmetic: the file format is the app's
// (apps/kv_policy_file.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvlm {

// Features of one resident token at an eviction point, in this order
// (KvTokenStats::features in kv_learned_policy.cpp computes them):
//   log_age            log(1 + tokens since it)
//   log_position       log(1 + its index in the sequence)
//   mean_attention     accumulated attention / queries that saw it
//   log_acc_attention  log(1e-6 + accumulated attention)
//   recent_attention   attention since the last eviction (TOVA's score)
//   last_attention     the newest query's attention
//   max_attention      the most one query gave it
//   entropy            the model's predictive entropy at it (nats)
//   is_first           1 for the sequence's first token (BOS), else 0
//   log_token_count    log(1 + times its token id occurred in the sequence so far)
//   induction          1 if the token before it recurs among the newest 16
//                      tokens (induction heads read the token after an
//                      earlier occurrence of the current one), else 0
inline constexpr int32_t kNumKvFeatures = 11;
std::span<const std::string_view> kv_feature_names();

// Standardised inputs z = (x - mean) / stddev; linear: w1 . z + b2 with
// num_hidden == 0; MLP: w2 . tanh(W1 z + b1) + b2.
struct KvScorerWeights {
  std::string model_name;      // the model the samples came from
  std::string name;            // what requests call it (learned:NAME): the file's stem; not saved
  std::vector<float> mean;     // [kNumKvFeatures]
  std::vector<float> stddev;   // [kNumKvFeatures], each > 0
  int32_t num_hidden = 0;      // 0: linear
  std::vector<float> w1;       // linear: [kNumKvFeatures]; MLP: [num_hidden][kNumKvFeatures]
  std::vector<float> b1;       // MLP: [num_hidden]
  std::vector<float> w2;       // MLP: [num_hidden]
  float b2 = 0;
};

class KvScorer {
 public:
  // Throws Error(kInvalidArgument) naming the first array of the wrong size
  // or a non-finite or non-positive stddev.
  explicit KvScorer(KvScorerWeights w);
  // Higher: more worth keeping. features: [kNumKvFeatures].
  float score(std::span<const float> features) const;
  const KvScorerWeights& weights() const { return w_; }

 private:
  KvScorerWeights w_;
};

// Samples: rows of features with the oracle's target (log mean future
// attention), grouped by eviction point (point_begin[i] is the first row of
// point i) so a fit can be judged on the choices it would make.
struct KvSampleSink {
  std::vector<float> x;                // [num_rows][kNumKvFeatures]
  std::vector<float> y;                // [num_rows]
  std::vector<size_t> point_begin;     // [num_points]
  void begin_point() { point_begin.push_back(y.size()); }
  void add(std::span<const float> features, float target);
  size_t num_rows() const { return y.size(); }
  // Appends another sink's points.
  void append(const KvSampleSink& other);
};

// Least squares with a small ridge (closed form, normal equations).
KvScorerWeights fit_linear(const KvSampleSink& s, double ridge = 1e-3);
// Adam on squared error, minibatches of 256, a fixed seed: deterministic.
KvScorerWeights fit_mlp(const KvSampleSink& s, int32_t num_hidden, int32_t num_epochs, uint64_t seed = 1);

// How well a scorer picks what the oracle picks: the mean, over eviction
// points, of the fraction of the num_evict rows with the lowest target that
// are also among the num_evict the scorer rates lowest.
double eviction_agreement(const KvScorer& scorer, const KvSampleSink& s, int32_t num_evict);

}  // namespace kvlm
