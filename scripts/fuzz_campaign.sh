#!/usr/bin/env bash
# A long differential-fuzzing campaign against PyTorch (tests/fuzz/fuzz.py), on demand:
#   bash scripts/fuzz_campaign.sh [PROGRAMS] [FIRST_SEED]     (defaults: 100000 programs from 100000)
# Builds the worker in build/release if needed, prints the pass table and the triage table, and
# writes each failure (shrunk, with kiln C++ and PyTorch repros) to build/fuzz_campaign/.
set -euo pipefail
cd "$(dirname "$0")/.."
programs=${1:-100000}
start=${2:-100000}
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_WERROR=ON >/dev/null
cmake --build build/release --target kiln_fuzz_worker
exec /usr/bin/python3 tests/fuzz/fuzz.py --worker build/release/tests/fuzz/kiln_fuzz_worker \
  --campaign "$programs" --start "$start" --out build/fuzz_campaign
