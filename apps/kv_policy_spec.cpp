#include "apps/kv_policy_spec.h"

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/mapped_file.h"
#include "model/config.h"

namespace kvlm::apps {
namespace {

constexpr std::string_view kFormat = "kvlm-kv-policy";
constexpr int kVersion = 1;

std::vector<float> floats(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_array())
    throw_error(ErrorCode::kInvalidArgument, "KV policy file: '{}' must be an array of numbers", key);
  std::vector<float> out;
  for (const auto& v : j[key]) {
    if (!v.is_number()) throw_error(ErrorCode::kInvalidArgument, "KV policy file: '{}' holds a non-number", key);
    out.push_back(v.get<float>());
  }
  return out;
}

}  // namespace

std::string kv_policy_model_id(const ModelConfig& m) {
  return fmt::format("{} '{}' vocab {} dim {} layers {} heads {}/{}", m.arch_name, m.name, m.vocab_size, m.dim,
                     m.num_layers, m.num_heads, m.num_kv_heads);
}

KvPolicySpec parse_kv_policy_spec(std::string_view text, const ModelConfig& model, bool allow_oracle) {
  KvPolicySpec spec;
  spec.label = std::string(text);
  if (text == "oracle") {
    if (!allow_oracle)
      throw_error(ErrorCode::kInvalidArgument,
                  "kv policy oracle needs a first pass over the same text: use it with kvlm bench kv or perplexity");
    spec.kind = KvPolicyKind::kOracle;
    return spec;
  }
  if (text.starts_with("learned:")) {
    const std::string path(text.substr(8));
    spec.kind = KvPolicyKind::kLearned;
    spec.scorer = load_kv_policy_file(path, model);
    spec.label = "learned:" + std::filesystem::path(path).stem().string();
    return spec;
  }
  auto kind = parse_kv_policy(text);
  if (!kind)
    throw_error(ErrorCode::kInvalidArgument, "unknown KV policy '{}' ({}, oracle, learned:POLICY.json)", text,
                kv_policy_names());
  spec.kind = *kind;
  return spec;
}

std::shared_ptr<const KvScorer> load_kv_policy_file(const std::string& path, const ModelConfig& model) {
  if (!std::filesystem::exists(path)) throw_error(ErrorCode::kNotFound, "KV policy file {} does not exist", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file_bytes(path));
  } catch (const nlohmann::json::exception& e) {
    throw_error(ErrorCode::kInvalidArgument, "KV policy file {}: not JSON ({})", path, e.what());
  }
  if (!j.is_object() || j.value("format", "") != kFormat)
    throw_error(ErrorCode::kInvalidArgument, "{} is not a KV policy file (format '{}')", path, kFormat);
  if (j.value("version", 0) != kVersion)
    throw_error(ErrorCode::kInvalidArgument, "KV policy file {}: version {} (this kvlm reads {}); retrain it", path,
                j.value("version", 0), kVersion);
  const std::string want = kv_policy_model_id(model), have = j.value("model", "");
  if (have != want)
    throw_error(ErrorCode::kInvalidArgument, "KV policy file {} was trained for {}, not this model ({}); retrain it",
                path, have, want);
  std::vector<std::string> names;
  for (std::string_view n : kv_feature_names()) names.emplace_back(n);
  if (j.value("features", std::vector<std::string>{}) != names)
    throw_error(ErrorCode::kInvalidArgument, "KV policy file {}: its features differ from this kvlm's; retrain it", path);
  KvScorerWeights w;
  w.model_name = have;
  w.name = std::filesystem::path(path).stem().string();
  w.mean = floats(j, "mean");
  w.stddev = floats(j, "stddev");
  w.num_hidden = j.value("num_hidden", -1);
  w.w1 = floats(j, "w1");
  w.b1 = floats(j, "b1");
  w.w2 = floats(j, "w2");
  if (!j.contains("b2") || !j["b2"].is_number())
    throw_error(ErrorCode::kInvalidArgument, "KV policy file {}: 'b2' must be a number", path);
  w.b2 = j["b2"].get<float>();
  try {
    return std::make_shared<const KvScorer>(std::move(w));
  } catch (const Error& e) {
    throw_error(ErrorCode::kInvalidArgument, "KV policy file {}: {}", path, e.what());
  }
}

void save_kv_policy_file(const std::string& path, const KvScorerWeights& w, const std::string& notes_json) {
  nlohmann::json j = {{"format", kFormat}, {"version", kVersion}, {"model", w.model_name}};
  j["features"] = nlohmann::json::array();
  for (std::string_view n : kv_feature_names()) j["features"].push_back(n);
  j["mean"] = w.mean;
  j["stddev"] = w.stddev;
  j["num_hidden"] = w.num_hidden;
  j["w1"] = w.w1;
  j["b1"] = w.b1;
  j["w2"] = w.w2;
  j["b2"] = w.b2;
  j["trained"] = nlohmann::json::parse(notes_json);
  std::ofstream out(path);
  out << j.dump(1) << "\n";
  if (!out) throw_error(ErrorCode::kInvalidArgument, "cannot write {}", path);
}

std::vector<std::shared_ptr<KvAttentionTrace>> record_oracle_traces(Engine& engine, const std::vector<int32_t>& tokens,
                                                                   int32_t n_ctx, int32_t first_chunk,
                                                                   int32_t num_chunks) {
  std::vector<std::shared_ptr<KvAttentionTrace>> traces;
  for (int32_t i = 0; i < num_chunks; ++i) traces.push_back(std::make_shared<KvAttentionTrace>());
  // A budget past the chunk never fires: the oracle policy only records.
  const int32_t bs = engine.config().block_size;
  KvBudget record;
  record.policy = KvPolicyKind::kOracle;
  record.budget_tokens = (n_ctx + bs - 1) / bs * bs;
  score_chunks(engine, tokens, n_ctx, first_chunk, num_chunks, [&](int32_t c) {
    KvBudget b = record;
    b.oracle = traces[static_cast<size_t>(c - first_chunk)];
    return std::optional<KvBudget>(b);
  });
  for (const auto& t : traces)
    if (t->num_rows() != n_ctx)
      throw_error(ErrorCode::kInternal, "the oracle's first pass recorded {} of {} queries", t->num_rows(), n_ctx);
  return traces;
}

}  // namespace kvlm::apps
