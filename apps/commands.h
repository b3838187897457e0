// The kvlm subcommands. Each takes the arguments after its name (argv[0] is
// "kvlm <name>") and returns the process exit code. Errors the user can act on
// are thrown as kvlm::Error and printed by main() as one line.
// Each parses its flags with KVLM_PARSE (apps/cli_parse.h), which also ends
// it right after the parse under KVLM_PARSE_ONLY=1.
#pragma once

namespace kvlm::apps {

int cmd_run(int argc, char** argv);         // cmd_run.cpp
int cmd_logits(int argc, char** argv);      // cmd_logits.cpp
int cmd_perplexity(int argc, char** argv);  // cmd_perplexity.cpp
int cmd_tokenize(int argc, char** argv);    // cmd_tokenize.cpp
int cmd_inspect(int argc, char** argv);     // cmd_inspect.cpp
int cmd_template(int argc, char** argv);    // cmd_template.cpp
int cmd_bench(int argc, char** argv);       // cmd_bench.cpp
int cmd_serve(int argc, char** argv);       // cmd_serve.cpp
// kvlm serve --models-dir / -m NAME=PATH / --sleep-idle-seconds: a router
// over a worker process per model (cmd_serve_models.cpp).
bool serves_several_models(int argc, char** argv);
int cmd_serve_models(int argc, char** argv);
int cmd_router(int argc, char** argv);      // cmd_router.cpp
int cmd_kv(int argc, char** argv);          // cmd_kv.cpp
int cmd_kv_bench(int argc, char** argv);    // cmd_kv_bench.cpp (kvlm kv bench)
int cmd_kv_train_policy(int argc, char** argv);  // cmd_kv_train_policy.cpp (kvlm kv train-policy)
int cmd_make_model(int argc, char** argv);  // cmd_make_model.cpp
int cmd_make_lora(int argc, char** argv);   // cmd_make_lora.cpp
int cmd_convert(int argc, char** argv);     // cmd_convert.cpp
int cmd_embed(int argc, char** argv);       // cmd_embed.cpp

// Benchmark kinds that cmd_bench dispatches to and live in their own file.
int bench_serve(int argc, char** argv);     // bench_serve.cpp
int bench_constrain(int argc, char** argv); // cmd_bench_constrain.cpp
int bench_grammar(int argc, char** argv);   // cmd_bench_grammar.cpp
int bench_speculative(int argc, char** argv);  // cmd_bench_speculative.cpp
int bench_chunks(int argc, char** argv);     // cmd_bench_chunks.cpp

}  // namespace kvlm::apps
