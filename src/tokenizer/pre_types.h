// The BPE pre-tokenizer types llama.cpp knows by `tokenizer.ggml.pre`: for
// each, the sequence of regular expressions that splits text into words (each
// expression splits the pieces the previous one left) and the vocabulary flags
// llama.cpp's loader sets for it. The expressions are llama.cpp's, verbatim
// (src/llama-vocab.cpp, llm_tokenizer_bpe); PreTokenizer adapts them to PCRE2.
#pragma once

#include <string_view>
#include <vector>

namespace kvlm {

struct PreTypeInfo {
  std::string_view name;                // canonical name (llama.cpp's spelling)
  std::vector<std::string_view> regexes;
  bool clean_spaces = true;             // detokenizer removes " ." " ," ... (clean_up_tokenization_spaces)
  bool ignore_merges = false;           // a word that is a whole token is emitted as is
  bool add_bos = false;                 // default for tokenizer.ggml.add_bos_token
  bool no_default_bos = false;          // the family has no BOS unless the GGUF names one
  bool known = true;                    // false: unknown name, GPT-2 expression used instead
};

// Looks up `pre` (the value of tokenizer.ggml.pre). An absent/empty value
// gives llama.cpp's "default" type; an unknown value gives the GPT-2
// expression with known == false (the caller logs a warning).
PreTypeInfo find_pre_type(std::string_view pre);

// Every name find_pre_type recognises (for tests and diagnostics).
std::vector<std::string_view> known_pre_type_names();

}  // namespace kvlm
