#include "hostile_gguf.h"

#include <cstring>
#include <limits>
#include <vector>

#include "backend/dtype.h"
#include "common/error.h"
#include "hostile_util.h"
#include "model/model.h"
#include "runner/sequence_evaluator.h"
#include "tokenizer/tokenizer.h"

namespace kvlm::test {
namespace {

using Rng = std::mt19937_64;

uint64_t below(Rng& rng, uint64_t n) { return n == 0 ? 0 : rng() % n; }

// Counts and sizes a hostile writer would choose: edges, powers of two, huge.
uint64_t absurd(Rng& rng, uint64_t real) {
  const uint64_t choices[] = {0, 1, real + 1, real - 1, real * 2, real * 1000, 1ull << 31, 1ull << 32, (1ull << 32) + 1,
                              1ull << 40, UINT64_MAX / 8, UINT64_MAX, rng()};
  return choices[below(rng, std::size(choices))];
}

void flip_bits(std::string& b, Rng& rng, uint64_t end) {
  for (uint64_t i = 0, n = 1 + below(rng, 8); i < n; ++i) b[below(rng, end)] ^= static_cast<char>(1u << below(rng, 8));
}

void change_count(std::string& b, const GgufLayout& l, Rng& rng) {
  std::vector<uint64_t> at = {l.tensor_count_at, l.kv_count_at};
  for (const auto& kv : l.kvs) {
    at.push_back(kv.key_at);                                  // key length
    if (kv.type == 8) at.push_back(kv.value_at);              // string length
    if (kv.type == 9) at.push_back(kv.value_at + 4);          // array count
  }
  for (const auto& t : l.tensors) at.push_back(t.name_at);   // name length
  const uint64_t where = at[below(rng, at.size())];
  put_u64(b, where, absurd(rng, get_u64(b, where)));
}

void change_type(std::string& b, const GgufLayout& l, Rng& rng) {
  if (below(rng, 3) == 0 && !l.kvs.empty()) {
    const auto& kv = l.kvs[below(rng, l.kvs.size())];
    put_u32(b, kv.type_at, static_cast<uint32_t>(below(rng, 3) == 0 ? rng() : below(rng, 13)));
    return;
  }
  // Tensor types: every dtype kvlm reads, relabelled onto another's bytes.
  static const uint32_t kTypes[] = {0, 1, 30, 8, 2, 12, 14, 15, 3, 10, 39, 64, 65, 0xFFFFFFFF};
  const auto& t = l.tensors[below(rng, l.tensors.size())];
  put_u32(b, t.type_at, kTypes[below(rng, std::size(kTypes))]);
}

void change_shape(std::string& b, const GgufLayout& l, Rng& rng) {
  const auto& t = l.tensors[below(rng, l.tensors.size())];
  if (below(rng, 4) == 0) {
    put_u32(b, t.num_dims_at, static_cast<uint32_t>(below(rng, 3) == 0 ? rng() : below(rng, 6)));
    return;
  }
  const uint64_t at = t.dim_at[below(rng, t.dim_at.size())];
  const uint64_t real = get_u64(b, at);
  const uint64_t small[] = {real / 2, real + 32, real + 256, real * 256, 32, 256};
  put_u64(b, at, below(rng, 2) == 0 ? small[below(rng, std::size(small))] : absurd(rng, real));
}

void change_offset(std::string& b, const GgufLayout& l, Rng& rng) {
  const auto& t = l.tensors[below(rng, l.tensors.size())];
  const uint64_t real = get_u64(b, t.offset_at);
  const auto& other = l.tensors[below(rng, l.tensors.size())];
  const uint64_t choices[] = {real + 32, real - 32, real + 1, get_u64(b, other.offset_at), b.size() - l.data_offset,
                              absurd(rng, real)};
  put_u64(b, t.offset_at, choices[below(rng, std::size(choices))]);
}

// NaN, Inf or huge values over part of one tensor's data.
void poison_data(std::string& b, const GgufLayout& l, Rng& rng) {
  const auto& t = l.tensors[below(rng, l.tensors.size())];
  const uint64_t at = l.data_offset + get_u64(b, t.offset_at);
  const uint64_t end = std::min<uint64_t>(b.size(), at + 4096);
  const uint8_t fills[] = {0xFF, 0x7F, 0x7C, 0x00};  // NaN / huge / F16 Inf patterns, zeros
  const uint8_t fill = fills[below(rng, std::size(fills))];
  for (uint64_t i = at; i < end; ++i) b[i] = static_cast<char>(fill);
}

}  // namespace

std::string mutate_gguf(const std::string& original, Rng& rng, std::string& kind) {
  std::string b = original;
  const GgufLayout l = gguf_layout(original);
  switch (below(rng, 8)) {
    case 0: kind = "bitflip-header"; flip_bits(b, rng, l.data_offset); break;
    case 1: kind = "bitflip-any"; flip_bits(b, rng, b.size()); break;
    case 2: kind = "truncate"; b.resize(below(rng, 2) ? below(rng, l.data_offset) : below(rng, b.size())); break;
    case 3: kind = "count"; change_count(b, l, rng); break;
    case 4: kind = "type"; change_type(b, l, rng); break;
    case 5: kind = "shape"; change_shape(b, l, rng); break;
    case 6: kind = "offset"; change_offset(b, l, rng); break;
    default: kind = "poison"; poison_data(b, l, rng); break;
  }
  return b;
}

std::string load_and_run(const std::string& path) {
  try {
    auto model = Model::load(path);
    auto tok = Tokenizer::from_metadata(model->gguf().metadata());
    const int32_t vocab = model->config().vocab_size;
    std::vector<int32_t> ids;
    for (int32_t id : tok->encode("Once upon a time, héllo", true, true))
      if (id >= 0 && id < vocab) ids.push_back(id);
    if (ids.empty()) ids.push_back(0);
    SequenceEvaluator eval(*model, static_cast<int32_t>(ids.size()) + 1, DType::kF16);
    eval.eval(ids, /*all_logits=*/true);
    tok->decode(ids);
    return "ok";
  } catch (const Error&) {
    return "error";
  } catch (const std::exception& e) {
    return std::string("exception: ") + typeid(e).name() + ": " + e.what();
  }
}

std::string MutationStats::summary() const {
  std::string s;
  for (const auto& [kind, outcomes] : counts) {
    s += "\n  " + kind + ":";
    for (const auto& [outcome, n] : outcomes) s += " " + outcome + "=" + std::to_string(n);
  }
  return s;
}

}  // namespace kvlm::test
