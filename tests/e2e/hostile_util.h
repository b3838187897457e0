// Tools of the hostile-input tests: a raw HTTP/1.1 client that sends exactly
// the bytes it is given (httplib and curl refuse or repair malformed ones),
// the layout of a GGUF header (where each count, type, dim and offset sits,
// so a test can change one field), and the run count of the generators.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvlm::test {

struct RawResponse {
  int status = 0;          // 0: no status line came back
  std::string head;        // status line and headers
  std::string body;        // as sent (chunked bodies are not decoded)
  bool closed = false;     // the server closed the connection before timeout_ms
  double seconds = 0;      // from connect to close (or timeout)
  bool connected = false;  // false: nothing listens on the port
};

// Sends `bytes` to 127.0.0.1:port, optionally half-closes (so a server waiting
// for more body sees end of file), then reads until the server closes or
// timeout_ms pass.
RawResponse raw_request(int port, const std::string& bytes, int timeout_ms = 10000, bool half_close = false);

// "POST path HTTP/1.1" with Host, Content-Type JSON, Content-Length and
// Connection: close.
std::string http_post(const std::string& path, const std::string& body);
std::string http_get(const std::string& path);

// The SSE data payloads of a chunked body ("[DONE]" included).
std::vector<std::string> sse_payloads(const std::string& chunked_body);

// Byte positions of the fields of a GGUF file's header.
struct GgufLayout {
  uint64_t tensor_count_at = 0, kv_count_at = 0;
  struct Kv {
    std::string key;
    uint64_t key_at, type_at, value_at;  // value_at: the first byte after the type
    uint32_t type;
  };
  struct Tensor {
    std::string name;
    uint64_t name_at, num_dims_at, type_at, offset_at;
    std::vector<uint64_t> dim_at;
  };
  std::vector<Kv> kvs;
  std::vector<Tensor> tensors;
  uint64_t data_offset = 0;
};
// Walks a well-formed file's header (the originals in ../shared).
GgufLayout gguf_layout(const std::string& bytes);
const GgufLayout::Tensor& layout_tensor(const GgufLayout& l, const std::string& name);
const GgufLayout::Kv& layout_kv(const GgufLayout& l, const std::string& key);

// Little-endian field writes into a file's bytes.
void put_u32(std::string& bytes, uint64_t at, uint32_t v);
void put_u64(std::string& bytes, uint64_t at, uint64_t v);
uint64_t get_u64(const std::string& bytes, uint64_t at);

// How many cases a generator test runs: KVLM_HOSTILE_COUNT if set, else `fallback`.
int hostile_count(int fallback);

}  // namespace kvlm::test
