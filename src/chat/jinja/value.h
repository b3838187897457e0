// The interpreter's value: what a Jinja expression evaluates to. It follows
// Python's data model closely enough that chat templates behave as under
// Jinja2: lists, dicts and namespaces are shared by reference (a template
// that writes `ns.x` through one name sees it through every other), strings
// are UTF-8 text measured in code points, ints are 64-bit.
//
// Undefined (a missing variable or attribute) is a value of its own, as in
// Jinja2's default Undefined: it prints as "", is falsy, iterates as empty,
// and any other use (arithmetic, attribute access, calling it) fails with the
// hint it carries, e.g. "'foo' is undefined".
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace kvlm::jinja {

class Value;

// The arguments of one call: positional first, then keyword ones in source order.
struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

struct Callable {
  std::string name;
  std::string repr;  // what printing it shows, e.g. "<Macro 'm'>"
  std::function<Value(CallArgs&)> fn;
};

struct ListObj {
  std::vector<Value> items;
  bool is_tuple = false;  // prints as (a, b) and is not equal to a list
};

// What a dict-shaped object is. Plain dicts support the mapping protocol;
// a namespace() and the `loop` variable only have attributes.
enum class DictFlavor { kDict, kNamespace, kLoop };

// An insertion-ordered dict with Python key equality (1 == 1.0 == True).
class DictObj {
 public:
  // The constructor and size() are out of line: Value is incomplete here, and
  // clang instantiates the pair<Value, Value> they touch at once (GCC waits).
  explicit DictObj(DictFlavor flavor = DictFlavor::kDict);

  const Value* find(const Value& key) const;
  const Value* find_str(std::string_view key) const;  // find(Value(key)) without building a Value
  void set(const Value& key, Value value);
  void clear();
  size_t size() const;
  const std::vector<std::pair<Value, Value>>& items() const { return items_; }
  DictFlavor flavor() const { return flavor_; }

 private:
  std::vector<std::pair<Value, Value>> items_;
  std::unordered_map<std::string, size_t> index_;  // hash_key(key) -> position in items_
  DictFlavor flavor_;
};

class Value {
 public:
  enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };

  Value() = default;  // undefined, no hint
  Value(bool b) : kind_(Kind::kBool), data_(b) {}
  Value(int i) : kind_(Kind::kInt), data_(int64_t{i}) {}
  Value(int64_t i) : kind_(Kind::kInt), data_(i) {}
  Value(double f) : kind_(Kind::kFloat), data_(f) {}
  Value(std::string s) : kind_(Kind::kString), data_(std::move(s)) {}
  Value(std::string_view s) : kind_(Kind::kString), data_(std::string(s)) {}
  Value(const char* s) : kind_(Kind::kString), data_(std::string(s)) {}

  // `hint` is the message of the error any later misuse raises.
  static Value undefined(std::string hint);
  static Value none();
  static Value make_list(std::vector<Value> items = {});
  static Value make_tuple(std::vector<Value> items);
  static Value make_dict(DictFlavor flavor = DictFlavor::kDict);
  static Value make_callable(std::string name, std::function<Value(CallArgs&)> fn, std::string repr = {});

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return is_bool() || is_int() || is_float(); }  // bool is an int in Python
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }  // lists and tuples
  bool is_tuple() const { return is_list() && list().is_tuple; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_mapping() const { return is_dict() && dict().flavor() == DictFlavor::kDict; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  // Accessors; calling the wrong one is a programmer error (asserted).
  bool as_bool() const;
  int64_t as_int() const;  // ints and bools
  double as_double() const;  // any number
  const std::string& as_string() const;
  const std::string& undefined_hint() const;
  ListObj& list() const;
  DictObj& dict() const;
  const Callable& callable() const;

  // Python truthiness.
  bool truthy() const;
  // Python's type name, used in error messages ("str", "list", "NoneType").
  std::string type_name() const;
  // Throws RuntimeError with this undefined's hint (precondition: is_undefined()).
  [[noreturn]] void fail_undefined() const;

 private:
  Kind kind_ = Kind::kUndefined;
  // Undefined keeps its hint in the std::string alternative; None has monostate.
  std::variant<std::monostate, bool, int64_t, double, std::string, std::shared_ptr<ListObj>,
               std::shared_ptr<DictObj>, std::shared_ptr<Callable>>
      data_;
};

// --- Python semantics over values (value.cpp) ---

bool values_equal(const Value& a, const Value& b);
// Three-way ordering for <, <=, >, >=; throws RuntimeError for unorderable
// pairs, naming `op` as Python does ("'<' not supported between ...").
int compare_values(const Value& a, const Value& b, std::string_view op);
// The elements a for-loop visits: list items, dict keys, string characters,
// nothing for undefined. Throws for non-iterables.
std::vector<Value> iterate(const Value& v);
// len(); throws for values without a length. Undefined has length 0.
size_t length_of(const Value& v);
// Python's `in` operator: needle in haystack.
bool contains(const Value& haystack, const Value& needle);

// --- printing (value_format.cpp) ---

std::string to_str(const Value& v);   // Python str(): what {{ v }} prints
std::string to_repr(const Value& v);  // Python repr(): how v prints inside a list or dict
std::string float_repr(double d);     // Python repr of a float: 1.0, 0.1, 1e-05, inf
std::string string_repr(std::string_view s);  // 'it''s' -> "it's"

}  // namespace kvlm::jinja
