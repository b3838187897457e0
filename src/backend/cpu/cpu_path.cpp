// CPU feature detection for the kernel paths (cpu_path.h).
#include "backend/cpu/cpu_path.h"

#include <atomic>
#include <cstdlib>
#include <mutex>

#if KVLM_HAVE_ISA_PATHS && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif

#include "common/error.h"
#include "common/log.h"

namespace kvlm {
namespace {

// -1 until the first active_cpu_path(); then a CpuPath value.
std::atomic<int> g_path{-1};
std::mutex g_pick_mutex;

#if KVLM_HAVE_ISA_PATHS && (defined(__GNUC__) || defined(__clang__))
// F16C and BMI2 from cpuid itself: clang's __builtin_cpu_supports knows
// neither name (GCC's does), and one source must build with both.
bool cpu_has_f16c_and_bmi2() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool f16c = (c & (1u << 29)) != 0;  // CPUID.1:ECX.F16C[bit 29]
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool bmi2 = (b & (1u << 8)) != 0;  // CPUID.(7,0):EBX.BMI2[bit 8]
  return f16c && bmi2;
}

// AVX-VNNI (VEX vpdpbusd), also from cpuid: CPUID.(7,1):EAX[bit 4]. Its
// registers are AVX's, whose OS support the avx2 check covers.
bool cpu_has_avx_vnni() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
  return (a & (1u << 4)) != 0;
}
#endif

// Whether this build holds the path's kernel copies (KVLM_ISA_PATHS).
bool path_built(CpuPath path) {
  switch (path) {
    case CpuPath::kScalar: return true;
#if KVLM_HAVE_ISA_PATHS && defined(KVLM_BUILT_AVX2)
    case CpuPath::kAvx2: return true;
#endif
#if KVLM_HAVE_ISA_PATHS && defined(KVLM_BUILT_AVXVNNI)
    case CpuPath::kAvxVnni: return true;
#endif
#if KVLM_HAVE_ISA_PATHS && defined(KVLM_BUILT_AVX512)
    case CpuPath::kAvx512: return true;
#endif
    default: return false;
  }
}

bool cpu_has_path(CpuPath path) {
  if (!path_built(path)) return false;
#if KVLM_HAVE_ISA_PATHS && (defined(__GNUC__) || defined(__clang__))
  // __builtin_cpu_supports also checks that the OS saves the wider registers
  // (XCR0), so a hypervisor that hides AVX-512 state is seen as lacking it.
  __builtin_cpu_init();
  // (F16C's registers are AVX's, whose OS support the avx2 check covers.)
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c_and_bmi2();
  switch (path) {
    case CpuPath::kScalar: return true;
    case CpuPath::kAvx2: return avx2;
    case CpuPath::kAvxVnni: return avx2 && cpu_has_avx_vnni();
    case CpuPath::kAvx512:
      // The flags the avx512 translation units are compiled with (backend/CMakeLists.txt).
      return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512vnni");
  }
  return false;
#else
  return path == CpuPath::kScalar;
#endif
}

CpuPath pick_path() {
  const char* env = std::getenv("KVLM_CPU_PATH");
  if (env != nullptr && *env != '\0') {
    const std::optional<CpuPath> p = parse_cpu_path(env);
    if (!p) throw_error(ErrorCode::kInvalidArgument, "KVLM_CPU_PATH={}: expected scalar, avx2, avxvnni or avx512", env);
    if (!cpu_path_supported(*p)) {
      throw_error(ErrorCode::kInvalidArgument, "KVLM_CPU_PATH={}: this CPU (or build) cannot run that path", env);
    }
    return *p;
  }
  return supported_cpu_paths().back();
}

}  // namespace

const char* cpu_path_name(CpuPath path) {
  switch (path) {
    case CpuPath::kScalar: return "scalar";
    case CpuPath::kAvx2: return "avx2";
    case CpuPath::kAvxVnni: return "avxvnni";
    case CpuPath::kAvx512: return "avx512";
  }
  return "?";
}

const char* cpu_path_description(CpuPath path) {
  switch (path) {
    case CpuPath::kScalar: return "scalar";
    case CpuPath::kAvx2: return "avx2-fma";
    case CpuPath::kAvxVnni: return "avx2-vnni";
    case CpuPath::kAvx512: return "avx512-vnni";
  }
  return "?";
}

std::optional<CpuPath> parse_cpu_path(std::string_view name) {
  for (CpuPath p : {CpuPath::kScalar, CpuPath::kAvx2, CpuPath::kAvxVnni, CpuPath::kAvx512}) {
    if (name == cpu_path_name(p)) return p;
  }
  return std::nullopt;
}

bool cpu_is_amd() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool amd = [] {
    __builtin_cpu_init();  // a caller's static initializer may run before libgcc's own
    return __builtin_cpu_is("amd") != 0;
  }();
  return amd;
#else
  return false;
#endif
}

bool cpu_path_supported(CpuPath path) {
  static const bool avx2 = cpu_has_path(CpuPath::kAvx2);
  static const bool avx_vnni = cpu_has_path(CpuPath::kAvxVnni);
  static const bool avx512 = cpu_has_path(CpuPath::kAvx512);
  switch (path) {
    case CpuPath::kScalar: return true;
    case CpuPath::kAvx2: return avx2;
    case CpuPath::kAvxVnni: return avx_vnni;
    case CpuPath::kAvx512: return avx512;
  }
  return false;
}

std::vector<CpuPath> supported_cpu_paths() {
  std::vector<CpuPath> out;
  for (CpuPath p : {CpuPath::kScalar, CpuPath::kAvx2, CpuPath::kAvxVnni, CpuPath::kAvx512}) {
    if (cpu_path_supported(p)) out.push_back(p);
  }
  return out;
}

CpuPath active_cpu_path() {
  const int p = g_path.load(std::memory_order_acquire);
  if (p >= 0) return static_cast<CpuPath>(p);
  std::lock_guard<std::mutex> lock(g_pick_mutex);
  if (g_path.load(std::memory_order_relaxed) < 0) {
    const CpuPath picked = pick_path();  // may throw; then the next call tries again
    log_info("cpu kernels: {}", cpu_path_description(picked));
    g_path.store(static_cast<int>(picked), std::memory_order_release);
  }
  return static_cast<CpuPath>(g_path.load(std::memory_order_relaxed));
}

bool set_cpu_path(CpuPath path) {
  if (!cpu_path_supported(path)) return false;
  g_path.store(static_cast<int>(path), std::memory_order_release);
  return true;
}

bool cpu_has_avx512_bf16() {
#if KVLM_HAVE_ISA_PATHS && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  return cpu_has_path(CpuPath::kAvx512) && __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

}  // namespace kvlm
