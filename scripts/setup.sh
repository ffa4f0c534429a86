#!/usr/bin/env bash
# Create .venv and install runbook with its pinned dependencies (idempotent, no sudo needed).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
# torch first, from the exact pin, so nothing later can swap in a CUDA build.
.venv/bin/python -m pip install -q -c constraints.txt torch==2.13.0
# The litgpt extra: the default trainer (torch, litgpt, litdata); test: the suite's runner and HF stack.
.venv/bin/python -m pip install -q -c constraints.txt -e '.[litgpt,test]'
# litdata pulls torchvision, whose PyPI build does not import beside this torch build
# ("operator torchvision::nms does not exist") and breaks `import litgpt`; runbook needs none of it.
if .venv/bin/python -m pip show torchvision >/dev/null 2>&1; then
  .venv/bin/python -m pip uninstall -q -y torchvision
fi
.venv/bin/python -c "import torch, litgpt, runbook.cli; assert torch.__version__.startswith('2.13.0'), torch.__version__"
echo "runbook is installed in .venv (torch $(.venv/bin/python -c 'import torch; print(torch.__version__)'))"
