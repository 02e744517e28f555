#!/usr/bin/env bash
# The main job: set up, build the `kiln` command, train the small CNN on Fashion-MNIST for two
# epochs (Adam 1e-3, batch 128) with a progress bar, print the test accuracy and save the
# checkpoint, weights, curves and logs in out/cnn. Extra arguments go to `kiln train`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The same build tree and options as scripts/test.sh, so running both builds the library once.
source scripts/ccache.sh
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_WERROR=ON \
  -DKILN_CCACHE_DIR="$kiln_ccache_dir" >/dev/null
ccache_begin
cmake --build build/release --target kiln_cli
ccache_report "build of the kiln command"
# Running the main job again replaces out/cnn (--overwrite); with --resume among the extra
# arguments it continues the run there instead.
replace=(--overwrite)
for arg in "$@"; do [[ $arg == --resume ]] && replace=(); done
./build/release/tools/kiln train --model cnn --data fashion-mnist --epochs 2 --optimizer adam \
  --lr 1e-3 --batch-size 128 --out out/cnn "${replace[@]}" "$@"
