#!/bin/sh
# Every external symbol that an ISA-specific object file (backend/CMakeLists.txt,
# KVLM_KERNEL_ISA) defines must live in that path's namespace. A weak copy of
# an inline function or library template outside it (say std::copy<float*>
# compiled with AVX-512) could be the one the linker keeps for every caller,
# and an AVX2-only CPU would then die of SIGILL far from any kernel.
# (DW.ref.__gxx_personality_v0, which code with unwinding cleanups emits, is
# a pointer to the C++ runtime's personality routine: data, the same in all.)
# Usage: check_isa_symbols.sh ISA OBJECT... (the objects may come as one
# space-separated argument, as ctest passes them; paths have no spaces)
isa=$1
shift
# shellcheck disable=SC2068
bad=$(nm -C --defined-only --extern-only $@ | grep -E '^[0-9a-f]+ [A-Za-z] ' |
      grep -v -E " kvlm::(cpu|simd)::${isa}::" |
      grep -v -E '^[0-9a-f]+ [A-Za-z] typeinfo|^[0-9a-f]+ V DW\.ref\.__gxx_personality_v0$|^$')
if [ -n "$bad" ]; then
  echo "symbols of the ${isa} objects outside namespace ${isa}:"
  echo "$bad"
  exit 1
fi
echo "ok: every symbol of the ${isa} objects is in kvlm::cpu::${isa} or kvlm::simd::${isa}"
