#!/usr/bin/env bash
# The main job: set up, build, train on Fashion-MNIST, print test accuracy, save weights.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_BENCH=OFF >/dev/null
cmake --build build/release --target mlp_fashion_mnist
./build/release/examples/mlp_fashion_mnist --out out/mlp "$@"
