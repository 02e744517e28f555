#!/usr/bin/env bash
# The installed kiln, used as an outside project uses it (Note [installed kiln] in
# cmake/kiln_install.cmake): installs the build into a temporary prefix, builds examples/deploy
# there with find_package(kiln), trains and exports a small model with the installed `kiln`, and
# checks that deploy_predict, linked only against the installed library, predicts a Fashion-MNIST
# test image as `kiln predict` does. The CTest test kiln_install_deploy (examples/CMakeLists.txt).
# Usage: check_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
prefix=$tmp/prefix

cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || fail "install: $(tail -5 "$tmp/install.log")"
for f in lib/libkiln.so include/kiln/kiln.h include/kiln/io/saved_model.h bin/kiln \
  lib/cmake/kiln/kilnConfig.cmake lib/cmake/kiln/kilnConfigVersion.cmake lib/cmake/kiln/kilnTargets.cmake; do
  [[ -e "$prefix/$f" ]] || fail "the installed tree lacks $f"
done

# The example, configured against the prefix only.
cmake -S "$src/examples/deploy" -B "$tmp/deploy" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/configure.log" 2>&1 || fail "configure: $(tail -20 "$tmp/configure.log")"
cmake --build "$tmp/deploy" >"$tmp/build.log" 2>&1 || fail "build: $(tail -30 "$tmp/build.log")"
ldd "$tmp/deploy/deploy_predict" >"$tmp/ldd.txt"
grep -qF "$prefix/lib/libkiln.so" "$tmp/ldd.txt" || fail "deploy_predict does not load the installed libkiln.so: $(cat "$tmp/ldd.txt")"

# A version the installed tree is not: find_package must refuse it.
mkdir "$tmp/wants2"
cat >"$tmp/wants2/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(wants_kiln_2 LANGUAGES CXX)
find_package(kiln 2.0 REQUIRED)
CMAKE
if cmake -S "$tmp/wants2" -B "$tmp/wants2/build" -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/wants2.log" 2>&1; then
  fail "find_package(kiln 2.0) succeeded against kiln $("$prefix/bin/kiln" --version)"
fi
grep -q "considered but not accepted" "$tmp/wants2.log" || fail "find_package(kiln 2.0): $(cat "$tmp/wants2.log")"

# A model trained and exported by the installed command line.
kiln=$prefix/bin/kiln
"$kiln" train --model cnn --train-samples 512 --batch-size 128 --epochs 1 --seed 5 --out "$tmp/run" \
  >"$tmp/train.log" 2>&1 || fail "installed kiln train: $(tail -3 "$tmp/train.log")"
"$kiln" export "$tmp/run" --out "$tmp/bundle" >"$tmp/export.log" || fail "export: $(cat "$tmp/export.log")"

# Test image 0 of Fashion-MNIST as a grey PNG (written with zlib, so no imaging library is needed).
"$py" - "$tmp/shoe.png" <<'PY'
import gzip, struct, sys, zlib
with gzip.open("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz") as f:
    f.read(16)
    pixels = f.read(28 * 28)
rows = b"".join(b"\0" + pixels[r * 28:(r + 1) * 28] for r in range(28))
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 28, 28, 8, 0, 0, 0, 0))
       + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
open(sys.argv[1], "wb").write(png)
PY

"$tmp/deploy/deploy_predict" "$tmp/bundle" "$tmp/shoe.png" --top 3 >"$tmp/deploy.txt" 2>&1 ||
  fail "deploy_predict: $(cat "$tmp/deploy.txt")"
[[ $(grep -c " %  " "$tmp/deploy.txt") -eq 3 ]] || fail "deploy_predict printed: $(cat "$tmp/deploy.txt")"
"$kiln" predict "$tmp/bundle" --input "$tmp/shoe.png" --top-k 1 >"$tmp/predict.txt" || fail "kiln predict: $(cat "$tmp/predict.txt")"
# deploy_predict: "   95.12 %  Ankle boot"; kiln predict: "shoe.png  1. Ankle boot 95.12%"
top_deploy=$(sed -n 2p "$tmp/deploy.txt" | sed -E 's/^ *([0-9.]+) %  (.*)$/\2 \1%/')
top_kiln=$(grep -F "1. " "$tmp/predict.txt" | sed -E 's/^.*1\. //')
[[ "$top_deploy" == "$top_kiln" ]] ||
  fail "deploy_predict's top class '$top_deploy' differs from kiln predict's '$top_kiln'"

# Clear errors from the deployed program.
if "$tmp/deploy/deploy_predict" "$tmp/nothing" "$tmp/shoe.png" >"$tmp/err.txt" 2>&1; then
  fail "deploy_predict on a missing bundle succeeded"
fi
grep -q "no saved model at" "$tmp/err.txt" || fail "deploy_predict on a missing bundle: $(cat "$tmp/err.txt")"
echo "installed kiln: deploy_predict predicts '$top_deploy', as kiln predict does"
