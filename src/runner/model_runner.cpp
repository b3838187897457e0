#include "runner/model_runner.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/attention.h"
#include "backend/cpu/ops.h"
#include "common/assert.h"

namespace kvlm {
namespace {

// Entropy (nats) of softmax(logits), in double so the order of the sum is all
// that decides the bits.
// The predictive entropy of one logits row, -sum p log p, from the path's
// vector softmax: with d = logit - max and p = softmax(d), log Z = -log p at
// the largest logit (d = 0 there), so H = log Z - sum p d. A double exp per
// element took most of a step's policy work on a small model (perf:
// stories260K, 8 streams under a learned policy).
float entropy_of(std::span<const float> logits, std::vector<float>& p) {
  p.assign(logits.begin(), logits.end());
  const auto top = std::max_element(p.begin(), p.end());
  const float max_logit = *top;
  const size_t at = static_cast<size_t>(top - p.begin());
  softmax(p.data(), 1, static_cast<int64_t>(p.size()));
  double weighted = 0;
  for (size_t i = 0; i < p.size(); ++i)
    weighted += static_cast<double>(p[i]) * (static_cast<double>(logits[i]) - max_logit);
  return static_cast<float>(-std::log(static_cast<double>(p[at])) - weighted);
}

}  // namespace

ModelRunner::ModelRunner(const Model& model, DType kv_dtype, int32_t block_size, int32_t num_blocks)
    : model_(model), storage_(model, kv_dtype, block_size, num_blocks) {
  for (const KvGroupSpec& g : model.kv_groups()) group_layers_.push_back(g.layers);
}

void ModelRunner::run_kv_ops(const KvOps& ops) {
  const KvCacheView& kv = storage_.view();
  for (const KvOp& op : ops) {
    for (int32_t l : group_layers_.at(static_cast<size_t>(op.group))) {
      switch (op.kind) {
        case KvOp::Kind::kCopyBlock: kv_copy_block(kv.layout, kv.layers[l], op.src, op.dst); break;
        case KvOp::Kind::kMoveSlot: kv_move_slot(kv.layout, kv.layers[l], op.src, op.dst); break;
        case KvOp::Kind::kRotateKey: kv_rotate_key(kv.layout, kv.layers[l], op.dst, op.delta, model_.config().rope); break;
      }
    }
  }
}

// Averages the attention the kernel summed over heads and layers, and takes
// the entropy of each logits row of seqs whose policy wants them.
void ModelRunner::collect_stats(const SchedulerOutput& out) {
  const ModelConfig& c = model_.config();
  const size_t vocab = static_cast<size_t>(c.vocab_size);
  size_t row = 0;
  for (size_t i = 0; i < out.seqs.size(); ++i) {
    const ScheduledSeq& s = out.seqs[i];
    const auto n = static_cast<int32_t>(s.new_tokens.size());
    SeqKvStats& st = kv_stats_[i];
    if (s.collect_attention) {
      const int32_t ctx = s.slot_begin + n, num_kv = c.num_kv_heads;
      size_t num_layers = 0;
      for (const auto& layers : group_layers_) num_layers += layers.size();
      const float norm = 1.f / static_cast<float>(c.num_heads * static_cast<int64_t>(num_layers));
      st.attention.assign(static_cast<size_t>(n) * ctx, 0.f);
      const std::vector<float>& raw = raw_attention_[i];
      const size_t per_layer = static_cast<size_t>(n) * num_kv * ctx;  // one layer's rows, or all layers' sums
      for (size_t at = 0; at < raw.size(); at += per_layer)
        for (int32_t r = 0; r < n; ++r)
          for (int32_t h = 0; h < num_kv; ++h)
            for (int32_t j = 0; j < ctx; ++j)
              st.attention[static_cast<size_t>(r) * ctx + j] += raw[at + (static_cast<size_t>(r) * num_kv + h) * ctx + j];
      for (float& w : st.attention) w *= norm;
    }
    const int32_t num_rows = s.num_prompt_logits + (s.sample ? 1 + s.num_spec_tokens : 0);
    KVLM_ASSERT(s.num_spec_tokens == 0 || !(s.collect_entropy || s.collect_attention),
                "proposals verified under a KV policy");
    if (s.collect_entropy) {
      st.entropy.assign(static_cast<size_t>(n), std::numeric_limits<float>::quiet_NaN());
      for (int32_t k = 0; k < num_rows; ++k) {
        const int32_t token = k < s.num_prompt_logits ? k : n - 1;
        st.entropy[static_cast<size_t>(token)] = entropy_of(std::span<const float>(logits_).subspan((row + k) * vocab, vocab), entropy_row_);
      }
    }
    row += static_cast<size_t>(num_rows);
  }
}

void ModelRunner::collect_deviation(const SchedulerOutput& out) {
  size_t row = 0;
  for (size_t i = 0; i < out.seqs.size(); ++i) {
    const size_t n = out.seqs[i].new_tokens.size();
    kv_stats_[i].deviation.assign(deviation_.begin() + static_cast<std::ptrdiff_t>(row),
                                  deviation_.begin() + static_cast<std::ptrdiff_t>(row + n));
    row += n;
  }
}

void ModelRunner::add_attention_seqs(const ScheduledSeq& s, int32_t begin, std::span<const int32_t> table,
                                     float* stats, std::vector<AttentionSeq>& seqs) {
  const auto n = static_cast<int32_t>(s.new_tokens.size());
  if (s.row_offsets.empty()) {
    seqs.push_back(AttentionSeq{begin, n, s.slot_begin + n, table, stats});
    return;
  }
  // A blend's rows: each run of consecutive positions is the last rows of
  // a context that ends at its last one.
  for (int32_t i = 0; i < n;) {
    int32_t j = i + 1;
    while (j < n && s.row_offsets[static_cast<size_t>(j)] == s.row_offsets[static_cast<size_t>(j - 1)] + 1) ++j;
    seqs.push_back(AttentionSeq{begin + i, j - i, s.slot_begin + s.row_offsets[static_cast<size_t>(j - 1)] + 1, table, nullptr});
    i = j;
  }
}

void ModelRunner::add_adapter_rows(const LoraAdapter* adapter, int32_t begin, int32_t n) {
  auto it = std::find_if(adapter_rows_.begin(), adapter_rows_.end(), [&](const auto& e) { return e.first == adapter; });
  if (it == adapter_rows_.end()) {
    // Adapters unused this step are forgotten before a new one is added, so
    // the list holds no pointer to an adapter that is gone.
    std::erase_if(adapter_rows_, [](const auto& e) { return e.second.empty(); });
    it = adapter_rows_.insert(adapter_rows_.end(), {adapter, {}});
  }
  for (int32_t i = 0; i < n; ++i) it->second.push_back(begin + i);
}

std::span<const float> ModelRunner::execute(const SchedulerOutput& out) {
  const size_t num_groups = model_.kv_groups().size();
  const int32_t bs = storage_.block_size();
  tokens_.clear();
  positions_.clear();
  logit_rows_.clear();
  hidden_rows_.clear();
  for (auto& [adapter, rows] : adapter_rows_) rows.clear();
  slots_.assign(num_groups, {});
  seqs_.assign(num_groups, {});
  run_kv_ops(out.kv_ops);
  kv_stats_.assign(out.seqs.size(), {});
  raw_attention_.resize(out.seqs.size());

  for (RequestId id : out.released_tables) tables_.forget(id);
  int32_t highest_block = -1;  // the step's highest block id: the prefaulter commits past it
  for (size_t si = 0; si < out.seqs.size(); ++si) {
    const ScheduledSeq& s = out.seqs[si];
    KVLM_ASSERT(s.table_changes.size() == num_groups, "one block table per KV group");
    const std::vector<BlockTableMirror::Table>& tables = tables_.apply(s.id, s.table_changes);
    const int32_t begin = static_cast<int32_t>(tokens_.size());
    const int32_t n = static_cast<int32_t>(s.new_tokens.size());
    for (int32_t i = 0; i < n; ++i) {
      // Its logical slot; a blend's rows skip the slots copied from KV chunks.
      const int32_t offset = s.row_offsets.empty() ? i : s.row_offsets[static_cast<size_t>(i)];
      const int32_t slot = s.slot_begin + offset;
      tokens_.push_back(s.new_tokens[i]);
      positions_.push_back(s.position_begin + offset);
      for (size_t g = 0; g < num_groups; ++g) {
        const auto& table = tables[g].ids;
        KVLM_ASSERT(static_cast<size_t>(slot / bs) < table.size(), "block table covers the slot");
        slots_[g].push_back(static_cast<int64_t>(table[slot / bs]) * bs + slot % bs);
        highest_block = std::max(highest_block, static_cast<int32_t>(table[slot / bs]));
      }
    }
    float* stats = nullptr;
    if (s.collect_attention) {
      const size_t layers = attention_per_layer_ ? static_cast<size_t>(model_.config().num_layers) : 1;
      raw_attention_[si].assign(layers * static_cast<size_t>(n) * model_.config().num_kv_heads * (s.slot_begin + n), 0.f);
      stats = raw_attention_[si].data();
    }
    for (size_t g = 0; g < num_groups; ++g) add_attention_seqs(s, begin, tables[g].ids, stats, seqs_[g]);
    if (s.lora) add_adapter_rows(s.lora, begin, n);
    for (int32_t i = 0; i < s.num_prompt_logits; ++i) logit_rows_.push_back(begin + s.first_prompt_logit_row + i);
    for (int32_t i = n - s.num_hidden_rows; i < n; ++i) hidden_rows_.push_back(begin + i);
    // Sampling rows: the last token's, or with proposals each of the last
    // 1 + num_spec_tokens tokens' (row j predicts the token after proposal j).
    if (s.sample)
      for (int32_t j = s.num_spec_tokens; j >= 0; --j) logit_rows_.push_back(begin + n - 1 - j);
  }

  if (highest_block >= 0) storage_.note_use(BlockId(highest_block));
  std::vector<KvGroupBatch> groups(num_groups);
  for (size_t g = 0; g < num_groups; ++g) groups[g] = KvGroupBatch{slots_[g], seqs_[g]};
  ForwardBatch batch{tokens_, positions_, groups, logit_rows_, hidden_rows_};
  lora_.clear();
  for (const auto& [adapter, rows] : adapter_rows_)
    if (!rows.empty()) lora_.push_back(LoraRows{adapter, rows});
  batch.lora = lora_;
  // Per-layer statistics: each layer's rows follow the previous layer's. One
  // stride for the whole batch, so only a step of one collecting seq can take it.
  if (attention_per_layer_) {
    KVLM_ASSERT(out.seqs.size() == 1, "per-layer attention is for one sequence a step");
    if (!raw_attention_[0].empty())
      batch.attn_stats_layer_stride = raw_attention_[0].size() / static_cast<size_t>(model_.config().num_layers);
  }
  const size_t vocab = static_cast<size_t>(model_.config().vocab_size);
  logits_.resize(logit_rows_.size() * vocab);
  scratch_.hidden.clear();
  if (out.probe_layers > 0) {
    deviation_.assign(tokens_.size(), 0.f);
    batch.num_layers = out.probe_layers;
    batch.kv_deviation = deviation_;
  }
  if (!tokens_.empty()) model_.forward(batch, storage_.view(), scratch_, logits_.data());
  collect_stats(out);
  if (out.probe_layers > 0) collect_deviation(out);
  return logits_;
}

}  // namespace kvlm
