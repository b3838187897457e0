// Text <-> token ids for a GGUF model, exactly as llama.cpp tokenizes: one
// class over both algorithms (SentencePiece for tokenizer.ggml.model "llama",
// byte-level BPE for "gpt2"), plus a per-request streaming detokenizer.
//
//   auto gguf = GgufFile::open(path);
//   auto tok = Tokenizer::from_metadata(gguf->metadata());
//   std::vector<int32_t> ids = tok->encode(prompt, /*add_special=*/true, /*parse_special=*/true);
//
// Leading spaces (SentencePiece vocabularies, add_space_prefix): encoding
// prefixes the text, and the text after every special token, with a space
// ("Hello" -> "▁Hello"). Pieces keep that space (token_to_piece of "▁Hello" is
// " Hello"); dropping it is the detokenizer's business:
//  - decode() follows llama.cpp's llama_detokenize: the first token's leading
//    space is dropped, unless remove_special drops a leading BOS (then the
//    next piece keeps its space, as llama.cpp does);
//  - StreamingDetokenizer drops nothing by default, since what it streams
//    continues a prompt (" there" after "Once upon a time," keeps its space);
//    with strip_leading_space it drops one leading space from the first piece
//    after an optional leading BOS, like SentencePiece's own decode (and
//    llama.cpp's former llama_detokenize_spm) -- for echoing a whole prompt.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/metadata.h"
#include "tokenizer/vocab.h"

namespace kvlm {

class SpmTokenizer;
class BpeTokenizer;

struct DecodeOptions {
  // Drop a leading BOS and a trailing EOS when the vocabulary adds them.
  bool remove_special = false;
  // Control and unknown tokens render their text ("<s>"); otherwise nothing.
  bool render_special = true;
};

class Tokenizer {
 public:
  // Builds the vocabulary and the tokenizer it names. Throws
  // Error(kUnsupported) naming the model type for anything but "llama"/"gpt2",
  // Error(kCorrupt) for malformed tokenizer metadata.
  static std::unique_ptr<Tokenizer> from_metadata(const Metadata& m);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // add_special: add BOS/EOS as the vocabulary says (add_bos/add_eos).
  // parse_special: control (and unknown) tokens written in the text, e.g.
  // "<|im_start|>", become their ids; otherwise they are tokenized as plain
  // text. User-defined tokens are split out of the text either way (llama.cpp).
  // Any bytes are accepted (invalid UTF-8 included). Thread-safe.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;
  // The tokens of `text` where it continues a text already encoded (a
  // prompt tokenized in pieces, tokenizer/prompt_pieces.h): as encode()
  // without BOS/EOS, and without the space prefix at its start
  // (SentencePiece vocabularies with add_space_prefix), so the pieces' ids
  // read as the pieces' text joined. Text after a special token still gets
  // the prefix, as in encode().
  std::vector<int32_t> encode_continuation(std::string_view text, bool parse_special) const;

  // The token's bytes: "▁" -> " " (SPM), GPT-2 byte symbols -> their bytes
  // (BPE), <0x0A> -> "\n", control/unknown/user-defined tokens -> their text,
  // unused tokens -> "". May be part of a UTF-8 sequence. Throws
  // Error(kInvalidArgument) for an id outside the vocabulary.
  std::string token_to_piece(int32_t id) const { return piece(id); }
  const std::string& piece(int32_t id) const;

  // The text of `ids` (see the header comment and DecodeOptions), with the
  // vocabulary's clean-up of spaces before punctuation where it asks for it
  // (clean_spaces). Bytes are concatenated as they are: the result may hold
  // invalid UTF-8 if `ids` ends inside a character.
  std::string decode(std::span<const int32_t> ids, DecodeOptions options = {}) const;

  int32_t vocab_size() const { return vocab_.size(); }
  std::optional<int32_t> bos_id() const { return vocab_.special().bos; }
  std::optional<int32_t> eos_id() const { return vocab_.special().eos; }
  bool add_bos() const { return vocab_.add_bos(); }
  bool add_eos() const { return vocab_.add_eos(); }
  bool is_end_of_generation(int32_t id) const { return vocab_.is_eog(id); }
  bool is_control(int32_t id) const {
    return vocab_.contains(id) && vocab_.has_attr(id, token_attr::kControl);
  }
  const Vocab& vocab() const { return vocab_; }

 private:
  explicit Tokenizer(Vocab vocab);
  void build_pieces();
  // encode() and encode_continuation(): `prefix_start` gives the text's
  // start the space prefix as if a special token came before it.
  std::vector<int32_t> encode_text(std::string_view text, bool add_special, bool parse_special,
                                   bool prefix_start) const;

  Vocab vocab_;
  std::unique_ptr<SpmTokenizer> spm_;  // exactly one of spm_/bpe_ is set
  std::unique_ptr<BpeTokenizer> bpe_;
  std::vector<std::string> pieces_;    // token_to_piece of every id, built once
};

struct StreamOptions {
  // Control and unknown tokens render their text; by default they render
  // nothing (as llama.cpp's server does). User-defined tokens always render.
  bool render_special = false;
  // Drop one leading space from the first piece after an optional leading BOS
  // (vocabularies with add_space_prefix only). See the header comment.
  bool strip_leading_space = false;
};

// Turns a stream of token ids into text, one request at a time. Pieces can
// end inside a UTF-8 character (byte-fallback tokens, byte-level BPE); push()
// holds such bytes back until the character is complete, so what it returns
// is always well-formed UTF-8, and the concatenation of all push() results and
// flush() equals the full text (ill-formed bytes replaced by U+FFFD).
class StreamingDetokenizer {
 public:
  // `tokenizer` must outlive this object.
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, StreamOptions options = {});

  // Returns the text completed by `id` (may be empty). Throws
  // Error(kInvalidArgument) for an id outside the vocabulary.
  std::string push(int32_t id);
  // Returns what is left at the end: an unfinished UTF-8 sequence becomes
  // U+FFFD. The detokenizer is then empty and may be reused.
  std::string flush();

 private:
  const Tokenizer& tokenizer_;
  StreamOptions options_;
  std::string pending_;  // bytes of an unfinished UTF-8 sequence (at most 3)
  size_t num_pushed_ = 0;
  bool strip_done_ = false;
};

}  // namespace kvlm
