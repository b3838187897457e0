// What kv/ asks the runner to do to KV bytes when a sequence sheds tokens
// (docs/ARCHITECTURE.md "Layers": kv/ is bookkeeping only and emits lists
// that others execute).
// The runner executes a list in order, before the forward pass of the next
// step, so every op reads the bytes as the previous ops left them.
#pragma once

#include <cstdint>
#include <vector>

namespace kvlm {

struct KvOp {
  enum class Kind {
    kCopyBlock,   // block src -> block dst, every layer of the group (copy-on-write)
    kMoveSlot,    // physical slot src -> physical slot dst (compaction)
    kRotateKey,   // re-rotate the key in physical slot dst by `delta` positions (--kv-shift)
  };
  Kind kind = Kind::kCopyBlock;
  int32_t group = 0;   // KV group whose layers the op touches
  int64_t src = 0;     // block id (kCopyBlock) or physical slot (kMoveSlot)
  int64_t dst = 0;     // block id (kCopyBlock) or physical slot
  int32_t delta = 0;   // kRotateKey: new position - old position

  static KvOp copy_block(int32_t group, int64_t src, int64_t dst) { return {Kind::kCopyBlock, group, src, dst, 0}; }
  static KvOp move_slot(int32_t group, int64_t src, int64_t dst) { return {Kind::kMoveSlot, group, src, dst, 0}; }
  static KvOp rotate_key(int32_t group, int64_t slot, int32_t delta) { return {Kind::kRotateKey, group, 0, slot, delta}; }
  bool operator==(const KvOp&) const = default;
};

using KvOps = std::vector<KvOp>;

}  // namespace kvlm
