#!/usr/bin/env bash
# Installs what the kvlm binary needs, builds only it, and runs kvlm's main
# job on the default model: models/stories260K.gguf, in the repository
# (models/README.md), or the model MODEL names. PROMPT and N change the
# prompt and the number of tokens; other arguments go to `kvlm run`.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${MODEL:-models/stories260K.gguf}"
if [[ ! -f "$MODEL" ]]; then
  cat >&2 <<MSG
demo: no model at $MODEL. The default is models/stories260K.gguf, in the
repository; give MODEL=path/to/model.gguf (a GGUF file or a Hugging Face
checkpoint folder), or make one with build/kvlm make-model (README.md).
MSG
  exit 1
fi
scripts/setup.sh --kvlm
exec build/kvlm run -m "$MODEL" -p "${PROMPT:-Once upon a time}" -n "${N:-200}" "$@"
