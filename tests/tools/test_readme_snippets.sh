#!/usr/bin/env bash
# Compiles and runs every ```cpp block of README.md (issue 16, defect 9): their #include and
# `using namespace` lines go first, each block's other lines become a function that main() calls
# in order, all in one program linked against the built libkiln. A snippet that does not
# compile, throws or crashes fails the test, and the output names it.
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
# One program (one compile of kiln.h instead of one per snippet): the snippets' #include and
# `using namespace` lines, each kept once, then each snippet's body as a function of its own,
# run in order by main.
heads, bodies = [], []
for block in blocks:
    head = [l for l in block.splitlines() if l.startswith("#include") or l.startswith("using namespace")]
    heads += [l for l in head if l not in heads]
    bodies.append([l for l in block.splitlines() if l not in head])
with open(f"{sys.argv[2]}/snippets.cpp", "w") as f:
    f.write("#include <exception>\n#include <iostream>\n" + "\n".join(heads) + "\n")
    for i, body in enumerate(bodies):
        f.write(f"\n// README snippet{i}\nstatic void snippet{i}() {{\n" + "\n".join(body) + "\n}\n")
    f.write("\nint main() {\n")
    for i in range(len(bodies)):
        f.write(f'  std::cout << "README snippet{i}: running" << std::endl;\n'
                f"  try {{ snippet{i}(); }} catch (const std::exception& e) {{\n"
                f'    std::cout << "README snippet{i} threw: " << e.what() << std::endl;\n'
                f"    return 1;\n  }}\n"
                f'  std::cout << "README snippet{i}: compiled and ran" << std::endl;\n')
    f.write("  return 0;\n}\n")
print(len(blocks))
PY
cd "$tmp"  # snippets write their files (history.csv, curves.svg) here
g++ -std=c++20 -O1 -I"$src" "$tmp/snippets.cpp" -o "$tmp/snippets" -L"$build" -lkiln -lfmt \
  -Wl,-rpath,"$build" 2>"$tmp/snippets.err" ||
  { echo "FAIL: the README snippets do not compile:" >&2; sed 's/^/  /' "$tmp/snippets.err" >&2;
    cat -n "$tmp/snippets.cpp" >&2; exit 1; }
if ! "$tmp/snippets" >"$tmp/snippets.out" 2>&1; then
  echo "FAIL: a README snippet failed when run:" >&2
  tail -20 "$tmp/snippets.out" >&2
  cat -n "$tmp/snippets.cpp" >&2
  exit 1
fi
grep "compiled and ran" "$tmp/snippets.out"
