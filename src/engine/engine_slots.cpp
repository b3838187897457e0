// A prefix's KV copied out of the prefix cache, put back into it, or
// forgotten, for the server's slot files (docs/slots.md). Each runs
// on the engine thread between steps, where the pool and the storage are
// the engine thread's alone; callers wait on a future.
#include <exception>
#include <memory>

#include "common/error.h"
#include "engine/engine.h"
#include "kv/block_hash.h"
#include "model/model.h"
#include "runner/kv_storage.h"
#include "runner/model_runner.h"
#include "sched/scheduler.h"

namespace kvlm {
namespace {

// `work`'s result (or what it threw) into `done`.
template <typename T, typename Work>
void answer(std::promise<T>& done, Work& work) {
  try {
    done.set_value(work());
  } catch (...) {
    done.set_exception(std::current_exception());
  }
}

// Runs `work` on the engine thread through `post`; its result comes back
// through the future. std::function must be copyable, so the promise is
// shared between the copies (only the one run answers it).
template <typename T, typename Post, typename Work>
std::future<T> on_engine_thread(Post&& post, Work work) {
  auto done = std::make_shared<std::promise<T>>();
  std::future<T> result = done->get_future();
  post([done, work = std::move(work)]() mutable { answer(*done, work); });
  return result;
}

}  // namespace

void Engine::post_engine_task(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    // Once stopping, the loop may have run its last tasks: nobody would answer.
    if (stopping_) throw_error(ErrorCode::kUnavailable, "the engine is shutting down");
    engine_tasks_.push_back(std::move(task));
  }
  cv_.notify_all();
}

void Engine::run_engine_tasks() {
  std::vector<std::function<void()>> tasks;
  {
    std::lock_guard lock(mu_);
    tasks.swap(engine_tasks_);
  }
  for (std::function<void()>& task : tasks) task();
}

void Engine::check_prefix_files() const {
  if (!config_.prefix_caching)
    throw_error(ErrorCode::kUnsupported, "slot files need the prefix cache (the server runs with --no-prefix-cache)");
  if (model_->kv_groups().size() != 1)
    throw_error(ErrorCode::kUnsupported, "slot files need a model whose layers share one KV cache; {} has "
                "sliding-window layers", model_->config().arch_name);
}

std::future<std::vector<KvRecord>> Engine::export_prefix(std::vector<int32_t> tokens, uint64_t extra_key) {
  auto post = [this](std::function<void()> t) { post_engine_task(std::move(t)); };
  return on_engine_thread<std::vector<KvRecord>>(post, [this, tokens = std::move(tokens), extra_key] {
    check_prefix_files();
    const KvStorage& storage = runner_->storage();
    const BlockPool& pool = scheduler_->kv().pool();
    const int32_t bs = config_.block_size;
    const std::vector<BlockHash> hashes = hash_full_blocks(tokens, bs, extra_key);
    std::vector<KvRecord> records;
    for (size_t i = 0; i < hashes.size(); ++i) {
      // Group 0 caches a block under its chain hash itself (hash_for_group).
      const std::optional<BlockId> block = pool.find_cached(hashes[i]);
      if (!block) break;  // later blocks hang off this one: no request could reach them
      KvRecord& r = records.emplace_back();
      r.hash = hashes[i];
      if (i > 0) r.parent = hashes[i - 1];
      r.tokens.assign(tokens.begin() + static_cast<ptrdiff_t>(i) * bs,
                      tokens.begin() + static_cast<ptrdiff_t>(i + 1) * bs);
      r.payload.resize(storage.block_bytes());
      storage.read_block(*block, r.payload);
      r.salt = extra_key;
    }
    return records;
  });
}

namespace {

// Each record is the block its chain says, with a block's sizes: whatever
// the caller read from a file, nothing else reaches the pool.
void check_chain(std::span<const KvRecord> records, int32_t block_size, size_t block_bytes) {
  std::optional<BlockHash> parent;
  for (size_t i = 0; i < records.size(); ++i) {
    const KvRecord& r = records[i];
    if (r.tokens.size() != static_cast<size_t>(block_size) || r.payload.size() != block_bytes)
      throw_error(ErrorCode::kInvalidArgument, "KV block {} holds {} tokens and {} bytes; this server's blocks hold "
                  "{} tokens and {} bytes", i, r.tokens.size(), r.payload.size(), block_size, block_bytes);
    if (r.parent != parent || hash_block(parent, r.tokens, r.salt) != r.hash)
      throw_error(ErrorCode::kInvalidArgument, "KV block {} is not the block its tokens chain to", i);
    parent = r.hash;
  }
}

}  // namespace

std::future<int32_t> Engine::import_prefix(std::vector<KvRecord> records) {
  auto post = [this](std::function<void()> t) { post_engine_task(std::move(t)); };
  return on_engine_thread<int32_t>(post, [this, records = std::move(records)] {
    check_prefix_files();
    KvStorage& storage = runner_->storage();
    KvCacheManager& kv = scheduler_->kv_manager();
    check_chain(records, config_.block_size, storage.block_bytes());
    if (records.empty()) return 0;
    std::vector<BlockHash> hashes;
    std::vector<BlockContent> contents;  // views into the records, for the KV events
    for (const KvRecord& r : records) {
      hashes.push_back(r.hash);
      contents.push_back({r.parent, r.tokens, r.salt});
    }
    // Every record gets a block of its own, those cached already too: the
    // allocation may evict a cached free block of this very chain, and a
    // copy that finds its hash still cached stays unhashed and is freed.
    const std::optional<std::vector<BlockId>> ids = kv.import_blocks(hashes, contents);
    if (!ids)
      throw_error(ErrorCode::kUnavailable, "the KV pool has {} free blocks and restoring needs {}; try again when "
                  "requests have finished", kv.pool().num_free_blocks(), records.size());
    for (size_t i = 0; i < ids->size(); ++i) storage.write_block((*ids)[i], records[i].payload);
    kv.release_imported(*ids);
    // The KV events list the blocks before the caller hears they are there.
    if (kv_events_) kv_events_->append(kv.take_kv_events());
    return static_cast<int32_t>(records.size());
  });
}

std::future<int32_t> Engine::forget_prefix(std::vector<int32_t> tokens, uint64_t extra_key) {
  auto post = [this](std::function<void()> t) { post_engine_task(std::move(t)); };
  return on_engine_thread<int32_t>(post, [this, tokens = std::move(tokens), extra_key] {
    check_prefix_files();
    KvCacheManager& kv = scheduler_->kv_manager();
    const int32_t num_forgotten = kv.forget_cached(hash_full_blocks(tokens, config_.block_size, extra_key));
    if (kv_events_) kv_events_->append(kv.take_kv_events());
    return num_forgotten;
  });
}

std::future<std::vector<int32_t>> Engine::cached_prefix_tokens(std::vector<PrefixKey> prefixes) {
  auto post = [this](std::function<void()> t) { post_engine_task(std::move(t)); };
  return on_engine_thread<std::vector<int32_t>>(post, [this, prefixes = std::move(prefixes)] {
    std::vector<int32_t> out;
    const BlockPool& pool = scheduler_->kv().pool();
    for (const PrefixKey& p : prefixes) {
      int32_t num_blocks = 0;
      // Group 0's keys: with several groups a block is usable only when
      // every group holds it, so counting group 0 alone may say more.
      for (const BlockHash& h : hash_full_blocks(p.tokens, config_.block_size, p.extra_key)) {
        if (!pool.find_cached(h)) break;
        ++num_blocks;
      }
      out.push_back(num_blocks * config_.block_size);
    }
    return out;
  });
}

}  // namespace kvlm
