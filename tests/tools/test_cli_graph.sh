#!/usr/bin/env bash
# End-to-end checks of the `kiln` command: `kiln summary` and `kiln graph` (text, JSON, DOT, SVG,
# passes). One of the kiln_cli_* CTest tests, split so that CTest runs them side by side
# (tools/CMakeLists.txt).
# Usage: test_cli_graph.sh path/to/kiln
set -euo pipefail

source "$(dirname "$0")/cli_test_lib.sh" "$1"

"$kiln" summary --model cnn >"$tmp/summary.txt"
grep -q "421,834" "$tmp/summary.txt" || fail "summary lacks the cnn's parameter count"

# kiln graph: text, JSON, DOT and (graphviz is a setup package) SVG of a traced model.
"$kiln" graph --model cnn --out "$tmp/graph" >"$tmp/graph.log"
grep -Eq "[0-9]+ nodes, [0-9]+ captures" "$tmp/graph.log" || fail "kiln graph: $(cat "$tmp/graph.log")"
grep -Eq "= conv2d(_affine)?\(%0, %[0-9]+" "$tmp/graph/graph.txt" ||
  fail "graph.txt lacks the first convolution: $(head -5 "$tmp/graph/graph.txt")"
grep -q "x: float32\[batch, 1, 28, 28\]" "$tmp/graph/graph.txt" || fail "graph.txt lacks the symbolic input"
grep -q '"format": "kiln.graph"' "$tmp/graph/graph.json" || fail "graph.json is not a kiln.graph document"
grep -q "^digraph" "$tmp/graph/graph.dot" || fail "graph.dot is not DOT"
grep -q "<svg" "$tmp/graph/graph.svg" || fail "graph.svg is not SVG"
grep -q "conv1.weight" "$tmp/graph/graph.svg" || fail "graph.svg does not name the captures"
"$kiln" graph --model resnet18 --data cifar10 --mode train --out "$tmp/graph_rn" >"$tmp/graph_rn.log"
grep -q "running_stat_update" "$tmp/graph_rn/graph.txt" || fail "a training-mode graph updates running statistics"
# --freeze folds each batch norm into its convolution's scale and shift once (Note [graph passes]).
"$kiln" graph --model cnn --freeze --out "$tmp/graph_frozen" >"$tmp/graph_frozen.log"
grep -q "optimized: .* nodes -> " "$tmp/graph_frozen.log" || fail "kiln graph prints no pass report"
grep -q "conv_bn_fold" "$tmp/graph/graph.txt" || fail "an unfrozen graph folds batch norms per call"
! grep -q "conv_bn_fold" "$tmp/graph_frozen/graph.txt" || fail "--freeze left conv_bn_fold nodes"
expect_error "unknown pass 'cs'" graph --model cnn --skip-passes cs --out "$tmp/g3"
expect_error "--freeze is for inference" graph --model cnn --mode train --freeze --out "$tmp/g4"
expect_error "--out" graph --model cnn
expect_error "--mode" graph --mode predict --out "$tmp/g2"
echo "kiln command (summary and graph): all checks passed"
