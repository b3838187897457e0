// Strong integer ids: a BlockId cannot be passed where a RequestId is wanted.
// "None" is std::optional<Id>, never a sentinel value.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>

namespace kvlm {

template <typename Tag, typename T = int32_t>
class StrongId {
 public:
  using value_type = T;
  constexpr StrongId() = default;
  constexpr explicit StrongId(T v) : value_(v) {}
  constexpr T value() const { return value_; }
  constexpr auto operator<=>(const StrongId&) const = default;

 private:
  T value_{};
};

struct BlockIdTag {};
struct RequestIdTag {};
using BlockId = StrongId<BlockIdTag, int32_t>;     // index into the BlockPool
using RequestId = StrongId<RequestIdTag, int64_t>; // unique per engine

}  // namespace kvlm

template <typename Tag, typename T>
struct std::hash<kvlm::StrongId<Tag, T>> {
  size_t operator()(const kvlm::StrongId<Tag, T>& id) const noexcept {
    return std::hash<T>{}(id.value());
  }
};
