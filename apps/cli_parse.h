// How every kvlm command parses its flags: KVLM_PARSE(app, argc, argv) in
// place of CLI11_PARSE.
//
// It is CLI11_PARSE (--help prints the help and returns 0 from the command; a
// bad flag prints the error and returns its exit code), and then, when the
// environment has KVLM_PARSE_ONLY=1, it returns 0 from the command before the
// command checks its values, opens a file or starts anything. The docs test
// (tests/docs/check_docs.py) runs every `build/kvlm` line of the README's and
// docs/'s code blocks this way, so a flag renamed or removed fails the suite
// instead of a reader.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace kvlm::apps {

// True when KVLM_PARSE_ONLY is "1" (read once).
bool parse_only();

// The items of a comma-separated flag value ("a,b,,c" -> a, b, c: empty items dropped).
std::vector<std::string> split_list(const std::string& list);

}  // namespace kvlm::apps

#define KVLM_PARSE(app, argc, argv)                 \
  do {                                              \
    CLI11_PARSE(app, argc, argv);                   \
    if (::kvlm::apps::parse_only()) return 0;       \
  } while (0)
