#!/usr/bin/env bash
# check_isa_paths.sh ROOT KVLM: the kernel copy the demo's build keeps
# (scripts/cpu_isa_paths.sh, from /proc/cpuinfo) is the path a build with
# every copy picks on this CPU at run time (cpu_path.cpp, from cpuid): if the
# two disagreed, the demo would build a copy it does not run, or leave out
# the one it should.
set -eu
root=$1
kvlm=$2
source "$root/scripts/cpu_isa_paths.sh"
best=$(cpu_isa_paths | tr ';' '\n' | tail -n 1)
case "$best" in
  avx512) want=avx512-vnni ;;
  avxvnni) want=avx2-vnni ;;
  avx2) want=avx2-fma ;;
  "") want=scalar ;;
  *) echo "cpu_isa_paths printed an unknown path: $best" >&2; exit 1 ;;
esac
got=$(env -u KVLM_CPU_PATH "$kvlm" run -v -m "$root/models/stories260K.gguf" -p x -n 1 2>&1 >/dev/null |
      sed -n 's/.*cpu kernels: //p' | head -n 1)
if [ "$got" != "$want" ]; then
  echo "the demo would build the '$best' copy ($want); a full build runs '$got' here" >&2
  exit 1
fi
echo "ok: $want"
