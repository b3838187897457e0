// Where a model's attention goes, for `kvlm bench kv --attention-profile`:
// the mass queries put on the first tokens (StreamingLLM's "sinks") and on
// their most recent neighbours explains which policies can work on a model.
#include <fmt/format.h>

#include "apps/bench_kv.h"
#include "common/error.h"
#include "runner/model_runner.h"

namespace kvlm::apps {

AttentionProfile attention_profile(const Model& model, DType kv_dtype, const std::vector<int32_t>& tokens,
                                   int32_t n_ctx, int32_t num_chunks, std::optional<int32_t> bos) {
  constexpr int32_t kBlock = 16;
  const int32_t num_blocks = (n_ctx + kBlock - 1) / kBlock;
  ModelRunner runner(model, kv_dtype, kBlock, num_blocks);
  AttentionProfile p;
  for (int32_t c = 0; c < num_chunks && static_cast<size_t>(c + 1) * n_ctx <= tokens.size(); ++c) {
    SchedulerOutput out;
    ScheduledSeq s;
    s.id = RequestId(c + 1);
    s.new_tokens.assign(tokens.begin() + static_cast<ptrdiff_t>(c) * n_ctx,
                        tokens.begin() + static_cast<ptrdiff_t>(c + 1) * n_ctx);
    if (bos) s.new_tokens[0] = *bos;
    s.sample = true;
    s.collect_attention = true;
    BlockTableChange table;  // a new request each chunk: its whole table, over all the blocks
    for (int32_t b = 0; b < num_blocks; ++b) table.append.push_back(b);
    s.table_changes = {table};
    out.seqs.push_back(std::move(s));
    if (c > 0) out.released_tables = {RequestId(c)};
    out.num_tokens = n_ctx;
    runner.execute(out);
    const std::vector<float>& w = runner.kv_stats()[0].attention;  // [n_ctx][n_ctx]
    // The scored half, as perplexity scores it.
    for (int32_t q = n_ctx / 2; q < n_ctx; ++q) {
      const float* row = w.data() + static_cast<size_t>(q) * n_ctx;
      p.first += row[0];
      for (int32_t k = 0; k < 4; ++k) p.first4 += row[k];
      for (size_t r = 0; r < p.recent_sizes.size(); ++r)
        for (int32_t k = std::max(0, q - p.recent_sizes[r] + 1); k <= q; ++k) p.recent[r] += row[k];
      ++p.num_queries;
    }
  }
  if (p.num_queries == 0) throw_error(ErrorCode::kInvalidArgument, "no chunk of {} tokens to profile", n_ctx);
  p.first /= static_cast<double>(p.num_queries);
  p.first4 /= static_cast<double>(p.num_queries);
  for (double& x : p.recent) x /= static_cast<double>(p.num_queries);
  return p;
}

std::string format_attention_profile(const AttentionProfile& p) {
  std::string out = fmt::format("attention of {} queries (averaged over heads and layers): first token {:.1f}%, first 4 {:.1f}%",
                                p.num_queries, 100 * p.first, 100 * p.first4);
  for (size_t r = 0; r < p.recent_sizes.size(); ++r)
    out += fmt::format(", newest {} {:.1f}%", p.recent_sizes[r], 100 * p.recent[r]);
  return out;
}

}  // namespace kvlm::apps
