// libFuzzer target: tokenizer encode and decode over the shared SPM and BPE
// vocabularies (../shared/vocab, stories260K). Input: byte 0 picks the
// vocabulary, byte 1 the mode and flags, the rest is text to encode (mode 0)
// or little-endian 16-bit token ids to decode (mode 1). Any bytes must give
// ids inside the vocabulary, text that streams as well-formed UTF-8, and an
// Error (never a crash) for an id outside it.
//
//   scripts/fuzz.sh 60
//   KVLM_SHARED=/path/to/shared build-fuzz/fuzz/kvlm_fuzz_tokenizer CORPUS_DIR
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "model/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace {

// SPM first, then BPE; the seed corpus names vocabularies by this index.
constexpr const char* kVocabs[] = {
    "vocab/ggml-vocab-llama-spm.gguf", "vocab/ggml-vocab-phi-3.gguf",       "models/stories260K.gguf",
    "vocab/ggml-vocab-gpt-2.gguf",     "vocab/ggml-vocab-deepseek-coder.gguf", "vocab/ggml-vocab-falcon.gguf",
    "vocab/ggml-vocab-starcoder.gguf",
};

std::vector<std::unique_ptr<kvlm::Tokenizer>>& tokenizers() {
  static std::vector<std::unique_ptr<kvlm::Tokenizer>> all;
  return all;
}

// Streams `ids` and checks every piece of text it returns is well-formed UTF-8.
void stream(const kvlm::Tokenizer& tok, const std::vector<int32_t>& ids, bool render_special) {
  kvlm::StreamingDetokenizer d(tok, kvlm::StreamOptions{render_special, /*strip_leading_space=*/!render_special});
  for (int32_t id : ids)
    if (!kvlm::unicode::is_valid_utf8(d.push(id))) std::abort();
  if (!kvlm::unicode::is_valid_utf8(d.flush())) std::abort();
}

void decode_all_ways(const kvlm::Tokenizer& tok, const std::vector<int32_t>& ids) {
  (void)tok.decode(ids);
  (void)tok.decode(ids, kvlm::DecodeOptions{/*remove_special=*/true, /*render_special=*/false});
  stream(tok, ids, false);
  stream(tok, ids, true);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* env = std::getenv("KVLM_SHARED");
  const std::string shared = env ? env : KVLM_SHARED_DIR;
  for (const char* rel : kVocabs)
    tokenizers().push_back(kvlm::Tokenizer::from_metadata(kvlm::GgufFile::open(shared + "/" + rel)->metadata()));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const kvlm::Tokenizer& tok = *tokenizers()[data[0] % tokenizers().size()];
  const uint8_t flags = data[1];
  const std::string_view rest(reinterpret_cast<const char*>(data + 2), size - 2);
  std::vector<int32_t> ids;
  if ((flags & 1) == 0) {
    ids = tok.encode(rest, /*add_special=*/flags & 2, /*parse_special=*/flags & 4);
    for (int32_t id : ids)
      if (id < 0 || id >= tok.vocab_size()) std::abort();
  } else {
    for (size_t i = 0; i + 1 < rest.size(); i += 2)
      ids.push_back((static_cast<uint8_t>(rest[i]) | static_cast<uint8_t>(rest[i + 1]) << 8) % tok.vocab_size());
  }
  decode_all_ways(tok, ids);
  if (flags & 8) {
    // An id past either end is the caller's error, reported as one.
    ids.push_back(flags & 16 ? -1 : tok.vocab_size());
    try {
      (void)tok.decode(ids);
      std::abort();
    } catch (const kvlm::Error&) {
    }
  }
  return 0;
}
