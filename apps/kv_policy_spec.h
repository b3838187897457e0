// KV policies as the command line names them: a fixed policy, "oracle"
// (offline: bench kv, perplexity) or "learned:POLICY.json"; the learned
// policy's file; the oracle's first pass (docs/kv-budgets.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "apps/stream_scoring.h"
#include "kv/kv_learned_policy.h"
#include "kv/kv_scorer.h"

namespace kvlm {
struct ModelConfig;
}

namespace kvlm::apps {

struct KvPolicySpec {
  std::string label;  // as tables print it: "tova", "oracle", "learned:NAME"
  KvPolicyKind kind = KvPolicyKind::kSinks;
  std::shared_ptr<const KvScorer> scorer;  // kLearned
};

// Throws Error(kInvalidArgument) for an unknown name, "oracle" where
// !allow_oracle, and a learned file that does not load (load_kv_policy_file).
KvPolicySpec parse_kv_policy_spec(std::string_view text, const ModelConfig& model, bool allow_oracle);

// What a policy file names as its model: architecture, name and shapes.
std::string kv_policy_model_id(const ModelConfig& model);

// The file: {"format": "kvlm-kv-policy", "version": 1, "model": ID,
// "features": [names], "mean", "stddev", "num_hidden", "w1", "b1", "w2",
// "b2", "trained": {...notes}}. Throws Error(kInvalidArgument) (bad JSON,
// other format or version, other features, a model other than `model`'s,
// wrong shapes) or Error(kNotFound).
std::shared_ptr<const KvScorer> load_kv_policy_file(const std::string& path, const ModelConfig& model);
void save_kv_policy_file(const std::string& path, const KvScorerWeights& w, const std::string& notes_json);

// The oracle's first pass: each chunk of [first_chunk, first_chunk +
// num_chunks) run with the full cache while its attention is recorded.
// traces[i] belongs to chunk first_chunk + i.
std::vector<std::shared_ptr<KvAttentionTrace>> record_oracle_traces(Engine& engine, const std::vector<int32_t>& tokens,
                                                                   int32_t n_ctx, int32_t first_chunk,
                                                                   int32_t num_chunks);

}  // namespace kvlm::apps
