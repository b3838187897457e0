#include "hostile_util.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace kvlm::test {

RawResponse raw_request(int port, const std::string& bytes, int timeout_ms, bool half_close) {
  RawResponse r;
  const auto start = std::chrono::steady_clock::now();
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return r;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return r;
  }
  r.connected = true;
  for (size_t sent = 0; sent < bytes.size();) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server may answer and close before reading it all
    sent += static_cast<size_t>(n);
  }
  if (half_close) ::shutdown(fd, SHUT_WR);
  std::string in;
  char buf[65536];
  auto elapsed_ms = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
  };
  while (elapsed_ms() < timeout_ms) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout_ms - elapsed_ms())) <= 0) break;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      r.closed = true;
      break;
    }
    in.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const size_t end = in.find("\r\n\r\n");
  r.head = in.substr(0, end);
  if (end != std::string::npos) r.body = in.substr(end + 4);
  if (in.rfind("HTTP/1.1 ", 0) == 0 && in.size() >= 12) r.status = std::atoi(in.substr(9, 3).c_str());
  return r;
}

std::string http_post(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

std::string http_get(const std::string& path) {
  return "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
}

std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> out;
  for (size_t pos = 0; (pos = body.find("data: ", pos)) != std::string::npos;) {
    const size_t end = body.find("\n\n", pos);
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end;
  }
  return out;
}

namespace {

class Walker {
 public:
  explicit Walker(const std::string& b) : b_(b) {}
  uint64_t pos = 0;
  template <typename T>
  T read() {
    if (pos + sizeof(T) > b_.size()) throw std::runtime_error("gguf_layout: truncated file");
    T v;
    std::memcpy(&v, b_.data() + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  std::string string() {
    const uint64_t n = read<uint64_t>();
    if (pos + n > b_.size()) throw std::runtime_error("gguf_layout: truncated string");
    std::string s = b_.substr(pos, n);
    pos += n;
    return s;
  }
  void skip_value(uint32_t type) {
    static constexpr int kSizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};  // by GGUF value type
    if (type == 8) {
      string();
    } else if (type == 9) {
      const uint32_t elem = read<uint32_t>();
      const uint64_t n = read<uint64_t>();
      for (uint64_t i = 0; i < n; ++i) skip_value(elem);
    } else {
      pos += static_cast<uint64_t>(kSizes[type]);
    }
  }

 private:
  const std::string& b_;
};

}  // namespace

GgufLayout gguf_layout(const std::string& bytes) {
  Walker w(bytes);
  GgufLayout l;
  w.pos = 8;  // magic, version
  l.tensor_count_at = w.pos;
  const uint64_t num_tensors = w.read<uint64_t>();
  l.kv_count_at = w.pos;
  const uint64_t num_kv = w.read<uint64_t>();
  uint64_t alignment = 32;
  for (uint64_t i = 0; i < num_kv; ++i) {
    GgufLayout::Kv kv;
    kv.key_at = w.pos;
    kv.key = w.string();
    kv.type_at = w.pos;
    kv.type = w.read<uint32_t>();
    kv.value_at = w.pos;
    if (kv.key == "general.alignment" && kv.type == 4) {  // u32
      alignment = w.read<uint32_t>();
      w.pos -= 4;
    }
    w.skip_value(kv.type);
    l.kvs.push_back(kv);
  }
  for (uint64_t i = 0; i < num_tensors; ++i) {
    GgufLayout::Tensor t;
    t.name_at = w.pos;
    t.name = w.string();
    t.num_dims_at = w.pos;
    const uint32_t num_dims = w.read<uint32_t>();
    for (uint32_t d = 0; d < num_dims; ++d) {
      t.dim_at.push_back(w.pos);
      w.read<uint64_t>();
    }
    t.type_at = w.pos;
    w.read<uint32_t>();
    t.offset_at = w.pos;
    w.read<uint64_t>();
    l.tensors.push_back(t);
  }
  l.data_offset = (w.pos + alignment - 1) / alignment * alignment;
  return l;
}

const GgufLayout::Tensor& layout_tensor(const GgufLayout& l, const std::string& name) {
  for (const auto& t : l.tensors)
    if (t.name == name) return t;
  throw std::runtime_error("no tensor " + name);
}

const GgufLayout::Kv& layout_kv(const GgufLayout& l, const std::string& key) {
  for (const auto& kv : l.kvs)
    if (kv.key == key) return kv;
  throw std::runtime_error("no key " + key);
}

void put_u32(std::string& bytes, uint64_t at, uint32_t v) { std::memcpy(bytes.data() + at, &v, 4); }
void put_u64(std::string& bytes, uint64_t at, uint64_t v) { std::memcpy(bytes.data() + at, &v, 8); }
uint64_t get_u64(const std::string& bytes, uint64_t at) {
  uint64_t v;
  std::memcpy(&v, bytes.data() + at, 8);
  return v;
}

int hostile_count(int fallback) {
  const char* env = std::getenv("KVLM_HOSTILE_COUNT");
  return env && std::atoi(env) > 0 ? std::atoi(env) : fallback;
}

}  // namespace kvlm::test
