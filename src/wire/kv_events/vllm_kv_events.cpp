#include "wire/kv_events/vllm_kv_events.h"

#include <fmt/format.h>

#include "wire/kv_events/msgpack_writer.h"

namespace kvlm::vllm_events {
namespace {

void write_hashes(msgpack::Writer& w, const std::vector<uint64_t>& hashes) {
  w.array(hashes.size());
  for (uint64_t h : hashes) w.uint(h);
}

void write_event(msgpack::Writer& w, const BlockStored& e) {
  w.array(e.extra_keys.empty() ? 8 : 9);
  w.str("BlockStored");
  write_hashes(w, e.block_hashes);
  if (e.parent_block_hash) {
    w.uint(*e.parent_block_hash);
  } else {
    w.nil();
  }
  w.array(e.token_ids.size());
  for (int32_t t : e.token_ids) w.sint(t);
  w.sint(e.block_size);
  w.nil();  // lora_id: no LoRA
  w.str(e.medium);
  w.nil();  // lora_name
  if (e.extra_keys.empty()) return;
  w.array(e.extra_keys.size());
  for (const auto& keys : e.extra_keys) {
    if (!keys) {
      w.nil();
      continue;
    }
    w.array(keys->size());
    for (const std::string& k : *keys) w.str(k);
  }
}

void write_event(msgpack::Writer& w, const BlockRemoved& e) {
  w.array(3);
  w.str("BlockRemoved");
  write_hashes(w, e.block_hashes);
  w.str(e.medium);
}

void write_event(msgpack::Writer& w, const AllBlocksCleared&) {
  w.array(1);
  w.str("AllBlocksCleared");
}

}  // namespace

std::string encode_batch(double ts, std::span<const Event> events, int64_t dp_rank) {
  msgpack::Writer w;
  w.array(3);
  w.float64(ts);
  w.array(events.size());
  for (const Event& e : events) std::visit([&w](const auto& v) { write_event(w, v); }, e);
  w.sint(dp_rank);
  return w.take();
}

std::string topic(std::string_view address, std::string_view model) {
  return fmt::format("kv@{}@{}", address, model);
}

std::vector<Event> Converter::convert(std::span<const KvEvent> events) {
  std::vector<Event> out;
  for (const KvEvent& e : events) {
    if (e.kind == KvEvent::Kind::kStored) {
      stored(e, out);
    } else {
      removed(e, out);
    }
  }
  return out;
}

void Converter::stored(const KvEvent& e, std::vector<Event>& out) {
  if (e.tokens.size() != static_cast<size_t>(block_size_)) return;  // no content: not for these readers
  const uint64_t hash = wire_hash(e.hash);
  const std::optional<uint64_t> parent = e.parent ? std::optional(wire_hash(*e.parent)) : std::nullopt;
  if (parent && !published_.count(*parent)) return;  // an orphan: its readers would drop it
  if (!published_.insert(hash).second) return;      // held already
  auto* run = out.empty() ? nullptr : std::get_if<BlockStored>(&out.back());
  if (!run || !parent || run->block_hashes.back() != *parent) {
    out.push_back(BlockStored{{}, parent, {}, block_size_, medium_, {}});
    run = &std::get<BlockStored>(out.back());
    if (!parent && e.salt != 0) run->extra_keys.push_back(std::vector<std::string>{fmt::format("{:016x}", e.salt)});
  } else if (!run->extra_keys.empty()) {
    run->extra_keys.push_back(std::nullopt);
  }
  run->block_hashes.push_back(hash);
  run->token_ids.insert(run->token_ids.end(), e.tokens.begin(), e.tokens.end());
}

void Converter::removed(const KvEvent& e, std::vector<Event>& out) {
  const uint64_t hash = wire_hash(e.hash);
  if (published_.erase(hash) == 0) return;  // never published
  auto* run = out.empty() ? nullptr : std::get_if<BlockRemoved>(&out.back());
  if (!run) {
    out.push_back(BlockRemoved{{}, medium_});
    run = &std::get<BlockRemoved>(out.back());
  }
  run->block_hashes.push_back(hash);
}

Event Converter::clear() {
  published_.clear();
  return AllBlocksCleared{};
}

}  // namespace kvlm::vllm_events
