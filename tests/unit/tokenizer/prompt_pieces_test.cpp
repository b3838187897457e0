// A prompt tokenized in pieces around its KV chunks (tokenizer/prompt_pieces.h):
// a chunk's ids are its text's own wherever it stands, a prompt without
// chunks is the caller's tokenization bit for bit, and the ids still read as
// the text. On a SentencePiece vocabulary with the space prefix (stories260K)
// and a byte-level BPE one (GPT-2).
#include <gtest/gtest.h>

#include <span>

#include "tokenizer/prompt_pieces.h"
#include "tokenizer_test_util.h"

namespace kvlm {
namespace {

using Ids = std::vector<int32_t>;

constexpr const char* kSpmVocab = "models/stories260K.gguf";
constexpr const char* kBpeVocab = "vocab/ggml-vocab-gpt-2.gguf";

Ids whole(const Tokenizer& tok, std::string_view text) { return tok.encode(text, true, true); }

PieceIds pieces(const Tokenizer& tok, std::string_view text, std::vector<ByteSpan> chunks) {
  return encode_in_pieces(tok, text, chunks, [&](std::string_view first) { return whole(tok, first); });
}

Ids span_ids(const PieceIds& p, size_t i) {
  const IdSpan s = p.chunks.at(i);
  return Ids(p.ids.begin() + s.begin, p.ids.begin() + s.end);
}

// The text of `ids` piece by piece, a leading BOS left out (SentencePiece's
// space prefix kept: " Once").
std::string pieces_text(const Tokenizer& tok, std::span<const int32_t> ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i)
    if (i > 0 || ids[i] != tok.bos_id()) out += tok.piece(ids[i]);
  return out;
}

// The byte span of `needle`'s first occurrence in `text` from `from`.
ByteSpan span_of(std::string_view text, std::string_view needle, size_t from = 0) {
  const size_t at = text.find(needle, from);
  EXPECT_NE(at, std::string_view::npos) << needle;
  return {at, at + needle.size()};
}

TEST(FindInOrder, EachAfterTheOneBefore) {
  const std::string text = "A: the cat. B: the dog. C: the cat.";
  const std::vector<std::string> parts = {"the dog.", "the cat."};
  // "the cat." is looked for after "the dog.": its second occurrence.
  EXPECT_EQ(find_in_order(text, parts), (std::vector<ByteSpan>{{15, 23}, {27, 35}}));
}

TEST(FindInOrder, WhitespaceAroundIsLeftOutAndMissingPartsSkipped) {
  const std::string text = "<user>\nHello there\n<end>";
  const std::vector<std::string> parts = {"  \n ", "\nHello there  ", "not in the text", "<end>"};
  EXPECT_EQ(find_in_order(text, parts), (std::vector<ByteSpan>{{7, 18}, {19, 24}}));
  // One that stands only before the part found before it is not found.
  const std::vector<std::string> backwards = {"<end>", "Hello"};
  EXPECT_EQ(find_in_order(text, backwards), (std::vector<ByteSpan>{{19, 24}}));
}

class PromptPieces : public ::testing::TestWithParam<const char*> {
 protected:
  const Tokenizer& tok() const { return test::shared_tokenizer(GetParam()); }
};

TEST_P(PromptPieces, NoChunksIsTheCallersTokenization) {
  const std::string text = "Once upon a time, there was a little dog named Sam.";
  const PieceIds p = pieces(tok(), text, {});
  EXPECT_EQ(p.ids, whole(tok(), text));
  EXPECT_TRUE(p.chunks.empty());
}

TEST_P(PromptPieces, AChunksIdsAreItsOwnWhereverItStands) {
  const std::string doc = "Lily had a red ball. She liked to play with it in the park.";
  const std::string a = "Question one. " + doc + " What did Lily have?";
  const std::string b = "A different start, longer than the first one: " + doc + "\nAnswer:";
  const PieceIds pa = pieces(tok(), a, {span_of(a, doc)});
  const PieceIds pb = pieces(tok(), b, {span_of(b, doc)});
  ASSERT_EQ(pa.chunks.size(), 1u);
  ASSERT_EQ(pb.chunks.size(), 1u);
  EXPECT_EQ(span_ids(pa, 0), encode_chunk(tok(), doc));
  EXPECT_EQ(span_ids(pb, 0), encode_chunk(tok(), doc));
  EXPECT_NE(pa.chunks[0].begin, pb.chunks[0].begin);
  // The first piece is the caller's (BOS and all).
  const Ids first = whole(tok(), "Question one.");
  EXPECT_TRUE(std::equal(first.begin(), first.end(), pa.ids.begin()));
}

TEST_P(PromptPieces, ChunksInEitherOrderKeepTheirIds) {
  const std::string d1 = "Tom saw a big tree.", d2 = "The sun was hot and bright.";
  const std::string ab = "Docs: " + d1 + " " + d2 + " End.";
  const std::string ba = "Docs: " + d2 + " " + d1 + " End.";
  const PieceIds p = pieces(tok(), ab, {span_of(ab, d1), span_of(ab, d2)});
  const PieceIds q = pieces(tok(), ba, {span_of(ba, d2), span_of(ba, d1)});
  ASSERT_EQ(p.chunks.size(), 2u);
  ASSERT_EQ(q.chunks.size(), 2u);
  EXPECT_EQ(span_ids(p, 0), span_ids(q, 1));
  EXPECT_EQ(span_ids(p, 1), span_ids(q, 0));
  EXPECT_EQ(p.ids.size(), q.ids.size());
  // Spans are ascending and not overlapping.
  EXPECT_LE(p.chunks[0].end, p.chunks[1].begin);
}

TEST_P(PromptPieces, TheIdsReadAsTheText) {
  const std::string d = "Tom saw a big tree.";
  // SentencePiece's prefix gives the text a leading space, and a chunk after
  // anything but a space one more.
  const std::string lead = tok().vocab().add_space_prefix() ? " " : "";
  for (const std::string& text : {"Docs: " + d + " End.", d + " then more", "Start " + d, "x\n" + d + "\ny"}) {
    const PieceIds p = pieces(tok(), text, {span_of(text, d)});
    std::string expected = lead + text;
    if (!lead.empty() && text.starts_with("x\n")) expected = " x\n " + d + "\ny";
    EXPECT_EQ(pieces_text(tok(), p.ids), expected);
  }
}

TEST_P(PromptPieces, AChunkAtEitherEnd) {
  const std::string d = "The cat sat on the mat.";
  const PieceIds start = pieces(tok(), d + " More.", {{0, d.size()}});
  ASSERT_EQ(start.chunks.size(), 1u);
  EXPECT_EQ(span_ids(start, 0), encode_chunk(tok(), d));
  // The first piece is empty: the caller's tokenization of nothing (a BOS).
  EXPECT_EQ(start.chunks[0].begin, static_cast<int32_t>(whole(tok(), "").size()));
  const std::string text = "Before: " + d;
  const PieceIds end = pieces(tok(), text, {span_of(text, d)});
  EXPECT_EQ(span_ids(end, 0), encode_chunk(tok(), d));
  EXPECT_EQ(end.chunks[0].end, static_cast<int32_t>(end.ids.size()));
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, PromptPieces, ::testing::Values(kSpmVocab, kBpeVocab),
                         [](const auto& info) { return std::string(info.param == kSpmVocab ? "Spm" : "Bpe"); });

TEST(EncodeContinuation, NoSpacePrefixAtTheStart) {
  const Tokenizer& spm = test::shared_tokenizer(kSpmVocab);
  // "upon" continuing "Once": no space between them.
  EXPECT_EQ(pieces_text(spm, spm.encode_continuation("upon", true)), "upon");
  EXPECT_EQ(pieces_text(spm, spm.encode(" upon", false, true)), "  upon");
  EXPECT_EQ(pieces_text(spm, spm.encode_continuation(" upon", true)), " upon");
  // No BOS, whatever the vocabulary says.
  EXPECT_NE(spm.encode_continuation("upon", true).at(0), spm.bos_id());
  // Text after a special token gets the prefix, as in encode().
  const std::string bos_text = spm.piece(*spm.bos_id());
  EXPECT_EQ(pieces_text(spm, spm.encode_continuation("a" + bos_text + "b", true)), "a" + bos_text + " b");
  // Byte-level BPE has no prefix: the same ids as encode without BOS.
  const Tokenizer& bpe = test::shared_tokenizer(kBpeVocab);
  EXPECT_EQ(bpe.encode_continuation(" upon a time", true), bpe.encode(" upon a time", false, true));
}

}  // namespace
}  // namespace kvlm
