// A request's block table for one KV group, and how the runner's copy of it
// is kept up to date: the scheduler sends each step only what changed since
// the step before (BlockTableChange), not the whole table. A decode step of a
// long sequence changes at most its last entry, or appends one, so 64 streams
// of 2,048 tokens send a few entries a step rather than 8,192.
//
// The table records the first entry changed since the last take_change(); its
// mutators are the only way to change it, so no change can go unsent. The
// runner's BlockTableMirror applies the changes: keep the first `keep`
// entries it has, append the rest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/strong_id.h"

namespace kvlm {

// What one group's table did since the last step: entries [0, keep) stand,
// then `append` follows (the whole table when keep is 0). num_released: the
// table's leading stale entries (BlockTable::num_released).
struct BlockTableChange {
  int32_t keep = 0;
  std::vector<int32_t> append;
  int32_t num_released = 0;
};

// A request's table for one group. Entries [0, num_released) were released
// (window groups only): their ids are stale and must not be read.
class BlockTable {
 public:
  const std::vector<BlockId>& blocks() const { return blocks_; }
  size_t size() const { return blocks_.size(); }
  BlockId operator[](size_t i) const { return blocks_[i]; }

  void push_back(BlockId b) { blocks_.push_back(b); }
  void append(std::span<const BlockId> more) { blocks_.insert(blocks_.end(), more.begin(), more.end()); }
  void set(size_t i, BlockId b);
  void erase(size_t i);
  void truncate(size_t n);
  // Replaces the entries; the change starts where the new ones first differ.
  void assign(std::vector<BlockId> blocks);

  // The change since the last call (all of it at the first), and from now on
  // the table counts as sent.
  BlockTableChange take_change();

  int32_t num_released = 0;

 private:
  void changed_from(size_t i) { num_unchanged_ = i < num_unchanged_ ? i : num_unchanged_; }

  std::vector<BlockId> blocks_;
  size_t num_unchanged_ = 0;  // entries [0, num_unchanged_) are as last taken
};

// The runner's copy of every scheduled request's tables, built from changes.
class BlockTableMirror {
 public:
  struct Table {
    std::vector<int32_t> ids;  // physical block ids
    int32_t num_released = 0;
  };
  // Applies a scheduled request's changes (one per group) and returns its
  // tables. The spans into them stay valid until the next apply() or
  // forget() of the same request.
  const std::vector<Table>& apply(RequestId id, std::span<const BlockTableChange> changes);
  // A request's blocks are gone (finished or preempted): forgets its tables.
  void forget(RequestId id) { tables_.erase(id); }
  size_t num_requests() const { return tables_.size(); }

 private:
  std::unordered_map<RequestId, std::vector<Table>> tables_;
};

}  // namespace kvlm
