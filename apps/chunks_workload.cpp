#include "apps/chunks_workload.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <string>

#include "common/error.h"
#include "tokenizer/tokenizer.h"

namespace kvlm::apps {
namespace {

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string_view trim_blanks(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

// Bytes of a closing mark at s[i] that still belongs to the sentence before
// it: quotes (ASCII, and UTF-8 's right quotes), a parenthesis, more end
// punctuation ("...", "?!"). 0: none.
size_t closer_length(std::string_view s, size_t i) {
  const char c = s[i];
  if (c == '"' || c == '\'' || c == ')' || c == '.' || c == '!' || c == '?') return 1;
  if (s.substr(i, 3) == "\xe2\x80\x9d" || s.substr(i, 3) == "\xe2\x80\x99") return 3;
  return 0;
}

void split_paragraph(std::string_view p, std::vector<std::string_view>& out) {
  size_t start = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] != '.' && p[i] != '!' && p[i] != '?') continue;
    size_t end = i + 1;
    while (end < p.size()) {
      const size_t n = closer_length(p, end);
      if (n == 0) break;
      end += n;
    }
    i = end - 1;
    if (end < p.size() && !is_blank(p[end])) continue;  // "3.5", "Mr.Smith": not an end
    if (std::string_view s = trim_blanks(p.substr(start, end - start)); !s.empty()) out.push_back(s);
    start = end;
  }
  if (std::string_view s = trim_blanks(p.substr(std::min(start, p.size()))); !s.empty()) out.push_back(s);
}

int32_t count_tokens(const Tokenizer& tok, std::string_view s) {
  return static_cast<int32_t>(tok.encode(s, /*add_special=*/false, /*parse_special=*/false).size());
}

// The pool: the text's sentences, in order, gathered until a document
// holds doc_tokens tokens (each sentence counted alone), so a document ends
// at the first sentence end at or past that count; a paragraph break inside
// one stays a newline. A document is tokenized alone with a newline after it
// (the boundary, for tokenizers that put no space before a word). Returns
// the index of the first paragraph after the last document's.
size_t cut_docs(const std::vector<std::vector<std::string_view>>& paragraphs, const Tokenizer& tok,
                const ChunksWorkloadSpec& spec, std::vector<std::vector<int32_t>>& docs) {
  std::string doc;
  int32_t num_tokens = 0;
  for (size_t p = 0; p < paragraphs.size(); ++p) {
    for (size_t i = 0; i < paragraphs[p].size(); ++i) {
      if (!doc.empty()) doc += i == 0 ? '\n' : ' ';
      doc.append(paragraphs[p][i]);
      num_tokens += count_tokens(tok, paragraphs[p][i]);
      if (num_tokens < spec.doc_tokens) continue;
      docs.push_back(tok.encode(doc + "\n", /*add_special=*/false, /*parse_special=*/false));
      doc.clear();
      num_tokens = 0;
      if (static_cast<int32_t>(docs.size()) == spec.num_docs) return p + 1;
    }
  }
  throw_error(ErrorCode::kInvalidArgument,
              "the text gave {} documents of {} tokens, not {}: give a longer --text, or fewer --docs or --doc-tokens",
              docs.size(), spec.doc_tokens, spec.num_docs);
}

// ChunksQuery::kText: the first tail + continuation tokens of each paragraph
// from `first` on that has that many, one a request.
std::vector<std::vector<int32_t>> text_passages(const std::vector<std::vector<std::string_view>>& paragraphs,
                                                size_t first, const Tokenizer& tok, const ChunksWorkloadSpec& spec) {
  const auto length = static_cast<size_t>(spec.tail_tokens + spec.continuation_tokens);
  std::vector<std::vector<int32_t>> out;
  for (size_t p = first; p < paragraphs.size() && static_cast<int32_t>(out.size()) < spec.num_requests; ++p) {
    std::string text;
    for (std::string_view sentence : paragraphs[p]) text.append(text.empty() ? "" : " ").append(sentence);
    std::vector<int32_t> tokens = tok.encode(text, /*add_special=*/false, /*parse_special=*/false);
    if (tokens.size() < length) continue;
    tokens.resize(length);
    out.push_back(std::move(tokens));
  }
  if (static_cast<int32_t>(out.size()) < spec.num_requests)
    throw_error(ErrorCode::kInvalidArgument,
                "the text after the documents gave {} passages of {} tokens for --query text, not {}: give a longer "
                "--text, or fewer --requests",
                out.size(), length, spec.num_requests);
  return out;
}

// K documents in a random order, then the tail and the continuation: a
// passage of one of them (kDoc) or `passage` (kText).
ChunksRequest make_request(const ChunksWorkload& w, const ChunksWorkloadSpec& spec, std::mt19937_64& rng,
                           const std::vector<int32_t>* passage) {
  std::vector<int32_t> order(w.docs.size());
  std::iota(order.begin(), order.end(), 0);
  ChunksRequest r;
  if (w.bos) r.tokens.push_back(*w.bos);
  for (int32_t i = 0; i < spec.docs_per_request; ++i) {
    std::uniform_int_distribution<size_t> pick(static_cast<size_t>(i), order.size() - 1);
    std::swap(order[static_cast<size_t>(i)], order[pick(rng)]);
    const std::vector<int32_t>& doc = w.docs[static_cast<size_t>(order[static_cast<size_t>(i)])];
    const auto begin = static_cast<int32_t>(r.tokens.size());
    r.tokens.insert(r.tokens.end(), doc.begin(), doc.end());
    r.chunks.push_back({begin, static_cast<int32_t>(r.tokens.size())});
    r.doc_ids.push_back(order[static_cast<size_t>(i)]);
  }
  const auto length = static_cast<size_t>(spec.tail_tokens + spec.continuation_tokens);
  if (passage != nullptr) {
    r.tokens.insert(r.tokens.end(), passage->begin(), passage->end());
  } else {
    std::uniform_int_distribution<size_t> pick_doc(0, r.doc_ids.size() - 1);
    const std::vector<int32_t>& doc = w.docs[static_cast<size_t>(r.doc_ids[pick_doc(rng)])];
    std::uniform_int_distribution<size_t> pick_start(0, doc.size() - length);
    const auto start = static_cast<ptrdiff_t>(pick_start(rng));
    r.tokens.insert(r.tokens.end(), doc.begin() + start, doc.begin() + start + static_cast<ptrdiff_t>(length));
  }
  r.continuation_begin = static_cast<int32_t>(r.tokens.size()) - spec.continuation_tokens;
  return r;
}

void check_spec(const ChunksWorkloadSpec& spec) {
  if (spec.num_docs < 1 || spec.doc_tokens < 1 || spec.num_requests < 1 || spec.continuation_tokens < 1)
    throw_error(ErrorCode::kInvalidArgument, "--docs, --doc-tokens, --requests and --continuation must be positive");
  if (spec.docs_per_request < 1 || spec.docs_per_request > spec.num_docs)
    throw_error(ErrorCode::kInvalidArgument, "--k {} must be in [1, --docs {}]", spec.docs_per_request,
                spec.num_docs);
  if (spec.tail_tokens < 0) throw_error(ErrorCode::kInvalidArgument, "--tail must be >= 0");
}

}  // namespace

int32_t ChunksWorkload::max_request_tokens() const {
  size_t n = 0;
  for (const ChunksRequest& r : requests) n = std::max(n, r.tokens.size());
  return static_cast<int32_t>(n);
}

double ChunksWorkload::mean_request_tokens() const {
  double sum = 0;
  for (const ChunksRequest& r : requests) sum += static_cast<double>(r.tokens.size());
  return requests.empty() ? 0 : sum / static_cast<double>(requests.size());
}

double ChunksWorkload::mean_doc_tokens() const {
  double sum = 0;
  for (const std::vector<int32_t>& d : docs) sum += static_cast<double>(d.size());
  return docs.empty() ? 0 : sum / static_cast<double>(docs.size());
}

std::vector<std::vector<std::string_view>> split_sentences(std::string_view text) {
  std::vector<std::vector<std::string_view>> out;
  std::vector<std::string_view> sentences;
  size_t para_begin = std::string_view::npos, para_end = 0;
  auto flush = [&] {
    if (para_begin != std::string_view::npos) split_paragraph(text.substr(para_begin, para_end - para_begin), sentences);
    if (!sentences.empty()) out.push_back(std::move(sentences));
    sentences.clear();
    para_begin = std::string_view::npos;
  };
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    if (trim_blanks(text.substr(pos, eol - pos)).empty()) {
      flush();
    } else {
      if (para_begin == std::string_view::npos) para_begin = pos;
      para_end = eol;
    }
    pos = eol + 1;
  }
  flush();
  return out;
}

ChunksWorkload make_chunks_workload(std::string_view text, const Tokenizer& tokenizer, const ChunksWorkloadSpec& spec) {
  check_spec(spec);
  const std::vector<std::vector<std::string_view>> paragraphs = split_sentences(text);
  ChunksWorkload w;
  if (tokenizer.add_bos()) w.bos = tokenizer.bos_id();
  const size_t next_paragraph = cut_docs(paragraphs, tokenizer, spec, w.docs);
  const auto length = static_cast<size_t>(spec.tail_tokens + spec.continuation_tokens);
  std::vector<std::vector<int32_t>> passages;
  if (spec.query == ChunksQuery::kText) {
    passages = text_passages(paragraphs, next_paragraph, tokenizer, spec);
  } else {
    for (const std::vector<int32_t>& doc : w.docs)
      if (doc.size() < length)
        throw_error(ErrorCode::kInvalidArgument,
                    "--tail + --continuation ({} tokens) must fit in each document for --query doc, and one has {}: "
                    "raise --doc-tokens",
                    length, doc.size());
  }
  std::mt19937_64 rng(spec.seed);
  for (int32_t i = 0; i < spec.num_requests; ++i)
    w.requests.push_back(make_request(w, spec, rng, passages.empty() ? nullptr : &passages[static_cast<size_t>(i)]));
  return w;
}

}  // namespace kvlm::apps
