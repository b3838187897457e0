// kvlm run: one request through the engine, the continuation streamed to
// stdout as it is generated, speeds on stderr.
#include <cmath>
#include <chrono>
#include <cstdio>
#include <random>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "apps/cli_parse.h"
#include "apps/commands.h"
#include "apps/engine_options.h"
#include "apps/lora_options.h"
#include "common/error.h"
#include "common/mapped_file.h"
#include "model/model.h"
#include "chat/chat_prompt.h"
#include "tokenizer/tokenizer.h"

namespace kvlm::apps {

namespace {

// exp(mean negative log-probability) of each run of `segment` generated
// tokens: a generation that stays fluent keeps it flat; one that falls apart
// (positions past the trained context, a lost cache) sees it climb.
void print_self_perplexity(const std::vector<float>& logprobs, int segment) {
  std::vector<std::string> parts;
  for (size_t begin = 0; begin < logprobs.size(); begin += static_cast<size_t>(segment)) {
    const size_t end = std::min(logprobs.size(), begin + static_cast<size_t>(segment));
    double nll = 0;
    for (size_t i = begin; i < end; ++i) nll -= logprobs[i];
    parts.push_back(fmt::format("{:.3f}", std::exp(nll / static_cast<double>(end - begin))));
  }
  fmt::print(stderr, "self-perplexity per {} tokens: {}\n", segment, fmt::join(parts, " "));
}

// The prompt's tokens: plain text, or a user message through a chat template.
std::vector<int32_t> encode_prompt(const Engine& engine, const std::string& prompt, bool chat,
                                   const std::string& system, const std::optional<std::string>& chat_template_file) {
  if (!chat) {
    if (!system.empty() || chat_template_file)
      throw_error(ErrorCode::kInvalidArgument, "--system and --chat-template-file need --chat");
    return engine.tokenizer().encode(prompt, /*add_special=*/true, /*parse_special=*/true);
  }
  auto tmpl = load_chat_template(engine.model().gguf().metadata(), chat_template_file);
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
  messages.push_back({{"role", "user"}, {"content", prompt}});
  return encode_chat(engine.tokenizer(), *tmpl, messages, /*add_generation_prompt=*/true);
}

}  // namespace

int cmd_run(int argc, char** argv) {
  CLI::App app{"Generate a continuation of a prompt, streamed to stdout", "kvlm run"};
  EngineOptions eo;
  add_engine_options(app, eo);
  std::string prompt, prompt_file;
  GenerateRequest g;
  g.max_tokens = 256;
  int64_t seed = -1;
  bool show_ids = false, chat = false;
  std::string system;
  std::optional<std::string> chat_template_file;
  app.add_option("-p,--prompt", prompt, "prompt text");
  LoraFlags loras;
  add_lora_options(app, loras, "LoRA adapter FILE[:SCALE]: a PEFT folder or a GGUF LoRA (repeatable: applied together)");
  app.add_option("-f,--file", prompt_file, "read the prompt from a file");
  app.add_option("-n,--n-predict", g.max_tokens, "tokens to generate at most")->capture_default_str();
  app.add_option("--temp", g.sampling.temperature, "temperature (0 = greedy)")->capture_default_str();
  app.add_option("--top-k", g.sampling.top_k, "top-k (0 = off)")->capture_default_str();
  app.add_option("--top-p", g.sampling.top_p, "top-p (1 = off)")->capture_default_str();
  app.add_option("--min-p", g.sampling.min_p, "min-p (0 = off)")->capture_default_str();
  app.add_option("--repeat-penalty", g.sampling.repetition_penalty, "repetition penalty (1 = off)")->capture_default_str();
  app.add_option("--repeat-last-n", g.sampling.repeat_last_n, "tokens the penalty looks back")->capture_default_str();
  app.add_option("--seed", seed, "random seed (default: random)");
  app.add_option("--stop", g.stop, "stop string (repeatable)");
  app.add_flag("--ignore-eos", g.ignore_eos, "keep generating after an end-of-generation token");
  app.add_flag("--show-ids", show_ids, "print the generated token ids on stderr");
  int self_ppl = 0;
  app.add_option("--self-ppl", self_ppl,
                 "print on stderr the perplexity the model assigns to its own output, per N generated tokens");
  app.add_flag("--chat", chat, "the prompt is a user message: apply the model's chat template");
  app.add_option("--system", system, "system message (with --chat)");
  app.add_option("--chat-template-file", chat_template_file, "Jinja chat template to use instead of the model's");
  KVLM_PARSE(app, argc, argv);

  if (prompt.empty() == prompt_file.empty())
    throw_error(ErrorCode::kInvalidArgument, "give exactly one of -p PROMPT or -f FILE");
  if (!prompt_file.empty()) prompt = read_file_bytes(prompt_file);
  g.sampling.seed = seed >= 0 ? static_cast<uint64_t>(seed) : std::random_device{}();

  auto engine = start_engine(eo);
  g.lora = load_stacked_loras(loras, engine->model());
  g.prompt_tokens = encode_prompt(*engine, prompt, chat, system, chat_template_file);
  // Like llama.cpp, generation stops at the end of the context; say so up front.
  const int32_t room = engine->max_model_len() - static_cast<int32_t>(g.prompt_tokens.size());
  const bool unbounded = engine->config().kv_budget.enabled() && engine->config().kv_budget.shift;
  if (room > 0 && g.max_tokens > room && !unbounded)
    fmt::print(stderr, "kvlm run: -n {} does not fit the context of {} tokens; generating at most {} "
               "(--kv-budget with --kv-shift runs past it)\n", g.max_tokens, engine->max_model_len(), room);
  if (self_ppl < 0) throw_error(ErrorCode::kInvalidArgument, "--self-ppl must be positive");
  if (self_ppl > 0) g.logprobs = 0;
  auto stream = engine->submit(g);
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  std::optional<Error> error;
  while (auto ev = stream->next()) {
    if (!ev->text.empty()) {
      std::fwrite(ev->text.data(), 1, ev->text.size(), stdout);
      std::fflush(stdout);
    }
    ids.insert(ids.end(), ev->tokens.begin(), ev->tokens.end());
    for (const auto& lp : ev->logprobs) logprobs.push_back(lp.chosen.logprob);
    if (ev->error) error = ev->error;
  }
  if (error) throw *error;
  std::fputc('\n', stdout);
  RequestStats st = stream->stats();
  double gen_s = st.e2e_s - st.ttft_s;
  fmt::print(stderr, "\nprompt: {} tokens in {:.1f} ms ({:.1f} tok/s) | generation: {} tokens in {:.1f} ms ({:.1f} tok/s) | seed {}\n",
             st.num_prompt_tokens, st.ttft_s * 1e3, st.num_prompt_tokens / std::max(st.ttft_s, 1e-9),
             st.num_generated_tokens, gen_s * 1e3,
             st.num_generated_tokens > 1 ? (st.num_generated_tokens - 1) / std::max(gen_s, 1e-9) : 0.0,
             g.sampling.seed);
  if (show_ids) fmt::print(stderr, "ids: {}\n", fmt::join(ids, " "));
  if (self_ppl > 0) print_self_perplexity(logprobs, self_ppl);
  return 0;
}

}  // namespace kvlm::apps
