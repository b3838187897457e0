// kvlm: one binary, one subcommand per job (docs/ARCHITECTURE.md "Layers").
#include <cstdio>
#include <cstring>
#include <string_view>

#include <CLI/CLI.hpp>

#include "apps/commands.h"
#include "common/error.h"

namespace {

struct Command {
  const char* name;
  int (*fn)(int, char**);
  const char* help;
};

constexpr Command kCommands[] = {
    {"run", kvlm::apps::cmd_run, "generate a continuation of a prompt, streamed to stdout"},
    {"serve", kvlm::apps::cmd_serve, "serve the OpenAI-compatible HTTP API"},
    {"router", kvlm::apps::cmd_router, "route the API over many kvlm serve workers by the KV they hold"},
    {"bench", kvlm::apps::cmd_bench, "benchmarks: model, batch, serve, kv, constrain, grammar, speculative, chunks (kvlm bench <kind> --help)"},
    {"perplexity", kvlm::apps::cmd_perplexity, "perplexity of a model over a text file"},
    {"embed", kvlm::apps::cmd_embed, "embed texts: their pooled final hidden states, one JSON line each"},
    {"logits", kvlm::apps::cmd_logits, "print the logits after each of the given token ids (JSON)"},
    {"tokenize", kvlm::apps::cmd_tokenize, "tokenize text with a model's vocabulary"},
    {"inspect", kvlm::apps::cmd_inspect, "print a GGUF file's metadata and tensors"},
    {"template", kvlm::apps::cmd_template, "render a chat template over a messages file"},
    {"make-model", kvlm::apps::cmd_make_model, "write a random-weight GGUF of a real model's shape"},
    {"make-lora", kvlm::apps::cmd_make_lora, "write a random-weight LoRA adapter (PEFT or GGUF) for a base model"},
    {"convert", kvlm::apps::cmd_convert, "write a Hugging Face checkpoint folder as GGUF (--merge-lora: with an adapter merged)"},
    {"kv", kvlm::apps::cmd_kv, "KV tier tools: stat, verify, clear a disk tier; bench a tier"},
};

void usage(FILE* out) {
  std::fprintf(out, "usage: kvlm <command> [options]   (kvlm <command> --help for its options)\n\ncommands:\n");
  for (const auto& c : kCommands) std::fprintf(out, "  %-12s %s\n", c.name, c.help);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  std::string_view name = argv[1];
  if (name == "-h" || name == "--help" || name == "help") {
    usage(stdout);
    return 0;
  }
  for (const auto& c : kCommands) {
    if (name != c.name) continue;
    try {
      return c.fn(argc - 1, argv + 1);
    } catch (const CLI::ParseError& e) {
      // CLI11 signals --help as a "success" parse error.
      if (e.get_exit_code() == 0) return 0;
      std::fprintf(stderr, "kvlm %s: %s\n", c.name, e.what());
      return 2;
    } catch (const kvlm::Error& e) {
      std::fprintf(stderr, "kvlm %s: error: %s\n", c.name, e.what());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kvlm %s: internal error: %s\n", c.name, e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "kvlm: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
