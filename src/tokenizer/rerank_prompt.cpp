#include "tokenizer/rerank_prompt.h"

#include "tokenizer/tokenizer.h"

namespace kvlm {
namespace {

// Every occurrence, left to right, past each inserted text; {query} is
// replaced before {document}, so a query that says "{document}" gets the
// document there too, as llama-server's string_replace_all does.
std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

}  // namespace

std::vector<int32_t> rerank_prompt(const Tokenizer& tok, const RerankFormat& format, std::string_view query,
                                   std::string_view document) {
  if (format.rerank_template) {
    const std::string text =
        replace_all(replace_all(*format.rerank_template, "{query}", query), "{document}", document);
    return tok.encode(text, /*add_special=*/false, /*parse_special=*/true);
  }
  const Vocab& v = tok.vocab();
  const std::optional<int32_t> eos = v.special().eos ? v.special().eos : v.special().sep;
  std::vector<int32_t> out;
  if (v.add_bos() && v.special().bos) out.push_back(*v.special().bos);
  const std::vector<int32_t> q = tok.encode(query, false, false), d = tok.encode(document, false, false);
  out.insert(out.end(), q.begin(), q.end());
  if (v.add_eos() && eos) out.push_back(*eos);
  if (format.add_sep && v.special().sep) out.push_back(*v.special().sep);
  out.insert(out.end(), d.begin(), d.end());
  if (v.add_eos() && eos) out.push_back(*eos);
  return out;
}

}  // namespace kvlm
