#include "constrain/constraint.h"

#include "common/error.h"
#include "constrain/regex.h"

namespace kvlm::constrain {

std::shared_ptr<const Program> json_schema_program(const Json& schema, SchemaMode mode) {
  Grammar g;
  g.set_root(json_schema_expr(g, schema, mode));
  return Program::compile(g);
}

std::shared_ptr<const Program> json_object_program() {
  Grammar g;
  g.set_root(any_json_object_expr(g));
  return Program::compile(g);
}

std::shared_ptr<const Program> regex_program(std::string_view pattern) {
  Grammar g;
  g.set_root(regex_expr(pattern));
  return Program::compile(g);
}

std::shared_ptr<const Program> choice_program(const std::vector<std::string>& choices) {
  if (choices.empty()) throw_error(ErrorCode::kInvalidArgument, "choice: the list of choices is empty");
  std::vector<Expr> options;
  for (const std::string& c : choices) options.push_back(literal(c));
  Grammar g;
  g.set_root(alt(std::move(options)));
  return Program::compile(g);
}

std::shared_ptr<const Program> grammar_program(const Grammar& grammar) { return Program::compile(grammar); }

}  // namespace kvlm::constrain
