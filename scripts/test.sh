#!/usr/bin/env bash
# Builds everything with -Werror and runs all tests (unit, registry gradchecks, live PyTorch
# parity), then again under AddressSanitizer + UndefinedBehaviorSanitizer, and checks formatting.
# KILN_TEST_BUILD_ONLY=1 configures both builds (every find_package and pkg-config check, and a
# test link with the sanitizer runtimes) and builds one program per external dependency set (the
# library and `kiln`, a GoogleTest program, the Google Benchmark program, the parity dumper), runs
# the three tests that need a package only at run time (parity_torch: python3-torch and numpy;
# kiln_cli_graph: graphviz; kiln_board: chromium and curl), then stops:
# scripts/fresh_machine_check.sh proves the packages with it in a fraction of the time.
# Every compile goes through kiln's compiler cache (scripts/ccache.sh); each build stage prints its
# hit rate. KILN_STAGE_LOG=FILE appends "stage<TAB>seconds" lines to FILE (.ci/run's table).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/ccache.sh
jobs=$(nproc)
build_only=${KILN_TEST_BUILD_ONLY:-0}
stage_start=$SECONDS
stage() { echo "== $1"; stage_start=$SECONDS; }
took() {
  local s=$((SECONDS - stage_start))
  echo "   ($1: $s s)"
  [[ -z ${KILN_STAGE_LOG:-} ]] || printf '%s\t%s\n' "$1" "$s" >>"$KILN_STAGE_LOG"
}

stage "format"
bash scripts/check_format.sh
took "format"

stage "build (Release, -Werror) and test"
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_WERROR=ON \
  -DKILN_CCACHE_DIR="$kiln_ccache_dir" >/dev/null
ccache_begin
if [[ $build_only == 1 ]]; then
  cmake --build build/release -j "$jobs" --target kiln_cli kiln_core_tests kiln_bench kiln_parity_dump
  took "Release build (build only: kiln, kiln_core_tests, kiln_bench, kiln_parity_dump)"
else
  cmake --build build/release -j "$jobs"
  took "Release build"
fi
ccache_report "Release build"
stage_start=$SECONDS
if [[ $build_only == 1 ]]; then
  # A package used only by tests (no compile needs it) is proved by the tests that use it.
  ctest --test-dir build/release --output-on-failure -j "$jobs" \
    -R '^(parity_torch|kiln_cli_graph|kiln_board)$' --no-tests=error
  took "Release tests (build only: the run-time packages' tests parity_torch, kiln_cli_graph, kiln_board)"
else
  ctest --test-dir build/release --output-on-failure -j "$jobs"
  took "Release tests"
fi

stage "build (ASan + UBSan) and test"
# The library is built without debug info (a third less compile time; reports still name the
# functions); the test programs keep their line tables (-g1, see CMakeLists.txt).
cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g0 \
  -DKILN_WERROR=ON -DKILN_SANITIZE=ON -DKILN_BUILD_BENCH=OFF \
  -DKILN_CCACHE_DIR="$kiln_ccache_dir" >/dev/null
if [[ $build_only == 1 ]]; then
  took "ASan configure (build only: not built)"
else
  ccache_begin
  cmake --build build/asan -j "$jobs"
  took "ASan build"
  ccache_report "ASan build"
  stage_start=$SECONDS
  # OpenMP's runtime keeps thread-local memory alive at exit; that is not a kiln leak. Label e2e
  # (dozens of end-to-end training runs, the board in Chromium) runs in Release only: under the
  # sanitizers the same command code is exercised by the kiln_cli_* tests, in a fraction of the time.
  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build/asan --output-on-failure -j "$jobs" -LE "parity|e2e"
  took "ASan tests"
fi
