#!/usr/bin/env bash
# Fails when a C++ file differs from .clang-format's output.
set -euo pipefail
cd "$(dirname "$0")/.."
bad=()
while IFS= read -r f; do
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done < <(git ls-files '*.h' '*.cpp')
if ((${#bad[@]})); then
  echo "not clang-formatted (run: clang-format -i FILE):"; printf '  %s\n' "${bad[@]}"; exit 1
fi
echo "format: ok"
