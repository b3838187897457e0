#include "wire/kv_events/msgpack_writer.h"

#include <bit>
#include <limits>

#include "common/error.h"

namespace kvlm::msgpack {

void Writer::put(uint8_t type, uint64_t v, int num_bytes) {
  out_.push_back(static_cast<char>(type));
  for (int i = num_bytes - 1; i >= 0; --i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void Writer::header(size_t n, int fix_max, uint8_t fix_base, uint8_t type8, uint8_t type16, uint8_t type32) {
  if (fix_max >= 0 && n <= static_cast<size_t>(fix_max)) {
    out_.push_back(static_cast<char>(fix_base | n));
  } else if (type8 != 0 && n <= 0xff) {  // arrays and maps have no 8-bit form (type8 0)
    put(type8, n, 1);
  } else if (n <= 0xffff) {
    put(type16, n, 2);
  } else if (n <= 0xffffffffu) {
    put(type32, n, 4);
  } else {
    throw_error(ErrorCode::kOutOfRange, "msgpack: {} elements or bytes do not fit a 32-bit length", n);
  }
}

void Writer::nil() { out_.push_back(static_cast<char>(0xc0)); }

void Writer::boolean(bool v) { out_.push_back(static_cast<char>(v ? 0xc3 : 0xc2)); }

void Writer::uint(uint64_t v) {
  if (v <= 0x7f) {
    out_.push_back(static_cast<char>(v));  // positive fixint
  } else if (v <= 0xff) {
    put(0xcc, v, 1);
  } else if (v <= 0xffff) {
    put(0xcd, v, 2);
  } else if (v <= 0xffffffffu) {
    put(0xce, v, 4);
  } else {
    put(0xcf, v, 8);
  }
}

void Writer::sint(int64_t v) {
  if (v >= 0) return uint(static_cast<uint64_t>(v));
  const auto bits = static_cast<uint64_t>(v);  // two's complement; put() takes its low bytes
  if (v >= -32) {
    out_.push_back(static_cast<char>(bits & 0xff));  // negative fixint 0xe0..0xff
  } else if (v >= std::numeric_limits<int8_t>::min()) {
    put(0xd0, bits, 1);
  } else if (v >= std::numeric_limits<int16_t>::min()) {
    put(0xd1, bits, 2);
  } else if (v >= std::numeric_limits<int32_t>::min()) {
    put(0xd2, bits, 4);
  } else {
    put(0xd3, bits, 8);
  }
}

void Writer::float64(double v) { put(0xcb, std::bit_cast<uint64_t>(v), 8); }

void Writer::str(std::string_view utf8) {
  header(utf8.size(), 31, 0xa0, 0xd9, 0xda, 0xdb);
  out_.append(utf8);
}

void Writer::bin(std::string_view bytes) {
  header(bytes.size(), -1, 0, 0xc4, 0xc5, 0xc6);  // no fix form: 0..255 bytes take bin 8
  out_.append(bytes);
}

void Writer::array(size_t num_elements) { header(num_elements, 15, 0x90, 0, 0xdc, 0xdd); }

void Writer::map(size_t num_pairs) { header(num_pairs, 15, 0x80, 0, 0xde, 0xdf); }

}  // namespace kvlm::msgpack
