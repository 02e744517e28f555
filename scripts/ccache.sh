# Sourced by scripts/train.sh and scripts/test.sh: kiln's compiler cache (Note [compiler cache] in
# CMakeLists.txt). Sets kiln_ccache_dir (KILN_CCACHE_DIR, default ~/.cache/kiln-ccache), which
# both scripts pass to CMake, and prints the hit rate of each build stage.
kiln_ccache_dir=${KILN_CCACHE_DIR:-${HOME:-/root}/.cache/kiln-ccache}
export KILN_CCACHE_DIR=$kiln_ccache_dir

ccache_stat() { CCACHE_DIR=$kiln_ccache_dir ccache --print-stats | awk -v k="$1" '$1 == k {print $2}'; }

# ccache_begin: remembers the counters before a build stage.
ccache_begin() {
  command -v ccache >/dev/null || return 0
  ccache_hits0=$(($(ccache_stat direct_cache_hit) + $(ccache_stat preprocessed_cache_hit)))
  ccache_misses0=$(ccache_stat cache_miss)
}

# ccache_report LABEL: prints how many of the stage's compiles the cache answered.
ccache_report() {
  command -v ccache >/dev/null || {
    echo "   ccache ($1): not installed, nothing cached"
    return 0
  }
  local hits misses total size
  hits=$(($(ccache_stat direct_cache_hit) + $(ccache_stat preprocessed_cache_hit) - ccache_hits0))
  misses=$(($(ccache_stat cache_miss) - ccache_misses0))
  total=$((hits + misses))
  size=$(($(ccache_stat cache_size_kibibyte) / 1024))
  if ((total == 0)); then
    echo "   ccache ($1): nothing compiled (the build was up to date); cache $size MiB in $kiln_ccache_dir"
  else
    echo "   ccache ($1): $hits of $total compiles were hits ($((100 * hits / total)) %); cache $size MiB in $kiln_ccache_dir"
  fi
}
