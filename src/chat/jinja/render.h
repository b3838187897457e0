// The tree-walking renderer: executes a parsed template against a context.
// One Renderer serves one render call (it owns that render's scopes, loop
// state and macro closures); the parsed template it walks is shared and
// never modified, so concurrent renders of one template are safe.
//
// Scoping follows Jinja2: `set` writes to the innermost scope; a for loop
// body gets a fresh scope on every iteration (a `set` inside a loop is not
// seen after it, which is what namespace() is for); macros see the scope
// they were defined in plus their own arguments.
#pragma once

#include <ctime>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "chat/jinja/ast.h"
#include "chat/jinja/value.h"

namespace kvlm::jinja {

class Renderer {
 public:
  // `local_time` is what strftime_now() formats.
  explicit Renderer(std::function<std::tm()> local_time);
  // Empties every namespace() of the render: values can only form reference
  // cycles through namespaces (ns.self = [ns]), and this frees them.
  ~Renderer();
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;

  // Renders `body` with the variables of `context` (a mapping); call once. Throws
  // Error(kInvalidArgument): "template error at line L, column C: ..." for
  // runtime errors, or exactly the template's message for raise_exception().
  std::string render(const Body& body, const Value& context);

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Scope {
    std::unordered_map<std::string, Value, StringHash, std::equal_to<>> vars;
    Scope* parent = nullptr;
  };
  enum class Flow { kNormal, kBreak, kContinue };

  Scope* new_scope(Scope* parent);
  Value lookup(std::string_view name) const;
  void assign(const Target& target, const Value& value, SourcePos pos);

  // --- statements (render.cpp) ---
  Flow exec_body(const Body& body, std::string& out);
  Flow exec(const Stmt& stmt, std::string& out);
  Flow exec_for(const ForStmt& stmt, std::string& out);
  void exec_call_block(const CallBlockStmt& stmt, std::string& out);
  // A macro (or a call block's caller) as a callable closing over `scope`.
  Value make_macro(const std::string& name, const std::vector<Param>& params, const Body& body, Scope* scope);
  Value call_macro(const std::string& name, const std::vector<Param>& params, const Body& body, Scope* scope,
                   CallArgs& args);
  std::string apply_filters(const std::vector<std::unique_ptr<FilterExpr>>& filters, std::string text);

  // --- expressions (eval.cpp) ---
  Value eval(const Expr& e);
  Value eval_list(const ListExpr& e);
  Value eval_dict(const DictExpr& e);
  Value eval_cond(const CondExpr& e);
  Value eval_call(const CallExpr& e);
  Value eval_compare(const CompareExpr& e);
  CallArgs eval_args(const ArgList& args);
  Value eval_slice(const SliceExpr& e);
  bool eval_test(const TestExpr& e);

  std::function<std::tm()> local_time_;
  std::vector<Value> namespaces_;  // every namespace() this render created
  std::deque<Scope> scopes_;  // every scope of this render; deque keeps addresses stable for closures
  Scope* current_ = nullptr;
  SourcePos pos_;  // construct being evaluated, for runtime error messages
  int call_depth_ = 0;
};

}  // namespace kvlm::jinja
