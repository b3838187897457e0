#!/usr/bin/env bash
# Installs, builds, and runs kvlm's main job on the default model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
MODEL="${MODEL:-../shared/models/stories260K.gguf}"
exec build/kvlm run -m "$MODEL" -p "${PROMPT:-Once upon a time}" -n "${N:-200}" "$@"
