// What a request's generated tokens become (docs/ARCHITECTURE.md "The life
// of a request"): their text (detokenized, stop strings held back and
// matched), the grammar they must follow (its mask before each draw, its
// matcher advanced after) and a reasoning model's thinking section (its
// budget, the markers forced). Internal to src/engine/.
//
// One OutputProcessor per engine holds what every request shares (the
// tokenizer, the vocabulary's token trie); each request's own state is its
// SeqOutput. Both are touched on the engine thread, and a request's
// SeqOutput by the one compute thread that samples it (draw_logits,
// advance) while its batch samples.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "constrain/matcher.h"
#include "engine/stop_matcher.h"
#include "engine/thinking_tracker.h"
#include "tokenizer/tokenizer.h"

namespace kvlm {

struct GenerateRequest;
class RequestStream;
namespace constrain {
class TokenIndex;
}  // namespace constrain

// A request's output text: its tokens detokenized, and its stop strings
// matched. One thread owns it. A request with stop strings keeps it on the
// engine thread, where a match must end the request before the next step.
// Any other request hands it to the stream deliverer's thread (only the
// deliveries it runs touch it), so the step thread does not detokenize.
struct OutputText {
  OutputText(const Tokenizer& tok, const GenerateRequest& g);
  StreamingDetokenizer detok;
  StopMatcher stop;
};

// Text on its way to a request's stream: `text` as it is, or, with
// `deferred` set, detokenized on the stream deliverer's thread (OutputText).
struct PendingText {
  std::string text;
  std::shared_ptr<OutputText> deferred;
  // On the deliverer's thread, before the push: the text of `token`
  // (resolve_token) or what the detokenizer held back (resolve_flush). A
  // fault there fails that request's stream alone and returns false; the
  // stream then drops the request's later deliveries. (The engine generates
  // the request's remaining tokens unseen: a fault here is an allocation
  // failure, and the step goes on as it would.)
  bool resolve_token(RequestStream& stream, int32_t token);
  bool resolve_flush(RequestStream& stream);
};

// One request's output state.
struct SeqOutput {
  SeqOutput(const Tokenizer& tok, const GenerateRequest& g);

  std::shared_ptr<OutputText> text;
  bool text_on_engine_thread;  // see OutputText
  // Structured output: where the output stands in its grammar (advanced by
  // every sampled token, so it survives preemption: a recomputed prompt
  // samples nothing again), and scratch for the mask and the masked row.
  std::optional<constrain::Matcher> matcher;
  std::vector<uint8_t> allowed;
  std::vector<float> masked_logits;
  // The grammar of the last step's first num_grammar_advanced tokens was
  // advanced by the verification already (grammar_done: by the last of
  // them, the grammar completed); postprocess does not advance them again.
  int32_t num_grammar_advanced = 0;
  bool grammar_done = false;
  // A thinking section (GenerateRequest::thinking): where the output stands,
  // the tokens to force next (the open marker's, then the close marker's
  // once the budget is spent; taken by the sampling thread), and whether
  // the answer has begun for the grammar (the space after the marker is
  // not the answer's).
  std::optional<ThinkingTracker> thinking;
  std::deque<int32_t> forced;
  std::vector<int32_t> close_tokens;
  bool close_forced = false;
  bool answer_begun = true;

  // The grammar or the thinking section follows each token.
  bool tracked() const { return matcher || thinking; }
  // A stop string ended the text (only known on the engine thread).
  bool stopped() const { return text_on_engine_thread && text->stop.stopped(); }
};

class OutputProcessor {
 public:
  explicit OutputProcessor(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  // Engine thread, before a batch samples: what a request about to sample
  // needs built (the token trie for the first constrained one).
  void prepare(const SeqOutput& out) {
    if (out.matcher && !token_index_) build_token_index();
  }
  // The row a request draws from: as it is, its grammar's mask, or (inside a
  // thinking section while a grammar waits) without end-of-generation tokens.
  std::span<const float> draw_logits(SeqOutput& out, std::span<const float> logits) const;
  // A generated token through the thinking section (forcing the close once
  // its budget is spent) and the grammar; true: the grammar is complete, or
  // the token left it (the request ends).
  bool advance(SeqOutput& out, int32_t token) const;
  // A generated token's text: now for a request with stop strings, else
  // deferred to the deliverer's thread.
  static PendingText push(SeqOutput& out, int32_t token);
  // The end of a request that was not aborted: what the text held back, and
  // the stop string that ended it ("" when none did).
  static PendingText finish(SeqOutput& out, std::string& stop_string);
  // A resumed request's replayed output (GenerateRequest::num_replayed)
  // through its state: the text it releases. Throws Error(kInvalidArgument)
  // for output the request could not have produced.
  std::string replay(SeqOutput& out, std::span<const int32_t> tokens, std::span<const int32_t> stop_token_ids) const;

 private:
  void build_token_index();
  // A constrained request's logits with the tokens its grammar refuses at -inf.
  std::span<const float> constrained_logits(SeqOutput& out, std::span<const float> logits) const;

  const Tokenizer& tokenizer_;
  // The vocabulary's token trie for constrained requests, built by the engine
  // thread before the first one samples, then only read (by compute threads).
  std::shared_ptr<const constrain::TokenIndex> token_index_;
};

}  // namespace kvlm
