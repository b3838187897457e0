// KV chunks in requests (docs/kv-chunks.md): the marks that say which parts
// of a prompt may have their KV reused wherever they stand. Read inside
// validated() (fields.h): a bad mark is a 400 naming its field.
//
//   chat      a content part or a message with "kv_chunk": true
//   completions  "kv_chunks": [[begin, end], ...]: character offsets
//             (Unicode code points) into a text prompt, token offsets into
//             a token-id prompt; ascending, not overlapping, not empty
#pragma once

#include <span>
#include <string>
#include <vector>

#include "tokenizer/prompt_pieces.h"
#include "wire/openai/protocol.h"

namespace kvlm {
class Tokenizer;
}

namespace kvlm::openai {

// Whether `obj` (a message or a content part, named `where`) is marked
// `"kv_chunk": true`; a mark that is not a boolean is a 400.
bool kv_chunk_mark(const Json& obj, const std::string& where);

// The completions request's `kv_chunks` over its prompts (CompletionRequest::
// kv_chunks): a text prompt's in bytes. A 400 names `kv_chunks` for spans
// that are not pairs of integers, not ascending, overlapping, empty or past
// the prompt's end, and for a list of prompts or a `suffix` (fill in the
// middle), which have no one prompt for them to mark.
std::vector<PromptSpan> parse_kv_chunk_spans(const Json& body, const std::vector<Prompt>& prompts, bool has_suffix);

// A completions prompt's ids with its KV chunks' spans over them, as kvlm
// serve submits them (and kvlm router predicts them): a token-id prompt as
// it is; a text prompt with BOS and special pieces, in pieces around its
// chunks (tokenizer/prompt_pieces.h), or whole without chunks, as ever.
PieceIds completion_prompt_pieces(const Tokenizer& tok, const Prompt& prompt, std::span<const PromptSpan> chunks);

}  // namespace kvlm::openai
