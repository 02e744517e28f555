#!/usr/bin/env bash
# Builds everything with -Werror and runs all tests (unit, registry gradchecks, live PyTorch
# parity), then again under AddressSanitizer + UndefinedBehaviorSanitizer, and checks formatting.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
jobs=$(nproc)

echo "== format"
bash scripts/check_format.sh

echo "== build (Release, -Werror) and test"
cmake -S . -B build/ci -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_WERROR=ON >/dev/null
cmake --build build/ci -j "$jobs"
ctest --test-dir build/ci --output-on-failure -j "$jobs"

echo "== build (ASan + UBSan) and test"
cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKILN_WERROR=ON -DKILN_SANITIZE=ON \
  -DKILN_BUILD_BENCH=OFF >/dev/null
cmake --build build/asan -j "$jobs"
# OpenMP's runtime keeps thread-local memory alive at exit; that is not a kiln leak.
ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build/asan --output-on-failure -j "$jobs" -LE parity
