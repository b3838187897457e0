// The engine: owns the model, tokenizer, scheduler and runner, and runs the
// step loop on its own thread (docs/ARCHITECTURE.md "Threads"). Each step reads in three
// lines — schedule, run, postprocess — as in nano-vllm.
//
// Thread safety: submit(), cancel(), metrics() may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <optional>
#include <span>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backend/dtype.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/histogram.h"
#include "engine/kv_event_log.h"
#include "engine/request_stream.h"
#include "engine/spec/speculation_controller.h"
#include "engine/stream_deliverer.h"
#include "engine/tier_loader.h"
#include "kv/kv_policy.h"
#include "kvstore/record.h"
#include "kvstore/tier_stack.h"
#include "runner/sampler.h"

namespace kvlm {

class Model;
struct LoraAdapter;
struct ModelConfig;
class OutputProcessor;
class Tokenizer;
namespace constrain {
class Program;
}  // namespace constrain
class Scheduler;
class ModelRunner;
struct KvChunk;
struct SchedulerOutput;
struct ScheduledSeq;
struct Request;

struct EngineConfig {
  int32_t num_threads = 0;               // compute threads; <= 0: all cores
  DType kv_dtype = DType::kF16;          // F16, BF16, F32, Q8_0 or Q4_0
  int32_t block_size = 16;               // token slots per KV block
  int64_t kv_mem_bytes = 0;              // KV pool size in bytes (wins over kv_tokens)
  int32_t kv_tokens = 0;                 // KV pool size in tokens
                                         // neither: max_seqs x max_model_len, capped at
                                         // min(RAM / 4, 4 GiB)
  int32_t max_model_len = 0;             // per-request context; 0: the model's trained context
  int32_t max_batched_tokens = 2048;     // token budget per step
  int32_t max_seqs = 64;                 // running sequences at most
  bool prefix_caching = true;
  KvBudget kv_budget;                    // for requests that name none (disabled: unbounded)
  // KV tiers behind the pool (disk, Redis); nullopt: none. Needs prefix
  // caching and a model with one KV group.
  std::optional<TierStackConfig> tiers;
  double tier_flush_timeout_s = 10;      // at shutdown, for queued tier writes
  // Sampling a step's batch runs on the compute threads, split into tasks of
  // whole sequences of about this many logits each (rows x vocab); fewer in
  // all than one task's worth run on the engine thread, where the fork would
  // cost more than it saves. Tests set 1 to split every sequence off.
  int64_t sample_logits_per_task = 16384;
  // Test-only fault injection (engine/fault_injection.h), inert when empty:
  // called before each sampling of a request, with its id and how many tokens
  // it has generated, on a compute thread: concurrently for different
  // requests, so it must be thread-safe. What it throws fails that request
  // alone (its blocks go back to the pool); the others go on.
  std::function<void(RequestId, int32_t num_generated)> fault_hook;
  // Keep a KvEventLog of the prefix cache's changes (kv_events()), for a
  // router that routes by the blocks each server holds.
  bool kv_events = false;
  // Its batches also keep the events themselves with each stored block's
  // parent and tokens (KvEventBatch::events), for readers that key blocks by
  // their tokens (the ZMQ publisher); implies kv_events.
  bool kv_event_contents = false;
  // Speculative decoding (engine/spec/speculative.h); off by default.
  SpeculativeConfig speculative;
  // KV chunks (GenerateRequest::kv_chunks, docs/kv-chunks.md): the share of
  // a request's reused chunk tokens whose KV is recomputed in its context,
  // chosen by how much their KV deviates on layer kv_blend_probe_layer
  // (CacheBlend). 0: reuse alone; 1: every token recomputed (exact).
  double kv_blend_recompute = 0.15;
  int32_t kv_blend_probe_layer = 1;
};

// A span [begin, end) of a request's prompt tokens.
struct TokenSpan {
  int32_t begin = 0;
  int32_t end = 0;
  bool operator==(const TokenSpan&) const = default;
};

struct GenerateRequest {
  std::vector<int32_t> prompt_tokens;
  SamplingParams sampling;
  int32_t max_tokens = 256;
  std::vector<std::string> stop;         // stop strings (not included in the output)
  bool ignore_eos = false;
  // Control tokens are written as their text instead of nothing: tool-call
  // markers such as Mistral's [TOOL_CALLS] and Llama 3's <|python_tag|> are
  // control tokens, and the server's tool-call parser needs to see them.
  bool render_special = false;
  uint64_t cache_salt = 0;
  // A LoRA adapter of the engine's model (model/lora.h) the request runs
  // with; null: the base alone. The engine holds it until the request ends.
  std::shared_ptr<const LoraAdapter> lora;
  // < 0: none; 0: the log-probability of each generated token; N: and the N
  // most likely tokens at each step (token_logprobs in runner/sampler.h).
  int32_t logprobs = -1;
  // Also the log-probability of each prompt token after the first (with the
  // `logprobs` top alternatives), delivered with the first generated token.
  // Such a prompt is computed in full (no prefix-cache hit).
  bool prompt_logprobs = false;
  // With prompt_logprobs: only prompt positions from this one on are scored
  // (their logprobs come, in order, for tokens prompt_logprobs_from + 1 ..),
  // so the part before it may be served by the prefix cache and KV chunks.
  int32_t prompt_logprobs_from = 0;
  // KV chunks (docs/kv-chunks.md): spans of prompt_tokens (ascending, not
  // overlapping) whose KV may be reused wherever they stand: each chunk's
  // KV is computed once as if it stood alone (keyed by its tokens, the
  // adapter and cache_salt, in the prefix cache and the tiers), moved to its
  // place here with its keys re-rotated, and a share of its tokens
  // recomputed in this prompt's context (kv_blend_recompute). Ignored (the
  // prompt computed as usual) on models whose positions cannot move (learned
  // positions, sliding-window groups), under a KV budget, and for whole
  // prompts' logprobs or mean-pooled embeddings.
  std::vector<TokenSpan> kv_chunks;
  // The share for this request; < 0: EngineConfig::kv_blend_recompute.
  double kv_blend_recompute = -1;
  // KV budget and eviction policy; nullopt: EngineConfig::kv_budget.
  std::optional<KvBudget> kv_budget;
  // Structured output (src/constrain/constraint.h): the output must follow
  // this grammar. Before each draw, tokens the grammar cannot take next get
  // -inf (after logit_bias; logprobs stay the model's own); end-of-generation
  // tokens are allowed only where the grammar is complete, and the request
  // ends with kStop once it is complete and nothing may follow. Immutable and
  // shared (by every choice of submit_n, and by requests with one schema);
  // each choice keeps its own matcher. null: unconstrained.
  std::shared_ptr<const constrain::Program> constraint;
  // Time limit in seconds from submission (<= 0: none). Past it the request
  // fails with Error(kUnavailable) saying so, and its blocks are released.
  double timeout_s = 0;
  // A resumed generation (kvlm router, docs/router.md): the last num_replayed
  // prompt tokens are this request's own output from an earlier run that was
  // cut off (its server died), already sent to the client. The request goes
  // on as if it had never stopped: those tokens advance the sampler's random
  // stream (one draw each when sampling), the grammar, the stop strings and
  // the detokenizer, and the stream's first event (StreamEvent::replayed)
  // carries the text they release, so the caller can bring its own state
  // (tool-call parsing) to the same point. max_tokens counts new tokens only.
  // At least one prompt token must precede them; submit_n needs n == 1.
  int32_t num_replayed = 0;
  // false: no proposals for this request, even with speculation on.
  bool speculative = true;
  // A reasoning model's thinking section (<think> ... </think>; the server
  // reads the markers off the chat template). While the output is inside
  // it, `constraint` waits: the grammar applies from the close marker on
  // (space right after the marker aside), and end-of-generation tokens are
  // refused so that a constrained answer comes. Past `budget` tokens inside
  // the section, `close_tokens` are forced (a thinking budget). Forced
  // tokens draw from the sampler as sampled ones do, so a resumed request
  // continues the same random stream. nullopt: no section (a grammar
  // applies from the first token).
  struct Thinking {
    std::string close;                  // the marker that ends the section, as text
    bool opened = true;                 // the prompt opened it: the output starts inside
    std::vector<int32_t> open_tokens;   // !opened: forced first, to open it (empty: no section)
    std::vector<int32_t> close_tokens;  // forced when the budget is spent
    int32_t budget = -1;                // most tokens inside the section; < 0: no limit
  };
  std::optional<Thinking> thinking;
  // An embedding request (engine_embed.cpp): the prompt's final hidden
  // states pooled into RequestStats::embedding, L2-normalised when
  // `normalize`. Runs unbounded (no KV budget), never speculates; the one
  // generated token is a by-product the caller drops (max_tokens must be 1).
  Pooling pooling = Pooling::kNone;
  bool normalize = true;
};

// The key a request's blocks are hashed with (kv/block_hash.h extra_key):
// its cache_salt key, under its LoRA adapter's key when it has one.
uint64_t request_extra_key(const GenerateRequest& g);

// The pooling of embedding requests: `flag` ("mean", "last") when given,
// else the model's pooling_type (llama.cpp's numbering), else the last
// token's (decoder models carry the whole prompt there). Error(kUnsupported)
// for a pooling kvlm does not have (cls, rank), kInvalidArgument for a bad flag.
Pooling choose_pooling(const ModelConfig& model, std::string_view flag);

// Where the step thread's time goes, summed over the steps that ran a batch
// (seconds of steady-clock time). Everything but forward_s is the step
// thread's own work around the forward pass: admitting requests and
// scheduling, choosing each sampled token (split over the compute threads
// when the batch is large enough: sample_batch), and handing results to the
// streams.
struct StepTimes {
  double schedule_s = 0;     // inbox, tier loads, proposals, scheduler
  double forward_s = 0;      // ModelRunner::execute (the compute threads' work)
  double sample_s = 0;       // logits rows to tokens (and logprobs), until the last row is done
  double postprocess_s = 0;  // scheduler update, detokenize, stop strings, stream pushes
  double total_s() const { return schedule_s + forward_s + sample_s + postprocess_s; }
};

// Engine-wide counters, as a metrics endpoint exports them.
struct EngineMetrics {
  EngineMetrics()
      : resident_tokens(token_buckets()), ttft_s(latency_buckets_s()), itl_s(latency_buckets_s()),
        e2e_s(latency_buckets_s()), queue_s(latency_buckets_s()) {}
  int32_t num_running = 0;
  int32_t num_waiting = 0;
  int64_t num_pending_tokens = 0;        // tokens to compute before every request samples (Scheduler)
  int32_t num_kv_blocks = 0;
  int32_t num_kv_blocks_used = 0;
  int32_t peak_kv_blocks_used = 0;
  int32_t block_size = 0;
  int64_t num_prefix_query_tokens = 0;
  int64_t num_prefix_hit_tokens = 0;
  int64_t num_preemptions = 0;
  int64_t num_requests_finished = 0;
  int64_t num_prompt_tokens = 0;         // prompt tokens of submitted requests
  int64_t num_generated_tokens = 0;
  int64_t num_steps = 0;
  StepTimes step_times;
  int64_t num_requests_stopped = 0;      // finished by an end token or a stop string
  int64_t num_requests_length = 0;       // finished by max_tokens or the context
  int64_t num_requests_aborted = 0;      // cancelled, disconnected or failed
  int64_t num_requests_failed = 0;       // ended by an error (a fault in their step, a refusal)
  int64_t num_requests_timed_out = 0;    // ... of which past GenerateRequest::timeout_s
  int64_t num_prefix_evicted_blocks = 0; // cached blocks reused for other content
  // KV chunks: chunks looked up at admission, those found cached (in part),
  // tokens whose KV was reused from them, and of those the ones recomputed.
  int64_t num_kv_chunk_lookups = 0;
  int64_t num_kv_chunk_hits = 0;
  int64_t num_kv_chunk_reused_tokens = 0;
  int64_t num_kv_chunk_recomputed_tokens = 0;
  std::array<int64_t, kNumKvPolicyKinds> num_kv_evicted_tokens{};  // by KvPolicyKind: tokens dropped by budgets
  Histogram resident_tokens;             // most KV tokens a finished request held at once
  // KV tiers (empty without): per tier counters, and the engine's view.
  std::vector<TierStats> tiers;
  int32_t num_loading = 0;               // requests waiting for a tier lookup
  int64_t num_tier_hit_tokens = 0;       // prompt tokens loaded from a tier
  int64_t num_tier_writes_queued = 0;    // blocks handed to the tiers' write queue
  int64_t num_tier_writes_dropped = 0;   // ... and refused (queue full or already queued)
  int64_t num_tier_lookups_timed_out = 0; // lookups past --kv-tier-timeout-ms: the request went on as a miss
  // Speculative decoding: proposed tokens verified, those accepted, decode
  // steps that verified proposals, and the tokens each such step gave its
  // sequence (1 + accepted).
  int64_t num_spec_proposed = 0;
  int64_t num_spec_accepted = 0;
  int64_t num_spec_steps = 0;
  // A draft model's state (engine/spec/draft_proposer.h): sequences it keeps KV
  // for now, and those KV buffers' bytes (their capacity; pages are touched
  // as they fill). 0 for proposers without state.
  int32_t num_spec_draft_seqs = 0;
  int64_t spec_draft_kv_bytes = 0;
  // Seconds the proposer took (a draft model's forward passes), part of
  // step_times.schedule_s.
  double spec_propose_s = 0;
  std::array<int64_t, 16> spec_tokens_per_step{};  // [n]: steps that gave n tokens (the last bucket: n or more)
  // Latency distributions of finished requests, in seconds.
  Histogram ttft_s, itl_s, e2e_s, queue_s;
};

class Engine {
 public:
  // Loads nothing itself: takes a loaded model and its tokenizer. Throws
  // Error(kInvalidArgument) for a configuration that cannot work (a pool
  // smaller than one block, a KV type the model's head size does not allow).
  Engine(std::unique_ptr<Model> model, std::unique_ptr<Tokenizer> tokenizer, EngineConfig config,
         const Clock& clock = steady_clock());
  ~Engine();  // stops the step thread; unfinished requests end as aborted
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request and returns its stream. Throws Error(kOutOfRange) for a
  // prompt that can never run (longer than the context or the KV pool) and
  // Error(kInvalidArgument) for bad parameters, before anything is queued.
  // The stream is shared: the engine writes it until the request ends, the
  // caller reads it for as long as it likes.
  std::shared_ptr<RequestStream> submit(GenerateRequest request);
  // n choices of one prompt (OpenAI's `n`): choice i samples with seed + i,
  // so it equals submit() of the same request with that seed. The first
  // choice prefills the prompt; the others start once it has sampled its
  // first token and take the prompt's full blocks from the prefix cache: the
  // prompt's KV is held once, plus each choice's partial last block.
  std::vector<std::shared_ptr<RequestStream>> submit_n(GenerateRequest request, int32_t n);
  // Several prompts (OpenAI's list `prompt`), n choices each, queued at once
  // so they are admitted in one step and batch together: the streams come
  // prompt-major (prompt i's choice k at i * n + k). Each prompt's choices
  // share its KV as in submit_n; a prompt whose first full KV blocks are
  // another earlier prompt's (the longest such shared prefix, at least one
  // block) starts once that prompt has sampled, and takes those blocks from
  // the prefix cache. Throws before anything is queued, as submit does.
  std::vector<std::shared_ptr<RequestStream>> submit_batch(std::vector<GenerateRequest> requests, int32_t n);
  // Ends a request at the next step; its blocks are released. No-op if done.
  void cancel(RequestId id);
  // Forgets every block of the prefix cache at the next step (SGLang's
  // /flush_cache, vLLM's reset_prefix_cache; the tiers keep theirs): true
  // once done, false when a request held blocks then (nothing changes).
  // The KV events list every forgotten block as removed.
  std::future<bool> reset_prefix_cache();
  // Slot files (docs/slots.md): a prefix's KV copied out of the
  // prefix cache, put back into it, or forgotten, each on the engine thread
  // between steps. `extra_key`: the key its requests' blocks were hashed
  // with (request_extra_key). The futures carry Error(kUnsupported) without
  // prefix caching or for a model of several KV groups, as tiers do.
  // export_prefix: a record of each cached full block of `tokens`, from the
  // first to the first one not cached (each block's bytes as read_block
  // writes them; the salt is extra_key).
  std::future<std::vector<KvRecord>> export_prefix(std::vector<int32_t> tokens, uint64_t extra_key);
  // import_prefix: the records (one chain, first block first) become free
  // cached blocks, as a tier load leaves them, for any request whose prompt
  // starts with their tokens: how many of them are cached afterwards (those
  // cached already count). Error(kUnavailable) when the pool lacks the free
  // blocks now, kInvalidArgument for a payload of another size; either way
  // nothing is loaded.
  std::future<int32_t> import_prefix(std::vector<KvRecord> records);
  // forget_prefix: the cached blocks of `tokens`' chain that no request
  // holds leave the prefix cache (/flush_cache for one chain): how many.
  std::future<int32_t> forget_prefix(std::vector<int32_t> tokens, uint64_t extra_key);
  // For each prefix (its tokens, its extra_key): how many of its leading
  // tokens the prefix cache holds, in whole blocks (0 without prefix caching).
  struct PrefixKey {
    std::vector<int32_t> tokens;
    uint64_t extra_key = 0;
  };
  std::future<std::vector<int32_t>> cached_prefix_tokens(std::vector<PrefixKey> prefixes);
  // Requests (choices) submitted and not yet ended, exact at any moment: a
  // server's admission control compares it with max_seqs plus its queue.
  int32_t num_unfinished() const { return num_unfinished_.load(); }

  EngineMetrics metrics() const;
  const Model& model() const { return *model_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const EngineConfig& config() const { return config_; }
  int32_t max_model_len() const { return max_model_len_; }
  // The prefix cache's changes (EngineConfig::kv_events); null when off.
  // Thread-safe; closed when the engine stops.
  const KvEventLog* kv_events() const { return kv_events_.get(); }
  // The shared (Redis) tier's namespace as stored (RecordCodec::tier_id):
  // servers that report the same one find each other's records. nullopt: none.
  std::optional<Hash128> shared_tier_id() const;

 private:
  struct Live;  // per-request engine-thread state (sampler, detokenizer, stats)
  // The constructor's parts (engine.cpp), in its order; each throws
  // kvlm::Error for a config it cannot run.
  void check_config() const;
  // The config's max_model_len, else the model's context, within the
  // positions a learned position table holds.
  int32_t trained_context_len() const;
  void plan_kv_pool();  // sets num_kv_blocks_ and max_model_len_ (kv/kv_pool_sizing.h)
  void build_scheduler_and_runner();
  void open_tiers();
  void loop();
  void step();
  void serve_prefix_resets();  // the prefix_resets_ queued, between steps
  // Work other threads queued for the engine thread (the slot files' copies,
  // engine_slots.cpp), run between steps in order; at shutdown each is
  // still run, so its caller's future is answered.
  void run_engine_tasks();
  void post_engine_task(std::function<void()> task);
  void check_prefix_files() const;  // throws Error(kUnsupported) where slot files cannot work
  void admit_inbox();
  // engine_choices.cpp: validation shared by submit and submit_n, admission,
  // and choices parked until their first sibling has prefilled.
  std::unique_ptr<Request> make_request(GenerateRequest& g, KvBudget& budget) const;
  // KV chunks (engine_choices.cpp): a request's chunks, validated, or none
  // where it cannot blend; a companion request that computes one chunk
  // alone (null: no whole block of it); the parent's companions, queued
  // before it (under mu_). admit_inbox drops those whose chunk is cached
  // and parks the parent behind the last one it admits.
  void set_kv_chunks(const GenerateRequest& g, Request& request) const;
  std::unique_ptr<Request> make_companion(const Request& parent, const KvChunk& chunk) const;
  void queue_companions(const Request& parent, const GenerateRequest& g);
  bool admit_companion(std::unique_ptr<Request>& request);
  // A finished request's counts into its stats (and the chunk metrics).
  void record_request_stats(Live& live, const Request& request);
  // A resumed request's replayed output (GenerateRequest::num_replayed) run
  // through its new Live before anything else sees it; throws
  // Error(kInvalidArgument) for output the request could not have produced.
  void replay_output(Live& live, const Request& request, int32_t num_replayed) const;
  // A new request: a tier lookup (TierLoader) or the scheduler.
  void admit(std::unique_ptr<Request> request);
  // Requests whose tier lookup finished or was given up go to the scheduler.
  void take_tier_loads();
  void admit_after_lookup(std::unique_ptr<Request> request);
  void release_followers(RequestId first);
  void drop_follower(RequestId id);
  // engine_sample.cpp: the step's logits rows to tokens (and logprobs), the
  // rows split over the compute threads. Each worker touches only its own
  // sequences' Live (sampler, matcher, scratch) and result slots; what the
  // results change (prompt logprobs kept, tokens appended, requests failed)
  // is applied on the engine thread afterwards, in the order of out.seqs.
  struct SeqSample;  // one sequence's results, written by one compute thread
  struct SampledBatch {
    // Per seq with sample == true, in order: num_tokens[i] tokens (1, or
    // 1 + accepted proposals); a failed request's one token is a placeholder.
    std::vector<int32_t> tokens;
    std::vector<int32_t> num_tokens;
    std::vector<SampledLogprobs> logprobs;  // aligned with tokens; empty entries where not asked for
    std::vector<std::pair<RequestId, std::string>> failed;  // sampling threw: ended with this message
  };
  SampledBatch sample_batch(const SchedulerOutput& out, std::span<const float> logits);
  void sample_seq(const ScheduledSeq& s, std::span<const float> logits, SeqSample& slot);
  // Speculative decoding (SpeculationController): proposals for the decoding
  // requests before the schedule, one sequence's verification (a compute
  // thread's work, as sample_seq: a token per row until one differs from its
  // proposal), and what the verifications gave.
  void propose_drafts();
  void verify_seq(const ScheduledSeq& s, std::span<const float> logits, SeqSample& slot);
  void record_speculation(const SchedulerOutput& out, const SampledBatch& batch);
  // engine_embed.cpp: the step's final hidden states added to their
  // embedding requests' pools, and a finished request's pooled vector.
  void collect_hidden(const SchedulerOutput& out);
  static std::vector<float> pooled_embedding(const Live& live);
  // `failed`: requests whose sampling threw (their tokens are placeholders),
  // ended here with their message.
  void postprocess(const SchedulerOutput& out, const SampledBatch& sampled,
                   std::vector<std::unique_ptr<Request>> finished);
  void finish_live(RequestId id, FinishReason reason, const Request* request);
  void fail_live(RequestId id, const Error& error);  // a request refused after it was queued
  // Ends a request wherever it is (scheduler, tier lookup, parked choice)
  // with `error`; its blocks are released. No-op if it has ended.
  void fail_request(RequestId id, const Error& error);
  void expire_deadlines();  // fails the requests past their timeout_s
  // grammar_done: nullopt to advance the grammar here; else verify_seq
  // advanced it already, with this result.
  void postprocess_one(RequestId id, int32_t token, const SampledLogprobs& token_lp, const Request* finished,
                       double now, std::optional<bool> grammar_done = std::nullopt);
  void publish_metrics();
  void record_step_times(const StepTimes& t);  // adds one step's times to metrics_
  // Queues a stream update (push, finish, fail) for the deliverer; the loop
  // posts them after each step, in order.
  void deliver(StreamDeliverer::Delivery d) { deliveries_.push_back(std::move(d)); }
  // The budget a request runs under, checked against the model.
  KvBudget checked_budget(KvBudget b) const;

  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  // Requests' text, grammars and thinking sections; what a compute thread
  // reads of it while a batch samples, the engine thread built before.
  std::unique_ptr<OutputProcessor> output_;
  EngineConfig config_;
  const Clock& clock_;
  int32_t max_model_len_ = 0;
  int32_t num_kv_blocks_ = 0;
  int32_t peak_kv_blocks_used_ = 0;  // engine thread; measured right after allocation
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ModelRunner> runner_;
  // The map: engine thread only. While a batch samples, each compute thread
  // works on the Live of its own sequences (sample_batch).
  std::unordered_map<RequestId, std::unique_ptr<Live>> live_;
  TierLoader tiers_;                            // requests waiting for a tier lookup; inert without tiers
  SpeculationController spec_;                  // off unless EngineConfig::speculative
  std::vector<StreamDeliverer::Delivery> deliveries_;                // engine thread: this step's
  std::unique_ptr<StreamDeliverer> deliverer_;  // wakes stream readers off the step thread
  std::unique_ptr<KvEventLog> kv_events_;       // null unless EngineConfig::kv_events

  // Inbox from other threads.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  struct Inbound {
    std::unique_ptr<Request> request;
    std::unique_ptr<Live> live;
    std::optional<RequestId> after;  // submit_n: start once this sibling has prefilled
  };
  std::deque<Inbound> inbox_;
  std::unordered_map<RequestId, std::vector<std::unique_ptr<Request>>> followers_;  // by the sibling they wait for
  std::unordered_map<RequestId, RequestId> last_companion_;  // parent -> its last admitted KV chunk companion
  std::unordered_map<RequestId, std::vector<size_t>> fresh_chunks_;  // parent -> chunks its companions compute
  bool blends_kv_chunks_ = false;  // the model can blend KV chunks (Model::blends_kv_chunks)
  std::vector<RequestId> cancels_;
  std::vector<std::promise<bool>> prefix_resets_;  // reset_prefix_cache() calls not yet served
  std::vector<std::function<void()>> engine_tasks_;  // post_engine_task(), not yet run
  bool stopping_ = false;
  int64_t next_request_id_ = 1;
  std::atomic<int32_t> num_unfinished_{0};  // live_ entries and inbox_ together
  EngineMetrics metrics_;  // guarded by mu_, published after each step
  std::thread thread_;
};

}  // namespace kvlm
