// The soak test's client: one request of a random kind against a running
// server, checked for well-formedness, and the tallies of many of them.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <vector>

namespace kvlm::soak {

// What one request ended as. Expected outcomes under the soak's settings:
// ok, hangup, cancel, queue_full (503 of --max-queued-requests) and fault
// (the injected KVLM_FAULT). Anything else is a defect the test reports.
struct Outcome {
  std::string kind;    // "ok", "hangup", "cancel", "queue_full", "fault", "malformed", "http_<status>", "transport"
  std::string detail;  // for the unexpected kinds: what was wrong
  bool streamed = false;
};

struct Tally {
  void add(const Outcome& o);
  int64_t count(const std::string& kind) const;
  int64_t total() const;
  std::string summary() const;  // "ok 123, hangup 20, ..."
  std::vector<std::string> unexpected_samples() const;

  mutable std::mutex mu;
  std::map<std::string, int64_t> by_kind;
  int64_t num_streamed = 0;
  std::vector<std::string> samples;  // first few unexpected outcomes
};

// Prompts that share long prefixes (prefix-cache hits) or are random words
// (misses).
std::string random_prompt(std::mt19937& rng);

// One request of a random kind: a fifth hang up at a random byte (before the
// request is whole, before the answer, or midway through it), some streams
// are cancelled after their first event, the rest are read whole and checked.
Outcome run_one(int port, std::mt19937& rng);

// Whether a JSON completion body / SSE body is well formed; "" or what is wrong.
std::string check_body(const std::string& body, int num_choices);
std::string check_stream(const std::string& body, int num_choices);

}  // namespace kvlm::soak
