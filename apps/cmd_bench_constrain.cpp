// kvlm bench constrain: what a grammar's token mask costs per generated
// token, next to what a decode step of the same model costs.
//
// For each workload (a JSON schema, JSON mode, a regex) the bench spells a
// reference output token by token: at every step it computes the mask
// (timed), then takes the longest allowed token that continues the reference
// text, as a model following the grammar would. The decode step is one
// single-token forward pass after a short prompt (SequenceEvaluator).
#include <algorithm>
#include <chrono>
#include <cstdio>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "apps/cli_parse.h"
#include "apps/commands.h"
#include "apps/model_loading.h"
#include "backend/threads.h"
#include "common/error.h"
#include "constrain/constraint.h"
#include "constrain/token_mask.h"
#include "model/model.h"
#include "runner/sampler.h"
#include "runner/sequence_evaluator.h"
#include "tokenizer/tokenizer.h"

namespace kvlm::apps {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Workload {
  const char* name;
  std::shared_ptr<const constrain::Program> program;
  std::string reference;  // an output the grammar accepts
};

std::vector<Workload> workloads() {
  const auto schema = constrain::Json::parse(R"J({"type":"object","properties":{
      "name":{"type":"string","maxLength":40},"age":{"type":"integer","minimum":0,"maximum":150},
      "email":{"type":"string","pattern":"[a-z]+@[a-z]+\\.(com|org)"},
      "tags":{"type":"array","items":{"type":"string","maxLength":16},"maxItems":8},
      "address":{"type":"object","properties":{"city":{"type":"string"},"zip":{"type":"string","pattern":"[0-9]{5}"}},
                 "required":["city","zip"],"additionalProperties":false}},
      "required":["name","age","email","tags","address"],"additionalProperties":false})J");
  return {
      {"json_schema", constrain::json_schema_program(schema),
       R"({"name":"Lily and the little red ball","age":42,"email":"lily@park.org","tags":["happy","play","sun"],)"
       R"("address":{"city":"Once upon a time there was a town","zip":"12345"}})"},
      {"json_object", constrain::json_object_program(),
       R"({"story":"One day, a little girl named Lily went to the park.","mood":["happy",3,true],"n":1.5})"},
      {"regex", constrain::regex_program("[A-Z][a-z]+( [a-z]+){3,12}\\."),
       "Once upon a time there was a little dog named spot."},
  };
}

struct MaskCost {
  int num_tokens = 0;
  double total_s = 0, max_s = 0;
  int64_t num_allowed = 0;
};

MaskCost run_workload(const Workload& w, const Tokenizer& tok, const constrain::TokenIndex& index, int reps) {
  MaskCost cost;
  std::vector<uint8_t> allowed;
  for (int rep = 0; rep < reps; ++rep) {
    constrain::Matcher m(w.program);
    std::string_view rest = w.reference;
    while (!rest.empty()) {
      const auto t0 = Clock::now();
      cost.num_allowed += index.fill_mask(m, allowed);
      const double s = seconds_since(t0);
      cost.total_s += s;
      cost.max_s = std::max(cost.max_s, s);
      ++cost.num_tokens;
      int32_t best = -1;
      for (int32_t id = 0; id < tok.vocab_size(); ++id) {
        if (!allowed[id]) continue;
        const std::string& p = tok.piece(id);
        if (!p.empty() && rest.starts_with(p) && (best < 0 || p.size() > tok.piece(best).size())) best = id;
      }
      if (best < 0) throw_error(ErrorCode::kInternal, "{}: no allowed token continues the reference", w.name);
      if (!m.advance(tok.piece(best))) throw_error(ErrorCode::kInternal, "{}: the mask allowed a refused token", w.name);
      rest.remove_prefix(tok.piece(best).size());
    }
    if (!m.accepting()) throw_error(ErrorCode::kInternal, "{}: the reference is not complete", w.name);
  }
  return cost;
}

// Mean seconds of one single-token forward pass (after a 64-token prompt).
double decode_step_s(const Model& model, int steps) {
  SequenceEvaluator eval(model, 64 + steps + 1);
  std::vector<int32_t> prompt(64, 1);
  eval.eval(prompt, false);
  int32_t t = 1;
  t = argmax(eval.eval(std::span<const int32_t>(&t, 1), false));  // warm-up
  const auto t0 = Clock::now();
  for (int i = 0; i < steps; ++i) t = argmax(eval.eval(std::span<const int32_t>(&t, 1), false));
  return seconds_since(t0) / steps;
}

}  // namespace

int bench_constrain(int argc, char** argv) {
  CLI::App app{"Per-token cost of grammar token masks against a decode step", "kvlm bench constrain"};
  std::string model_path;
  int threads = 0, reps = 5, steps = 16;
  app.add_option("-m,--model", model_path, "GGUF model file (its vocabulary and its decode step)")->required();
  app.add_option("-t,--threads", threads, "compute threads for the decode step (default: all cores)");
  app.add_option("-r,--repetitions", reps, "times each reference output is spelled")->capture_default_str();
  app.add_option("-n,--n-gen", steps, "decode steps timed (0: skip the model)")->capture_default_str();
  KVLM_PARSE(app, argc, argv);
  if (reps < 1 || steps < 0) throw_error(ErrorCode::kInvalidArgument, "-r must be >= 1 and -n >= 0");
  set_num_threads(threads);
  auto model = load_model(model_path);
  auto tok = Tokenizer::from_metadata(model->gguf().metadata());
  auto t0 = Clock::now();
  auto index = constrain::TokenIndex::from_tokenizer(*tok);
  fmt::print("vocab {} tokens, trie {} nodes, built in {:.1f} ms\n", index->vocab_size(), index->num_trie_nodes(),
             seconds_since(t0) * 1e3);
  const double step_s = steps > 0 ? decode_step_s(*model, steps) : 0;
  if (steps > 0) fmt::print("decode step (1 token, {} threads): {:.3f} ms\n", num_threads(), step_s * 1e3);
  for (const Workload& w : workloads()) {
    const MaskCost c = run_workload(w, *tok, *index, reps);
    const double mean = c.total_s / c.num_tokens;
    fmt::print("{:<12} mask per token: mean {:.3f} ms, max {:.3f} ms, {:.0f} tokens allowed on average{}\n", w.name,
               mean * 1e3, c.max_s * 1e3, static_cast<double>(c.num_allowed) / c.num_tokens,
               steps > 0 ? fmt::format(" | {:.1f}% of a decode step", 100 * mean / step_s) : "");
  }
  return 0;
}

}  // namespace kvlm::apps
