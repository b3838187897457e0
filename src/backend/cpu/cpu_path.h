// Which instruction-set path the CPU kernels take. One build holds the
// scalar kernels and, on x86-64, AVX2 (+FMA, F16C), AVX2 with AVX-VNNI (the
// VEX int8 dot products of Intel's client cores since Alder Lake, which lack
// AVX-512) and AVX-512 (+VNNI) kernels compiled as separate translation units
// (backend/CMakeLists.txt): the matmul kernels (matmul_impl.h) and the
// element-wise ops and attention (ops_impl.h; AVX-VNNI runs their AVX2 copy);
// the best path this CPU supports is picked at the first use, or the one
// named by the environment variable KVLM_CPU_PATH=scalar|avx2|avxvnni|avx512.
// Nothing ever runs an instruction the CPU lacks: a path it does not support
// is refused.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

// Whether this build holds the per-ISA copies (x86-64, unless configured
// with KVLM_ISA_COPIES=OFF: then only the scalar path exists).
#if defined(__x86_64__) && !defined(KVLM_NO_ISA_COPIES)
#define KVLM_HAVE_ISA_PATHS 1
#else
#define KVLM_HAVE_ISA_PATHS 0
#endif

namespace kvlm {

enum class CpuPath { kScalar, kAvx2, kAvxVnni, kAvx512 };

// "scalar", "avx2", "avxvnni", "avx512": the names KVLM_CPU_PATH takes.
const char* cpu_path_name(CpuPath path);
// What the path runs, for logs: "avx512-vnni", "avx2-vnni", "avx2-fma", "scalar".
const char* cpu_path_description(CpuPath path);
std::optional<CpuPath> parse_cpu_path(std::string_view name);

// Whether this build has the path and this CPU (and OS) can run it.
bool cpu_path_supported(CpuPath path);
// Every supported path, scalar first, best last.
std::vector<CpuPath> supported_cpu_paths();

// The path the kernels use. The first call picks it (KVLM_CPU_PATH, else the
// best supported) and logs "cpu kernels: ..." at info level (kvlm -v); it
// throws Error(kInvalidArgument) if KVLM_CPU_PATH names an unknown path or
// one this CPU cannot run.
CpuPath active_cpu_path();
// Switches the path (tests, benchmarks); false, and no change, when the path
// is not supported here. Not safe while another thread runs a matmul.
bool set_cpu_path(CpuPath path);

// Whether the CPU is AMD's: the decode kernels leave prefetching to its
// hardware prefetchers (matmul_float.cpp, matmul_q8.cpp; measured on a Zen 5).
bool cpu_is_amd();

// Whether the CPU has AVX512-BF16 (VDPBF16PS): the avx512 path's attention
// over BF16 KV storage uses it (attention_bf16.cpp); every other path, and
// this one without it, runs the same sums in f32 multiply-adds.
bool cpu_has_avx512_bf16();

}  // namespace kvlm
