// A MessagePack writer (the format's spec: github.com/msgpack/msgpack/blob/master/spec.md),
// for the KV events kvlm publishes in vLLM's format (vllm_kv_events.h).
// Each value takes the smallest encoding the spec allows, as msgspec and
// the reference implementations write it, so a reader in any language sees
// the types it expects: a non-negative integer is always unsigned (uint64
// above 2^63 too), a negative one the smallest signed form.
//
// Arrays and maps are written as a header with their element count; the
// caller then writes exactly that many values (maps: key, value, ...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvlm::msgpack {

class Writer {
 public:
  void nil();
  void boolean(bool v);
  void uint(uint64_t v);
  void sint(int64_t v);  // v >= 0 is written as uint(v)
  void float64(double v);
  void str(std::string_view utf8);
  void bin(std::string_view bytes);
  void array(size_t num_elements);
  void map(size_t num_pairs);

  const std::string& bytes() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  // A type byte and `num_bytes` big-endian bytes of v.
  void put(uint8_t type, uint64_t v, int num_bytes);
  // The header of a str, bin, array or map: fix_base | n when n <= fix_max
  // (-1: the type has no fix form), else the 8-bit (type8 0: none), 16-bit
  // or 32-bit count after its type byte.
  void header(size_t n, int fix_max, uint8_t fix_base, uint8_t type8, uint8_t type16, uint8_t type32);

  std::string out_;
};

}  // namespace kvlm::msgpack
