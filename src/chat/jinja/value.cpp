#include "chat/jinja/value.h"

#include <cmath>

#include <fmt/format.h>

#include "common/assert.h"
#include "chat/jinja/error.h"
#include "chat/jinja/utf8.h"

namespace kvlm::jinja {

namespace {

std::string tagged(char tag, std::string_view body) {
  std::string out(1, tag);
  out.append(body);
  return out;
}

// A string equal for keys Python considers equal: 1, 1.0 and True are one key.
std::string hash_key(const Value& key) {
  switch (key.kind()) {
    case Value::Kind::kString: return tagged('s', key.as_string());
    case Value::Kind::kBool:
    case Value::Kind::kInt: return tagged('i', std::to_string(key.as_int()));
    case Value::Kind::kFloat: {
      double d = key.as_double();
      if (std::fabs(d) < 9.2e18 && d == std::trunc(d)) return tagged('i', std::to_string(static_cast<int64_t>(d)));
      return tagged('f', float_repr(d));
    }
    case Value::Kind::kNone: return "n";
    case Value::Kind::kUndefined: return "u";
    case Value::Kind::kList:
      if (key.is_tuple()) {
        std::string out = "t(";
        for (const auto& item : key.list().items) out += hash_key(item) + ",";
        return out + ")";
      }
      break;
    default: break;
  }
  throw_runtime("unhashable type: '{}'", key.type_name());
}

}  // namespace

// --- DictObj ---

DictObj::DictObj(DictFlavor flavor) : flavor_(flavor) {}

size_t DictObj::size() const { return items_.size(); }

const Value* DictObj::find(const Value& key) const {
  auto it = index_.find(hash_key(key));
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

const Value* DictObj::find_str(std::string_view key) const {
  auto it = index_.find(tagged('s', key));
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

void DictObj::set(const Value& key, Value value) {
  auto [it, inserted] = index_.emplace(hash_key(key), items_.size());
  if (inserted) {
    items_.emplace_back(key, std::move(value));
  } else {
    items_[it->second].second = std::move(value);
  }
}


void DictObj::clear() {
  items_.clear();
  index_.clear();
}

// --- Value ---

Value Value::undefined(std::string hint) {
  Value v;
  v.data_ = std::move(hint);
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::make_list(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::kList;
  v.data_ = std::make_shared<ListObj>(ListObj{std::move(items), false});
  return v;
}

Value Value::make_tuple(std::vector<Value> items) {
  Value v = make_list(std::move(items));
  v.list().is_tuple = true;
  return v;
}

Value Value::make_dict(DictFlavor flavor) {
  Value v;
  v.kind_ = Kind::kDict;
  v.data_ = std::make_shared<DictObj>(flavor);
  return v;
}

Value Value::make_callable(std::string name, std::function<Value(CallArgs&)> fn, std::string repr) {
  Value v;
  v.kind_ = Kind::kCallable;
  if (repr.empty()) repr = "<built-in function " + name + ">";
  v.data_ = std::make_shared<Callable>(Callable{std::move(name), std::move(repr), std::move(fn)});
  return v;
}

bool Value::as_bool() const {
  KVLM_ASSERT(is_bool(), "wrong Value accessor for this kind");
  return std::get<bool>(data_);
}

int64_t Value::as_int() const {
  KVLM_ASSERT(is_int() || is_bool(), "wrong Value accessor for this kind");
  return is_bool() ? int64_t{std::get<bool>(data_)} : std::get<int64_t>(data_);
}

double Value::as_double() const {
  KVLM_ASSERT(is_number(), "wrong Value accessor for this kind");
  return is_float() ? std::get<double>(data_) : static_cast<double>(as_int());
}

const std::string& Value::as_string() const {
  KVLM_ASSERT(is_string(), "wrong Value accessor for this kind");
  return std::get<std::string>(data_);
}

const std::string& Value::undefined_hint() const {
  KVLM_ASSERT(is_undefined(), "wrong Value accessor for this kind");
  return std::get<std::string>(data_);
}

ListObj& Value::list() const {
  KVLM_ASSERT(is_list(), "wrong Value accessor for this kind");
  return *std::get<std::shared_ptr<ListObj>>(data_);
}

DictObj& Value::dict() const {
  KVLM_ASSERT(is_dict(), "wrong Value accessor for this kind");
  return *std::get<std::shared_ptr<DictObj>>(data_);
}

const Callable& Value::callable() const {
  KVLM_ASSERT(is_callable(), "wrong Value accessor for this kind");
  return *std::get<std::shared_ptr<Callable>>(data_);
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return as_bool();
    case Kind::kInt: return as_int() != 0;
    case Kind::kFloat: return as_double() != 0.0;
    case Kind::kString: return !as_string().empty();
    case Kind::kList: return !list().items.empty();
    case Kind::kDict: return dict().flavor() != DictFlavor::kDict || dict().size() != 0;
    case Kind::kCallable: return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return is_tuple() ? "tuple" : "list";
    case Kind::kDict:
      switch (dict().flavor()) {
        case DictFlavor::kDict: return "dict";
        case DictFlavor::kNamespace: return "Namespace";
        case DictFlavor::kLoop: return "LoopContext";
      }
      break;
    case Kind::kCallable: return "function";
  }
  return "object";
}

void Value::fail_undefined() const {
  KVLM_ASSERT(is_undefined(), "fail_undefined on a defined value");
  const std::string& hint = undefined_hint();
  throw RuntimeError(hint.empty() ? std::string("value is undefined") : hint);
}

// --- Python semantics ---

bool values_equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone: return true;
    case K::kString: return a.as_string() == b.as_string();
    case K::kList: {
      const auto& x = a.list();
      const auto& y = b.list();
      if (&x == &y) return true;
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!values_equal(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    case K::kDict: {
      const auto& x = a.dict();
      const auto& y = b.dict();
      if (&x == &y) return true;
      // Namespaces and loop objects compare by identity, as Python objects do.
      if (x.flavor() != DictFlavor::kDict || y.flavor() != DictFlavor::kDict) return false;
      if (x.size() != y.size()) return false;
      for (const auto& [key, value] : x.items()) {
        const Value* other = y.find(key);
        if (other == nullptr || !values_equal(value, *other)) return false;
      }
      return true;
    }
    case K::kCallable: return &a.callable() == &b.callable();
    default: return false;
  }
}

int compare_values(const Value& a, const Value& b, std::string_view op) {
  if (a.is_undefined()) a.fail_undefined();
  if (b.is_undefined()) b.fail_undefined();
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    // UTF-8 byte order is code point order, which is how Python orders str.
    int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (values_equal(x[i], y[i])) continue;
      return compare_values(x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  throw_runtime("'{}' not supported between instances of '{}' and '{}'", op, a.type_name(),
                b.type_name());
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return v.list().items;
    case Value::Kind::kString: {
      std::vector<Value> out;
      for (char32_t c : decode_utf8(v.as_string())) {
        std::string s;
        append_utf8(s, c);
        out.emplace_back(std::move(s));
      }
      return out;
    }
    case Value::Kind::kDict:
      if (v.is_mapping()) {
        std::vector<Value> keys;
        keys.reserve(v.dict().size());
        for (const auto& item : v.dict().items()) keys.push_back(item.first);
        return keys;
      }
      break;
    default: break;
  }
  throw_runtime("'{}' object is not iterable", v.type_name());
}

size_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return utf8_length(v.as_string());
    case Value::Kind::kList: return v.list().items.size();
    case Value::Kind::kDict:
      if (v.is_mapping()) return v.dict().size();
      break;
    default: break;
  }
  throw_runtime("object of type '{}' has no len()", v.type_name());
}

bool contains(const Value& haystack, const Value& needle) {
  switch (haystack.kind()) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kString:
      if (!needle.is_string()) {
        throw_runtime("'in <string>' requires string as left operand, not {}", needle.type_name());
      }
      return haystack.as_string().find(needle.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const auto& item : haystack.list().items) {
        if (values_equal(item, needle)) return true;
      }
      return false;
    case Value::Kind::kDict:
      if (haystack.is_mapping()) return haystack.dict().find(needle) != nullptr;
      break;
    default: break;
  }
  throw_runtime("argument of type '{}' is not iterable", haystack.type_name());
}

}  // namespace kvlm::jinja
