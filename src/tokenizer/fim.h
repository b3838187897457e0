// Fill-in-the-middle prompts for code models: the code before and after a
// gap, with the model's FIM tokens around them, in the prefix-suffix-middle
// order the models are trained on (and llama.cpp builds):
//   [BOS] [extra context] <fim_pre> prefix <fim_suf> suffix <fim_mid> middle
// The extra context (other files) is, with <fim_rep> and <fim_sep>,
//   <fim_rep> "myproject\n" (<fim_sep> filename "\n" text)... <fim_sep> "filename\n"
// and without them each file's text after a "--- snippet ---" line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvlm {

class Tokenizer;

struct FimFile {
  std::string filename{};
  std::string text{};
};

struct FimParts {
  std::string prefix{};
  std::string suffix{};
  std::string middle{};  // text already typed at the gap (llama.cpp's `prompt`)
  std::vector<FimFile> extra{};
};

// The prompt's token ids; nullopt when the vocabulary has no fim_pre,
// fim_suf or fim_mid token (the GGUF's ids, or found by their text).
std::optional<std::vector<int32_t>> fim_prompt(const Tokenizer& tok, const FimParts& parts);

}  // namespace kvlm
