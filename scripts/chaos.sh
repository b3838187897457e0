#!/usr/bin/env bash
# The chaos run (scripts/chaos.py): kvlm serve with a disk tier (on a small
# tmpfs as root) and a Redis tier under load while the server is SIGKILLed
# and restarted, Redis SIGSTOPped, killed and restarted, and the disk tier's
# filesystem filled, over and over; loopback only, bounded in time.
#   scripts/chaos.sh [SECONDS] [-- kvlm serve flags]   (default 60 s; BUILD_DIR)
# Prints requests sent / answered / failed, outputs wrong, blocks leaked and
# bad disk records; exits 1 unless wrong, leaked and bad are 0 and every
# failure was a request a killed server had in flight.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${BUILD_DIR:-build}"
seconds="${1:-60}"
shift || true
[[ "${1:-}" == "--" ]] && shift
exec python3 scripts/chaos.py --kvlm "$build/kvlm" --model ../shared/models/stories260K.gguf \
  --text ../shared/text/tinystories_sample.txt --seconds "$seconds" -- "$@"
