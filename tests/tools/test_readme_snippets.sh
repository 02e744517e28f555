#!/usr/bin/env bash
# Compiles and runs every ```cpp block of README.md (issue 16, defect 9): its #include and
# `using namespace` lines go first, the rest becomes main()'s body, linked against the built
# libkiln. A snippet that does not compile, throws or crashes fails the test.
# Usage: test_readme_snippets.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src="$(realpath "$1")"
build="$(realpath "$2")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 - "$src/README.md" "$tmp" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
blocks = re.findall(r"```cpp\n(.*?)```", text, re.S)
assert blocks, "README.md has no ```cpp block"
for i, block in enumerate(blocks):
    head = [l for l in block.splitlines() if l.startswith("#include") or l.startswith("using namespace")]
    body = [l for l in block.splitlines() if l not in head]
    with open(f"{sys.argv[2]}/snippet{i}.cpp", "w") as f:
        f.write("#include <iostream>\n" + "\n".join(head) + "\nint main() {\n" + "\n".join(body) +
                "\n  return 0;\n}\n")
print(len(blocks))
PY
cd "$tmp"  # snippets write their files (history.csv, curves.svg) here
for f in "$tmp"/snippet*.cpp; do
  name=$(basename "$f" .cpp)
  g++ -std=c++20 -O1 -I"$src" "$f" -o "$tmp/$name" -L"$build" -lkiln -lfmt \
    -Wl,-rpath,"$build" 2>"$tmp/$name.err" ||
    { echo "FAIL: README $name does not compile:" >&2; sed 's/^/  /' "$tmp/$name.err" >&2; cat -n "$f" >&2; exit 1; }
  if ! "$tmp/$name" >"$tmp/$name.out" 2>&1; then
    echo "FAIL: README $name failed when run:" >&2
    tail -20 "$tmp/$name.out" >&2
    cat -n "$f" >&2
    exit 1
  fi
  echo "README $name: compiled and ran"
done
