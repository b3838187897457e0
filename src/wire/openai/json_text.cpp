#include "wire/openai/json_text.h"

#include <bit>
#include <functional>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/error.h"

namespace kvlm::openai {
namespace {

// An object's members: ordered_map is a std::vector of them, appended to as
// one here, without ordered_map's emplace(), whose duplicate check is a
// walk over every member.
using Members = Json::object_t::Container;

// The positions of an object's members by key. An object of fewer than
// kHashFrom members is walked (no table for the many small objects of a
// request); a larger one gets an open-addressing table of positions + 1
// (0: empty), at most half full, that stores no key: a probe compares with
// the member's own. 16 to 32 bytes a member, beside its 48.
class MemberIndex {
 public:
  static constexpr size_t kHashFrom = 16;

  std::optional<size_t> find(const Members& members, std::string_view key) const {
    if (slots_.empty()) {
      for (size_t i = 0; i < members.size(); ++i)
        if (members[i].first == key) return i;
      return std::nullopt;
    }
    for (size_t s = slot_of(key);; s = (s + 1) & (slots_.size() - 1)) {
      if (slots_[s] == 0) return std::nullopt;
      if (members[slots_[s] - 1].first == key) return slots_[s] - 1;
    }
  }

  // After a member was appended to `members`.
  void added(const Members& members) {
    if (members.size() < kHashFrom) return;
    if (2 * members.size() > slots_.size()) {
      slots_.assign(std::bit_ceil(4 * members.size()), 0);
      for (size_t i = 0; i < members.size(); ++i) insert(members, i);
    } else {
      insert(members, members.size() - 1);
    }
  }

 private:
  size_t slot_of(std::string_view key) const { return std::hash<std::string_view>{}(key) & (slots_.size() - 1); }
  void insert(const Members& members, size_t i) {
    size_t s = slot_of(members[i].first);
    while (slots_[s] != 0) s = (s + 1) & (slots_.size() - 1);
    slots_[s] = i + 1;
  }

  std::vector<size_t> slots_;
};

// Builds a Json from nlohmann's SAX events, in time linear in the text.
// nlohmann's own parser adds each object member with ordered_map's
// operator[], which compares the key with every member already there: an
// object of n members took n^2/2 string comparisons (a logit_bias of
// 100,000 ids: 10.9 s). Duplicate keys behave as there: the member keeps
// its first position and takes the last value.
class JsonBuilder {
 public:
  using string_t = Json::string_t;

  bool null() { return put(Json(nullptr)); }
  bool boolean(bool v) { return put(Json(v)); }
  bool number_integer(Json::number_integer_t v) { return put(Json(v)); }
  bool number_unsigned(Json::number_unsigned_t v) { return put(Json(v)); }
  bool number_float(Json::number_float_t v, const string_t&) { return put(Json(v)); }
  bool string(string_t& v) { return put(Json(std::move(v))); }
  bool binary(Json::binary_t& v) { return put(Json(v)); }  // not from JSON text
  bool start_object(size_t) { return open(Json::object()); }
  bool start_array(size_t) { return open(Json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(string_t& k);
  [[noreturn]] bool parse_error(size_t, const std::string&, const nlohmann::detail::exception& e);

  Json take() { return std::move(root_); }

 private:
  struct OpenContainer {
    Json* value;
    MemberIndex index;  // an object's
  };

  Json* place(Json v);
  bool put(Json v) {
    place(std::move(v));
    return true;
  }
  bool open(Json container) {
    // Refused as each container opens, before its children exist, so a body
    // nested a million deep never becomes a value whose copy or destruction
    // recurses that deep. The top-level container is depth 0.
    if (open_.size() >= static_cast<size_t>(kMaxJsonDepth))
      throw_error(ErrorCode::kInvalidArgument, "JSON nested deeper than {} levels", kMaxJsonDepth);
    open_.push_back({place(std::move(container)), {}});
    return true;
  }
  bool close() {
    open_.pop_back();
    return true;
  }

  Json root_;
  std::vector<OpenContainer> open_;  // the containers being filled, outermost first
  Json* member_ = nullptr;           // in an object: the value of the last key
};

// Where `v` goes: the root, the end of the innermost array, or the value of
// the object member whose key came last. The pointer stays valid while `v`
// is open: only the innermost open container grows.
Json* JsonBuilder::place(Json v) {
  if (open_.empty()) {
    root_ = std::move(v);
    return &root_;
  }
  Json& into = *open_.back().value;
  if (into.is_array()) {
    auto& items = into.get_ref<Json::array_t&>();
    items.push_back(std::move(v));
    return &items.back();
  }
  *member_ = std::move(v);
  return member_;
}

bool JsonBuilder::key(string_t& k) {
  OpenContainer& obj = open_.back();
  Members& members = obj.value->get_ref<Json::object_t&>();
  std::optional<size_t> at = obj.index.find(members, k);
  if (!at) {
    at = members.size();
    members.emplace_back(std::move(k), nullptr);
    obj.index.added(members);
  }
  member_ = &members[*at].second;
  return true;
}

bool JsonBuilder::parse_error(size_t, const std::string&, const nlohmann::detail::exception& e) {
  // 406: a number such as 1e400 that does not fit a double.
  if (e.id == 406) throw_error(ErrorCode::kInvalidArgument, "not valid JSON (a number out of range): {}", e.what());
  throw_error(ErrorCode::kInvalidArgument, "not valid JSON: {}", e.what());
}

}  // namespace

Json parse_json(std::string_view text) {
  // nlohmann's lexer ends its input at a NUL byte, so "{...}\0{...}" would
  // read as its first object: JSON text holds no raw NUL anywhere.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos)
    throw_error(ErrorCode::kInvalidArgument, "not valid JSON: a NUL byte at offset {}", nul);
  JsonBuilder builder;
  Json::sax_parse(text.begin(), text.end(), &builder);
  return builder.take();
}

Json parse_json_or_discarded(std::string_view text) {
  try {
    return parse_json(text);
  } catch (const Error&) {
    return Json(Json::value_t::discarded);
  }
}

int64_t parsed_json_bytes(std::string_view text) {
  constexpr int64_t kSlotBytes = 48, kMemberBytes = 96, kContainerBytes = 64, kStringBytes = 48;
  int64_t num_commas = 0, num_members = 0, num_containers = 0, num_strings = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    switch (c) {
      case '"': in_string = true; ++num_strings; break;
      case ',': ++num_commas; break;
      case ':': ++num_members; break;
      case '[':
      case '{': ++num_containers; break;
      default: break;
    }
  }
  // Each container holds one value more than its commas separate.
  const int64_t num_values = 1 + num_commas + num_containers;
  return 2 * static_cast<int64_t>(text.size()) + num_values * kSlotBytes + num_members * kMemberBytes +
         num_containers * kContainerBytes + num_strings * kStringBytes;
}

std::string dump_json(const Json& j) {
  return j.dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kvlm::openai
