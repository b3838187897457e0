#include "chat/jinja/error.h"

#include "common/error.h"

namespace kvlm::jinja {

void throw_syntax(SourcePos pos, std::string_view message) {
  throw_error(ErrorCode::kInvalidArgument, "template syntax error at line {}, column {}: {}",
              pos.line, pos.column, message);
}

}  // namespace kvlm::jinja
