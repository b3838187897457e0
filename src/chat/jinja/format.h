// Python string formatting: printf-style `fmt % args` (also Jinja's |format
// filter) and str.format(). Conversions and specs cover what templates use
// (%s %r %d %i %f %e %g %x %o %c, width, precision, flags; {} {0} {name}
// {x.attr} {x[0]} with !r/!s and fill/align/sign/width/precision/type specs).
#pragma once

#include <string>
#include <string_view>

#include "chat/jinja/value.h"

namespace kvlm::jinja {

// `args` is a tuple of positional values, a mapping for %(name)s, or a single value.
std::string percent_format(std::string_view fmt, const Value& args);
std::string str_format(std::string_view fmt, const CallArgs& args);

}  // namespace kvlm::jinja
