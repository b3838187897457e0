#include "tokenizer/special_tokens.h"

#include <cctype>

namespace kvlm {

namespace {

// C isspace, as llama.cpp uses for LSTRIP/RSTRIP.
bool is_space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

}  // namespace

std::vector<Fragment> split_special_tokens(const Vocab& vocab, std::string_view text, bool parse_special) {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({-1, 0, text.size()});
  std::vector<Fragment> next;
  for (const int32_t id : vocab.special_tokens_by_length()) {
    const uint32_t attr = vocab.attr(id);
    if (!parse_special && (attr & (token_attr::kControl | token_attr::kUnknown))) continue;
    const std::string_view special = vocab.text(id);
    const bool lstrip = attr & token_attr::kLstrip;
    const bool rstrip = attr & token_attr::kRstrip;

    next.clear();
    bool changed = false;
    for (const Fragment& f : fragments) {
      if (!f.is_text()) {
        next.push_back(f);
        continue;
      }
      size_t pos = f.begin;
      while (true) {
        // Search only inside the fragment: the view ends where it ends.
        const size_t match = text.substr(0, f.end).find(special, pos);
        if (match == std::string_view::npos) {
          if (pos < f.end) next.push_back({-1, pos, f.end});
          break;
        }
        changed = true;
        size_t left_end = match;
        if (lstrip) {
          while (left_end > pos && is_space(text[left_end - 1])) --left_end;
        }
        if (left_end > pos) next.push_back({-1, pos, left_end});
        next.push_back({id, 0, 0});
        pos = match + special.size();
        if (rstrip) {
          while (pos < f.end && is_space(text[pos])) ++pos;
        }
        if (pos >= f.end) break;
      }
    }
    if (changed) fragments.swap(next);
  }
  return fragments;
}

}  // namespace kvlm
