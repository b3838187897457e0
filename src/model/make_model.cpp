#include "model/make_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "backend/quant.h"
#include "backend/thread_pool.h"
#include "common/error.h"
#include "model/gguf_writer.h"
#include "model/make_model_plan.h"

namespace kvlm {
namespace {

// n values of N(0, sigma^2) by Box-Muller, from a stream seeded by `key`.
void fill_normal(uint64_t key, float sigma, float* out, int64_t n) {
  uint64_t state = key;
  for (int64_t i = 0; i < n; i += 2) {
    // 24-bit uniforms in (0, 1]: log() never sees 0.
    const float u1 = static_cast<float>((splitmix64(state) >> 40) + 1) * (1.0f / 16777216.0f);
    const float u2 = static_cast<float>(splitmix64(state) >> 40) * (1.0f / 16777216.0f);
    const float r = sigma * std::sqrt(-2.0f * std::log(u1));
    const float a = 6.2831853f * u2;
    out[i] = r * std::cos(a);
    if (i + 1 < n) out[i + 1] = r * std::sin(a);
  }
}

uint64_t row_key(uint64_t seed, size_t tensor, int64_t row) {
  uint64_t s = seed ^ (0xD1B54A32D192ED03ull * (tensor + 1));
  splitmix64(s);
  return s ^ (0x8CB92BA72F3D8DD7ull * static_cast<uint64_t>(row + 1));
}

// Generates one tensor in chunks of rows on the compute threads and passes
// each chunk to `sink`; memory stays at one chunk (about 8 MiB of f32).
void produce_tensor(const TensorPlan& t, size_t index, uint64_t seed, float std_dev, const GgufWriter::ByteSinkFn& sink) {
  const size_t out_row = row_bytes(t.dtype, t.cols);
  const int64_t chunk_rows = std::max<int64_t>(1, (int64_t{8} << 20) / (t.cols * 4));
  std::vector<uint8_t> out;
  std::vector<std::vector<float>> scratch;
  const int64_t rows = t.total_rows();  // an expert stack's rows run on across its experts
  for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
    const int64_t n = std::min(chunk_rows, rows - r0);
    out.resize(static_cast<size_t>(n) * out_row);
    scratch.resize(static_cast<size_t>(n));
    parallel_for(n, [&](int64_t i, int /*worker*/) {
      std::vector<float>& row = scratch[static_cast<size_t>(i)];
      row.resize(static_cast<size_t>(t.cols));
      if (t.fill == Fill::kOnes) {
        std::fill(row.begin(), row.end(), 1.0f);
      } else if (t.fill == Fill::kValues) {
        std::copy(t.values.begin(), t.values.end(), row.begin());
      } else if (t.fill == Fill::kRowsOf) {
        // The source row's own stream: the same values before its quantization.
        fill_normal(row_key(seed, t.source, t.source_rows[static_cast<size_t>(r0 + i)]), std_dev, row.data(), t.cols);
      } else {
        fill_normal(row_key(seed, index, r0 + i), std_dev, row.data(), t.cols);
      }
      quantize_row(t.dtype, row.data(), out.data() + static_cast<size_t>(i) * out_row, t.cols);
    });
    sink(out.data(), out.size());
  }
}

}  // namespace

MakeModelResult make_model(const MakeModelOptions& o, const std::function<void(const std::string&)>& log) {
  using Clock = std::chrono::steady_clock;
  check_shape(o.shape);
  if (!(o.weight_std > 0.0f) || o.weight_std > 10.0f)
    throw_error(ErrorCode::kInvalidArgument, "--std {} must be in (0, 10]", o.weight_std);
  GgufWriter w;
  const int64_t vocab = set_metadata(w, o);
  std::vector<TensorPlan> plan = plan_tensors(o.shape, vocab, o.type);
  if (o.shape.rank_head) plan_rank_head(o.shape, rank_label_tokens(o.vocab_from), plan);

  MakeModelResult result;
  std::set<std::string> fallbacks;
  for (const auto& t : plan) {
    w.declare_tensor(t.name, t.dims(), t.dtype);
    result.num_params += t.cols * t.total_rows();
    if (t.fell_back)
      fallbacks.insert(fmt::format("rows of {} values are not a multiple of {}'s block of {}: {} instead",
                                   t.cols, dtype_name(o.type), dtype_info(o.type).block_size, dtype_name(t.dtype)));
  }
  for (const auto& f : fallbacks) log(f);

  const auto start = Clock::now();
  auto last_report = start;
  result.file_bytes = w.write_streaming(o.out_path, [&](size_t index, const GgufWriter::ByteSinkFn& sink) {
    produce_tensor(plan[index], index, o.seed, o.weight_std, sink);
    const auto now = Clock::now();
    if (now - last_report > std::chrono::seconds(2) || index + 1 == plan.size()) {
      log(fmt::format("[{}/{}] {} ({:.1f} s)", index + 1, plan.size(), plan[index].name,
                      std::chrono::duration<double>(now - start).count()));
      last_report = now;
    }
  });
  return result;
}

}  // namespace kvlm
