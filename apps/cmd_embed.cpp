// kvlm embed -m MODEL -p TEXT [-p TEXT ...] | -f FILE: embeds each input
// (one a line of FILE) through the engine, all of them batched, as the
// server's /v1/embeddings does, and prints one JSON line per input:
//   {"index":0,"tokens":7,"embedding":[0.0123,...]}
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "apps/cli_parse.h"
#include "apps/commands.h"
#include "apps/engine_options.h"
#include "common/error.h"
#include "engine/engine.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace kvlm::apps {
namespace {

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw_error(ErrorCode::kNotFound, "-f: cannot read {}", path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

}  // namespace

int cmd_embed(int argc, char** argv) {
  CLI::App app{"Embed texts: one JSON line per input with its pooled, normalised final hidden state", "kvlm embed"};
  EngineOptions eo;
  add_engine_options(app, eo);
  std::vector<std::string> inputs;
  std::string file, pooling;
  bool no_normalize = false;
  app.add_option("-p,--prompt", inputs, "a text to embed (repeatable)");
  app.add_option("-f,--file", file, "embed each non-empty line of this file");
  app.add_option("--pooling", pooling, "mean or last (default: the model's pooling_type, else last)")
      ->check(CLI::IsMember({"mean", "last"}));
  app.add_flag("--no-normalize", no_normalize, "print the pooled vector as it is, not scaled to length 1");
  KVLM_PARSE(app, argc, argv);
  if (!file.empty()) {
    const std::vector<std::string> lines = read_lines(file);
    inputs.insert(inputs.end(), lines.begin(), lines.end());
  }
  if (inputs.empty()) throw_error(ErrorCode::kInvalidArgument, "nothing to embed: give -p TEXT or -f FILE");

  auto engine = start_engine(eo);
  const Pooling how = choose_pooling(engine->model().config(), pooling);
  std::vector<GenerateRequest> gs(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    gs[i].prompt_tokens = engine->tokenizer().encode(inputs[i], /*add_special=*/true, /*parse_special=*/true);
    gs[i].max_tokens = 1;
    gs[i].sampling.temperature = 0.f;
    gs[i].pooling = how;
    gs[i].normalize = !no_normalize;
  }
  const auto start = std::chrono::steady_clock::now();
  auto streams = engine->submit_batch(std::move(gs), 1);
  int64_t num_tokens = 0;
  for (size_t i = 0; i < streams.size(); ++i) {
    while (auto ev = streams[i]->next())
      if (ev->error) throw *ev->error;
    const RequestStats st = streams[i]->stats();
    num_tokens += st.num_prompt_tokens;
    fmt::print("{{\"index\":{},\"tokens\":{},\"embedding\":[{}]}}\n", i, st.num_prompt_tokens,
               fmt::join(st.embedding, ","));
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print(stderr, "kvlm embed: {} inputs, {} tokens in {:.1f} ms ({:.1f} tok/s), {} pooling\n", inputs.size(),
             num_tokens, s * 1e3, static_cast<double>(num_tokens) / std::max(s, 1e-9),
             how == Pooling::kMean ? "mean" : "last");
  return 0;
}

}  // namespace kvlm::apps
