#include "tokenizer/tokenizer.h"

#include "common/error.h"
#include "tokenizer/bpe.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/spm.h"
#include "tokenizer/unicode.h"

namespace kvlm {

namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's escaped space

// SentencePiece form of a text fragment: every ' ' becomes U+2581.
void append_escaped(std::string_view text, std::string& out) {
  for (char c : text) {
    if (c == ' ') {
      out.append(kSpmSpace);
    } else {
      out.push_back(c);
    }
  }
}

// llama.cpp's token_to_byte: two hex digits after "<0x" (strtol semantics:
// stops at the first non-digit).
char byte_of_token(const std::string& text) {
  unsigned value = 0;
  for (size_t i = 3; i < text.size() && i < 5; ++i) {
    const char c = text[i];
    unsigned digit;
    if (c >= '0' && c <= '9') digit = c - '0';
    else if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
    else break;
    value = value * 16 + digit;
  }
  return static_cast<char>(value);
}

// llama.cpp's llama_decode_text: GPT-2 byte symbols back to bytes; a code
// point outside the mapping is rendered as "[UNK_BYTE_0x<hex><text>]".
std::string decode_byte_level(const std::string& text) {
  std::string out;
  size_t pos = 0;
  while (pos < text.size()) {
    std::optional<uint32_t> cp = unicode::decode_lenient(text, pos);
    if (!cp || *cp > 0x10FFFF) cp = 0xFFFD;
    if (std::optional<uint8_t> byte = unicode::codepoint_to_byte(*cp)) {
      out.push_back(static_cast<char>(*byte));
      continue;
    }
    std::string utf8;
    unicode::append_utf8(*cp, utf8);
    out += "[UNK_BYTE_0x";
    for (char c : utf8) out += fmt::format("{:02x}", static_cast<uint8_t>(c));
    out += text + "]";
  }
  return out;
}

}  // namespace

Tokenizer::Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {}

Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::from_metadata(const Metadata& m) {
  std::unique_ptr<Tokenizer> t(new Tokenizer(Vocab::from_metadata(m)));
  if (t->vocab_.model() == TokenizerModel::kSpm) {
    t->spm_ = std::make_unique<SpmTokenizer>(t->vocab_);
  } else {
    t->bpe_ = std::make_unique<BpeTokenizer>(t->vocab_);
  }
  t->build_pieces();
  return t;
}

// llama.cpp's token_to_piece with special = true, for every token.
void Tokenizer::build_pieces() {
  pieces_.resize(vocab_.size());
  const bool spm = vocab_.model() == TokenizerModel::kSpm;
  for (int32_t id = 0; id < vocab_.size(); ++id) {
    const std::string& text = vocab_.text(id);
    const uint32_t attr = vocab_.attr(id);
    std::string& piece = pieces_[id];
    if (attr & (token_attr::kUnknown | token_attr::kControl | token_attr::kUserDefined)) {
      piece = text;
    } else if (attr & token_attr::kNormal) {
      if (spm) {
        for (size_t i = 0; i < text.size();) {
          if (text.compare(i, kSpmSpace.size(), kSpmSpace) == 0) {
            piece.push_back(' ');
            i += kSpmSpace.size();
          } else {
            piece.push_back(text[i++]);
          }
        }
      } else {
        piece = decode_byte_level(text);
      }
    } else if (attr & token_attr::kByte) {
      piece.assign(1, byte_of_token(text));
    }
    // Unused and undefined tokens render nothing.
  }
}

const std::string& Tokenizer::piece(int32_t id) const {
  if (!vocab_.contains(id)) {
    throw_error(ErrorCode::kInvalidArgument, "token id {} is outside the vocabulary [0, {})", id, vocab_.size());
  }
  return pieces_[id];
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  return encode_text(text, add_special, parse_special, /*prefix_start=*/true);
}

std::vector<int32_t> Tokenizer::encode_continuation(std::string_view text, bool parse_special) const {
  return encode_text(text, /*add_special=*/false, parse_special, /*prefix_start=*/false);
}

std::vector<int32_t> Tokenizer::encode_text(std::string_view text, bool add_special, bool parse_special,
                                            bool prefix_start) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  const std::vector<Fragment> fragments = split_special_tokens(vocab_, text, parse_special);
  if (add_special && vocab_.add_bos()) out.push_back(*vocab_.special().bos);

  if (spm_) {
    // Text after a special token (or at the start, unless it continues a
    // text) gets the space prefix, whether or not a BOS was added
    // (llama.cpp's is_prev_special).
    bool prev_special = prefix_start;
    std::string escaped;
    for (const Fragment& f : fragments) {
      if (!f.is_text()) {
        out.push_back(f.token);
        prev_special = true;
        continue;
      }
      escaped.clear();
      if (vocab_.add_space_prefix() && prev_special) escaped.append(kSpmSpace);
      append_escaped(text.substr(f.begin, f.end - f.begin), escaped);
      spm_->encode(escaped, out);
      prev_special = false;
    }
  } else {
    for (const Fragment& f : fragments) {
      if (f.is_text()) {
        bpe_->encode(text.substr(f.begin, f.end - f.begin), out);
      } else {
        out.push_back(f.token);
      }
    }
  }

  if (add_special && vocab_.add_eos()) out.push_back(*vocab_.special().eos);
  return out;
}

}  // namespace kvlm
