#include "tokenizer/fim.h"

#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace kvlm {
namespace {

void append_text(std::vector<int32_t>& ids, const Tokenizer& tok, const std::string& text) {
  // The user's code is text: a "<fim_prefix>" typed in it stays text.
  for (int32_t id : tok.encode(text, /*add_special=*/false, /*parse_special=*/false)) ids.push_back(id);
}

void append_extra(std::vector<int32_t>& ids, const Tokenizer& tok, const SpecialTokens& s,
                  const std::vector<FimFile>& extra) {
  const bool repo_format = s.fim_rep && s.fim_sep;
  if (repo_format) {
    ids.push_back(*s.fim_rep);
    append_text(ids, tok, "myproject\n");
  }
  for (const FimFile& f : extra) {
    if (s.fim_sep) {
      ids.push_back(*s.fim_sep);
      append_text(ids, tok, f.filename + "\n");
    } else {
      append_text(ids, tok, "\n\n--- snippet ---\n\n");
    }
    append_text(ids, tok, f.text);
  }
  // The file being edited: repository-trained models expect its separator.
  if (repo_format) {
    ids.push_back(*s.fim_sep);
    append_text(ids, tok, "filename\n");
  }
}

}  // namespace

std::optional<std::vector<int32_t>> fim_prompt(const Tokenizer& tok, const FimParts& parts) {
  const SpecialTokens& s = tok.vocab().special();
  if (!s.fim_pre || !s.fim_suf || !s.fim_mid) return std::nullopt;
  std::vector<int32_t> ids;
  if (tok.add_bos() && tok.bos_id()) ids.push_back(*tok.bos_id());
  if (!parts.extra.empty()) append_extra(ids, tok, s, parts.extra);
  ids.push_back(*s.fim_pre);
  append_text(ids, tok, parts.prefix);
  ids.push_back(*s.fim_suf);
  append_text(ids, tok, parts.suffix);
  ids.push_back(*s.fim_mid);
  append_text(ids, tok, parts.middle);
  return ids;
}

}  // namespace kvlm
