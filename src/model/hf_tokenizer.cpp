#include "model/hf_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/log.h"
#include "common/printable.h"
#include "tokenizer/pre_types.h"
#include "tokenizer/vocab.h"

namespace kvlm {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

std::optional<Json> read_json(const fs::path& p, bool required) {
  std::ifstream in(p);
  if (!in) {
    if (required) throw_error(ErrorCode::kNotFound, "{}: cannot open (a Hugging Face folder needs it)", p.string());
    return std::nullopt;
  }
  Json j = Json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw_error(ErrorCode::kCorrupt, "{}: not a JSON object", p.string());
  return j;
}

[[noreturn]] void refuse_field(const std::string& path, const std::string& field, const Json& value,
                              std::string_view why) {
  throw_error(ErrorCode::kUnsupported, "{}: field '{}' = {} is not supported: {}", path, field,
              printable(value.dump(), 200), why);
}

// Text of a token field: "<s>" or {"content": "<s>", ...}.
std::optional<std::string> token_text(const Json& j, const char* key) {
  if (!j.contains(key)) return std::nullopt;
  const Json& v = j[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

struct Tokens {
  std::vector<std::string> text;
  std::vector<int32_t> type;
  std::unordered_map<std::string, int32_t> id_of;
};

// model.vocab plus added_tokens (which may extend it); ids must be dense, a
// gap is filled as llama.cpp's converter fills it ("[PADn]", unused).
Tokens read_tokens(const Json& tj, const std::string& path) {
  const Json& vocab = tj["model"]["vocab"];
  if (!vocab.is_object()) throw_error(ErrorCode::kCorrupt, "{}: model.vocab is not an object", path);
  std::vector<std::pair<int64_t, std::string>> all;
  for (const auto& [text, id] : vocab.items()) {
    if (!id.is_number_integer()) throw_error(ErrorCode::kCorrupt, "{}: model.vocab['{}'] is not an id", path, text);
    all.emplace_back(id.get<int64_t>(), text);
  }
  std::unordered_map<int64_t, bool> added;  // id -> special
  for (const Json& a : tj.value("added_tokens", Json::array())) {
    if (!a.contains("id") || !a["id"].is_number_integer() || !a.contains("content"))
      throw_error(ErrorCode::kCorrupt, "{}: an added_tokens entry lacks id or content", path);
    all.emplace_back(a["id"].get<int64_t>(), a["content"].get<std::string>());
    added[a["id"].get<int64_t>()] = a.value("special", false);
  }
  int64_t size = 0;
  for (const auto& [id, text] : all) size = std::max(size, id + 1);
  if (size <= 0 || size > (1 << 24)) throw_error(ErrorCode::kCorrupt, "{}: vocabulary size {} is out of range", path, size);
  Tokens t;
  t.text.assign(static_cast<size_t>(size), "");
  t.type.assign(static_cast<size_t>(size), static_cast<int32_t>(TokenType::kUnused));
  for (const auto& [id, text] : all) {
    if (id < 0) throw_error(ErrorCode::kCorrupt, "{}: negative token id for '{}'", path, text);
    t.text[id] = text;
    t.type[id] = static_cast<int32_t>(TokenType::kNormal);
  }
  for (const auto& [id, special] : added)
    t.type[id] = static_cast<int32_t>(special ? TokenType::kControl : TokenType::kUserDefined);
  for (size_t id = 0; id < t.text.size(); ++id) {
    if (t.type[id] == static_cast<int32_t>(TokenType::kUnused)) t.text[id] = "[PAD" + std::to_string(id) + "]";
    t.id_of.emplace(t.text[id], static_cast<int32_t>(id));
  }
  return t;
}

// Merges as "left right" strings; newer files write [left, right].
std::vector<std::string> read_merges(const Json& model, const std::string& path) {
  std::vector<std::string> out;
  for (const Json& m : model.value("merges", Json::array())) {
    if (m.is_string()) {
      out.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      out.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    } else {
      throw_error(ErrorCode::kCorrupt, "{}: a model.merges entry is neither \"a b\" nor [a, b]", path);
    }
  }
  return out;
}

// The pieces of a Sequence (or the one step that is not a Sequence).
std::vector<Json> steps(const Json& j) {
  if (j.is_null()) return {};
  if (j.value("type", "") == "Sequence") {
    for (const char* key : {"pretokenizers", "normalizers"})
      if (j.contains(key)) return j[key].get<std::vector<Json>>();
  }
  return {j};
}

// HF writes the contractions case-insensitively; llama.cpp's expressions
// spell the cases out. Equal after this rewrite means the same expression.
std::string canonical_regex(std::string r) {
  const std::string hf = "(?i:'s|'t|'re|'ve|'m|'ll|'d)";
  const std::string cpp = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";
  if (auto pos = r.find(hf); pos != std::string::npos) r.replace(pos, hf.size(), cpp);
  return r;
}

// The pre-tokenizer type whose expressions the Split steps are.
std::string byte_level_pre_type(const Json& pre, bool ignore_merges, const std::string& path) {
  std::vector<std::string> regexes;
  for (const Json& s : steps(pre)) {
    const std::string type = s.value("type", "");
    if (type == "ByteLevel") {
      if (s.value("use_regex", true)) regexes.push_back(std::string(find_pre_type("gpt-2").regexes[0]));
    } else if (type == "Split" && s.contains("pattern") && s["pattern"].contains("Regex") &&
               s.value("behavior", "") == "Isolated" && !s.value("invert", false)) {
      regexes.push_back(canonical_regex(s["pattern"]["Regex"].get<std::string>()));
    } else {
      refuse_field(path, "pre_tokenizer", s, "kvlm knows ByteLevel and isolating Split(Regex) steps");
    }
  }
  std::optional<std::string> any;
  for (std::string_view name : known_pre_type_names()) {
    PreTypeInfo info = find_pre_type(name);
    if (info.regexes.size() != regexes.size()) continue;
    bool same = true;
    for (size_t i = 0; i < regexes.size(); ++i) same = same && canonical_regex(std::string(info.regexes[i])) == regexes[i];
    if (!same) continue;
    if (info.ignore_merges == ignore_merges) return std::string(name);
    if (!any) any = std::string(name);
  }
  if (any) return *any;
  refuse_field(path, "pre_tokenizer", pre, "its expressions match none of the pre-tokenizer types kvlm implements");
}

// SentencePiece-style: spaces become "▁" (Replace normalizer or Metaspace);
// returns whether a "▁" is prepended.
bool spm_space_prefix(const Json& tj, const std::string& path) {
  bool prefix = false, replaced = false;
  for (const Json& n : steps(tj["normalizer"])) {
    const std::string type = n.value("type", "");
    if (type == "Prepend" && n.value("prepend", "") == "\xe2\x96\x81") {
      prefix = true;
    } else if (type == "Replace" && n["pattern"].value("String", "") == " " && n.value("content", "") == "\xe2\x96\x81") {
      replaced = true;
    } else {
      refuse_field(path, "normalizer", n, "kvlm knows Prepend(\"▁\") and Replace(\" \", \"▁\") for this model");
    }
  }
  for (const Json& p : steps(tj["pre_tokenizer"])) {
    if (p.value("type", "") != "Metaspace" || p.value("split", false) || p.value("replacement", "") != "\xe2\x96\x81")
      refuse_field(path, "pre_tokenizer", p, "kvlm knows Metaspace(\"▁\", split false) for this model");
    replaced = true;
    prefix = p.value("prepend_scheme", "always") != "never";
  }
  if (!replaced) refuse_field(path, "normalizer", tj["normalizer"], "spaces are not turned into \"▁\"");
  return prefix;
}

// Scores that make SentencePiece's "highest score first" merge in the order
// of the merge list: the result of merge r scores -r; other tokens never win.
std::vector<float> spm_scores(const Tokens& t, const std::vector<std::string>& merges) {
  std::vector<float> scores(t.text.size(), -1e9f);
  for (size_t r = 0; r < merges.size(); ++r) {
    const size_t sp = merges[r].find(' ');
    auto it = t.id_of.find(merges[r].substr(0, sp) + merges[r].substr(sp + 1));
    if (it != t.id_of.end() && scores[it->second] == -1e9f) scores[it->second] = -static_cast<float>(r);
  }
  return scores;
}

void read_vocab(const Json& tj, const std::string& path, Metadata& out) {
  const Json& model = tj["model"];
  if (model.value("type", "") != "BPE") refuse_field(path, "model.type", model.value("type", Json()), "kvlm reads BPE");
  Tokens t = read_tokens(tj, path);
  std::vector<std::string> merges = read_merges(model, path);
  const bool spm = model.value("byte_fallback", false);
  if (spm) {
    out.set("tokenizer.ggml.model", meta_string("llama"));
    out.set("tokenizer.ggml.add_space_prefix", meta_bool(spm_space_prefix(tj, path)));
    for (size_t id = 0; id < t.text.size(); ++id) {
      const std::string& s = t.text[id];
      if (s.size() == 6 && s.rfind("<0x", 0) == 0 && s.back() == '>') t.type[id] = static_cast<int32_t>(TokenType::kByte);
    }
    if (auto unk = token_text(model, "unk_token"); unk && t.id_of.count(*unk))
      t.type[t.id_of[*unk]] = static_cast<int32_t>(TokenType::kUnknown);
    out.set("tokenizer.ggml.scores", meta_f32_array(spm_scores(t, merges)));
  } else {
    const Json& norm = tj["normalizer"];
    if (!norm.is_null() && norm.value("type", "") == "NFC")
      log_warn("{}: the NFC normalizer is not applied (as in llama.cpp): text already in NFC tokenizes the same", path);
    else if (!norm.is_null())
      refuse_field(path, "normalizer", norm, "byte-level BPE is read without a normalizer");
    out.set("tokenizer.ggml.model", meta_string("gpt2"));
    out.set("tokenizer.ggml.pre", meta_string(byte_level_pre_type(tj["pre_tokenizer"], model.value("ignore_merges", false), path)));
    out.set("tokenizer.ggml.merges", meta_string_array(merges));
  }
  out.set("tokenizer.ggml.tokens", meta_string_array(t.text));
  out.set("tokenizer.ggml.token_type", meta_i32_array(t.type));
}

// The id of a special token named by text in tokenizer_config.json, else
// the id config.json gives.
std::optional<int64_t> special_id(const Json& cfg, const char* key, const Metadata& out, int64_t fallback) {
  if (auto text = token_text(cfg, key)) {
    const auto tokens = out.get_string_array("tokenizer.ggml.tokens").value();
    for (size_t id = 0; id < tokens.size(); ++id)
      if (tokens[id] == *text) return static_cast<int64_t>(id);
  }
  return fallback >= 0 ? std::optional<int64_t>(fallback) : std::nullopt;
}

// Whether BOS is added: tokenizer_config's add_bos_token, else whether the
// post-processor's single-sequence template starts with a special token.
bool adds_bos(const Json& cfg, const Json& tj, bool spm) {
  if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean()) return cfg["add_bos_token"].get<bool>();
  const Json& post = tj.contains("post_processor") ? tj["post_processor"] : Json();
  for (const Json& p : steps(post)) {
    if (p.value("type", "") != "TemplateProcessing" || !p.contains("single") || p["single"].empty()) continue;
    return p["single"][0].contains("SpecialToken");
  }
  return spm;
}

std::optional<std::string> chat_template(const fs::path& dir, const Json& cfg) {
  std::ifstream jinja(dir / "chat_template.jinja");
  if (jinja) {
    std::stringstream ss;
    ss << jinja.rdbuf();
    return ss.str();
  }
  if (!cfg.contains("chat_template")) return std::nullopt;
  const Json& t = cfg["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  for (const Json& named : t)  // [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
    if (named.value("name", "") == "default" && named.contains("template")) return named["template"].get<std::string>();
  return std::nullopt;
}

// generation_config.json: the end tokens (more than one for chat models: the
// first other than EOS becomes EOT) and the default sampling, in the
// general.sampling.* keys llama.cpp's converter writes.
void read_generation_config(const fs::path& dir, Metadata& out) {
  const std::optional<Json> g = read_json(dir / "generation_config.json", false);
  if (!g) return;
  std::vector<int64_t> ends;
  if (g->contains("eos_token_id")) {
    const Json& e = (*g)["eos_token_id"];
    if (e.is_number_integer()) ends.push_back(e.get<int64_t>());
    if (e.is_array())
      for (const Json& id : e) ends.push_back(id.get<int64_t>());
  }
  for (int64_t id : ends) {
    if (!out.has("tokenizer.ggml.eos_token_id"))
      out.set("tokenizer.ggml.eos_token_id", meta_u32(static_cast<uint32_t>(id)));
    else if (id != out.require_int("tokenizer.ggml.eos_token_id") && !out.has("tokenizer.ggml.eot_token_id"))
      out.set("tokenizer.ggml.eot_token_id", meta_u32(static_cast<uint32_t>(id)));
  }
  if (g->contains("temperature") && (*g)["temperature"].is_number())
    out.set("general.sampling.temp", meta_f32((*g)["temperature"].get<float>()));
  if (g->contains("top_p") && (*g)["top_p"].is_number()) out.set("general.sampling.top_p", meta_f32((*g)["top_p"].get<float>()));
  if (g->contains("top_k") && (*g)["top_k"].is_number_integer())
    out.set("general.sampling.top_k", meta_i32((*g)["top_k"].get<int32_t>()));
  if (g->contains("min_p") && (*g)["min_p"].is_number()) out.set("general.sampling.min_p", meta_f32((*g)["min_p"].get<float>()));
  if (g->contains("repetition_penalty") && (*g)["repetition_penalty"].is_number())
    out.set("general.sampling.penalty_repeat", meta_f32((*g)["repetition_penalty"].get<float>()));
}

void read_hf_tokenizer_config(const fs::path& dir, const Json& tj, int64_t config_bos_id, int64_t config_eos_id,
                              Metadata& out) {
  const Json cfg = read_json(dir / "tokenizer_config.json", false).value_or(Json::object());
  const int64_t size = static_cast<int64_t>(out.get_string_array("tokenizer.ggml.tokens")->size());
  auto set_id = [&](const char* key, std::optional<int64_t> id) {
    if (!id) return;
    if (*id < 0 || *id >= size) throw_error(ErrorCode::kCorrupt, "{}: {} {} is outside the vocabulary", dir.string(), key, *id);
    out.set(std::string("tokenizer.ggml.") + key, meta_u32(static_cast<uint32_t>(*id)));
  };
  set_id("bos_token_id", special_id(cfg, "bos_token", out, config_bos_id));
  set_id("eos_token_id", special_id(cfg, "eos_token", out, config_eos_id));
  set_id("padding_token_id", special_id(cfg, "pad_token", out, -1));
  if (auto unk = token_text(tj["model"], "unk_token")) set_id("unknown_token_id", special_id(Json{{"u", *unk}}, "u", out, -1));
  const bool spm = out.require_string("tokenizer.ggml.model") == "llama";
  out.set("tokenizer.ggml.add_bos_token", meta_bool(adds_bos(cfg, tj, spm)));
  out.set("tokenizer.ggml.add_eos_token", meta_bool(cfg.value("add_eos_token", false)));
  if (auto t = chat_template(dir, cfg)) out.set("tokenizer.chat_template", meta_string(*t));
  read_generation_config(dir, out);
}

}  // namespace

void read_hf_tokenizer(const std::string& dir, int64_t config_bos_id, int64_t config_eos_id, Metadata& out) {
  const fs::path p = fs::path(dir) / "tokenizer.json";
  const Json tj = *read_json(p, true);
  if (!tj.contains("model") || !tj["model"].is_object())
    throw_error(ErrorCode::kCorrupt, "{}: no 'model' object", p.string());
  read_vocab(tj, p.string(), out);
  read_hf_tokenizer_config(dir, tj, config_bos_id, config_eos_id, out);
}

}  // namespace kvlm
