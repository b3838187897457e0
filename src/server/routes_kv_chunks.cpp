// KV chunks (docs/kv-chunks.md) on the server's side: --kv-chunks-auto's
// chunks of a chat request, and a prompt's chunk spans for the engine.
#include "engine/engine.h"
#include "server/routes_choices.h"
#include "tokenizer/tokenizer.h"

namespace kvlm {

void add_auto_kv_chunks(const ServerContext& ctx, openai::ChatRequest& r) {
  if (ctx.kv_chunks_auto <= 0) return;
  const Tokenizer& tok = ctx.engine.tokenizer();
  const auto min_tokens = static_cast<size_t>(ctx.kv_chunks_auto);
  std::vector<openai::ChatRequest::KvChunk> chunks;
  size_t next = 0;  // the first of r.kv_chunks not yet taken
  for (size_t i = 0; i < r.messages.size(); ++i) {
    const bool marked = next < r.kv_chunks.size() && r.kv_chunks[next].message == i;
    while (next < r.kv_chunks.size() && r.kv_chunks[next].message == i) chunks.push_back(std::move(r.kv_chunks[next++]));
    if (marked) continue;
    const openai::Json& m = r.messages[i];
    const std::string role = m.value("role", "");
    const auto content = m.find("content");
    if ((role != "user" && role != "tool") || content == m.end() || !content->is_string()) continue;
    const std::string& text = content->get_ref<const std::string&>();
    // A token covers a byte at least (one more: SentencePiece's space prefix).
    if (text.size() + 1 < min_tokens) continue;
    if (encode_chunk(tok, text).size() >= min_tokens) chunks.push_back({i, text});
  }
  while (next < r.kv_chunks.size()) chunks.push_back(std::move(r.kv_chunks[next++]));
  r.kv_chunks = std::move(chunks);
}

void set_last_prompt_chunks(Generation& gen, std::span<const IdSpan> chunks) {
  if (chunks.empty() || gen.prompts.empty()) return;
  gen.prompt_chunks.resize(gen.prompts.size());
  std::vector<TokenSpan>& spans = gen.prompt_chunks.back();
  spans.clear();
  for (const IdSpan& c : chunks) spans.push_back({c.begin, c.end});
}

}  // namespace kvlm
