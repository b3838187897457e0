// A model's vocabulary as llama.cpp's vocab loader (llama_vocab::impl::load)
// builds it from GGUF metadata: token texts, scores and attributes, special
// token ids, the add-BOS/EOS and space-prefix flags, BPE merges, the
// pre-tokenizer type, the end-of-generation set and the special tokens that
// text is split on. Plain data, built once; every lookup is O(1).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/metadata.h"
#include "tokenizer/pre_types.h"

namespace kvlm {

enum class TokenizerModel {
  kSpm,  // tokenizer.ggml.model == "llama": SentencePiece BPE over scores
  kBpe,  // tokenizer.ggml.model == "gpt2": byte-level BPE over merge ranks
};

// GGUF's tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
  kUndefined = 0, kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6,
};

// Token attributes, bit flags with llama.cpp's values (llama_token_attr). A
// token's type gives one of the first six; the loader adds more (CONTROL for
// end-of-generation texts, UNUSED for control tokens named "unused", RSTRIP
// and LSTRIP for a few model families).
namespace token_attr {
inline constexpr uint32_t kUndefined = 0;
inline constexpr uint32_t kUnknown = 1u << 0;
inline constexpr uint32_t kUnused = 1u << 1;
inline constexpr uint32_t kNormal = 1u << 2;
inline constexpr uint32_t kControl = 1u << 3;
inline constexpr uint32_t kUserDefined = 1u << 4;
inline constexpr uint32_t kByte = 1u << 5;
inline constexpr uint32_t kNormalized = 1u << 6;
inline constexpr uint32_t kLstrip = 1u << 7;  // swallow whitespace before it when split out of text
inline constexpr uint32_t kRstrip = 1u << 8;  // swallow whitespace after it
}  // namespace token_attr

// Special token ids; nullopt where the vocabulary has none.
struct SpecialTokens {
  std::optional<int32_t> bos, eos, eot, eom, unk, sep, pad, mask;
  std::optional<int32_t> fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
};

class Vocab {
 public:
  // Reads the tokenizer.ggml.* keys. Throws Error(kUnsupported) naming the
  // model type unless tokenizer.ggml.model is "llama" or "gpt2", and
  // Error(kCorrupt) for missing or malformed arrays, duplicate tokens, or an
  // add_bos/add_eos flag without its token id. An unknown tokenizer.ggml.pre
  // logs a warning and uses the GPT-2 expression.
  static Vocab from_metadata(const Metadata& m);

  TokenizerModel model() const { return model_; }
  const std::string& model_name() const { return model_name_; }  // "llama" or "gpt2"
  const std::string& pre_name() const { return pre_name_; }      // tokenizer.ggml.pre as stored
  const PreTypeInfo& pre_type() const { return pre_type_; }      // meaningful for BPE only

  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }
  bool contains(int32_t id) const { return id >= 0 && id < size(); }
  // Preconditions for the accessors below: contains(id).
  const std::string& text(int32_t id) const { return tokens_[id].text; }
  float score(int32_t id) const { return tokens_[id].score; }
  uint32_t attr(int32_t id) const { return tokens_[id].attr; }
  bool has_attr(int32_t id, uint32_t mask) const { return (tokens_[id].attr & mask) != 0; }
  // Exact text lookup (any token type).
  std::optional<int32_t> find(std::string_view text) const;
  size_t max_token_length() const { return max_token_length_; }

  const SpecialTokens& special() const { return special_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_space_prefix() const { return add_space_prefix_; }  // SPM: prefix text with a space
  bool clean_spaces() const { return clean_spaces_; }          // detokenizer clean-up passes
  bool ignore_merges() const { return ignore_merges_; }        // BPE: whole-word tokens first

  // BPE merges in rank order ("left right"); empty for SPM.
  const std::vector<std::string>& merges() const { return merges_; }

  // End of generation: eos, eot, eom and tokens such as <|im_end|>,
  // <|eot_id|>, <end_of_turn>, <|endoftext|> found by text (sorted ids).
  bool is_eog(int32_t id) const;
  const std::vector<int32_t>& eog_ids() const { return eog_ids_; }

  // Control, user-defined and unknown tokens, longest text first (ties by
  // id): the order in which text is split on special tokens.
  const std::vector<int32_t>& special_tokens_by_length() const { return special_by_length_; }

 private:
  struct Token {
    std::string text;
    float score = 0.0f;
    uint32_t attr = token_attr::kNormal;
  };
  // Text -> id, open addressing with linear probing over 8-byte slots; the
  // slot keeps 32 bits of the hash so a miss (most SentencePiece pair
  // probes) never touches the token texts. Load factor <= 1/2.
  struct Slot {
    uint32_t tag = 0;
    int32_t id = -1;  // -1: empty
  };

  void load_tokens(const Metadata& m);
  void load_special_ids(const Metadata& m);
  void detect_special_tokens();
  void build_eog_set();
  void apply_model_attrs(const Metadata& m);

  TokenizerModel model_ = TokenizerModel::kSpm;
  std::string model_name_;
  std::string pre_name_;
  PreTypeInfo pre_type_;
  std::vector<Token> tokens_;
  std::vector<Slot> index_;
  uint64_t index_mask_ = 0;
  size_t max_token_length_ = 0;
  SpecialTokens special_;
  bool add_bos_ = false;
  bool add_eos_ = false;
  bool add_space_prefix_ = false;
  bool clean_spaces_ = false;
  bool ignore_merges_ = false;
  std::vector<std::string> merges_;
  std::vector<int32_t> eog_ids_;
  std::vector<int32_t> special_by_length_;
};

}  // namespace kvlm
