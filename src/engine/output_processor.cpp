#include "engine/output_processor.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "common/error.h"
#include "common/log.h"
#include "constrain/token_mask.h"
#include "engine/engine.h"
#include "engine/request_stream.h"

namespace kvlm {
namespace {

// Sets `text` from `decode`; a fault fails the stream (PendingText).
template <typename Decode>
bool deliver_text(RequestStream& stream, Decode&& decode, std::string& text) {
  try {
    text = decode();
    return true;
  } catch (const std::exception& e) {
    stream.fail(Error(ErrorCode::kInternal,
                      fmt::format("detokenizing this request failed: {} (other requests are unaffected)", e.what())));
    return false;
  }
}

}  // namespace

OutputText::OutputText(const Tokenizer& tok, const GenerateRequest& g)
    : detok(tok, StreamOptions{.render_special = g.render_special}), stop(g.stop) {}

bool PendingText::resolve_token(RequestStream& stream, int32_t token) {
  return !deferred || deliver_text(stream, [&] { return deferred->detok.push(token); }, text);
}

bool PendingText::resolve_flush(RequestStream& stream) {
  return !deferred || deliver_text(stream, [&] { return deferred->detok.flush(); }, text);
}

SeqOutput::SeqOutput(const Tokenizer& tok, const GenerateRequest& g)
    : text(std::make_shared<OutputText>(tok, g)), text_on_engine_thread(!g.stop.empty()) {
  if (g.constraint) matcher.emplace(g.constraint);
  if (g.thinking && (g.thinking->opened || !g.thinking->open_tokens.empty())) {
    const GenerateRequest::Thinking& t = *g.thinking;
    // The budget counts the tokens after a forced open marker.
    const auto num_open = static_cast<int32_t>(t.opened ? 0 : t.open_tokens.size());
    thinking.emplace(t.close, true, t.budget < 0 ? -1 : t.budget + num_open);
    if (!t.opened) forced.assign(t.open_tokens.begin(), t.open_tokens.end());
    // A budget of nothing closes the section the prompt opened at once.
    if (t.opened && t.budget == 0) {
      forced.assign(t.close_tokens.begin(), t.close_tokens.end());
      close_forced = true;
    }
    close_tokens = t.close_tokens;
    answer_begun = false;
  }
}

void OutputProcessor::build_token_index() { token_index_ = constrain::TokenIndex::from_tokenizer(tokenizer_); }

std::span<const float> OutputProcessor::constrained_logits(SeqOutput& out, std::span<const float> logits) const {
  int32_t num_allowed = token_index_->fill_mask(*out.matcher, out.allowed);
  if (num_allowed == 0) {
    // The grammar wants bytes no token spells: end the output rather than
    // leave the grammar (advance then ends the request).
    log_warn("constrained output: no token can continue the grammar; ending the request");
    for (int32_t e : token_index_->end_tokens()) out.allowed[e] = 1;
    num_allowed = static_cast<int32_t>(token_index_->end_tokens().size());
    if (num_allowed == 0) return logits;
  }
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  out.masked_logits.resize(logits.size());
  const size_t n = std::min(logits.size(), out.allowed.size());
  for (size_t i = 0; i < n; ++i) out.masked_logits[i] = out.allowed[i] ? logits[i] : kMasked;
  for (size_t i = n; i < logits.size(); ++i) out.masked_logits[i] = kMasked;  // padded vocab rows
  return out.masked_logits;
}

std::span<const float> OutputProcessor::draw_logits(SeqOutput& out, std::span<const float> logits) const {
  if (!out.matcher) return logits;
  if (!out.thinking || !out.thinking->thinking()) return constrained_logits(out, logits);
  out.masked_logits.assign(logits.begin(), logits.end());
  for (int32_t e : token_index_->end_tokens())
    if (static_cast<size_t>(e) < logits.size()) out.masked_logits[static_cast<size_t>(e)] = -std::numeric_limits<float>::infinity();
  return out.masked_logits;
}

bool OutputProcessor::advance(SeqOutput& out, int32_t token) const {
  std::string_view bytes = tokenizer_.piece(token);
  if (out.thinking) {
    bytes = out.thinking->push(bytes);
    if (out.thinking->budget_spent() && !out.close_forced && out.forced.empty()) {
      out.forced.assign(out.close_tokens.begin(), out.close_tokens.end());
      out.close_forced = true;
    }
    if (out.thinking->thinking()) return false;
    if (!out.answer_begun) {
      // The space after the close marker is not the answer's.
      const size_t first = bytes.find_first_not_of(" \t\r\n");
      if (first == std::string_view::npos) return false;
      bytes.remove_prefix(first);
      out.answer_begun = true;
    }
  }
  if (!out.matcher) return false;
  if (tokenizer_.is_end_of_generation(token)) return true;  // allowed only where complete
  if (!out.matcher->advance(bytes)) return true;  // the no-token fallback above
  return out.matcher->complete();
}

PendingText OutputProcessor::push(SeqOutput& out, int32_t token) {
  PendingText p;
  if (out.text_on_engine_thread) {
    p.text = out.text->stop.push(out.text->detok.push(token));
  } else {
    p.deferred = out.text;
  }
  return p;
}

PendingText OutputProcessor::finish(SeqOutput& out, std::string& stop_string) {
  PendingText p;
  OutputText& text = *out.text;
  if (!out.text_on_engine_thread) {
    p.deferred = out.text;
  } else if (!text.stop.stopped()) {
    p.text = text.stop.push(text.detok.flush()) + text.stop.flush();
  }
  if (out.text_on_engine_thread && text.stop.stopped()) stop_string = text.stop.matched();
  return p;
}

std::string OutputProcessor::replay(SeqOutput& out, std::span<const int32_t> tokens,
                                    std::span<const int32_t> stop_token_ids) const {
  std::string text;
  for (int32_t t : tokens) {
    // Output that would have ended the request, or left its grammar, was never sent.
    if (std::find(stop_token_ids.begin(), stop_token_ids.end(), t) != stop_token_ids.end())
      throw_error(ErrorCode::kInvalidArgument, "replayed output token {} ends the generation", t);
    // Forced tokens (a thinking section's markers) were what the run wrote.
    if (!out.forced.empty()) {
      if (t != out.forced.front())
        throw_error(ErrorCode::kInvalidArgument, "replayed output token {} is not the marker token the run forced", t);
      out.forced.pop_front();
    }
    if (out.matcher && tokenizer_.is_end_of_generation(t))
      throw_error(ErrorCode::kInvalidArgument, "the replayed output does not follow the request's grammar");
    if (out.tracked() && advance(out, t) && !out.matcher->complete())
      throw_error(ErrorCode::kInvalidArgument, "the replayed output does not follow the request's grammar");
    text += out.text->stop.push(out.text->detok.push(t));
    if (out.text->stop.stopped())
      throw_error(ErrorCode::kInvalidArgument, "the replayed output contains one of the request's stop strings");
  }
  return text;
}

}  // namespace kvlm
