// matmul(): prepares the activations once (f32 as is, or quantized to Q8_0 /
// Q8_K), then hands chunks of output rows to the compute threads on demand;
// a chunk's weight rows meet every token (in L2-sized token chunks) through
// the dtype's kernel, so decode reads each weight once per step.
// pack_for_matmul(): the load-time copy of a quantized matrix in the strip
// layout its kernel reads (matmul_impl.h).
#include "backend/cpu/matmul.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/chunk_regions.h"
#include "backend/cpu/matmul_impl.h"
#include "backend/cpu/simd.h"
#include "backend/quant.h"
#include "backend/quant_impl.h"
#include "backend/thread_pool.h"
#include "backend/threads.h"
#include "common/assert.h"

namespace kvlm {
namespace cpu {
namespace {

enum class ActKind { kF32, kQ8_0, kQ8_K };

ActKind act_kind_for(DType t) {
  switch (t) {
    case DType::kQ8_0:
    case DType::kQ4_0: return ActKind::kQ8_0;
    case DType::kQ4_K:
    case DType::kQ6_K: return ActKind::kQ8_K;
    default: return ActKind::kF32;
  }
}

RowRangeKernel kernel_in(const CpuKernels& k, DType t) {
  switch (t) {
    case DType::kF32: return k.f32;
    case DType::kF16: return k.f16;
    case DType::kBF16: return k.bf16;
    case DType::kQ8_0: return k.q8_0;
    case DType::kQ4_0: return k.q4_0;
    case DType::kQ4_K: return k.q4_k;
    case DType::kQ6_K: return k.q6_k;
    case DType::kQ8_K: break;
  }
  KVLM_ASSERT(false, "matmul: Q8_K is an activation type, not a weight type");
  return nullptr;
}

size_t no_strip_bytes(DType, int64_t) { return 0; }
StripPacker no_strip_packer(DType) { return nullptr; }

// Quantized activations of the calling thread, reused across calls so a
// forward pass allocates only while the buffers grow to their largest size.
struct ActScratch {
  std::vector<int8_t> q8_qs;       // [num_tokens, cols]
  std::vector<float> q8_d;         // [num_tokens, cols / 32]
  std::vector<int32_t> q8_sum;     // [num_tokens, cols / 32]
  std::vector<ActBlockQ8Tile> q8_tiles;  // [cols / 32, num_tokens]
  std::vector<ActBlockQ8K> q8k;    // [num_tokens, cols / 256]
};
thread_local ActScratch t_scratch;

// Strips packed on the fly (matrices without a packed copy), per thread.
thread_local std::vector<Bytes32> t_strip_scratch;

// Below this many multiply-adds the fork/join of a parallel region costs more
// than it saves.
constexpr int64_t kMinParallelWork = 1 << 17;
// Activations of one token chunk should stay in L2 while weight rows stream.
constexpr int64_t kActChunkBytes = 192 * 1024;
// Whole activation rows of one token block, which every row chunk meets
// before the next block begins: they stay in L2 (2 MiB a core on recent
// Xeons, 1 MiB on Zen 4/5 and most AVX2 parts), so each activation byte
// serves all of a thread's rows, not just one row chunk's.
constexpr int64_t kTokenBlockBytes = 1024 * 1024;
// The same for f32 activations (float weights): their rows are 3.6 times a
// Q8_0 row, so 1 MiB held only 96 tokens of TinyLlama's 2,048 columns (40 of
// its FFN's 5,632), and every block read all the weights from DRAM again.
// With 8 MiB a 512-token prefill reads them once or twice, and the
// activations come from L3 at a few bytes a cycle: Zen 5 (1 MiB L2), F16
// prefill 78-84 -> 85-89 tokens/s, 4096 x 4096 x 256 tokens on two threads
// +5-8% for F32, F16 and BF16 (three alternated runs each). The quantized
// types keep 1 MiB (their blocks already hold 400+ tokens; Q8_0 prefill was
// no faster with larger ones).
constexpr int64_t kFloatTokenBlockBytes = 8 * 1024 * 1024;
// Up to this many activation values are quantized by the calling thread alone.
constexpr int64_t kSerialActElements = 16 * 1024;
// Weights handed to a thread at a time (see matmul()).
constexpr int64_t kRowChunkBytes = 96 * 1024;
// The same for a call of at most kStreamTokens tokens (decode, small
// batches), which streams the weights once: when the threads took chunks in
// turn, each chunk started a new stream that a core's hardware prefetcher
// had to pick up again, and at 96 KiB those restarts cost a fifth of decode
// (every call now walks ChunkRegions). Zen 5, TinyLlama,
// 2 threads, four or five alternated runs: Q4_0 decode 40.5-46.0 -> 47.9-55.1
// tokens/s, Q8_0 25.6-30.5 -> 26.2-35.5, F16 11.7-13.1 -> 13.0-14.3. Prefill
// keeps 96 KiB (232-261 against 223-237 tokens/s with 256 KiB): there the
// chunk's weights must stay in L2 while every token chunk passes over them.
constexpr int64_t kStreamRowChunkBytes = 256 * 1024;
constexpr int64_t kStreamTokens = 8;

}  // namespace

uint8_t* strip_scratch(size_t bytes) {
  const size_t n = (bytes + 31) / 32;
  if (t_strip_scratch.size() < n) t_strip_scratch.resize(n);
  return reinterpret_cast<uint8_t*>(t_strip_scratch.data());
}

#if KVLM_HAVE_ISA_PATHS
namespace avx2 {
KVLM_DECLARE_SIMD_KERNELS
}
namespace avxvnni {
KVLM_DECLARE_SIMD_KERNELS
}
namespace avx512 {
KVLM_DECLARE_SIMD_KERNELS
}
#endif

const CpuKernels& kernels_for(CpuPath path) {
  static const CpuKernels kScalar = {kernel_f32_scalar,  kernel_f16_scalar,  kernel_bf16_scalar, kernel_q8_0_scalar,
                                     kernel_q4_0_scalar, kernel_q4_k_scalar, kernel_q6_k_scalar, no_strip_bytes,
                                     no_strip_packer,    quantize_act_q8_0,  quantize_act_q8_k};
  KVLM_ASSERT(cpu_path_supported(path), "matmul: kernels of a CPU path this CPU cannot run");
  // Only the copies this build holds (KVLM_ISA_PATHS): cpu_path_supported()
  // is false for the others.
#if KVLM_HAVE_ISA_PATHS && defined(KVLM_BUILT_AVX2)
  static const CpuKernels kAvx2 = {avx2::kernel_f32,  avx2::kernel_f16,  avx2::kernel_bf16,
                                   avx2::kernel_q8_0, avx2::kernel_q4_0, avx2::kernel_q4_k,
                                   avx2::kernel_q6_k, avx2::packed_strip_bytes, avx2::strip_packer,
      avx2::quantize_act_q8_0, avx2::quantize_act_q8_k};
  if (path == CpuPath::kAvx2) return kAvx2;
#endif
#if KVLM_HAVE_ISA_PATHS && defined(KVLM_BUILT_AVX512)
  static const CpuKernels kAvx512 = {avx512::kernel_f32,  avx512::kernel_f16,  avx512::kernel_bf16,
                                     avx512::kernel_q8_0, avx512::kernel_q4_0, avx512::kernel_q4_k,
                                     avx512::kernel_q6_k, avx512::packed_strip_bytes, avx512::strip_packer,
      avx512::quantize_act_q8_0, avx512::quantize_act_q8_k, /*act_q8_tiles=*/true};
  if (path == CpuPath::kAvx512) return kAvx512;
#endif
#if KVLM_HAVE_ISA_PATHS && defined(KVLM_BUILT_AVXVNNI)
  static const CpuKernels kAvxVnni = {avxvnni::kernel_f32,  avxvnni::kernel_f16,  avxvnni::kernel_bf16,
                                      avxvnni::kernel_q8_0, avxvnni::kernel_q4_0, avxvnni::kernel_q4_k,
                                      avxvnni::kernel_q6_k, avxvnni::packed_strip_bytes, avxvnni::strip_packer,
      avxvnni::quantize_act_q8_0, avxvnni::quantize_act_q8_k};
  if (path == CpuPath::kAvxVnni) return kAvxVnni;
#endif
  return kScalar;
}

namespace {

// The activations of one call, prepared once for every matrix of the call,
// and the token chunks and blocks the kernels take them in.
struct PreparedActs {
  MatmulActs acts;
  int64_t chunk = 0;  // tokens per kernel call
  int64_t block = 0;  // tokens per fork: whole chunks, ~kTokenBlockBytes of activation rows
};

PreparedActs prepare_acts(const CpuKernels& kernels, ActKind act, const float* x, int64_t num_tokens,
                          int64_t cols) {
  PreparedActs p;
  MatmulActs& acts = p.acts;
  acts.cols = cols;
  acts.num_tokens = num_tokens;
  int64_t act_bytes_per_token = cols * 4;
  int64_t act_row_bytes = cols * 4;  // all of one token's activations
  ActScratch& scratch = t_scratch;
  switch (act) {
    case ActKind::kF32:
      acts.f32 = x;
      // The float kernels pass over 512 columns at a time (matmul_float.cpp).
      act_bytes_per_token = std::min<int64_t>(cols, 512) * 4;
      break;
    case ActKind::kQ8_0:
      if (scratch.q8_qs.size() < static_cast<size_t>(num_tokens * cols)) {
        scratch.q8_qs.resize(num_tokens * cols);
        scratch.q8_d.resize(num_tokens * cols / 32);
        scratch.q8_sum.resize(num_tokens * cols / 32);
      }
      acts.q8_qs = scratch.q8_qs.data();
      acts.q8_d = scratch.q8_d.data();
      acts.q8_sum = scratch.q8_sum.data();
      if (kernels.act_q8_tiles) {
        if (scratch.q8_tiles.size() < static_cast<size_t>(num_tokens * cols / 32)) {
          scratch.q8_tiles.resize(num_tokens * cols / 32);
        }
        acts.q8_tiles = scratch.q8_tiles.data();
      }
      act_bytes_per_token = cols + cols / 8;
      act_row_bytes = act_bytes_per_token;
      break;
    case ActKind::kQ8_K:
      if (scratch.q8k.size() < static_cast<size_t>(num_tokens * cols / 256)) {
        scratch.q8k.resize(num_tokens * cols / 256);
      }
      acts.q8k = scratch.q8k.data();
      act_bytes_per_token = cols / 256 * static_cast<int64_t>(sizeof(ActBlockQ8K));
      act_row_bytes = act_bytes_per_token;
      break;
  }
  int64_t chunk = std::max<int64_t>(8, kActChunkBytes / std::max<int64_t>(1, act_bytes_per_token));
  chunk = chunk / 8 * 8;
  // Token blocks of whole chunks (a chunk no larger than a block).
  const int64_t block_bytes = act == ActKind::kF32 ? kFloatTokenBlockBytes : kTokenBlockBytes;
  p.chunk = std::min({num_tokens, chunk, std::max<int64_t>(8, block_bytes / act_row_bytes / 8 * 8)});
  p.block = std::max<int64_t>(1, block_bytes / (act_row_bytes * p.chunk)) * p.chunk;

  auto quantize_token = [&](int64_t t) {
    if (act == ActKind::kQ8_0) {
      kernels.act_q8_0(x + t * cols, cols,
                       act_q8_out_for_token(scratch.q8_qs.data(), scratch.q8_d.data(), scratch.q8_sum.data(),
                                            acts.q8_tiles != nullptr ? scratch.q8_tiles.data() : nullptr, cols,
                                            num_tokens, t));
    } else if (act == ActKind::kQ8_K) {
      kernels.act_q8_k(x + t * cols, cols, scratch.q8k.data() + t * (cols / 256));
    }
  };
  // A few tokens are quantized before forking: one barrier fewer per call.
  if (act != ActKind::kF32) {
    if (num_tokens * cols > kSerialActElements) {
      parallel_for(num_tokens, [&](int64_t t, int) { quantize_token(t); });
    } else {
      for (int64_t t = 0; t < num_tokens; ++t) quantize_token(t);
    }
  }
  return p;
}

// One matrix of a call, cut into row chunks.
struct RowChunks {
  const WeightMatrix* w;
  float* y;
  RowRangeKernel kernel;
  int64_t rows_per_chunk;
  int64_t num_chunks;
};

RowChunks row_chunks(const CpuKernels& kernels, const WeightMatrix& w, float* y, int num_threads_used,
                     int64_t num_tokens) {
  // Row chunks of about kRowChunkBytes of weights (they stay in L2 while the
  // token chunks pass over them; kStreamRowChunkBytes where the call streams
  // them once), and at least 8 chunks per thread; whole
  // strips of kStripRows rows, as the quantized kernels work in strips.
  const int64_t weight_row_bytes = static_cast<int64_t>(row_bytes(w.dtype, w.cols));
  const int64_t chunk_bytes = num_tokens <= kStreamTokens ? kStreamRowChunkBytes : kRowChunkBytes;
  int64_t rows_per_chunk = std::max<int64_t>(1, chunk_bytes / weight_row_bytes);
  rows_per_chunk = std::min(rows_per_chunk, (w.rows + 8 * num_threads_used - 1) / (8 * num_threads_used));
  // Pairs of strips where a chunk holds 16 rows or more: the AVX-512 kernels
  // take 16 rows at a time (for_each_strip_pair).
  const int64_t chunk_rows_unit = rows_per_chunk >= 2 * kStripRows ? 2 * kStripRows : kStripRows;
  rows_per_chunk = std::max<int64_t>(kStripRows, rows_per_chunk / chunk_rows_unit * chunk_rows_unit);
  return {&w, y, kernel_in(kernels, w.dtype), rows_per_chunk, (w.rows + rows_per_chunk - 1) / rows_per_chunk};
}

}  // namespace

void matmul_many_with(CpuPath path, std::span<const MatmulJob> jobs, const float* x, int64_t num_tokens) {
  if (jobs.empty() || num_tokens <= 0) return;  // e.g. a step where no row needs logits
  const int64_t cols = jobs[0].w->cols;
  const ActKind act = act_kind_for(jobs[0].w->dtype);
  const CpuKernels& kernels = kernels_for(path);
  int64_t work = 0;
  for (const MatmulJob& job : jobs) {
    const WeightMatrix& w = *job.w;
    KVLM_ASSERT(w.data != nullptr && x != nullptr && job.y != nullptr, "matmul: null buffer");
    KVLM_ASSERT(w.cols % dtype_info(w.dtype).block_size == 0, "matmul: cols not a multiple of the block size");
    KVLM_ASSERT(w.cols == cols && act_kind_for(w.dtype) == act, "matmul_many: matrices with different inputs");
    work += w.rows * cols * num_tokens;
  }
  const PreparedActs prepared = prepare_acts(kernels, act, x, num_tokens, cols);
  const MatmulActs& acts = prepared.acts;

  int64_t total_rows = 0;
  for (const MatmulJob& job : jobs) total_rows += job.w->rows;
  if (total_rows == 0) return;
  const int num_threads_used =
      work < kMinParallelWork ? 1 : static_cast<int>(std::min<int64_t>(num_threads(), total_rows));
  constexpr int kMaxJobs = 4;
  KVLM_ASSERT(jobs.size() <= kMaxJobs, "matmul_many: at most 4 matrices a call");
  RowChunks parts[kMaxJobs];
  int64_t num_chunks = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    parts[j] = row_chunks(kernels, *jobs[j].w, jobs[j].y, num_threads_used, num_tokens);
    num_chunks += parts[j].num_chunks;
  }
  // Every activation row is ready here. Rows go out in small chunks on
  // demand, so a thread that the OS preempts (other work shares these cores)
  // delays the step by one chunk, not by its whole share; each thread walks
  // its own run of chunks (ChunkRegions), so its weights come as one stream.
  // With the chunks taken in turn instead, F16 prefill ran 68-82 tokens/s
  // against 78-86 (Zen 5, nine alternated runs; the quantized types within
  // noise). One fork per token block; a block's activations outlive every
  // row chunk of every matrix.
  for (int64_t b0 = 0; b0 < num_tokens; b0 += prepared.block) {
    const int64_t b1 = std::min(num_tokens, b0 + prepared.block);
    auto run_chunk = [&](int64_t rc, int) {
      size_t j = 0;
      while (rc >= parts[j].num_chunks) rc -= parts[j++].num_chunks;
      const RowChunks& part = parts[j];
      const int64_t row_begin = rc * part.rows_per_chunk;
      const int64_t row_end = std::min(part.w->rows, row_begin + part.rows_per_chunk);
      for (int64_t t0 = b0; t0 < b1; t0 += prepared.chunk) {
        part.kernel(*part.w, acts, row_begin, row_end, t0, std::min(b1, t0 + prepared.chunk), part.y);
      }
    };
    if (num_threads_used > 1) {
      ChunkRegions regions(num_chunks, num_threads_used);
      parallel_for(num_threads_used, [&](int64_t, int worker) {
        for (int64_t rc = regions.next(worker); rc >= 0; rc = regions.next(worker)) run_chunk(rc, worker);
      });
    } else {
      for (int64_t rc = 0; rc < num_chunks; ++rc) run_chunk(rc, 0);
    }
  }
}

void matmul_grouped_with(CpuPath path, std::span<const GroupedMatmulJob> jobs) {
  const CpuKernels& kernels = kernels_for(path);
  int64_t work = 0, total_rows = 0;
  for (const GroupedMatmulJob& job : jobs) {
    KVLM_ASSERT(act_kind_for(job.w->dtype) == ActKind::kF32, "matmul_grouped: a matrix with quantized inputs");
    if (job.num_tokens <= 0) continue;
    KVLM_ASSERT(job.w->data != nullptr && job.x != nullptr && job.y != nullptr, "matmul_grouped: null buffer");
    work += job.w->rows * job.w->cols * job.num_tokens;
    total_rows += job.w->rows;
  }
  if (total_rows == 0) return;
  const int num_threads_used =
      work < kMinParallelWork ? 1 : static_cast<int>(std::min<int64_t>(num_threads(), total_rows));
  // Float inputs need no preparation: each job's chunks read its x in place.
  std::vector<RowChunks> parts;
  std::vector<PreparedActs> acts;
  parts.reserve(jobs.size());
  acts.reserve(jobs.size());
  int64_t num_chunks = 0;
  for (const GroupedMatmulJob& job : jobs) {
    if (job.num_tokens <= 0) continue;
    parts.push_back(row_chunks(kernels, *job.w, job.y, num_threads_used, job.num_tokens));
    acts.push_back(prepare_acts(kernels, ActKind::kF32, job.x, job.num_tokens, job.w->cols));
    num_chunks += parts.back().num_chunks;
  }
  auto run_chunk = [&](int64_t rc) {
    size_t j = 0;
    while (rc >= parts[j].num_chunks) rc -= parts[j++].num_chunks;
    const RowChunks& part = parts[j];
    const PreparedActs& a = acts[j];
    const int64_t row_begin = rc * part.rows_per_chunk;
    const int64_t row_end = std::min(part.w->rows, row_begin + part.rows_per_chunk);
    for (int64_t t0 = 0; t0 < a.acts.num_tokens; t0 += a.chunk)
      part.kernel(*part.w, a.acts, row_begin, row_end, t0, std::min(a.acts.num_tokens, t0 + a.chunk), part.y);
  };
  if (num_threads_used == 1) {
    for (int64_t rc = 0; rc < num_chunks; ++rc) run_chunk(rc);
    return;
  }
  ChunkRegions regions(num_chunks, num_threads_used);
  parallel_for(num_threads_used, [&](int64_t, int worker) {
    for (int64_t rc = regions.next(worker); rc >= 0; rc = regions.next(worker)) run_chunk(rc);
  });
}

void matmul_with(CpuPath path, const WeightMatrix& w, const float* x, int64_t num_tokens, float* y) {
  if (w.rows <= 0) return;
  const MatmulJob job{&w, y};
  matmul_many_with(path, {&job, 1}, x, num_tokens);
}

}  // namespace cpu


void matmul(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y) {
  cpu::matmul_with(active_cpu_path(), w, x, num_tokens, y);
}

void matmul_many(std::span<const MatmulJob> jobs, const float* x, int64_t num_tokens) {
  // Matrices that take the input in different forms (Q4_K beside Q6_K is
  // one form; Q4_0 beside Q6_K is two) go one at a time.
  bool together = jobs.size() <= 4;
  for (const MatmulJob& job : jobs) {
    together = together && job.w->cols == jobs[0].w->cols &&
               cpu::act_kind_for(job.w->dtype) == cpu::act_kind_for(jobs[0].w->dtype);
  }
  if (!together) {
    for (const MatmulJob& one : jobs) matmul(*one.w, x, num_tokens, one.y);
    return;
  }
  cpu::matmul_many_with(active_cpu_path(), jobs, x, num_tokens);
}

void matmul_grouped(std::span<const GroupedMatmulJob> jobs) {
  // Matrices whose kernels quantize their input (a quantized adapter) go one
  // at a time, each with its own prepared input.
  bool floats = true;
  for (const GroupedMatmulJob& job : jobs) floats = floats && cpu::act_kind_for(job.w->dtype) == cpu::ActKind::kF32;
  if (!floats) {
    for (const GroupedMatmulJob& job : jobs) matmul(*job.w, job.x, job.num_tokens, job.y);
    return;
  }
  cpu::matmul_grouped_with(active_cpu_path(), jobs);
}

WeightMatrix pack_for_matmul(WeightMatrix w) {
  using namespace cpu;
  // The SIMD paths share one layout (matmul_impl.h); the scalar path packs nothing.
  const CpuKernels& kernels = kernels_for(active_cpu_path());
  const size_t strip_bytes = kernels.strip_bytes(w.dtype, w.cols);
  if (w.packed || w.rows <= 0) return w;
  if (strip_bytes == 0) return w;
  KVLM_ASSERT(w.data != nullptr && w.cols % dtype_info(w.dtype).block_size == 0, "pack_for_matmul: bad matrix");
  auto packed = std::make_shared<PackedWeights>();
  packed->strip_bytes = strip_bytes;
  packed->num_strips = (w.rows + kStripRows - 1) / kStripRows;
  packed->paired = paired_strips(w.dtype);
  const int64_t num_slots = packed->paired ? (packed->num_strips + 1) / 2 * 2 : packed->num_strips;
  packed->bytes = HugePageBuffer(strip_bytes * static_cast<size_t>(num_slots), "packed weights");
  const StripPacker pack = kernels.strip_packer(w.dtype);
  const size_t wrow_bytes = row_bytes(w.dtype, w.cols);
  const auto* base = static_cast<const uint8_t*>(w.data);
  PackedWeights& p = *packed;
  parallel_for(p.num_strips, [&](int64_t s, int) {
    const int64_t r0 = s * kStripRows;
    const uint8_t* rows[kStripRows];
    for (int k = 0; k < kStripRows; ++k) rows[k] = base + static_cast<size_t>(std::min(r0 + k, w.rows - 1)) * wrow_bytes;
    const StripAt at = p.strip(s);
    pack(rows, w.cols, const_cast<uint8_t*>(at.bytes), at.slot);
  });
  w.packed = std::move(packed);
  return w;
}

void get_row(const WeightMatrix& w, int64_t row, float* out) {
  KVLM_ASSERT(row >= 0 && row < w.rows, "get_row: row out of range");
  const size_t bytes = row_bytes(w.dtype, w.cols);
  dequantize_row(w.dtype, static_cast<const uint8_t*>(w.data) + static_cast<size_t>(row) * bytes, out, w.cols);
}

}  // namespace kvlm
