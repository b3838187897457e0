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
    // leave the grammar (advance_output then ends the request).
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

std::span<const float> Engine::draw_logits(Live& live, std::span<const float> logits) const {
  if (!live.matcher) return logits;
  if (!live.thinking || !live.thinking->thinking()) return constrained_logits(live, logits);
  live.masked_logits.assign(logits.begin(), logits.end());
  for (int32_t e : token_index_->end_tokens())
    if (static_cast<size_t>(e) < logits.size()) live.masked_logits[static_cast<size_t>(e)] = -std::numeric_limits<float>::infinity();
  return live.masked_logits;
}

bool Engine::advance_output(Live& live, int32_t token) const {
  std::string_view bytes = tokenizer_->piece(token);
  if (live.thinking) {
    bytes = live.thinking->push(bytes);
    if (live.thinking->budget_spent() && !live.close_forced && live.forced.empty()) {
      live.forced.assign(live.close_tokens.begin(), live.close_tokens.end());
      live.close_forced = true;
    }
    if (live.thinking->thinking()) return false;
    if (!live.answer_begun) {
      // The space after the close marker is not the answer's.
      const size_t first = bytes.find_first_not_of(" \t\r\n");
      if (first == std::string_view::npos) return false;
      bytes.remove_prefix(first);
      live.answer_begun = true;
    }
  }
  if (!live.matcher) return false;
  if (tokenizer_->is_end_of_generation(token)) return true;  // allowed only where complete
  if (!live.matcher->advance(bytes)) return true;  // the no-token fallback above
  return live.matcher->complete();
}

}  // namespace kvlm
