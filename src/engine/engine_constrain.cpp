// Structured output in the step: the grammar's token mask before the draw,
// and the grammar advanced after it (engine.h, GenerateRequest::constraint).
#include <algorithm>
#include <limits>

#include "common/log.h"
#include "constrain/token_mask.h"
#include "engine/engine.h"
#include "engine/engine_live.h"
#include "tokenizer/tokenizer.h"

namespace kvlm {

std::span<const float> Engine::constrained_logits(Live& live, std::span<const float> logits) const {
  int32_t num_allowed = token_index_->fill_mask(*live.matcher, live.allowed);
  if (num_allowed == 0) {
    // The grammar wants bytes no token spells: end the output rather than
    // leave the grammar (advance_constraint then ends the request).
    log_warn("constrained output: no token can continue the grammar; ending the request");
    for (int32_t e : token_index_->end_tokens()) live.allowed[e] = 1;
    num_allowed = static_cast<int32_t>(token_index_->end_tokens().size());
    if (num_allowed == 0) return logits;
  }
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  live.masked_logits.resize(logits.size());
  const size_t n = std::min(logits.size(), live.allowed.size());
  for (size_t i = 0; i < n; ++i) live.masked_logits[i] = live.allowed[i] ? logits[i] : kMasked;
  for (size_t i = n; i < logits.size(); ++i) live.masked_logits[i] = kMasked;  // padded vocab rows
  return live.masked_logits;
}

bool Engine::advance_constraint(Live& live, int32_t token) {
  if (tokenizer_->is_end_of_generation(token)) return true;  // allowed only where complete
  if (!live.matcher->advance(tokenizer_->piece(token))) return true;  // the no-token fallback above
  return live.matcher->complete();
}

}  // namespace kvlm
