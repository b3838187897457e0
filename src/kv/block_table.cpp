#include "kv/block_table.h"

#include <algorithm>

#include "common/assert.h"

namespace kvlm {

void BlockTable::set(size_t i, BlockId b) {
  KVLM_ASSERT(i < blocks_.size(), "block table entry out of range");
  blocks_[i] = b;
  changed_from(i);
}

void BlockTable::erase(size_t i) {
  KVLM_ASSERT(i < blocks_.size(), "block table entry out of range");
  blocks_.erase(blocks_.begin() + static_cast<std::ptrdiff_t>(i));
  changed_from(i);
}

void BlockTable::truncate(size_t n) {
  if (n >= blocks_.size()) return;
  blocks_.resize(n);
  changed_from(n);
}

void BlockTable::assign(std::vector<BlockId> blocks) {
  const size_t common = std::min(blocks.size(), blocks_.size());
  size_t same = 0;
  while (same < common && blocks[same] == blocks_[same]) ++same;
  blocks_ = std::move(blocks);
  changed_from(same);
}

BlockTableChange BlockTable::take_change() {
  BlockTableChange c;
  const size_t keep = std::min(num_unchanged_, blocks_.size());
  c.keep = static_cast<int32_t>(keep);
  c.append.reserve(blocks_.size() - keep);
  for (size_t i = keep; i < blocks_.size(); ++i) c.append.push_back(blocks_[i].value());
  c.num_released = num_released;
  num_unchanged_ = blocks_.size();
  return c;
}

const std::vector<BlockTableMirror::Table>& BlockTableMirror::apply(RequestId id,
                                                                    std::span<const BlockTableChange> changes) {
  std::vector<Table>& tables = tables_[id];
  tables.resize(changes.size());
  for (size_t g = 0; g < changes.size(); ++g) {
    const BlockTableChange& c = changes[g];
    Table& t = tables[g];
    // A keep beyond what the copy holds would mean a lost change: the
    // scheduler and runner disagree about the table.
    KVLM_ASSERT(static_cast<size_t>(c.keep) <= t.ids.size(), "block table change past the runner's copy");
    t.ids.resize(static_cast<size_t>(c.keep));
    t.ids.insert(t.ids.end(), c.append.begin(), c.append.end());
    t.num_released = c.num_released;
  }
  return tables;
}

}  // namespace kvlm
