#!/usr/bin/env bash
# Installs, builds, and runs kvlm's main job on the default model:
# stories260K.gguf from ../shared/models (the shared data folder beside the
# repository), or the model MODEL names. PROMPT and N change the prompt and
# the number of tokens; other arguments go to `kvlm run`.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${MODEL:-../shared/models/stories260K.gguf}"
if [[ ! -f "$MODEL" ]]; then
  cat >&2 <<MSG
demo: no model at $MODEL.
The default model is stories260K.gguf (1.2 MB), kept in ../shared/models beside
this repository. Without ../shared, fetch ggml-org's copy and run the demo on it:
  mkdir -p models
  curl -L -o models/stories260K.gguf https://huggingface.co/ggml-org/models/resolve/main/tinyllamas/stories260K.gguf
  MODEL=models/stories260K.gguf scripts/demo.sh
or build (scripts/setup.sh) and make a random-weight model with build/kvlm make-model
(README.md, "The default model"), then run MODEL=that.gguf scripts/demo.sh.
MSG
  exit 1
fi
scripts/setup.sh
exec build/kvlm run -m "$MODEL" -p "${PROMPT:-Once upon a time}" -n "${N:-200}" "$@"
