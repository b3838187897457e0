// Global functions: range, namespace, dict, joiner, and the two Hugging Face
// adds for chat templates, raise_exception and strftime_now.
#include <memory>

#include "common/error.h"
#include "chat/jinja/builtins.h"
#include "chat/jinja/error.h"

namespace kvlm::jinja {

namespace {

constexpr int64_t kMaxRange = 100000;  // Jinja2's sandbox refuses longer ranges

Value g_range(CallArgs& args) {
  if (!args.kwargs.empty()) throw_runtime("range() takes no keyword arguments");
  if (args.args.empty() || args.args.size() > 3) throw_runtime("range expected 1 to 3 arguments, got {}", args.args.size());
  std::vector<int64_t> n;
  for (const auto& a : args.args) {
    if (!a.is_int() && !a.is_bool()) throw_runtime("'{}' object cannot be interpreted as an integer", a.type_name());
    n.push_back(a.as_int());
  }
  int64_t start = n.size() == 1 ? 0 : n[0];
  int64_t stop = n.size() == 1 ? n[0] : n[1];
  int64_t step = n.size() == 3 ? n[2] : 1;
  if (step == 0) throw_runtime("range() arg 3 must not be zero");
  std::vector<Value> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(out.size()) >= kMaxRange) {
      throw_runtime("Range too big. The sandbox blocks ranges larger than MAX_RANGE ({}).", kMaxRange);
    }
    out.emplace_back(i);
    if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
  }
  return Value::make_list(std::move(out));
}

// namespace(mapping?, **kwargs) and dict(mapping?, **kwargs) build the same way.
Value build_dict(DictFlavor flavor, CallArgs& args, const char* fn) {
  if (args.args.size() > 1) throw_runtime("{}() expected at most 1 positional argument, got {}", fn, args.args.size());
  Value out = Value::make_dict(flavor);
  if (!args.args.empty()) {
    const Value& init = args.args[0];
    if (init.is_undefined()) init.fail_undefined();  // Python asks the argument for keys(), which fails
    if (init.is_mapping()) {
      for (const auto& [k, v] : init.dict().items()) out.dict().set(k, v);
    } else {
      for (const auto& pair : iterate(init)) {  // a list of (key, value) pairs
        std::vector<Value> kv = iterate(pair);
        if (kv.size() != 2) throw_runtime("{}(): sequence elements must have length 2", fn);
        out.dict().set(kv[0], kv[1]);
      }
    }
  }
  for (auto& [k, v] : args.kwargs) out.dict().set(k, v);
  return out;
}

Value g_raise_exception(CallArgs& args) {
  ArgBinder a("raise_exception", args, {"message"});
  // The template's own message, verbatim: callers show it to the user.
  throw Error(ErrorCode::kInvalidArgument, to_str(a.get(0)));
}

Value g_joiner(CallArgs& args) {
  ArgBinder a("joiner", args, {"sep"});
  std::string sep = a.get_string(0, ", ");
  auto used = std::make_shared<bool>(false);
  return Value::make_callable("joiner", [sep, used](CallArgs&) {
    if (!*used) {
      *used = true;
      return Value("");
    }
    return Value(sep);
  });
}

}  // namespace

std::vector<std::pair<std::string, Value>> make_globals(std::function<std::tm()> local_time,
                                                        std::vector<Value>* namespaces) {
  std::vector<std::pair<std::string, Value>> g;
  g.emplace_back("range", Value::make_callable("range", g_range, "<class 'range'>"));
  g.emplace_back("namespace", Value::make_callable("namespace", [namespaces](CallArgs& args) {
                   Value ns = build_dict(DictFlavor::kNamespace, args, "namespace");
                   namespaces->push_back(ns);
                   return ns;
                 }, "<class 'jinja2.utils.Namespace'>"));
  g.emplace_back("dict", Value::make_callable("dict", [](CallArgs& args) {
                   return build_dict(DictFlavor::kDict, args, "dict");
                 }, "<class 'dict'>"));
  g.emplace_back("joiner", Value::make_callable("joiner", g_joiner, "<class 'jinja2.utils.Joiner'>"));
  g.emplace_back("raise_exception", Value::make_callable("raise_exception", g_raise_exception));
  g.emplace_back("strftime_now", Value::make_callable("strftime_now", [local_time](CallArgs& args) {
                   ArgBinder a("strftime_now", args, {"format"});
                   std::string format = a.get_string(0, "");
                   std::tm tm = local_time();
                   if (format.empty()) return Value("");
                   std::string buf(256, '\0');
                   while (true) {
                     size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &tm);
                     if (n > 0) return Value(buf.substr(0, n));
                     // 0 means "did not fit" (or an empty result); retry larger, within reason.
                     if (buf.size() > 65536) return Value("");
                     buf.resize(buf.size() * 4);
                   }
                 }));
  return g;
}

}  // namespace kvlm::jinja
