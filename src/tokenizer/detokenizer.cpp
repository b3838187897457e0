// Tokenizer::decode and StreamingDetokenizer.
#include "common/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace kvlm {

namespace {

// llama.cpp's clean_up_tokenization_spaces, three passes over the bytes,
// each reading the previous pass's output as it was before the pass.
std::string clean_up_spaces(const std::string& text) {
  if (text.empty()) return text;
  // 1. No space before ? ! . ,
  std::string src = text;
  std::string out(1, src[0]);
  for (size_t i = 1; i < src.size(); ++i) {
    const char x = src[i];
    if (src[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) out.pop_back();
    out.push_back(x);
  }
  // 2. " ' " -> "'" (the swallowed following space cannot start another match).
  src = out;
  out.assign(1, src[0]);
  for (size_t i = 1; i < src.size(); ++i) {
    const char x = src[i];
    if (x == '\'' && i + 1 < src.size() && src[i - 1] == ' ' && src[i + 1] == ' ') {
      out.pop_back();
      src[++i] = '\0';
    }
    out.push_back(x);
  }
  // 3. Contractions: " 's" " 'm" " 're" " 've" lose the space (" 't" " 'd" " 'll" keep it).
  src = out;
  out.assign(1, src[0]);
  for (size_t i = 1; i < src.size(); ++i) {
    const char x = src[i];
    if (src[i - 1] == ' ' && x == '\'' && i + 1 < src.size()) {
      const char x1 = src[i + 1];
      if (x1 == 's' || x1 == 'm') {
        out.pop_back();
      } else if (x1 != 't' && x1 != 'd' && i + 2 < src.size()) {
        const char x2 = src[i + 2];
        if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) out.pop_back();
      }
    }
    out.push_back(x);
  }
  return out;
}

constexpr uint32_t kSpecialAttrs = token_attr::kControl | token_attr::kUnknown;

}  // namespace

std::string Tokenizer::decode(std::span<const int32_t> ids, DecodeOptions options) const {
  const SpecialTokens& special = vocab_.special();
  size_t first = 0, last = ids.size();
  bool remove_space = vocab_.add_space_prefix();
  if (options.remove_special && vocab_.add_bos() && last > first && special.bos && ids[first] == *special.bos) {
    remove_space = false;  // llama.cpp: the piece after a removed BOS keeps its space
    ++first;
  }
  if (options.remove_special && vocab_.add_eos() && last > first && special.eos && ids[last - 1] == *special.eos) {
    --last;
  }
  std::string text;
  for (size_t i = first; i < last; ++i) {
    const std::string& p = piece(ids[i]);
    const bool hidden = !options.render_special && vocab_.has_attr(ids[i], kSpecialAttrs);
    if (!hidden) {
      const size_t skip = remove_space && !p.empty() && p[0] == ' ' ? 1 : 0;
      text.append(p, skip);
    }
    remove_space = false;
  }
  return vocab_.clean_spaces() ? clean_up_spaces(text) : text;
}

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer, StreamOptions options)
    : tokenizer_(tokenizer), options_(options) {}

std::string StreamingDetokenizer::push(int32_t id) {
  const Vocab& vocab = tokenizer_.vocab();
  std::string_view piece = tokenizer_.piece(id);
  if (!options_.render_special && vocab.has_attr(id, kSpecialAttrs)) piece = {};
  if (options_.strip_leading_space && !strip_done_ && vocab.add_space_prefix()) {
    const bool leading_bos = num_pushed_ == 0 && vocab.special().bos && id == *vocab.special().bos;
    if (!leading_bos) {
      if (!piece.empty() && piece.front() == ' ') piece.remove_prefix(1);
      strip_done_ = true;
    }
  }
  ++num_pushed_;
  pending_.append(piece);

  // Emit every complete character; ill-formed bytes become U+FFFD at once,
  // only a valid but unfinished sequence at the end waits for more bytes.
  std::string out;
  size_t pos = 0;
  while (pos < pending_.size()) {
    const unicode::Utf8Step step = unicode::utf8_step(pending_, pos);
    if (step.kind == unicode::Utf8Step::Kind::kIncomplete) break;
    if (step.kind == unicode::Utf8Step::Kind::kValid) {
      out.append(pending_, pos, step.length);
    } else {
      out.append("\xEF\xBF\xBD");
    }
    pos += step.length;
  }
  pending_.erase(0, pos);
  return out;
}

std::string StreamingDetokenizer::flush() {
  std::string out = unicode::sanitize_utf8(pending_);
  pending_.clear();
  num_pushed_ = 0;
  strip_done_ = false;
  return out;
}

}  // namespace kvlm
