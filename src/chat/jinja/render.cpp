// Statement execution, scopes and macros; expressions are in eval.cpp.
#include "chat/jinja/render.h"

#include <memory>
#include <optional>

#include "common/assert.h"
#include "common/error.h"
#include "chat/jinja/builtins.h"
#include "chat/jinja/error.h"

namespace kvlm::jinja {

namespace {

constexpr int kMaxCallDepth = 200;  // macro recursion; deeper is a runaway template

// Sets `slot` to `value` until destruction, then puts the old value back
// (the current scope around a loop, a macro call or a with block).
template <typename T>
class Restore {
 public:
  Restore(T& slot, T value) : slot_(slot), saved_(slot) { slot_ = value; }
  ~Restore() { slot_ = saved_; }
  Restore(const Restore&) = delete;
  Restore& operator=(const Restore&) = delete;

 private:
  T& slot_;
  T saved_;
};

}  // namespace

Renderer::Renderer(std::function<std::tm()> local_time) : local_time_(std::move(local_time)) {}

Renderer::~Renderer() {
  for (Value& ns : namespaces_) ns.dict().clear();
}

Renderer::Scope* Renderer::new_scope(Scope* parent) {
  scopes_.emplace_back();
  scopes_.back().parent = parent;
  return &scopes_.back();
}

std::string Renderer::render(const Body& body, const Value& context) {
  KVLM_ASSERT(scopes_.empty(), "a Renderer renders once");
  Scope* globals = new_scope(nullptr);
  for (auto& [name, value] : make_globals(local_time_, &namespaces_)) globals->vars[name] = std::move(value);
  Scope* ctx = new_scope(globals);
  for (const auto& [key, value] : context.dict().items()) ctx->vars[to_str(key)] = value;
  current_ = new_scope(ctx);  // template-level `set`s shadow the context without changing it
  std::string out;
  try {
    exec_body(body, out);
  } catch (const RuntimeError& e) {
    throw_error(ErrorCode::kInvalidArgument, "template error at line {}, column {}: {}", pos_.line, pos_.column,
                e.what());
  }
  return out;
}

Value Renderer::lookup(std::string_view name) const {
  for (const Scope* s = current_; s != nullptr; s = s->parent) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return it->second;
  }
  return Value::undefined(fmt::format("'{}' is undefined", name));
}

void Renderer::assign(const Target& target, const Value& value, SourcePos pos) {
  pos_ = pos;
  if (target.is_tuple) {
    if (!value.is_string() && !value.is_list() && !value.is_mapping()) {
      throw_runtime("cannot unpack non-iterable {} object", value.type_name());
    }
    std::vector<Value> items = iterate(value);
    const size_t n = target.items.size();
    if (items.size() < n) throw_runtime("not enough values to unpack (expected {}, got {})", n, items.size());
    if (items.size() > n) throw_runtime("too many values to unpack (expected {})", n);
    for (size_t i = 0; i < n; ++i) assign(target.items[i], items[i], pos);
    return;
  }
  if (!target.attr.empty()) {
    Value ns = lookup(target.name);
    if (!ns.is_dict() || ns.dict().flavor() != DictFlavor::kNamespace) {
      throw_runtime("cannot assign attribute '{}' on '{}': not a namespace() object", target.attr, target.name);
    }
    ns.dict().set(target.attr, value);
    return;
  }
  current_->vars[target.name] = value;
}

Renderer::Flow Renderer::exec_body(const Body& body, std::string& out) {
  for (const auto& stmt : body) {
    Flow flow = exec(*stmt, out);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Renderer::Flow Renderer::exec(const Stmt& stmt, std::string& out) {
  pos_ = stmt.pos;
  switch (stmt.kind) {
    case StmtKind::kText: out += static_cast<const TextStmt&>(stmt).text; break;
    case StmtKind::kOutput: out += to_str(eval(*static_cast<const OutputStmt&>(stmt).expr)); break;
    case StmtKind::kIf: {
      const auto& s = static_cast<const IfStmt&>(stmt);
      for (const auto& [cond, body] : s.branches) {
        if (eval(*cond).truthy()) return exec_body(body, out);
      }
      return exec_body(s.else_body, out);
    }
    case StmtKind::kFor: return exec_for(static_cast<const ForStmt&>(stmt), out);
    case StmtKind::kSet: {
      const auto& s = static_cast<const SetStmt&>(stmt);
      assign(s.target, eval(*s.value), s.pos);
      break;
    }
    case StmtKind::kSetBlock: {
      const auto& s = static_cast<const SetBlockStmt&>(stmt);
      std::string text;
      Flow flow = exec_body(s.body, text);
      assign(s.target, Value(apply_filters(s.filters, std::move(text))), s.pos);
      return flow;
    }
    case StmtKind::kMacro: {
      const auto& s = static_cast<const MacroStmt&>(stmt);
      current_->vars[s.name] = make_macro(s.name, s.params, s.body, current_);
      break;
    }
    case StmtKind::kCallBlock: exec_call_block(static_cast<const CallBlockStmt&>(stmt), out); break;
    case StmtKind::kFilterBlock: {
      const auto& s = static_cast<const FilterBlockStmt&>(stmt);
      std::string text;
      Flow flow = exec_body(s.body, text);
      out += apply_filters(s.filters, std::move(text));
      return flow;
    }
    case StmtKind::kWith: {
      const auto& s = static_cast<const WithStmt&>(stmt);
      std::vector<Value> values;
      for (const auto& assignment : s.assignments) values.push_back(eval(*assignment.second));
      Restore<Scope*> guard(current_, new_scope(current_));
      for (size_t i = 0; i < values.size(); ++i) assign(s.assignments[i].first, values[i], s.pos);
      return exec_body(s.body, out);
    }
    case StmtKind::kBreak: return Flow::kBreak;
    case StmtKind::kContinue: return Flow::kContinue;
  }
  return Flow::kNormal;
}

Renderer::Flow Renderer::exec_for(const ForStmt& stmt, std::string& out) {
  std::vector<Value> items = iterate(eval(*stmt.iterable));
  Scope* scope = new_scope(current_);
  {
    Restore<Scope*> guard(current_, scope);
    if (stmt.filter) {  // `for x in xs if cond`: loop.length and loop.last count only kept items
      std::vector<Value> kept;
      for (auto& item : items) {
        scope->vars.clear();
        assign(stmt.target, item, stmt.pos);
        if (eval(*stmt.filter).truthy()) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    const size_t n = items.size();
    // loop.cycle() and loop.changed() read state that outlives one iteration.
    auto index = std::make_shared<size_t>(0);
    auto last_changed = std::make_shared<std::optional<Value>>();
    Value cycle = Value::make_callable("cycle", [index](CallArgs& args) {
      if (args.args.empty()) throw_runtime("no items for cycling given");
      return args.args[*index % args.args.size()];
    });
    Value changed = Value::make_callable("changed", [last_changed](CallArgs& args) {
      Value current = Value::make_list(args.args);
      if (*last_changed && values_equal(**last_changed, current)) return Value(false);
      *last_changed = current;
      return Value(true);
    });
    // Jinja2 runs the else block unless some iteration reached the end of the
    // body: a loop whose every pass ends in break/continue runs it too.
    bool completed_pass = false;
    for (size_t i = 0; i < n; ++i) {
      *index = i;
      scope->vars.clear();  // each iteration starts from the enclosing scope, as in Jinja2
      assign(stmt.target, items[i], stmt.pos);
      Value loop = Value::make_dict(DictFlavor::kLoop);
      DictObj& d = loop.dict();
      auto count = [](size_t v) { return Value(static_cast<int64_t>(v)); };
      d.set("index", count(i + 1));
      d.set("index0", count(i));
      d.set("revindex", count(n - i));
      d.set("revindex0", count(n - i - 1));
      d.set("first", Value(i == 0));
      d.set("last", Value(i + 1 == n));
      d.set("length", count(n));
      d.set("depth", count(1));
      d.set("depth0", count(0));
      if (i > 0) d.set("previtem", items[i - 1]);
      if (i + 1 < n) d.set("nextitem", items[i + 1]);
      d.set("cycle", cycle);
      d.set("changed", changed);
      scope->vars["loop"] = loop;
      Flow flow = exec_body(stmt.body, out);
      if (flow == Flow::kNormal) completed_pass = true;
      if (flow == Flow::kBreak) break;
    }
    last_changed->reset();  // it may hold this loop's own `loop`, which holds it: a cycle
    if (completed_pass) return Flow::kNormal;
  }
  return exec_body(stmt.else_body, out);
}

void Renderer::exec_call_block(const CallBlockStmt& stmt, std::string& out) {
  Value caller = make_macro("caller", stmt.caller_params, stmt.body, current_);
  Value callee = eval(*stmt.call->callee);
  CallArgs args = eval_args(stmt.call->args);
  args.kwargs.emplace_back("caller", caller);
  pos_ = stmt.pos;
  if (callee.is_undefined()) callee.fail_undefined();
  if (!callee.is_callable()) throw_runtime("'{}' object is not callable", callee.type_name());
  out += to_str(callee.callable().fn(args));
}

Value Renderer::make_macro(const std::string& name, const std::vector<Param>& params, const Body& body,
                           Scope* scope) {
  // The closure points into this render's AST and scopes, both alive until
  // render() returns; values never outlive the render.
  return Value::make_callable(
      name, [this, &name, &params, &body, scope](CallArgs& args) { return call_macro(name, params, body, scope, args); },
      "<Macro '" + name + "'>");
}

Value Renderer::call_macro(const std::string& name, const std::vector<Param>& params, const Body& body, Scope* scope,
                           CallArgs& args) {
  if (call_depth_ >= kMaxCallDepth) throw_runtime("macro '{}': maximum recursion depth ({}) exceeded", name, kMaxCallDepth);
  Scope* s = new_scope(scope);
  std::vector<bool> bound(params.size(), false);
  std::vector<Value> varargs;
  for (size_t i = 0; i < args.args.size(); ++i) {
    if (i < params.size()) {
      s->vars[params[i].name] = args.args[i];
      bound[i] = true;
    } else {
      varargs.push_back(args.args[i]);
    }
  }
  Value kwargs = Value::make_dict();
  for (auto& [key, value] : args.kwargs) {
    size_t i = 0;
    while (i < params.size() && params[i].name != key) ++i;
    if (i < params.size()) {
      if (bound[i]) throw_runtime("macro '{}' got multiple values for argument '{}'", name, key);
      s->vars[key] = value;
      bound[i] = true;
    } else if (key == "caller") {
      s->vars["caller"] = value;
    } else {
      kwargs.dict().set(key, value);
    }
  }
  s->vars["varargs"] = Value::make_tuple(std::move(varargs));
  s->vars["kwargs"] = kwargs;
  SourcePos saved_pos = pos_;
  ++call_depth_;
  std::string out;
  {
    Restore<Scope*> guard(current_, s);
    for (size_t i = 0; i < params.size(); ++i) {  // defaults may read earlier parameters
      if (bound[i]) continue;
      s->vars[params[i].name] = params[i].default_value
                                    ? eval(*params[i].default_value)
                                    : Value::undefined(fmt::format("parameter '{}' was not provided", params[i].name));
    }
    exec_body(body, out);
  }
  --call_depth_;
  pos_ = saved_pos;
  return Value(std::move(out));
}

std::string Renderer::apply_filters(const std::vector<std::unique_ptr<FilterExpr>>& filters, std::string text) {
  Value v(std::move(text));
  for (const auto& f : filters) {
    CallArgs args = eval_args(f->args);
    pos_ = f->pos;
    v = call_filter(f->name, v, args);
  }
  return to_str(v);
}

}  // namespace kvlm::jinja
