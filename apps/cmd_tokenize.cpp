// kvlm tokenize -m MODEL (-p TEXT | -f FILE) [--ids] [--no-bos]
//
// Tokenizes the whole text with the model's vocabulary, as llama.cpp does.
// Default: special tokens are added as the vocabulary says (BOS...) and
// special pieces written in the text ("<s>", "<|im_start|>") are parsed.
// --no-bos: no special tokens added, none parsed (llama.cpp's vocab test
// vectors are made that way). Output: one "id 'piece'" per line, or with
// --ids the ids on one line. A timing line goes to stderr.
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "apps/cli_parse.h"
#include "apps/commands.h"
#include "common/clock.h"
#include "common/error.h"
#include "model/gguf.h"
#include "model/hf_checkpoint.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace kvlm::apps {

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_error(ErrorCode::kNotFound, "cannot read text file '{}': {}", path, std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw_error(ErrorCode::kNotFound, "error reading text file '{}'", path);
  return ss.str();
}

// A piece as one printable line: control characters and bytes that are not
// (yet) a whole UTF-8 character are escaped.
std::string printable(std::string_view piece) {
  std::string out;
  size_t pos = 0;
  while (pos < piece.size()) {
    const unicode::Utf8Step step = unicode::utf8_step(piece, pos);
    const auto c = static_cast<uint8_t>(piece[pos]);
    if (step.kind == unicode::Utf8Step::Kind::kValid && step.length > 1) {
      out.append(piece.substr(pos, step.length));
      pos += step.length;
      continue;
    }
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c == '\\') out += "\\\\";
    else if (c < 0x20 || c >= 0x7F) out += fmt::format("\\x{:02x}", c);
    else out.push_back(static_cast<char>(c));
    ++pos;
  }
  return out;
}

}  // namespace

int cmd_tokenize(int argc, char** argv) {
  CLI::App app{"Tokenize text with a model's vocabulary (as llama.cpp does)", "kvlm tokenize"};
  std::string model_path, prompt, text_path;
  bool ids_only = false, no_bos = false;
  app.add_option("-m,--model", model_path, "GGUF model (or vocabulary-only GGUF) file")->required();
  CLI::Option* prompt_opt = app.add_option("-p,--prompt", prompt, "text to tokenize");
  CLI::Option* file_opt = app.add_option("-f,--file", text_path, "file whose bytes are tokenized exactly");
  prompt_opt->excludes(file_opt);
  app.add_flag("--ids", ids_only, "print only the ids, on one line");
  app.add_flag("--no-bos", no_bos, "add no special tokens and parse none in the text");
  KVLM_PARSE(app, argc, argv);
  if (prompt_opt->count() == 0 && file_opt->count() == 0) {
    throw_error(ErrorCode::kInvalidArgument, "no text: give -p TEXT or -f FILE");
  }
  const std::string text = prompt_opt->count() ? prompt : read_bytes(text_path);

  const Clock& clock = steady_clock();
  const double t_load = clock.now_s();
  auto gguf = open_model_file(model_path);
  auto tokenizer = Tokenizer::from_metadata(gguf->metadata());
  const double t_encode = clock.now_s();
  const std::vector<int32_t> ids = tokenizer->encode(text, !no_bos, !no_bos);
  const double t_done = clock.now_s();

  std::string out;
  if (ids_only) {
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) out.push_back(' ');
      out += std::to_string(ids[i]);
    }
    out.push_back('\n');
  } else {
    for (int32_t id : ids) out += fmt::format("{} '{}'\n", id, printable(tokenizer->token_to_piece(id)));
  }
  std::fwrite(out.data(), 1, out.size(), stdout);

  const double seconds = t_done - t_encode;
  fmt::print(stderr, "tokenize: {} tokens from {} bytes in {:.3f} ms ({:.0f} tokens/s, {:.2f} MB/s); vocabulary loaded in {:.1f} ms\n",
             ids.size(), text.size(), seconds * 1e3, seconds > 0 ? ids.size() / seconds : 0.0,
             seconds > 0 ? text.size() / seconds / 1e6 : 0.0, (t_encode - t_load) * 1e3);
  return 0;
}

}  // namespace kvlm::apps
