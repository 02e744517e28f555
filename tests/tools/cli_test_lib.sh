# Shared by the kiln command's test scripts: `source cli_test_lib.sh path/to/kiln` sets `kiln` and
# `tmp`, a scratch folder removed when the script exits.
kiln="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# fail MESSAGE: prints it and ends the test.
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
# expect_error TEXT ARGS...: kiln ARGS must exit non-zero and print TEXT.
expect_error() {
  local text="$1" out
  shift
  if out=$("$kiln" "$@" 2>&1); then fail "kiln $* succeeded; expected an error"; fi
  grep -qF -- "$text" <<<"$out" || fail "kiln $*: expected '$text' in: $out"
}
