# Sourced by setup.sh. cpu_isa_paths prints the KVLM_ISA_PATHS value (CMake)
# that builds only this CPU's best kernel copy, from the kernel's CPU flags:
# "avx512", "avx2;avxvnni", "avx2", or "" (the scalar path only). The flags
# are the ones cpu_path.cpp checks at run time, which still decides: a copy
# this CPU cannot run is never picked. /proc/cpuinfo lists a feature only
# when the kernel enabled it (AVX-512 without the OS's register saving is
# left out), as cpuid's OS check does.
cpu_isa_paths() {
  local flags
  flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
  has() {
    local f
    for f in "$@"; do [[ "$flags" == *" $f "* ]] || return 1; done
  }
  if ! has avx2 fma f16c bmi2; then
    echo ""
  elif has avx512f avx512bw avx512dq avx512vl avx512_vnni; then
    echo "avx512"
  elif has avx_vnni; then
    echo "avx2;avxvnni"
  else
    echo "avx2"
  fi
}
