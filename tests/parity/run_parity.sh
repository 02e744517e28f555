#!/bin/sh
# The parity_torch test: self-test the comparison, dump kiln's results for every registered op
# sample with a torch expression, then replay them in PyTorch. Fails if any step fails.
# Usage: run_parity.sh PYTHON DUMP_EXE OUT_JSON CHECK_SCRIPT
set -eu
python="$1"
dump="$2"
json="$3"
check="$4"

if ! "$python" -c "import torch" >/dev/null 2>&1; then
  echo "parity_torch: '$python' cannot import torch." >&2
  echo "Install Debian's PyTorch: apt-get install python3-torch (it is used through /usr/bin/python3;" >&2
  echo "the python3 first on PATH may be a different interpreter without Debian's packages)." >&2
  exit 1
fi

"$python" "$check" --self-test
rm -f "$json"
"$dump" "$json"
"$python" "$check" "$json"
