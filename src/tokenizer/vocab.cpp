#include "tokenizer/vocab.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <initializer_list>
#include <span>

#include "common/error.h"
#include "common/printable.h"
#include "common/log.h"

namespace kvlm {

namespace {

uint32_t attr_from_type(int64_t type) {
  switch (static_cast<TokenType>(type)) {
    case TokenType::kNormal: return token_attr::kNormal;
    case TokenType::kUnknown: return token_attr::kUnknown;
    case TokenType::kControl: return token_attr::kControl;
    case TokenType::kUserDefined: return token_attr::kUserDefined;
    case TokenType::kUnused: return token_attr::kUnused;
    case TokenType::kByte: return token_attr::kByte;
    default: return token_attr::kUndefined;
  }
}

// Texts llama.cpp's loader recognises, per special role.
constexpr std::string_view kEotTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>"};
constexpr std::string_view kFimPreTexts[] = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
    "<|code_prefix|>", "<|prefix|>"};
constexpr std::string_view kFimSufTexts[] = {
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
    "<|code_suffix|>", "<|suffix|>"};
constexpr std::string_view kFimMidTexts[] = {
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
    "<|code_middle|>", "<|middle|>"};
constexpr std::string_view kFimPadTexts[] = {
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"};
constexpr std::string_view kFimRepTexts[] = {
    "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"};
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~["};

// A fast hash for short byte strings (token texts are mostly < 16 bytes).
uint64_t hash_text(std::string_view s) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (s.size() * 0xFF51AFD7ED558CCDull);
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  uint64_t tail = 0;
  if (i < s.size()) std::memcpy(&tail, s.data() + i, s.size() - i);
  h = (h ^ tail) * 0x94D049BB133111EBull;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 32);
}

}  // namespace

std::optional<int32_t> Vocab::find(std::string_view text) const {
  const uint64_t h = hash_text(text);
  const auto tag = static_cast<uint32_t>(h >> 32);
  for (uint64_t i = h & index_mask_;; i = (i + 1) & index_mask_) {
    const Slot& slot = index_[i];
    if (slot.id < 0) return std::nullopt;
    if (slot.tag == tag && tokens_[slot.id].text == text) return slot.id;
  }
}

bool Vocab::is_eog(int32_t id) const {
  return std::binary_search(eog_ids_.begin(), eog_ids_.end(), id);
}

Vocab Vocab::from_metadata(const Metadata& m) {
  Vocab v;
  v.model_name_ = m.require_string("tokenizer.ggml.model");
  v.pre_name_ = m.get_string("tokenizer.ggml.pre").value_or("");
  if (v.model_name_ == "llama") {
    v.model_ = TokenizerModel::kSpm;
    v.special_.bos = 1;
    v.special_.eos = 2;
    v.special_.unk = 0;
    v.add_space_prefix_ = true;
    v.add_bos_ = true;
  } else if (v.model_name_ == "gpt2") {
    v.model_ = TokenizerModel::kBpe;
    v.pre_type_ = find_pre_type(v.pre_name_);
    if (v.pre_name_.empty()) {
      log_warn("tokenizer: missing tokenizer.ggml.pre, using the 'default' pre-tokenizer "
               "(generation quality may suffer; consider regenerating the model)");
    } else if (!v.pre_type_.known) {
      log_warn("tokenizer: unknown pre-tokenizer type '{}', using the GPT-2 expression", v.pre_name_);
    }
    v.special_.bos = v.pre_type_.no_default_bos ? std::nullopt : std::optional<int32_t>(11);
    v.special_.eos = 11;
    v.clean_spaces_ = v.pre_type_.clean_spaces;
    v.ignore_merges_ = v.pre_type_.ignore_merges;
    v.add_bos_ = v.pre_type_.add_bos;
    auto merges = m.get_string_array("tokenizer.ggml.merges");
    if (!merges) throw_error(ErrorCode::kCorrupt, "missing metadata key 'tokenizer.ggml.merges' (BPE vocabulary)");
    v.merges_ = std::move(*merges);
  } else {
    throw_error(ErrorCode::kUnsupported,
                "tokenizer model '{}' is not supported: kvlm tokenizes 'llama' (SentencePiece) "
                "and 'gpt2' (byte-level BPE) vocabularies",
                printable(v.model_name_));
  }
  if (auto b = m.get_bool("tokenizer.ggml.add_space_prefix")) v.add_space_prefix_ = *b;

  v.load_tokens(m);
  v.load_special_ids(m);
  v.detect_special_tokens();
  v.build_eog_set();

  // Text is split on these, longest first. llama.cpp sorts by length only
  // (unstable); ties go by id here so the order is reproducible.
  for (int32_t id = 0; id < v.size(); ++id) {
    if (v.has_attr(id, token_attr::kControl | token_attr::kUserDefined | token_attr::kUnknown)) {
      v.special_by_length_.push_back(id);
    }
  }
  std::stable_sort(v.special_by_length_.begin(), v.special_by_length_.end(),
                   [&v](int32_t a, int32_t b) { return v.text(a).size() > v.text(b).size(); });

  v.apply_model_attrs(m);
  return v;
}

void Vocab::load_tokens(const Metadata& m) {
  std::vector<std::string> texts = m.require_string_array("tokenizer.ggml.tokens");
  const size_t num_tokens = texts.size();
  if (num_tokens == 0) throw_error(ErrorCode::kCorrupt, "tokenizer.ggml.tokens is empty");
  if (num_tokens > static_cast<size_t>(INT32_MAX)) {
    throw_error(ErrorCode::kCorrupt, "tokenizer.ggml.tokens has {} entries", num_tokens);
  }
  std::optional<std::vector<float>> scores;
  if (const MetaValue* s = m.find("tokenizer.ggml.scores")) {
    if (!s->is_array() || (s->elem_type != MetaType::kF32 && s->elem_type != MetaType::kI32)) {
      throw_error(ErrorCode::kCorrupt, "tokenizer.ggml.scores must be an array of f32 or i32");
    }
    scores = m.get_float_array("tokenizer.ggml.scores");
    if (scores->size() < num_tokens) {
      throw_error(ErrorCode::kCorrupt, "tokenizer.ggml.scores has {} entries for {} tokens",
                  scores->size(), num_tokens);
    }
  }
  std::optional<std::vector<int64_t>> types = m.get_int_array("tokenizer.ggml.token_type");
  if (types && types->size() < num_tokens) {
    throw_error(ErrorCode::kCorrupt, "tokenizer.ggml.token_type has {} entries for {} tokens",
                types->size(), num_tokens);
  }

  tokens_.resize(num_tokens);
  size_t capacity = 16;
  while (capacity < 2 * num_tokens) capacity *= 2;
  index_.assign(capacity, Slot{});
  index_mask_ = capacity - 1;
  for (size_t i = 0; i < num_tokens; ++i) {
    std::string& text = texts[i];
    if (text.empty()) {
      log_warn("tokenizer: empty token at index {}", i);
      text = fmt::format("[EMPTY_{}]", i);
    }
    if (std::optional<int32_t> other = find(text)) {
      throw_error(ErrorCode::kCorrupt, "duplicate token in vocabulary: '{}' has ids {} and {}", printable(text), *other, i);
    }
    max_token_length_ = std::max(max_token_length_, text.size());
    Token& t = tokens_[i];
    t.text = std::move(text);
    const uint64_t h = hash_text(t.text);
    uint64_t slot = h & index_mask_;
    while (index_[slot].id >= 0) slot = (slot + 1) & index_mask_;
    index_[slot] = {static_cast<uint32_t>(h >> 32), static_cast<int32_t>(i)};
    t.score = scores ? (*scores)[i] : 0.0f;
    t.attr = types ? attr_from_type((*types)[i]) : token_attr::kNormal;
  }
}

void Vocab::load_special_ids(const Metadata& m) {
  using Field = std::optional<int32_t> SpecialTokens::*;
  static const std::pair<std::string_view, Field> kKeys[] = {
      {"tokenizer.ggml.bos_token_id", &SpecialTokens::bos},
      {"tokenizer.ggml.eos_token_id", &SpecialTokens::eos},
      {"tokenizer.ggml.eot_token_id", &SpecialTokens::eot},
      {"tokenizer.ggml.eom_token_id", &SpecialTokens::eom},
      {"tokenizer.ggml.unknown_token_id", &SpecialTokens::unk},
      {"tokenizer.ggml.seperator_token_id", &SpecialTokens::sep},  // sic: GGUF's spelling
      {"tokenizer.ggml.padding_token_id", &SpecialTokens::pad},
      {"tokenizer.ggml.mask_token_id", &SpecialTokens::mask},
      {"tokenizer.ggml.fim_pre_token_id", &SpecialTokens::fim_pre},
      {"tokenizer.ggml.fim_suf_token_id", &SpecialTokens::fim_suf},
      {"tokenizer.ggml.fim_mid_token_id", &SpecialTokens::fim_mid},
      {"tokenizer.ggml.fim_pad_token_id", &SpecialTokens::fim_pad},
      {"tokenizer.ggml.fim_rep_token_id", &SpecialTokens::fim_rep},
      {"tokenizer.ggml.fim_sep_token_id", &SpecialTokens::fim_sep},
      {"tokenizer.ggml.prefix_token_id", &SpecialTokens::fim_pre},  // deprecated names
      {"tokenizer.ggml.suffix_token_id", &SpecialTokens::fim_suf},
      {"tokenizer.ggml.middle_token_id", &SpecialTokens::fim_mid},
  };
  for (const auto& [key, field] : kKeys) {
    std::optional<int32_t>& id = special_.*field;
    if (id && !contains(*id)) {
      log_warn("tokenizer: default special token '{}' = {} out of vocab range, disabling", key, *id);
      id.reset();
    }
    std::optional<int64_t> value = m.get_int(key);
    if (!value) continue;
    // Files write "none" as 0xFFFFFFFF; llama.cpp keeps the default then.
    if (*value < 0 || *value >= size()) {
      log_debug("tokenizer: special token '{}' = {} is out of range, keeping the default", key, *value);
      continue;
    }
    id = static_cast<int32_t>(*value);
  }
  if (auto b = m.get_bool("tokenizer.ggml.add_bos_token")) add_bos_ = *b;
  if (auto b = m.get_bool("tokenizer.ggml.add_eos_token")) add_eos_ = *b;
  if (add_bos_ && !special_.bos) {
    throw_error(ErrorCode::kCorrupt, "tokenizer.ggml.add_bos_token is true, but tokenizer.ggml.bos_token_id is not set");
  }
  if (add_eos_ && !special_.eos) {
    throw_error(ErrorCode::kCorrupt, "tokenizer.ggml.add_eos_token is true, but tokenizer.ggml.eos_token_id is not set");
  }
}

// Finds eot/eom/fim tokens that the GGUF does not name, by their text, and
// marks them control tokens, as llama.cpp's loader does ("convert scripts
// should provide these"). llama.cpp walks a hash map, so with several
// candidates its pick is arbitrary; the lowest id wins here.
void Vocab::detect_special_tokens() {
  const auto detect = [this](std::optional<int32_t>& slot, std::span<const std::string_view> texts) {
    if (slot) return;
    for (std::string_view t : texts) {
      const std::optional<int32_t> id = find(t);
      if (id && (!slot || *id < *slot)) slot = id;
    }
    if (slot && !has_attr(*slot, token_attr::kControl)) {
      log_warn("tokenizer: control-looking token {} '{}' was not control-type; treating it as control", *slot, text(*slot));
      tokens_[*slot].attr |= token_attr::kControl;
    }
  };
  detect(special_.eot, kEotTexts);
  static constexpr std::string_view kEom[] = {"<|eom_id|>"};
  detect(special_.eom, kEom);
  detect(special_.fim_pre, kFimPreTexts);
  detect(special_.fim_suf, kFimSufTexts);
  detect(special_.fim_mid, kFimMidTexts);
  detect(special_.fim_pad, kFimPadTexts);
  detect(special_.fim_rep, kFimRepTexts);
  static constexpr std::string_view kFimSep[] = {"<|file_sep|>"};
  detect(special_.fim_sep, kFimSep);

  // Control tokens whose text says "unused" are unused.
  for (Token& t : tokens_) {
    if ((t.attr & token_attr::kControl) && t.text.find("unused") != std::string::npos) {
      t.attr |= token_attr::kUnused;
    }
  }
}

void Vocab::build_eog_set() {
  std::vector<int32_t> eog;
  for (const auto& id : {special_.fim_pad, special_.fim_rep, special_.fim_sep}) {
    if (id) eog.push_back(*id);
  }
  for (std::string_view t : kEogTexts) {
    const std::optional<int32_t> id = find(t);
    if (!id) continue;
    eog.push_back(*id);
    if (!has_attr(*id, token_attr::kControl)) {
      log_warn("tokenizer: control-looking token {} '{}' was not control-type; treating it as control", *id, t);
      tokens_[*id].attr |= token_attr::kControl;
    }
  }
  // gpt-oss: these always render, as user-defined tokens.
  for (std::string_view t : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
    if (const std::optional<int32_t> id = find(t)) tokens_[*id].attr = token_attr::kUserDefined;
  }
  for (const auto& id : {special_.eos, special_.eot, special_.eom}) {
    if (id) eog.push_back(*id);
  }
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());

  const auto find_in = [&](std::string_view t) -> std::optional<int32_t> {
    for (int32_t id : eog) {
      if (text(id) == t) return id;
    }
    return std::nullopt;
  };
  // o200k_harmony and solar-open end turns with <|return|>/<|call|>
  // (<|calls|>/<|flush|>); their <|end|> is no end of generation.
  const bool has_call = find_in("<|call|>") || find_in("<|calls|>");
  if (auto end = find_in("<|end|>"); end && has_call && (find_in("<|return|>") || find_in("<|flush|>"))) {
    eog.erase(std::find(eog.begin(), eog.end(), *end));
    tokens_[*end].attr = token_attr::kUserDefined;
  }
  // Gemma-4 and PaddleOCR: </s> is no end of generation beside <|tool_response>.
  if (auto s = find_in("</s>"); s && find_in("<|tool_response>")) {
    eog.erase(std::find(eog.begin(), eog.end(), *s));
    tokens_[*s].attr = token_attr::kNormal;
  }
  eog_ids_ = std::move(eog);
}

// Per-family attributes llama.cpp sets by model name (they only change how
// special tokens swallow neighbouring whitespace when split out of text).
void Vocab::apply_model_attrs(const Metadata& m) {
  std::string name = m.get_string("general.name").value_or("");
  std::transform(name.begin(), name.end(), name.begin(),
                 [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); });
  const std::string arch = m.get_string("general.architecture").value_or("");
  const auto set = [this](std::string_view t, uint32_t flag, bool on) {
    if (auto id = find(t)) {
      tokens_[*id].attr = on ? (tokens_[*id].attr | flag) : (tokens_[*id].attr & ~flag);
    }
  };
  const auto contains_any = [](const std::string& s, std::initializer_list<std::string_view> subs) {
    return std::any_of(subs.begin(), subs.end(), [&](std::string_view sub) { return s.find(sub) != std::string::npos; });
  };
  if (contains_any(pre_name_, {"jina-v2-de", "jina-v2-es", "jina-v2-code"}) ||
      contains_any(arch, {"nomic-bert-moe", "jina-bert-v3"})) {
    set("<mask>", token_attr::kLstrip, true);
  } else if (contains_any(name, {"phi-3", "phi3"})) {
    for (int32_t id : special_by_length_) tokens_[id].attr |= token_attr::kRstrip;
    set("</s>", token_attr::kRstrip, true);
    for (std::string_view t : {"<unk>", "<s>", "<|endoftext|>"}) set(t, token_attr::kRstrip, false);
  } else if (contains_any(name, {"modern-bert"})) {
    set("[MASK]", token_attr::kLstrip, true);
  }
}

}  // namespace kvlm
