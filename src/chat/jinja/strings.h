// Python str operations on UTF-8 text, shared by str methods (s.strip())
// and filters (s|trim). Positions and lengths are in code points.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvlm::jinja {

// str.strip / lstrip / rstrip: `chars` nullopt strips whitespace.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_title(std::string_view s);       // str.title(): "hello world" -> "Hello World"
std::string py_capitalize(std::string_view s);  // str.capitalize(): "hELLO" -> "Hello"
std::string py_swapcase(std::string_view s);
// str.replace; count < 0 replaces all. An empty `old` inserts between characters.
std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);
// str.split / rsplit; `sep` nullopt splits on whitespace runs. maxsplit < 0: no limit.
// Throws RuntimeError for an empty separator.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> py_rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> py_splitlines(std::string_view s, bool keepends);
// str.find in code points; -1 when absent. rfind searches from the right.
int64_t py_find(std::string_view s, std::string_view sub, bool from_right);
// str.center / ljust / rjust.
std::string py_justify(std::string_view s, int64_t width, std::string_view fill, char align);
// markupsafe.escape: & < > " ' as HTML entities.
std::string html_escape(std::string_view s);

}  // namespace kvlm::jinja
