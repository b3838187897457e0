#include "engine/engine.h"
#include "engine/engine_live.h"

#include <algorithm>
#include <chrono>

#include "backend/threads.h"
#include "common/error.h"
#include "common/log.h"
#include "engine/output_processor.h"
#include "kv/kv_pool_sizing.h"
#include "kvstore/record_codec.h"
#include "model/model.h"
#include "runner/kv_storage.h"
#include "runner/model_runner.h"
#include "sched/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace kvlm {
Engine::Engine(std::unique_ptr<Model> model, std::unique_ptr<Tokenizer> tokenizer, EngineConfig config,
               const Clock& clock)
    : model_(std::move(model)), tokenizer_(std::move(tokenizer)),
      output_(std::make_unique<OutputProcessor>(*tokenizer_)), config_(config), clock_(clock) {
  set_num_threads(config_.num_threads);
  check_config();
  plan_kv_pool();
  build_scheduler_and_runner();
  if (config_.tiers) open_tiers();
  if (config_.kv_events || config_.kv_event_contents) {
    kv_events_ = std::make_unique<KvEventLog>(4096, config_.kv_event_contents);
    scheduler_->kv_manager().record_kv_events(true, config_.kv_event_contents);
  }
  spec_ = SpeculationController(config_.speculative);
  metrics_.num_kv_blocks = num_kv_blocks_;
  metrics_.block_size = config_.block_size;
  deliverer_ = std::make_unique<StreamDeliverer>();
  thread_ = std::thread([this] { loop(); });
}

void Engine::check_config() const {
  if (config_.block_size < 1 || config_.block_size > 1024)
    throw_error(ErrorCode::kInvalidArgument, "block size {} must be in [1, 1024]", config_.block_size);
  KvStorage::check_dtype(*model_, config_.kv_dtype, config_.block_size);
  if (config_.max_batched_tokens < 1)
    throw_error(ErrorCode::kInvalidArgument, "max batched tokens must be positive");
  if (config_.max_seqs < 1) throw_error(ErrorCode::kInvalidArgument, "max seqs must be positive");
  if (!(config_.kv_blend_recompute >= 0 && config_.kv_blend_recompute <= 1))
    throw_error(ErrorCode::kInvalidArgument, "the KV blend recompute share {} must be between 0 and 1",
                config_.kv_blend_recompute);
  if (config_.kv_blend_probe_layer < 0)
    throw_error(ErrorCode::kInvalidArgument, "the KV blend probe layer {} must be >= 0", config_.kv_blend_probe_layer);
}

int32_t Engine::trained_context_len() const {
  const ModelConfig& mc = model_->config();
  int32_t model_len = config_.max_model_len > 0 ? config_.max_model_len : mc.context_length;
  if (auto max_pos = model_->max_positions(); max_pos && model_len > *max_pos) {
    // Learned position tables (GPT-2) end at the trained context.
    if (config_.max_model_len > 0)
      throw_error(ErrorCode::kInvalidArgument, "max model length {} exceeds the {} positions {} was trained with",
                  config_.max_model_len, *max_pos, mc.arch_name);
    model_len = *max_pos;
  }
  return model_len;
}

void Engine::plan_kv_pool() {
  KvPoolSizing sizing;
  sizing.model_len = trained_context_len();
  sizing.kv_mem_bytes = config_.kv_mem_bytes;
  sizing.kv_tokens = config_.kv_tokens;
  sizing.max_seqs = config_.max_seqs;
  sizing.memory_budget_bytes = default_kv_budget_bytes();
  sizing.block_size = config_.block_size;
  const size_t block_bytes = KvStorage::bytes_per_block(*model_, config_.kv_dtype, config_.block_size);
  sizing.block_bytes = static_cast<int64_t>(block_bytes);
  sizing.num_groups = static_cast<int32_t>(model_->kv_groups().size());
  const KvPoolSize size = size_kv_pool(sizing);
  if (size.max_model_len < sizing.model_len)
    log_info("context limited to {} tokens by the KV pool (model: {})", size.pool_tokens, sizing.model_len);
  num_kv_blocks_ = size.num_blocks;
  max_model_len_ = size.max_model_len;
  log_info("KV pool: {} blocks of {} tokens ({:.1f} MiB, {}), context {} tokens per request", num_kv_blocks_,
           config_.block_size, static_cast<double>(num_kv_blocks_) * block_bytes / 1048576.0,
           dtype_name(config_.kv_dtype), max_model_len_);
}

void Engine::build_scheduler_and_runner() {
  SchedulerConfig sc;
  sc.max_num_batched_tokens = config_.max_batched_tokens;
  sc.max_num_seqs = config_.max_seqs;
  sc.max_model_len = max_model_len_;
  sc.kv_blend_probe_layer = config_.kv_blend_probe_layer;
  blends_kv_chunks_ = model_->blends_kv_chunks() && config_.prefix_caching && model_->kv_groups().size() == 1 &&
                      config_.kv_blend_probe_layer < model_->config().num_layers;
  KvCacheConfig kc;
  kc.num_blocks = num_kv_blocks_;
  kc.block_size = config_.block_size;
  kc.enable_prefix_caching = config_.prefix_caching;
  kc.group_windows.clear();
  for (const auto& g : model_->kv_groups()) kc.group_windows.push_back(g.window);
  scheduler_ = std::make_unique<Scheduler>(sc, kc);
  runner_ = std::make_unique<ModelRunner>(*model_, config_.kv_dtype, config_.block_size, num_kv_blocks_);
}

void Engine::open_tiers() {
  if (model_->kv_groups().size() != 1)
    throw_error(ErrorCode::kInvalidArgument, "KV tiers need a model whose layers share one KV cache; {} has sliding-window layers",
                model_->config().arch_name);
  if (!config_.prefix_caching) throw_error(ErrorCode::kInvalidArgument, "KV tiers need prefix caching");
  tiers_ = TierLoader(TierStack::open(*config_.tiers),
                      KvStorage::bytes_per_block(*model_, config_.kv_dtype, config_.block_size));
  scheduler_->kv_manager().record_published(true);
}

std::optional<Hash128> Engine::shared_tier_id() const {
  if (!config_.tiers || !config_.tiers->redis) return std::nullopt;
  return RecordCodec(config_.tiers->redis->ns, config_.tiers->redis->security).tier_id();
}

Engine::~Engine() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (kv_events_) kv_events_->close();
  // A clean restart finds what was queued (bounded: a dead tier cannot hold us).
  if (!tiers_.flush(config_.tier_flush_timeout_s))
    log_warn("KV tiers: queued writes not flushed within {} s", config_.tier_flush_timeout_s);
}

std::shared_ptr<RequestStream> Engine::submit(GenerateRequest g) {
  KvBudget budget;
  std::unique_ptr<Request> request = make_request(g, budget);
  const int32_t num_prompt = request->num_prompt_tokens;
  std::shared_ptr<RequestStream> stream;
  {
    std::lock_guard lock(mu_);
    if (stopping_) throw_error(ErrorCode::kUnavailable, "the engine is shutting down");
    request->id = RequestId(next_request_id_++);
    queue_companions(*request, g);
    stream = std::make_shared<RequestStream>(request->id);
    auto live = std::make_unique<Live>(stream, *tokenizer_, g, request->arrival_s);
    if (g.num_replayed > 0) replay_output(*live, *request, g.num_replayed);
    live->stats.num_prompt_tokens = num_prompt;
    live->kv_budget = budget;
    metrics_.num_prompt_tokens += num_prompt;
    ++num_unfinished_;
    inbox_.push_back({std::move(request), std::move(live), std::nullopt});
  }
  cv_.notify_all();
  return stream;
}

KvBudget Engine::checked_budget(KvBudget b) const {
  if (!b.enabled()) return b;
  if (model_->kv_groups().size() != 1)
    throw_error(ErrorCode::kInvalidArgument,
                "kv_budget needs a model whose layers share one KV cache; {} has sliding-window layers",
                model_->config().arch_name);
  if (b.shift && model_->max_positions())
    throw_error(ErrorCode::kInvalidArgument,
                "kv_shift renumbers rotary positions; {} has learned positions and cannot shift them",
                model_->config().arch_name);
  return validated_budget(b, config_.block_size);
}

void Engine::cancel(RequestId id) {
  {
    std::lock_guard lock(mu_);
    cancels_.push_back(id);
  }
  cv_.notify_all();
}

std::future<bool> Engine::reset_prefix_cache() {
  std::promise<bool> done;
  std::future<bool> result = done.get_future();
  {
    std::lock_guard lock(mu_);
    prefix_resets_.push_back(std::move(done));
  }
  cv_.notify_all();
  return result;
}

void Engine::serve_prefix_resets() {
  std::vector<std::promise<bool>> resets;
  {
    std::lock_guard lock(mu_);
    resets.swap(prefix_resets_);
  }
  if (resets.empty()) return;
  const bool done = scheduler_->kv_manager().reset_prefix_cache();
  log_info("prefix cache {}", done ? "flushed" : "not flushed: requests hold blocks");
  // The removals reach the KV events before the caller hears it is done, so
  // a reader that comes after the answer never sees a flushed block.
  if (kv_events_) kv_events_->append(scheduler_->kv_manager().take_kv_events());
  for (std::promise<bool>& r : resets) r.set_value(done);
}

EngineMetrics Engine::metrics() const {
  EngineMetrics m;
  {
    std::lock_guard lock(mu_);
    m = metrics_;
  }
  // Live, not as of the last step: the I/O thread keeps writing after the
  // engine goes idle. stats() never waits on a tier.
  if (tiers_.enabled()) m.tiers = tiers_.tier_stats();
  return m;
}

void Engine::loop() {
  while (true) {
    {
      std::unique_lock lock(mu_);
      auto ready = [&] {
        return stopping_ || !inbox_.empty() || !cancels_.empty() || !prefix_resets_.empty() ||
               !engine_tasks_.empty() || scheduler_->has_unfinished();
      };
      // Requests waiting on a tier lookup: poll its completions every millisecond.
      if (tiers_.empty()) {
        cv_.wait(lock, ready);
      } else {
        cv_.wait_for(lock, std::chrono::milliseconds(1), ready);
      }
      if (stopping_) break;
    }
    try {
      step();
    } catch (const std::exception& e) {
      // A failing step must not leave callers waiting forever: fail every
      // request in flight, release its blocks, and keep serving new ones.
      log_error("engine step failed: {}", e.what());
      for (auto& [id, live] : live_) {
        deliver([stream = live->stream, error = Error(ErrorCode::kInternal, std::string("engine step failed: ") + e.what())] {
          stream->fail(error);
        });
        scheduler_->finish(id, FinishReason::kAborted);
        spec_.release(id);
      }
      num_unfinished_ -= static_cast<int32_t>(live_.size());
      live_.clear();
      tiers_.clear();
      followers_.clear();
    }
    serve_prefix_resets();
    run_engine_tasks();
    if (kv_events_) kv_events_->append(scheduler_->kv_manager().take_kv_events());
    publish_metrics();
    deliverer_->post(deliveries_);
  }
  // Shutdown: every unfinished request ends as aborted, and a flush or a
  // task asked meanwhile is answered (its caller may be waiting).
  serve_prefix_resets();
  run_engine_tasks();
  admit_inbox();
  for (auto& [id, live] : live_) {
    auto r = scheduler_->finish(id, FinishReason::kAborted);
    deliver([stream = live->stream, stats = live->stats] { stream->finish(FinishReason::kAborted, stats); });
  }
  deliverer_->post(deliveries_);
  live_.clear();
  tiers_.clear();
  followers_.clear();
}

void Engine::admit_inbox() {
  std::deque<Inbound> inbox;
  std::vector<RequestId> cancels;
  {
    std::lock_guard lock(mu_);
    inbox.swap(inbox_);
    cancels.swap(cancels_);
  }
  for (Inbound& in : inbox) {
    const RequestId id = in.request->id;
    if (in.live->companion_of) {
      const RequestId parent = *in.live->companion_of;
      if (!admit_companion(in.request)) continue;  // its chunk is cached: not needed
      last_companion_[parent] = id;
      fresh_chunks_[parent].push_back(*in.live->companion_chunk);
      live_.emplace(id, std::move(in.live));
      admit(std::move(in.request));
      continue;
    }
    // A request with KV chunks waits for the companions that compute them.
    if (auto c = last_companion_.find(id); c != last_companion_.end()) {
      if (!in.after) in.after = c->second;
      last_companion_.erase(c);
      in.request->kv_chunk_fresh.assign(in.request->kv_chunks.size(), 0);
      for (size_t k : fresh_chunks_[id]) in.request->kv_chunk_fresh[k] = 1;
      fresh_chunks_.erase(id);
    }
    live_.emplace(id, std::move(in.live));
    if (in.after && live_.count(*in.after) && live_.at(*in.after)->stats.num_generated_tokens == 0) {
      followers_[*in.after].push_back(std::move(in.request));
      continue;
    }
    admit(std::move(in.request));
  }
  for (RequestId id : cancels) {
    if (!live_.count(id)) continue;
    tiers_.erase(id);
    drop_follower(id);
    auto r = scheduler_->finish(id, FinishReason::kAborted);
    finish_live(id, FinishReason::kAborted, r.get());
  }
}

void Engine::step() {
  using Steady = std::chrono::steady_clock;
  const auto t_begin = Steady::now();
  admit_inbox();
  expire_deadlines();
  take_tier_loads();
  propose_drafts();
  SchedulerOutput out = scheduler_->schedule();
  if (out.empty()) return;
  if (out.seqs.empty() && out.kv_ops.empty()) {  // only finished tables for the runner to forget: no step
    runner_->execute(out);
    return;
  }
  peak_kv_blocks_used_ = std::max(peak_kv_blocks_used_, scheduler_->kv().pool().num_used_blocks());
  const double now = clock_.now_s();
  for (const auto& s : out.seqs) {
    Live& live = *live_.at(s.id);
    if (live.first_scheduled_s < 0) live.first_scheduled_s = now;
  }
  const auto t_forward = Steady::now();
  std::span<const float> logits = runner_->execute(out);
  collect_hidden(out);
  const auto t_sample = Steady::now();

  SampledBatch sampled = sample_batch(out, logits);
  for (const auto& s : out.seqs) {  // held after this step's writes, before any eviction
    Live& live = *live_.at(s.id);
    live.peak_resident_tokens =
        std::max(live.peak_resident_tokens, s.slot_begin + static_cast<int32_t>(s.new_tokens.size()));
  }
  const auto t_post = Steady::now();
  spec_.record_forward(out, std::chrono::duration<double>(t_sample - t_forward).count());
  record_speculation(out, sampled);
  auto finished = scheduler_->update(out, sampled.tokens, runner_->kv_stats(), sampled.num_tokens);
  tiers_.store_published(scheduler_->kv_manager(), runner_->storage());
  postprocess(out, sampled, std::move(finished));
  auto seconds = [](Steady::duration d) { return std::chrono::duration<double>(d).count(); };
  record_step_times({seconds(t_forward - t_begin), seconds(t_sample - t_forward), seconds(t_post - t_sample),
                     seconds(Steady::now() - t_post)});
}

// Proposals for every decoding request that speculates, asked of the
// proposer in one batch (SpeculationController).
void Engine::propose_drafts() {
  if (!spec_.enabled()) return;
  spec_.begin_step(scheduler_->num_running());
  // A thinking section forces tokens and moves its grammar's start: such a
  // request decodes one token a step.
  for (auto& [id, live] : live_)
    spec_.consider(id, scheduler_->find(id), live->speculative && !live->output.thinking, live->spec);
  spec_.propose(*scheduler_);
}

void Engine::record_speculation(const SchedulerOutput& out, const SampledBatch& batch) {
  size_t k = 0;
  for (const ScheduledSeq& s : out.seqs) {
    if (!s.sample) continue;
    const int32_t n = batch.num_tokens[k++];
    if (s.num_spec_tokens == 0) continue;
    const bool failed = std::any_of(batch.failed.begin(), batch.failed.end(), [&](const auto& f) { return f.first == s.id; });
    if (!failed) spec_.record_verified(s.num_spec_tokens, n, live_.at(s.id)->spec);
  }
}

void Engine::record_step_times(const StepTimes& t) {
  std::lock_guard lock(mu_);
  StepTimes& sum = metrics_.step_times;
  sum.schedule_s += t.schedule_s;
  sum.forward_s += t.forward_s;
  sum.sample_s += t.sample_s;
  sum.postprocess_s += t.postprocess_s;
  // With -v, a profile line every 1,000 steps (per-step lines would flood the
  // log at 64 streams and cost time of their own).
  constexpr int64_t kLogEvery = 1000;
  if (metrics_.num_steps % kLogEvery == 0 && log_level() <= LogLevel::kInfo) {
    const double total = sum.total_s();
    log_info("steps {}: {:.1f}% outside the forward pass (schedule {:.1f}%, sample {:.1f}%, postprocess {:.1f}%), "
             "mean step {:.3f} ms", metrics_.num_steps, 100 * (total - sum.forward_s) / total,
             100 * sum.schedule_s / total, 100 * sum.sample_s / total, 100 * sum.postprocess_s / total,
             1e3 * total / metrics_.num_steps);
  }
}

void Engine::postprocess(const SchedulerOutput& out, const SampledBatch& sampled,
                         std::vector<std::unique_ptr<Request>> finished) {
  const double now = clock_.now_s();
  std::unordered_map<RequestId, Request*> finished_by_id;
  for (auto& r : finished) finished_by_id[r->id] = r.get();
  const auto& failed = sampled.failed;
  std::vector<std::pair<RequestId, std::string>> ended = failed;
  size_t k = 0, next = 0;
  int64_t num_generated = 0;
  for (const auto& s : out.seqs) {
    if (!s.sample) continue;
    const int32_t n = sampled.num_tokens[k++];
    const size_t first = next;
    next += static_cast<size_t>(n);
    if (std::any_of(failed.begin(), failed.end(), [&](const auto& f) { return f.first == s.id; })) continue;
    auto fin = finished_by_id.find(s.id);
    const Request* done = fin == finished_by_id.end() ? nullptr : fin->second;
    // The scheduler keeps no token after one that ended the request.
    const int32_t num_kept = done && s.num_spec_tokens > 0 ? done->num_tokens() - s.num_computed - 1 : n;
    // A fault in one request's text or stream fails that request alone.
    try {
      // A stop string or the grammar may end the request at any token.
      for (int32_t j = 0; j < num_kept && live_.count(s.id); ++j) {
        const Live& live = *live_.at(s.id);
        std::optional<bool> grammar_done;
        if (s.num_spec_tokens > 0 && j < live.output.num_grammar_advanced)
          grammar_done = live.output.grammar_done && j + 1 == live.output.num_grammar_advanced;
        postprocess_one(s.id, sampled.tokens[first + j], sampled.logprobs[first + j],
                        j + 1 == num_kept ? done : nullptr, now, grammar_done);
        ++num_generated;
      }
    } catch (const std::bad_alloc&) {
      ended.emplace_back(s.id, "out of memory while generating this request");
    } catch (const std::exception& e) {
      ended.emplace_back(s.id, fmt::format("generating this request failed: {}", e.what()));
    }
  }
  for (const auto& [id, why] : ended) {
    log_error("request {}: {}", id.value(), why);
    fail_request(id, Error(ErrorCode::kInternal, why + " (other requests are unaffected)"));
  }
  {
    std::lock_guard lock(mu_);
    metrics_.num_generated_tokens += num_generated;
    metrics_.num_steps++;
  }
}

void Engine::postprocess_one(RequestId id, int32_t token, const SampledLogprobs& token_lp, const Request* finished,
                             double now, std::optional<bool> grammar_done_in) {
  Live& live = *live_.at(id);
  live.stats.num_generated_tokens++;
  if (live.stats.num_generated_tokens == 1) release_followers(id);  // its prompt is cached now
  if (live.last_token_s < 0) {
    live.stats.ttft_s = now - live.arrival_s;
  } else {
    live.stats.itl_s.push_back(now - live.last_token_s);
  }
  live.last_token_s = now;
  const bool stopped_by_token = finished && finished->finish_reason == FinishReason::kStop;
  // An end-of-generation token ends the text; it is not part of it.
  PendingText text = stopped_by_token ? PendingText{} : OutputProcessor::push(live.output, token);
  std::vector<SampledLogprobs> lp;
  if (live.logprobs >= 0 && !stopped_by_token) lp.push_back(token_lp);
  deliver([stream = live.stream, token, text = std::move(text), lp = std::move(lp),
           plp = std::move(live.prompt_logprobs)]() mutable {
    if (!text.resolve_token(*stream, token)) return;
    stream->push({token}, std::move(text.text), std::move(lp), std::move(plp));
  });
  live.prompt_logprobs.clear();
  const bool grammar_done = live.output.tracked() && !stopped_by_token &&
                            (grammar_done_in ? *grammar_done_in : output_->advance(live.output, token));
  if (finished) {
    finish_live(id, *finished->finish_reason, finished);
  } else if (live.output.stopped() || grammar_done) {
    auto r = scheduler_->finish(id, FinishReason::kStop);
    finish_live(id, FinishReason::kStop, r.get());
  }
}

void Engine::fail_live(RequestId id, const Error& error) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  deliver([stream = it->second->stream, error] { stream->fail(error); });
  spec_.release(id);
  const bool companion = it->second->companion_of.has_value();
  live_.erase(it);
  if (companion) return;  // counted nowhere
  --num_unfinished_;
  std::lock_guard lock(mu_);
  metrics_.num_requests_failed++;
}

void Engine::fail_request(RequestId id, const Error& error) {
  if (!live_.count(id)) return;
  tiers_.erase(id);
  drop_follower(id);
  scheduler_->finish(id, FinishReason::kAborted);  // releases its blocks (nullptr if not there)
  release_followers(id);  // its parked siblings prefill the prompt themselves
  fail_live(id, error);
}

void Engine::expire_deadlines() {
  const double now = clock_.now_s();
  std::vector<std::pair<RequestId, double>> expired;
  for (const auto& [id, live] : live_)
    if (live->deadline_s > 0 && now >= live->deadline_s) expired.emplace_back(id, live->timeout_s);
  for (const auto& [id, timeout_s] : expired) {
    fail_request(id, Error(ErrorCode::kUnavailable,
                           fmt::format("the request ran past the server's time limit of {} s and was stopped; "
                                       "ask for fewer tokens or raise --request-timeout", timeout_s)));
    std::lock_guard lock(mu_);
    metrics_.num_requests_timed_out++;
  }
}

void Engine::finish_live(RequestId id, FinishReason reason, const Request* request) {
  release_followers(id);
  auto it = live_.find(id);
  if (it == live_.end()) return;
  Live& live = *it->second;
  if (request) record_request_stats(live, *request);
  if (live.companion_of) {  // internal: no stream reader, no metrics
    live_.erase(it);
    return;
  }
  const double now = clock_.now_s();
  live.stats.queue_s = (live.first_scheduled_s < 0 ? now : live.first_scheduled_s) - live.arrival_s;
  live.stats.e2e_s = now - live.arrival_s;
  live.stats.peak_resident_tokens = live.peak_resident_tokens;
  if (live.pooling != Pooling::kNone && reason != FinishReason::kAborted) live.stats.embedding = pooled_embedding(live);
  PendingText tail;
  if (reason != FinishReason::kAborted) tail = OutputProcessor::finish(live.output, live.stats.stop_string);
  deliver([stream = live.stream, reason, stats = live.stats, tail = std::move(tail)]() mutable {
    if (!tail.resolve_flush(*stream)) return;
    stream->finish(reason, std::move(stats), std::move(tail.text));
  });
  log_debug("request {} {}: prompt {}, generated {}, cached {}, kv {} (most resident {} tokens)", id.value(),
            finish_reason_name(reason), live.stats.num_prompt_tokens, live.stats.num_generated_tokens,
            live.stats.num_cached_tokens,
            live.kv_budget.enabled() ? fmt::format("budget {} {}{}", live.kv_budget.budget_tokens,
                                                   kv_policy_name(live.kv_budget.policy),
                                                   live.kv_budget.shift ? " shift" : "")
                                     : std::string("unbounded"),
            live.peak_resident_tokens);
  std::lock_guard lock(mu_);
  metrics_.num_requests_finished++;
  --num_unfinished_;
  switch (reason) {
    case FinishReason::kStop: metrics_.num_requests_stopped++; break;
    case FinishReason::kLength: metrics_.num_requests_length++; break;
    case FinishReason::kAborted: metrics_.num_requests_aborted++; break;
  }
  metrics_.e2e_s.observe(live.stats.e2e_s);
  if (live.peak_resident_tokens > 0) metrics_.resident_tokens.observe(live.peak_resident_tokens);
  metrics_.queue_s.observe(live.stats.queue_s);
  if (live.stats.num_generated_tokens > 0) metrics_.ttft_s.observe(live.stats.ttft_s);
  for (double gap : live.stats.itl_s) metrics_.itl_s.observe(gap);
  spec_.release(id);
  live_.erase(it);
}

void Engine::record_request_stats(Live& live, const Request& request) {
  live.stats.num_preemptions = request.num_preemptions;
  // Reused KV chunk tokens count as cached, as a prefix hit's do.
  live.stats.num_chunk_reused_tokens = request.num_chunk_reused_tokens;
  live.stats.num_chunk_recomputed_tokens = request.num_chunk_recomputed_tokens;
  // Chunks computed for this request by its companions are not cached: only
  // those found cached before it came.
  live.stats.num_cached_tokens = request.num_cached_tokens + request.num_chunk_cached_tokens;
  if (live.companion_of || request.num_chunks_looked_up == 0) return;
  std::lock_guard lock(mu_);
  metrics_.num_kv_chunk_lookups += request.num_chunks_looked_up;
  metrics_.num_kv_chunk_hits += request.num_chunks_hit;
  metrics_.num_kv_chunk_reused_tokens += request.num_chunk_reused_tokens;
  metrics_.num_kv_chunk_recomputed_tokens += request.num_chunk_recomputed_tokens;
}

bool Engine::admit_companion(std::unique_ptr<Request>& request) {
  const int32_t num_blocks = static_cast<int32_t>(request->tokens.size()) / config_.block_size;
  return scheduler_->kv().num_cached_chunk_blocks(request->tokens, request->cache_salt) < num_blocks;
}

void Engine::publish_metrics() {
  std::lock_guard lock(mu_);
  const auto& kv = scheduler_->kv();
  metrics_.num_running = scheduler_->num_running();
  size_t num_followers = 0;  // choices waiting for their first sibling's prefill
  for (const auto& [first, waiting] : followers_) num_followers += waiting.size();
  metrics_.num_waiting =
      scheduler_->num_waiting() + static_cast<int32_t>(inbox_.size() + tiers_.num_loading() + num_followers);
  metrics_.num_loading = static_cast<int32_t>(tiers_.num_loading());
  metrics_.num_pending_tokens = scheduler_->num_pending_tokens() + tiers_.num_loading_tokens();
  metrics_.num_kv_blocks_used = kv.pool().num_used_blocks();
  metrics_.peak_kv_blocks_used = peak_kv_blocks_used_;
  metrics_.num_prefix_query_tokens = kv.num_prefix_query_tokens();
  metrics_.num_prefix_hit_tokens = kv.num_prefix_hit_tokens();
  metrics_.num_preemptions = scheduler_->num_preemptions();
  metrics_.num_tier_hit_tokens = tiers_.num_hit_tokens();
  metrics_.num_tier_writes_queued = tiers_.num_writes_queued();
  metrics_.num_tier_writes_dropped = tiers_.num_writes_dropped();
  metrics_.num_tier_lookups_timed_out = tiers_.num_lookups_timed_out();
  if (spec_.enabled()) {
    const SpeculationController::Counters& c = spec_.counters();
    metrics_.num_spec_proposed = c.num_proposed;
    metrics_.num_spec_accepted = c.num_accepted;
    metrics_.num_spec_steps = c.num_steps;
    metrics_.spec_tokens_per_step = c.tokens_per_step;
    metrics_.spec_propose_s = c.propose_s;
    metrics_.num_spec_draft_seqs = spec_.num_draft_sequences();
    metrics_.spec_draft_kv_bytes = spec_.draft_kv_bytes();
  }
  metrics_.num_prefix_evicted_blocks = kv.pool().num_evicted_cached_blocks();
  for (KvPolicyKind k : all_kv_policies())
    metrics_.num_kv_evicted_tokens[static_cast<size_t>(k)] = kv.num_evicted_tokens(k);
}

}  // namespace kvlm
