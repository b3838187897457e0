// tokenizer.json and tokenizer_config.json from a GGUF vocabulary, as
// Hugging Face's converters lay them out (tokenizers' BPE model; for a
// SentencePiece vocabulary, the merges of every pair of pieces whose
// concatenation is a piece, in order of that piece's score).
#include <algorithm>
#include <tuple>

#include "support/hf_folder.h"
#include "tokenizer/pre_types.h"

namespace kvlm::test {
namespace {

using Json = nlohmann::json;

constexpr int64_t kNormal = 1, kControl = 3, kUserDefined = 4;

std::vector<std::string> spm_merges(const std::vector<std::string>& tokens, const std::vector<int64_t>& types,
                                    const std::vector<float>& scores, const Json& vocab) {
  std::vector<std::tuple<float, int64_t, int64_t, std::string>> merges;  // -score, left id, right id, "l r"
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (types[id] != kNormal) continue;
    const std::string& s = tokens[id];
    for (size_t i = 1; i < s.size(); ++i) {
      if ((static_cast<uint8_t>(s[i]) & 0xC0) == 0x80) continue;  // inside a UTF-8 sequence
      const std::string l = s.substr(0, i), r = s.substr(i);
      if (!vocab.contains(l) || !vocab.contains(r)) continue;
      const int64_t li = vocab[l], ri = vocab[r];
      if (types[li] != kNormal || types[ri] != kNormal) continue;
      merges.emplace_back(-scores[id], li, ri, l + " " + r);
    }
  }
  std::sort(merges.begin(), merges.end());
  std::vector<std::string> out;
  for (auto& m : merges) out.push_back(std::move(std::get<3>(m)));
  return out;
}

}  // namespace

Json hf_tokenizer_json(const Metadata& m) {
  const std::vector<std::string> tokens = m.require_string_array("tokenizer.ggml.tokens");
  std::vector<int64_t> types = m.get_int_array("tokenizer.ggml.token_type").value_or(std::vector<int64_t>(tokens.size(), kNormal));
  const bool spm = m.require_string("tokenizer.ggml.model") == "llama";
  Json vocab = Json::object(), added = Json::array();
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (!vocab.contains(tokens[id])) vocab[tokens[id]] = id;
    if (types[id] == kControl || types[id] == kUserDefined)
      added.push_back({{"id", id}, {"content", tokens[id]}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                       {"normalized", types[id] != kControl}, {"special", types[id] == kControl}});
  }
  Json t = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", added},
            {"post_processor", nullptr}};
  Json model = {{"type", "BPE"}, {"dropout", nullptr}, {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr}, {"fuse_unk", spm}, {"byte_fallback", spm}, {"vocab", vocab}};
  if (spm) {
    const std::vector<float> scores = m.get_float_array("tokenizer.ggml.scores").value();
    model["merges"] = spm_merges(tokens, types, scores, vocab);
    model["unk_token"] = tokens[m.get_int("tokenizer.ggml.unknown_token_id").value_or(0)];
    model["ignore_merges"] = false;
    Json norms = Json::array();
    if (m.get_bool("tokenizer.ggml.add_space_prefix").value_or(true)) norms.push_back({{"type", "Prepend"}, {"prepend", "\xe2\x96\x81"}});
    norms.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xe2\x96\x81"}});
    t["normalizer"] = {{"type", "Sequence"}, {"normalizers", norms}};
    t["pre_tokenizer"] = nullptr;
    t["decoder"] = {{"type", "Sequence"},
                    {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", "\xe2\x96\x81"}}}, {"content", " "}},
                                  {{"type", "ByteFallback"}},
                                  {{"type", "Fuse"}},
                                  {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  } else {
    const PreTypeInfo pre = find_pre_type(m.get_string("tokenizer.ggml.pre").value_or(""));
    model["merges"] = m.require_string_array("tokenizer.ggml.merges");
    model["ignore_merges"] = pre.ignore_merges;
    Json steps = Json::array();
    for (std::string_view r : pre.regexes)
      steps.push_back({{"type", "Split"}, {"pattern", {{"Regex", std::string(r)}}}, {"behavior", "Isolated"}, {"invert", false}});
    steps.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}});
    t["normalizer"] = nullptr;
    t["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", steps}};
    t["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  }
  t["model"] = model;
  return t;
}

Json hf_tokenizer_config_json(const Metadata& m, bool with_template) {
  const std::vector<std::string> tokens = m.require_string_array("tokenizer.ggml.tokens");
  Json c = {{"clean_up_tokenization_spaces", false}, {"model_max_length", 2048}};
  if (auto b = m.get_int("tokenizer.ggml.bos_token_id")) c["bos_token"] = tokens[*b];
  if (auto e = m.get_int("tokenizer.ggml.eos_token_id")) c["eos_token"] = tokens[*e];
  const bool spm = m.require_string("tokenizer.ggml.model") == "llama";
  const bool default_bos = spm || find_pre_type(m.get_string("tokenizer.ggml.pre").value_or("")).add_bos;
  c["add_bos_token"] = m.get_bool("tokenizer.ggml.add_bos_token").value_or(default_bos);
  c["add_eos_token"] = m.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  if (with_template)
    if (auto t = m.get_string("tokenizer.chat_template")) c["chat_template"] = *t;
  return c;
}

}  // namespace kvlm::test
