#!/usr/bin/env bash
# Fails when a C++ file differs from .clang-format's output. The tracked sources are checked in
# batches, one clang-format process per core (a process per file spent most of a minute starting
# clang-format).
set -euo pipefail
cd "$(dirname "$0")/.."
set +e
report=$(git ls-files -z '*.h' '*.cpp' |
  xargs -0 -n 64 -P "$(nproc)" clang-format --dry-run -Werror 2>&1 >/dev/null)
rc=$?
set -e
# A formatting difference reads "FILE:LINE:COL: error: code should be clang-formatted".
mapfile -t bad < <(grep -o '^[^:]*:[0-9]*:[0-9]*: error: code should be clang-formatted' <<<"$report" |
  cut -d: -f1 | sort -u)
if ((${#bad[@]})); then
  echo "not clang-formatted (run: clang-format -i FILE):"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
if ((rc != 0)); then
  echo "format: clang-format failed (exit $rc):"
  echo "$report" | head -20
  exit 1
fi
echo "format: ok ($(git ls-files '*.h' '*.cpp' | wc -l) files)"
