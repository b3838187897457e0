#include "engine/spec/speculative.h"

#include <algorithm>

#include "common/error.h"

namespace kvlm {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finaliser: a well-spread hash of x
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t hash_tokens(std::span<const int32_t> tokens) {
  uint64_t h = tokens.size();
  for (int32_t t : tokens) h = mix(h ^ static_cast<uint32_t>(t));
  return h;
}

}  // namespace

std::string_view speculate_mode_name(SpeculateMode m) {
  switch (m) {
    case SpeculateMode::kOff: return "off";
    case SpeculateMode::kNgram: return "ngram";
    case SpeculateMode::kDraft: return "draft";
  }
  return "?";
}

std::vector<std::vector<int32_t>> Proposer::propose_batch(std::span<const ProposalQuery> queries) {
  std::vector<std::vector<int32_t>> out;
  out.reserve(queries.size());
  for (const ProposalQuery& q : queries) out.push_back(propose(q.id, q.tokens, q.num_prompt_tokens, q.max_tokens));
  return out;
}

NgramProposer::NgramProposer(int32_t min_ngram, int32_t max_ngram) : min_ngram_(min_ngram), max_ngram_(max_ngram) {
  if (min_ngram < 1 || max_ngram < min_ngram)
    throw_error(ErrorCode::kInvalidArgument, "n-gram sizes must satisfy 1 <= min ({}) <= max ({})", min_ngram,
                max_ngram);
}

std::vector<int32_t> NgramProposer::propose(RequestId /*id*/, std::span<const int32_t> tokens,
                                            int32_t /*num_prompt_tokens*/, int32_t max_tokens) {
  const auto len = static_cast<int32_t>(tokens.size());
  // The longest n first: a longer match predicts better. The latest earlier
  // occurrence: the text nearest the end is the likeliest to be repeated.
  for (int32_t n = std::min(max_ngram_, len - 1); n >= min_ngram_ && max_tokens > 0; --n) {
    const std::span<const int32_t> tail = tokens.subspan(static_cast<size_t>(len - n));
    for (int32_t start = len - n - 1; start >= 0; --start) {
      if (!std::equal(tail.begin(), tail.end(), tokens.begin() + start)) continue;
      const int32_t from = start + n, count = std::min(max_tokens, len - from);
      return {tokens.begin() + from, tokens.begin() + from + count};
    }
  }
  return {};
}

ReplayProposer::ReplayProposer(double acceptance, int32_t vocab_size)
    : acceptance_(acceptance), vocab_size_(vocab_size) {
  if (!(acceptance >= 0 && acceptance <= 1))
    throw_error(ErrorCode::kInvalidArgument, "acceptance {} must be in [0, 1]", acceptance);
  if (vocab_size < 2) throw_error(ErrorCode::kInvalidArgument, "a replay needs a vocabulary of two tokens or more");
}

void ReplayProposer::add(std::vector<int32_t> prompt, std::vector<int32_t> continuation) {
  continuations_[hash_tokens(prompt)] = std::move(continuation);
}

std::vector<int32_t> ReplayProposer::propose(RequestId /*id*/, std::span<const int32_t> tokens,
                                             int32_t num_prompt_tokens, int32_t max_tokens) {
  const uint64_t key = hash_tokens(tokens.first(static_cast<size_t>(num_prompt_tokens)));
  auto it = continuations_.find(key);
  if (it == continuations_.end()) return {};
  const std::vector<int32_t>& next = it->second;
  const auto pos = static_cast<size_t>(static_cast<int32_t>(tokens.size()) - num_prompt_tokens);
  std::vector<int32_t> out;
  for (size_t i = pos; i < next.size() && static_cast<int32_t>(out.size()) < max_tokens; ++i) {
    const double u = static_cast<double>(mix(key ^ mix(i)) >> 11) * 0x1.0p-53;  // uniform in [0, 1)
    out.push_back(u < acceptance_ ? next[i] : (next[i] + 1) % vocab_size_);
  }
  return out;
}

int32_t SpecController::num_tokens(double propose_cost) {
  const double a = std::min(acceptance(), 0.99);
  int32_t best_k = 0;
  double best = 1.0;  // plain decoding: one token per step of cost 1
  double expected = 1.0, power = 1.0;
  for (int32_t k = 1; k <= max_; ++k) {
    power *= a;
    expected += power;  // 1 + a + ... + a^k
    const double per_cost = expected / (1.0 + (verify_cost_ + propose_cost) * k);
    if (per_cost > best) best = per_cost, best_k = k;
  }
  if (best_k > 0) return best_k;
  if (++num_idle_steps_ < 16) return 0;
  num_idle_steps_ = 0;
  return 1;
}

void SpecController::observe(int32_t num_proposed, int32_t num_accepted) {
  if (num_proposed == 0) return;
  num_accepted_ = 0.8 * num_accepted_ + num_accepted;
  num_tested_ = 0.8 * num_tested_ + num_accepted + (num_accepted < num_proposed ? 1 : 0);
}

}  // namespace kvlm
