#!/usr/bin/env bash
# Installs what kiln needs from Debian's packages. Idempotent: skips apt when everything is there.
set -euo pipefail
packages=(
  g++ cmake ninja-build pkg-config clang-format
  ccache                 # the compiler cache of every build (Note [compiler cache] in CMakeLists.txt)
  git                    # scripts/check_format.sh lists the tracked sources with git ls-files
  libdnnl-dev            # oneDNN: matmul and convolution kernels
  ocl-icd-opencl-dev     # OpenCL headers + libOpenCL.so: Debian's oneDNN CMake config requires them
  libsleef-dev           # SLEEF: vectorized exp, log, tanh, erf, ... in the elementwise kernels
  libfmt-dev             # fmt: error messages and printing
  nlohmann-json3-dev     # nlohmann-json: op attributes, safetensors headers, parity data
  zlib1g-dev             # zlib: gzip-compressed IDX datasets
  libzip-dev             # libzip: NumPy .npz archives (kiln/io/npz.cpp)
  libssl-dev             # OpenSSL's libcrypto: SHA-256 of every file a manifest lists (kiln/io/sha256.cpp)
  libpng-dev libjpeg62-turbo-dev  # libpng, libjpeg-turbo: image-folder datasets
  libcli11-dev           # CLI11: the kiln command's flags
  libdw-dev              # elfutils' libdw: the user's source line for errors raised inside kiln
  libgtest-dev libgmock-dev  # GoogleTest: the unit tests
  libbenchmark-dev       # Google Benchmark: bench/
  python3-torch python3-numpy python3-pil  # PyTorch: live parity tests and head-to-head benchmarks
  dataset-fashion-mnist  # the real Fashion-MNIST data
  graphviz               # dot: `kiln graph` renders a traced graph to SVG (tests check the SVG)
  libcpp-httplib-dev     # cpp-httplib: the HTTP server of `kiln board` (and later the model server)
  chromium               # headless Chromium: the board's page is loaded, checked and screenshot
  curl                   # the board's test drives its HTTP server with real requests
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
