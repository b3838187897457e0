#include "kv/kv_scorer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <random>

#include "common/assert.h"
#include "common/error.h"

namespace kvlm {
namespace {

constexpr std::array<std::string_view, kNumKvFeatures> kFeatureNames = {
    "log_age",        "log_position",  "mean_attention", "log_acc_attention", "recent_attention",
    "last_attention", "max_attention", "entropy",        "is_first",          "log_token_count",
    "induction",
};

void check_size(const std::vector<float>& v, size_t n, const char* name) {
  if (v.size() != n)
    throw_error(ErrorCode::kInvalidArgument, "KV scorer: '{}' has {} values, expected {}", name, v.size(), n);
  for (float f : v)
    if (!std::isfinite(f)) throw_error(ErrorCode::kInvalidArgument, "KV scorer: '{}' holds a non-finite value", name);
}

// Mean and standard deviation per feature (stddev 1 for a constant feature,
// so standardising never divides by zero).
void standardisation(const KvSampleSink& s, KvScorerWeights& w) {
  const size_t n = s.num_rows();
  w.mean.assign(kNumKvFeatures, 0.f);
  w.stddev.assign(kNumKvFeatures, 1.f);
  for (int32_t f = 0; f < kNumKvFeatures; ++f) {
    double sum = 0, sq = 0;
    for (size_t i = 0; i < n; ++i) {
      const double v = s.x[i * kNumKvFeatures + f];
      sum += v;
      sq += v * v;
    }
    const double mean = n ? sum / n : 0, var = n ? sq / n - mean * mean : 0;
    w.mean[f] = static_cast<float>(mean);
    w.stddev[f] = var > 1e-12 ? static_cast<float>(std::sqrt(var)) : 1.f;
  }
}

std::array<float, kNumKvFeatures> standardised(const KvScorerWeights& w, const float* x) {
  std::array<float, kNumKvFeatures> z{};
  for (int32_t f = 0; f < kNumKvFeatures; ++f) z[f] = (x[f] - w.mean[f]) / w.stddev[f];
  return z;
}

// Solves A x = b (A: n x n, symmetric positive definite after the ridge) by
// Gaussian elimination with partial pivoting.
std::vector<double> solve(std::vector<double> a, std::vector<double> b) {
  const size_t n = b.size();
  for (size_t c = 0; c < n; ++c) {
    size_t p = c;
    for (size_t r = c + 1; r < n; ++r)
      if (std::abs(a[r * n + c]) > std::abs(a[p * n + c])) p = r;
    for (size_t k = 0; k < n; ++k) std::swap(a[c * n + k], a[p * n + k]);
    std::swap(b[c], b[p]);
    KVLM_ASSERT(std::abs(a[c * n + c]) > 1e-12, "singular system despite the ridge");
    for (size_t r = c + 1; r < n; ++r) {
      const double f = a[r * n + c] / a[c * n + c];
      for (size_t k = c; k < n; ++k) a[r * n + k] -= f * a[c * n + k];
      b[r] -= f * b[c];
    }
  }
  std::vector<double> x(n);
  for (size_t r = n; r-- > 0;) {
    double v = b[r];
    for (size_t k = r + 1; k < n; ++k) v -= a[r * n + k] * x[k];
    x[r] = v / a[r * n + r];
  }
  return x;
}

}  // namespace

std::span<const std::string_view> kv_feature_names() { return kFeatureNames; }

KvScorer::KvScorer(KvScorerWeights w) : w_(std::move(w)) {
  constexpr size_t F = kNumKvFeatures;
  check_size(w_.mean, F, "mean");
  check_size(w_.stddev, F, "stddev");
  for (float s : w_.stddev)
    if (!(s > 0)) throw_error(ErrorCode::kInvalidArgument, "KV scorer: a stddev is not positive");
  if (w_.num_hidden < 0 || w_.num_hidden > 1024)
    throw_error(ErrorCode::kInvalidArgument, "KV scorer: {} hidden units (0..1024)", w_.num_hidden);
  const auto h = static_cast<size_t>(w_.num_hidden);
  check_size(w_.w1, h ? h * F : F, "w1");
  check_size(w_.b1, h, "b1");
  check_size(w_.w2, h, "w2");
  if (!std::isfinite(w_.b2)) throw_error(ErrorCode::kInvalidArgument, "KV scorer: 'b2' is not finite");
}

namespace {
// The MLP's activation, in training and in scoring alike: tanh from one expf
// (libm's tanhf, through expm1f, was 7.5% of a 260K-parameter model's decode
// under the learned policy, perf). Within 1e-7 of tanh; odd by construction.
float mlp_tanh(float x) {
  const float e = std::exp(-2.f * std::abs(x));
  return std::copysign((1.f - e) / (1.f + e), x);
}
}  // namespace

float KvScorer::score(std::span<const float> features) const {
  KVLM_ASSERT(features.size() == kNumKvFeatures, "one row of features");
  const auto z = standardised(w_, features.data());
  if (w_.num_hidden == 0) return std::inner_product(z.begin(), z.end(), w_.w1.begin(), w_.b2);
  float out = w_.b2;
  for (int32_t j = 0; j < w_.num_hidden; ++j) {
    const float* row = &w_.w1[static_cast<size_t>(j) * kNumKvFeatures];
    out += w_.w2[j] * mlp_tanh(std::inner_product(z.begin(), z.end(), row, w_.b1[j]));
  }
  return out;
}

void KvSampleSink::add(std::span<const float> features, float target) {
  KVLM_ASSERT(features.size() == kNumKvFeatures && !point_begin.empty(), "a row of features inside a point");
  x.insert(x.end(), features.begin(), features.end());
  y.push_back(target);
}

void KvSampleSink::append(const KvSampleSink& other) {
  const size_t base = y.size();
  for (size_t p : other.point_begin) point_begin.push_back(base + p);
  x.insert(x.end(), other.x.begin(), other.x.end());
  y.insert(y.end(), other.y.begin(), other.y.end());
}

KvScorerWeights fit_linear(const KvSampleSink& s, double ridge) {
  KvScorerWeights w;
  standardisation(s, w);
  constexpr size_t D = kNumKvFeatures + 1;  // the last column is the intercept
  std::vector<double> a(D * D, 0.0), b(D, 0.0);
  for (size_t i = 0; i < s.num_rows(); ++i) {
    const auto z = standardised(w, &s.x[i * kNumKvFeatures]);
    std::array<double, D> row{};
    std::copy(z.begin(), z.end(), row.begin());
    row[D - 1] = 1;
    for (size_t r = 0; r < D; ++r) {
      b[r] += row[r] * s.y[i];
      for (size_t c = 0; c < D; ++c) a[r * D + c] += row[r] * row[c];
    }
  }
  for (size_t r = 0; r + 1 < D; ++r) a[r * D + r] += ridge * static_cast<double>(s.num_rows());
  const std::vector<double> x = solve(std::move(a), std::move(b));
  w.w1.assign(x.begin(), x.end() - 1);
  w.b2 = static_cast<float>(x.back());
  return w;
}

// Adam over all parameters, flattened in the order w1, b1, w2, b2.
struct Adam {
  std::vector<double> m, v;
  int64_t t = 0;
  explicit Adam(size_t n) : m(n, 0.0), v(n, 0.0) {}
  void step(std::vector<float*>& params, const std::vector<double>& grad, double lr) {
    constexpr double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    ++t;
    const double c1 = 1 - std::pow(b1, static_cast<double>(t)), c2 = 1 - std::pow(b2, static_cast<double>(t));
    for (size_t i = 0; i < grad.size(); ++i) {
      m[i] = b1 * m[i] + (1 - b1) * grad[i];
      v[i] = b2 * v[i] + (1 - b2) * grad[i] * grad[i];
      *params[i] -= static_cast<float>(lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps));
    }
  }
};

KvScorerWeights fit_mlp(const KvSampleSink& s, int32_t num_hidden, int32_t num_epochs, uint64_t seed) {
  KVLM_ASSERT(num_hidden > 0 && s.num_rows() > 0, "an MLP needs hidden units and samples");
  constexpr int32_t F = kNumKvFeatures;
  const auto H = static_cast<size_t>(num_hidden);
  KvScorerWeights w;
  standardisation(s, w);
  w.num_hidden = num_hidden;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> init(0.f, 1.f);
  w.w1.resize(H * F);
  for (float& x : w.w1) x = init(rng) / std::sqrt(static_cast<float>(F));
  w.b1.assign(H, 0.f);
  w.w2.resize(H);
  for (float& x : w.w2) x = init(rng) / std::sqrt(static_cast<float>(H));
  w.b2 = static_cast<float>(std::accumulate(s.y.begin(), s.y.end(), 0.0) / static_cast<double>(s.num_rows()));
  std::vector<float*> params;
  for (float& x : w.w1) params.push_back(&x);
  for (float& x : w.b1) params.push_back(&x);
  for (float& x : w.w2) params.push_back(&x);
  params.push_back(&w.b2);
  Adam adam(params.size());
  std::vector<size_t> order(s.num_rows());
  std::iota(order.begin(), order.end(), size_t{0});
  constexpr size_t kBatch = 256;
  std::vector<double> grad(params.size());
  std::vector<float> hidden(H);
  for (int32_t epoch = 0; epoch < num_epochs; ++epoch) {
    std::shuffle(order.begin(), order.end(), rng);
    // A step size that halves over the run: the last epochs settle.
    const double lr = 3e-3 / (1.0 + static_cast<double>(epoch) / std::max(1, num_epochs));
    for (size_t start = 0; start < order.size(); start += kBatch) {
      const size_t end = std::min(order.size(), start + kBatch);
      std::fill(grad.begin(), grad.end(), 0.0);
      for (size_t k = start; k < end; ++k) {
        const size_t i = order[k];
        const auto z = standardised(w, &s.x[i * F]);
        double out = w.b2;
        for (size_t j = 0; j < H; ++j) {
          hidden[j] = mlp_tanh(std::inner_product(z.begin(), z.end(), &w.w1[j * F], w.b1[j]));
          out += w.w2[j] * hidden[j];
        }
        const double d = 2.0 * (out - s.y[i]) / static_cast<double>(end - start);
        for (size_t j = 0; j < H; ++j) {
          const double dh = d * w.w2[j] * (1.0 - hidden[j] * hidden[j]);
          for (int32_t f = 0; f < F; ++f) grad[j * F + f] += dh * z[f];
          grad[H * F + j] += dh;
          grad[H * F + H + j] += d * hidden[j];
        }
        grad.back() += d;
      }
      adam.step(params, grad, lr);
    }
  }
  return w;
}

double eviction_agreement(const KvScorer& scorer, const KvSampleSink& s, int32_t num_evict) {
  double sum = 0;
  size_t num_points = 0;
  for (size_t p = 0; p < s.point_begin.size(); ++p) {
    const size_t begin = s.point_begin[p], end = p + 1 < s.point_begin.size() ? s.point_begin[p + 1] : s.num_rows();
    const auto n = static_cast<int32_t>(end - begin);
    if (n <= num_evict) continue;
    std::vector<int32_t> by_target(n), by_score(n);
    std::vector<float> score(n);
    for (int32_t i = 0; i < n; ++i) score[i] = scorer.score({&s.x[(begin + i) * kNumKvFeatures], kNumKvFeatures});
    std::iota(by_target.begin(), by_target.end(), 0);
    std::iota(by_score.begin(), by_score.end(), 0);
    std::partial_sort(by_target.begin(), by_target.begin() + num_evict, by_target.end(),
                      [&](int32_t a, int32_t b) { return s.y[begin + a] < s.y[begin + b]; });
    std::partial_sort(by_score.begin(), by_score.begin() + num_evict, by_score.end(),
                      [&](int32_t a, int32_t b) { return score[a] < score[b]; });
    std::vector<bool> chosen(n, false);
    for (int32_t i = 0; i < num_evict; ++i) chosen[by_score[i]] = true;
    int32_t both = 0;
    for (int32_t i = 0; i < num_evict; ++i) both += chosen[by_target[i]] ? 1 : 0;
    sum += static_cast<double>(both) / num_evict;
    ++num_points;
  }
  return num_points ? sum / static_cast<double>(num_points) : 0;
}

}  // namespace kvlm
