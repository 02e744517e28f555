#!/usr/bin/python3
"""Joins the head-to-head sides' JSON files into one table and one JSON report (bench/h2h/run.sh).

  report.py --dir WORK [--out FILE] [--compare SAVED] [--tolerance 0.10] [--meta KEY=VALUE ...]

WORK holds SIDE_GROUP.json for every side and group of SIDE_GROUPS (each process's output; a
result named "workload@compiled" is kiln compiled's, "@torchscript" TorchScript's) and
prepare.json (torch_h2h.py prepare). A missing or unreadable file leaves its cells empty ("-") and
is listed at the end.

Exit status: 0; 2 when a correctness guard failed (kiln's or ONNX Runtime's ResNet-18 logits
differ from PyTorch's by more than 1e-4 relative); 3 when --compare flagged a slowdown (and the
guards passed).
"""
import argparse
import glob
import json
import os
import statistics
import sys

import report_lowp
from workloads import CONV, MLP, R18, TRAIN, small_cnn_forward_flops

SIDES = ("kiln", "torch", "ort", "onednn")
SIDE_NAMES = {"kiln": "kiln", "torch": "PyTorch", "ort": "ONNX RT", "onednn": "oneDNN",
              "kilnc": "kiln compiled", "ts": "TorchScript", "libtorch": "LibTorch",
              "kiln8": "kiln int8", "kilnbf": "kiln bf16", "kilnb": "kiln bundle"}
GROUPS = ("micro", "infer", "compile", "train", "trainc", "cnn", "lowp")
# Which processes run which groups (run.sh).
SIDE_GROUPS = {"kiln": GROUPS, "torch": ("micro", "infer", "compile", "train", "cnn", "lowp"),
               "ort": ("infer", "compile"), "libtorch": ("micro", "infer", "train")}
# A result key "name@suffix" is the workload `name` on another side of the same process.
SUFFIX_SIDES = {"compiled": "kilnc", "torchscript": "ts", "int8": "kiln8", "bf16": "kilnbf",
                "bundle": "kilnb"}
BATCHES = (1, 8, 32, 64, 128)
LOGITS_TOLERANCE = 1e-4


# key, label, unit, how a figure is shown ("time" in unit's scale, "rate" items/s, "mib"),
# scale or items, FLOPs per call (None: not compute-bound), sides.
ROWS = [
    ("dispatch_add", "eager dispatch, 1-element add", "us", "time", 1e-6, None,
     ("kiln", "torch")),
    ("sgemm_1024", "sgemm 1024x1024", "ms", "time", 1e-3, 2 * 1024 ** 3,
     ("kiln", "torch", "onednn")),
    ("conv_fwd", "conv3x3 64->64 32x32 b64 forward", "ms", "time", 1e-3, CONV,
     ("kiln", "torch")),
    ("conv_bwd_data", "conv3x3 backward-data", "ms", "time", 1e-3, CONV, ("kiln", "torch")),
    ("conv_bwd_weight", "conv3x3 backward-weights", "ms", "time", 1e-3, CONV,
     ("kiln", "torch")),
    ("resnet18_train_step", "ResNet-18 train step b128 Adam", "img/s", "rate", 128,
     TRAIN * R18 * 128, ("kiln", "torch")),
    ("resnet18_infer_b1", "ResNet-18 inference b1 latency", "ms", "time", 1e-3, R18,
     ("kiln", "torch", "ort", "kiln8", "kilnbf")),
    ("resnet18_infer_b64", "ResNet-18 inference b64", "img/s", "rate", 64, R18 * 64,
     ("kiln", "torch", "ort", "kiln8", "kilnbf")),
    ("mlp_step", "MLP 784-256-10 SGD step b64", "ms", "time", 1e-3, TRAIN * MLP * 64,
     ("kiln", "torch")),
    ("cnn_epoch", "small CNN Fashion-MNIST epoch", "s", "time", 1.0,
     TRAIN * small_cnn_forward_flops() * 60000, ("kiln", "torch", "kilnbf")),
    ("resnet18_train_rss", "ResNet-18 train peak RSS", "MiB", "mib", 1.0, None,
     ("kiln", "torch")),
]

# key -> [(description, predicate over the row's seconds/MiB by side)]. Speed targets compare
# seconds per call (lower is faster); a rate's ratio is the inverse ratio of times.
# Graph mode (issue 15): kiln compiled against the graph runtimes and C++ API a user would pick
# instead. key, label, unit, kind, scale, FLOPs, then the targets over the rows' seconds (MiB).
GRAPH_ROWS = [r for r in ROWS if r[0] in (
    "dispatch_add", "resnet18_infer_b1", "resnet18_infer_b64", "resnet18_train_step", "mlp_step",
    "cnn_epoch", "resnet18_train_rss")]
# kilnb: the same ResNet-18 saved as a bundle and loaded (io::load_model), issue 39.
GRAPH_SIDES = ("kilnc", "kilnb", "kiln", "ts", "torch", "libtorch", "ort")
GRAPH_TARGETS = {
    "resnet18_infer_b1": [("latency <= 0.9x ONNX RT", lambda f: f["kilnc"] <= 0.9 * f["ort"])],
    "resnet18_infer_b64": [(">= 1.6x ONNX RT", lambda f: f["ort"] / f["kilnc"] >= 1.6),
                           (">= 1.3x TorchScript", lambda f: f["ts"] / f["kilnc"] >= 1.3)],
    "resnet18_train_step": [(">= 1.6x PyTorch", lambda f: f["torch"] / f["kilnc"] >= 1.6),
                            (">= 1.15x kiln eager", lambda f: f["kiln"] / f["kilnc"] >= 1.15)],
    "mlp_step": [(">= 3x PyTorch", lambda f: f["torch"] / f["kilnc"] >= 3.0),
                 (">= 1.5x LibTorch", lambda f: f["libtorch"] / f["kilnc"] >= 1.5)],
    "cnn_epoch": [(">= 2x PyTorch", lambda f: f["torch"] / f["kilnc"] >= 2.0)],
    "resnet18_train_rss": [("<= 0.5x PyTorch", lambda f: f["kilnc"] <= 0.5 * f["torch"])],
}

TARGETS = {
    "resnet18_train_step": [(">= 1.2x PyTorch img/s", lambda f: f["torch"] / f["kiln"] >= 1.2)],
    "resnet18_infer_b64": [(">= 0.9x ONNX RT", lambda f: f["ort"] / f["kiln"] >= 0.9),
                           (">= 1.2x PyTorch", lambda f: f["torch"] / f["kiln"] >= 1.2),
                           # Issue 17: bfloat16 (compiled, autocast) against ONNX RT's float32.
                           ("bf16 >= 4x ONNX RT", lambda f: f["ort"] / f["kilnbf"] >= 4.0)],
    "resnet18_infer_b1": [("latency <= 1.2x ONNX RT", lambda f: f["kiln"] <= 1.2 * f["ort"]),
                          # Issue 17: int8 (kiln quantize) against ONNX RT's float32.
                          ("int8 latency <= 0.4x ONNX RT", lambda f: f["kiln8"] <= 0.4 * f["ort"])],
    "mlp_step": [(">= 1.5x PyTorch", lambda f: f["torch"] / f["kiln"] >= 1.5)],
    "cnn_epoch": [(">= 1.3x PyTorch", lambda f: f["torch"] / f["kiln"] >= 1.3),
                  # Issue 17: the bfloat16 epoch against kiln's own float32 one.
                  ("bf16 <= 0.5x kiln float32", lambda f: f["kilnbf"] <= 0.5 * f["kiln"])],
    "resnet18_train_rss": [("<= PyTorch", lambda f: f["kiln"] <= f["torch"])],
}


def load_sides(work):
    """{"kiln_micro": doc, "kiln_micro.r2": doc, ...}: round 1 and any later rounds (run.sh
    --rounds)."""
    raw, missing = {}, []
    for side, group in [(s, g) for s, groups in SIDE_GROUPS.items() for g in groups]:
        name = f"{side}_{group}"
        later = sorted(glob.glob(os.path.join(work, f"{name}.r*.json")),
                       key=lambda p: int(p.rsplit(".r", 1)[1].split(".")[0]))
        for path in [os.path.join(work, f"{name}.json")] + later:
            try:
                with open(path) as f:
                    raw[os.path.basename(path)[:-len(".json")]] = json.load(f)
            except (OSError, ValueError) as e:
                missing.append(f"{path}: {e.__class__.__name__}: {e}")
    return raw, missing


def median_or_none(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def collect(raw):
    """{key: {side: {"median": seconds or MiB, "min": ..., "extra": {...}}}} and info by side.
    With several rounds a figure is the median of the rounds' medians, its min the best of all."""
    rounds, info, rss = {}, {}, {}
    for name, doc in raw.items():
        side = doc.get("side", name.split("_")[0])
        group = doc.get("group", "")
        # The compile group's info is per process kind (kiln compile_s, ORT session_create_s).
        info_key = {"compile": side + "_compile", "trainc": "kilnc"}.get(group, side)
        info.setdefault(info_key, {}).update(doc.get("info", {}))
        if "rss_peak_mib" in doc.get("info", {}):
            rss.setdefault("kilnc" if group == "trainc" else side, []).append(
                doc["info"]["rss_peak_mib"])
        for key, r in doc.get("results", {}).items():
            if key == "sgemm_1024_onednn":
                key, side_here = "sgemm_1024", "onednn"
            elif "@" in key:
                key, suffix = key.split("@", 1)
                side_here = SUFFIX_SIDES.get(suffix, suffix)
            else:
                side_here = side
            rounds.setdefault(key, {}).setdefault(side_here, []).append(r)
    figures = {}
    for key, by_side in rounds.items():
        for side, rs in by_side.items():
            figures.setdefault(key, {})[side] = {
                "median": statistics.median(r["median_s"] for r in rs),
                "min": min(r["min_s"] for r in rs),
                "reps": sum(r.get("reps") or 0 for r in rs) or None,
                "rounds": len(rs),
                "cpu_median": median_or_none([r.get("cpu_median_s") for r in rs]),
                "extrapolated_from_steps": rs[0].get("extrapolated_from_steps")}
    for side, peaks in rss.items():
        if side in ("kiln", "torch", "kilnc", "libtorch"):
            figures.setdefault("resnet18_train_rss", {})[side] = {
                "median": statistics.median(peaks), "min": min(peaks), "rounds": len(peaks)}
    return figures, info


def shown(kind, scale, value):
    """A figure in the table's unit: times scaled, rates as items per second, MiB as is."""
    if kind == "time":
        return value / scale
    if kind == "rate":
        return scale / value
    return value


def fmt(x):
    if x is None:
        return "-"
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.3g}"


def build_rows(figures, spec=None, targets=None, base="kiln", all_sides=None):
    """One row per workload of `spec` (ROWS by default): each side's figure, GFLOP/s and share of
    the sgemm peak, `base`'s ratio to every other side, and the row's targets. all_sides, when
    given, replaces each row's own list of sides."""
    spec = ROWS if spec is None else spec
    targets = TARGETS if targets is None else targets
    # The machine's peak: the best sgemm repetition of the three (the least disturbed by other
    # load); every workload's fraction of it uses that workload's median.
    peak, peak_side = 0.0, None
    for side in ("kiln", "onednn", "torch"):
        f = figures.get("sgemm_1024", {}).get(side)
        if f:
            g = 2 * 1024 ** 3 / f["min"] / 1e9
            if g > peak:
                peak, peak_side = g, side
    rows = []
    for key, label, unit, kind, scale, flops, own_sides in spec:
        sides = all_sides or own_sides
        fig = figures.get(key, {})
        row = {"key": key, "label": label, "unit": unit, "figures": {}, "vs": {}, "vs_cpu": {},
               "gflops": {}, "peak_fraction": {}, "targets": []}
        for side in sides:
            f = fig.get(side)
            if not f:
                continue
            row["figures"][side] = {"median": shown(kind, scale, f["median"]),
                                    "best": shown(kind, scale, f["min"]),
                                    "median_raw": f["median"], "min_raw": f["min"],
                                    "cpu_median_raw": f.get("cpu_median")}
            if f.get("extrapolated_from_steps"):
                row["extrapolated_from_steps"] = f["extrapolated_from_steps"]
            if flops:
                g = flops / f["median"] / 1e9
                row["gflops"][side] = g
                if peak:
                    row["peak_fraction"][side] = g / peak
        k = fig.get(base)
        for side in sides:
            if side != base and k and fig.get(side):
                o = fig[side]["median"]
                # Speed: other's time / kiln's (> 1: kiln faster). Memory: kiln's / other's.
                row["vs"][side] = k["median"] / o if kind == "mib" else o / k["median"]
                # The same ratio in CPU seconds (all threads), less sensitive to other load.
                kc, oc = k.get("cpu_median"), fig[side].get("cpu_median")
                if kind != "mib" and kc and oc:
                    row["vs_cpu"][side] = oc / kc
        medians = {s: v["median"] for s, v in fig.items()}
        for text, pred in targets.get(key, []):
            try:
                met = bool(pred(medians))
            except (KeyError, ZeroDivisionError):
                met = None
            row["targets"].append({"target": text, "met": met})
        rows.append(row)
    return rows, peak, peak_side


def compare(rows, saved, tolerance):
    """Marks each row's kiln figure against a saved report. Flagged: kiln's median is more than
    `tolerance` worse than saved and, where PyTorch ran the workload both times, kiln's ratio to
    PyTorch also fell by more than `tolerance` (a machine that got slower slows both sides)."""
    old = {r["key"]: r for r in saved.get("rows", [])}
    flagged = []
    for row in rows:
        o = old.get(row["key"])
        k, ok = row["figures"].get("kiln"), o and o["figures"].get("kiln")
        if not k or not ok:
            continue
        # Worse = more seconds or more MiB (raw figures are seconds per call or MiB).
        change = k["median_raw"] / ok["median_raw"] - 1.0
        entry = {"key": row["key"], "kiln_change": change}
        worse = change > tolerance
        t, ot = row["figures"].get("torch"), o["figures"].get("torch")
        if t and ot:
            torch_change = t["median_raw"] / ot["median_raw"] - 1.0
            entry["torch_change"] = torch_change
            relative = (1.0 + change) / (1.0 + torch_change) - 1.0
            entry["relative_change"] = relative
            worse = worse and relative > tolerance
        entry["flagged"] = worse
        row["vs_saved"] = entry
        if worse:
            flagged.append(entry)
    return flagged


def render(rows, peak, peak_side, has_saved):
    head = ["workload", "unit", "kiln", "PyTorch", "ONNX RT", "oneDNN", "kiln vs PT",
            "kiln vs ORT", "kiln vs 1DNN", "kiln GF/s %pk", "PT GF/s %pk", "ORT GF/s %pk",
            "1DNN GF/s %pk", "target", "met"]
    if has_saved:
        head.append("kiln vs saved")
    lines = [head]
    for r in rows:
        label = r["label"] + (" *" if r.get("extrapolated_from_steps") else "")
        cells = [label, r["unit"]]
        for side in SIDES:
            f = r["figures"].get(side)
            cells.append(f"{fmt(f['median'])} ({fmt(f['best'])})" if f else "-")
        for side in ("torch", "ort", "onednn"):
            v = r["vs"].get(side)
            cells.append(f"{v:.2f}x" if v is not None else "-")
        for side in SIDES:
            g = r["gflops"].get(side)
            p = r["peak_fraction"].get(side)
            cells.append(f"{g:.1f} {100 * p:.0f}%" if g is not None and p is not None else
                         (f"{g:.1f}" if g is not None else "-"))
        cells.append("; ".join(t["target"] for t in r["targets"]) or "")
        cells.append("; ".join({True: "PASS", False: "FAIL", None: "n/a"}[t["met"]]
                               for t in r["targets"]))
        if has_saved:
            s = r.get("vs_saved")
            if not s:
                cells.append("-")
            else:
                cell = f"{100 * s['kiln_change']:+.0f}% {'SLOWER' if s['flagged'] else 'ok'}"
                if "torch_change" in s and abs(s["torch_change"]) > 0.05:
                    cell += f" (PT {100 * s['torch_change']:+.0f}%)"
                cells.append(cell)
        lines.append(cells)
    return table(lines, left={0, 1, head.index("target"), head.index("met")})


def render_graph(rows):
    """The graph-mode table: kiln compiled's figure next to every other side's, its ratio to
    each (X's time / kiln compiled's; for RSS kiln compiled's MiB / X's), its GFLOP/s and share of
    the sgemm peak, and issue 15's targets."""
    head = ["workload", "unit"] + [SIDE_NAMES[s] for s in GRAPH_SIDES] + \
        [f"vs {SIDE_NAMES[s]}" for s in GRAPH_SIDES[1:]] + ["compiled GF/s %pk", "target", "met"]
    lines = [head]
    for r in rows:
        cells = [r["label"] + (" *" if r.get("extrapolated_from_steps") else ""), r["unit"]]
        for side in GRAPH_SIDES:
            f = r["figures"].get(side)
            cells.append(f"{fmt(f['median'])} ({fmt(f['best'])})" if f else "-")
        for side in GRAPH_SIDES[1:]:
            v = r["vs"].get(side)
            cells.append(f"{v:.2f}x" if v is not None else "-")
        g, p = r["gflops"].get("kilnc"), r["peak_fraction"].get("kilnc")
        cells.append(f"{g:.1f} {100 * p:.0f}%" if g is not None and p is not None else
                     (f"{g:.1f}" if g is not None else "-"))
        cells.append("; ".join(t["target"] for t in r["targets"]) or "")
        cells.append("; ".join({True: "PASS", False: "FAIL", None: "n/a"}[t["met"]]
                               for t in r["targets"]))
        lines.append(cells)
    return table(lines, left={0, 1, len(head) - 2, len(head) - 1})


def compile_rows(figures, info):
    """Compile time and latency by batch size (ResNet-18 inference): kiln compiles once with a
    symbolic batch, TorchScript traces per size, ONNX Runtime creates one session."""
    rows = []
    k, t, o = info.get("kiln_compile", {}), info.get("torch_compile", {}), info.get("ort_compile", {})
    for b in BATCHES:
        fig = figures.get(f"resnet18_latency_b{b}", {})
        lat = {side: fig[side]["median"] for side in ("kilnc", "ts", "ort") if side in fig}
        rows.append({"batch": b,
                     "kiln_compile_s": k.get("compile_s") if b == BATCHES[0] else 0.0,
                     "kiln_first_call_s": k.get(f"first_call_s_b{b}"),
                     "torchscript_compile_s": t.get(f"compile_s_b{b}"),
                     "ort_session_s": o.get("session_create_s") if b == BATCHES[0] else 0.0,
                     "ort_first_call_s": o.get(f"first_call_s_b{b}"),
                     "latency_s": lat})
    return rows, k.get("traces")


def render_compile(rows, traces):
    ms = lambda v: "-" if v is None else f"{1e3 * v:.1f}"
    head = ["batch", "kiln compile ms", "kiln 1st call ms", "kiln ms", "TS compile ms", "TS ms",
            "ORT session ms", "ORT 1st call ms", "ORT ms", "kiln vs TS", "kiln vs ORT"]
    lines = [head]
    for r in rows:
        lat = r["latency_s"]
        vs = lambda side: (f"{lat[side] / lat['kilnc']:.2f}x" if side in lat and "kilnc" in lat
                           else "-")
        lines.append([str(r["batch"]), ms(r["kiln_compile_s"]), ms(r["kiln_first_call_s"]),
                      ms(lat.get("kilnc")), ms(r["torchscript_compile_s"]), ms(lat.get("ts")),
                      ms(r["ort_session_s"]), ms(r["ort_first_call_s"]), ms(lat.get("ort")),
                      vs("ts"), vs("ort")])
    note = (f"kiln: one trace with a symbolic batch for all sizes ({traces} trace(s) in all; "
            "compile = trace + passes + the first call at batch 1); TorchScript: trace + freeze + "
            "optimize_for_inference + first call, per size; ONNX Runtime: one session (dynamic "
            "batch).")
    return table(lines, left=set()) + "\n" + note


def table(lines, left):
    widths = [max(len(l[i]) for l in lines) for i in range(len(lines[0]))]
    out = []
    for i, l in enumerate(lines):
        out.append(" | ".join(c.ljust(w) if j in left else c.rjust(w)
                              for j, (c, w) in enumerate(zip(l, widths))))
        if i == 0:
            out.append("-+-".join("-" * w for w in widths))
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dir", required=True)
    p.add_argument("--out", default="")
    p.add_argument("--compare", default="")
    p.add_argument("--tolerance", type=float, default=0.10)
    p.add_argument("--meta", action="append", default=[], help="KEY=VALUE for the JSON's meta")
    a = p.parse_args()

    raw, missing = load_sides(a.dir)
    figures, info = collect(raw)
    rows, peak, peak_side = build_rows(figures)
    meta = dict(kv.split("=", 1) for kv in a.meta)
    meta["loadavg"] = {name: [d.get("loadavg_before"), d.get("loadavg_after")]
                       for name, d in raw.items()}
    torch_doc = next((d for n, d in raw.items() if n.startswith("torch_")), {})
    meta["versions"] = {"torch": torch_doc.get("version"),
                        "libtorch": raw.get("libtorch_micro", {}).get("version"),
                        "onnxruntime-node": raw.get("ort_infer", {}).get("version")}
    meta["torch_blas"] = info.get("torch", {}).get("blas")
    try:
        with open(os.path.join(a.dir, "prepare.json")) as f:
            meta["prepare"] = json.load(f)
    except (OSError, ValueError):
        pass

    checks, failed_checks = {}, []
    for side in ("kiln", "ort"):
        err = info.get(side, {}).get("logits_max_rel_err")
        if err is None:
            continue
        ok = err <= LOGITS_TOLERANCE
        checks[f"{side}_resnet18_logits_vs_torch"] = {"max_rel_err": err, "ok": ok}
        if not ok:
            failed_checks.append(side)

    flagged, saved_path = [], None
    if a.compare:
        with open(a.compare) as f:
            saved = json.load(f)
        saved_path = a.compare
        flagged = compare(rows, saved, a.tolerance)
        saved_mode = saved.get("meta", {}).get("mode")
        if saved_mode != meta.get("mode"):
            print(f"warning: comparing a {meta.get('mode')} run with a saved {saved_mode} run")

    quick = meta.get("mode") == "quick"
    print(f"kiln head-to-head: {meta.get('mode', '?')} mode, {meta.get('threads', '?')} threads "
          f"each, medians (best in parentheses) of the repetitions")
    print(f"machine: {meta.get('cpu', '?')}, {meta.get('cpus', '?')} CPUs; load average "
          f"{meta.get('load_start', '?')} at start, {meta.get('load_end', '?')} at end")
    print(f"PyTorch {meta['versions']['torch']} (BLAS: {meta['torch_blas'] or '?'}), "
          f"onnxruntime-node {meta['versions']['onnxruntime-node']}, kiln {meta.get('kiln', '?')}")
    if peak:
        print(f"sgemm peak: {peak:.1f} GFLOP/s (the best sgemm repetition of kiln, oneDNN and "
              f"PyTorch: {SIDE_NAMES[peak_side]}'s); GFLOP/s cells show the % of it")
    print()
    print(render(rows, peak, peak_side, bool(saved_path)))
    print()
    graph_rows, _, _ = build_rows(figures, GRAPH_ROWS, GRAPH_TARGETS, base="kilnc",
                                  all_sides=GRAPH_SIDES)
    print("graph mode: kiln compiled (traced once, every pass; inference frozen) against kiln "
          "eager, TorchScript (trace + freeze + optimize_for_inference), PyTorch eager, LibTorch "
          "(C++) and ONNX Runtime; vs X: X's time / kiln compiled's (> 1: compiled faster), for "
          "RSS compiled's MiB / X's")
    print(render_graph(graph_rows))
    print()
    crows, traces = compile_rows(figures, info)
    print("compile time and latency by batch size, ResNet-18 inference:")
    print(render_compile(crows, traces))
    print()
    lowp_rows = report_lowp.print_reduced_precision(figures, info, build_rows, render, fmt)
    print("kiln vs X: X's time / kiln's time (> 1: kiln faster; rates likewise); for peak RSS, "
          "kiln's MiB / PyTorch's (< 1: kiln smaller).")
    print("JSON: every repetition's seconds, minimums, and the ratios in CPU seconds (vs_cpu), "
          "which a loaded machine distorts less than wall time.")
    print("GFLOP/s: convolutions and matmuls only (training ~ 3x forward); RSS: VmHWM of a "
          "process that ran only the training steps (the framework's own import included).")
    if any(f > 1.0 for r in rows for f in r["peak_fraction"].values()):
        print("> 100% of peak: the 1024 sgemm did not reach the machine's peak in this run "
              "(other load, or the workload uses wider kernels); read those cells with care.")
    if any(r.get("extrapolated_from_steps") for r in rows):
        n = next(r["extrapolated_from_steps"] for r in rows if r.get("extrapolated_from_steps"))
        print(f"* --quick: extrapolated from {n} training steps to 60000 / 128 steps, not a "
              f"full epoch.")
    elif quick:
        print("* --quick mode: few repetitions; do not quote these numbers.")
    for name, c in checks.items():
        print(f"correctness: {name}: max |diff| / max |ref| = {c['max_rel_err']:.2e} "
              f"(<= {LOGITS_TOLERANCE:g}: {'ok' if c['ok'] else 'FAILED'})")
    for side in ("kiln", "kilnc", "torch", "libtorch"):
        i = info.get(side, {})
        if "rss_peak_mib" in i:
            extra = ""
            if "allocator_peak_reserved_mib" in i:
                extra = f", caching allocator peak reserved {i['allocator_peak_reserved_mib']:.0f}"
            print(f"memory: {SIDE_NAMES[side]} peak RSS {i['rss_peak_mib']:.0f} MiB after "
                  f"{i.get('steps')} steps (RSS before the model: {i['rss_baseline_mib']:.0f} "
                  f"MiB{extra})")
    if saved_path:
        print(f"regression check vs {saved_path} (tolerance {100 * a.tolerance:.0f}%): "
              + (", ".join(f"{e['key']} {100 * e['kiln_change']:+.0f}%" for e in flagged)
                 + " SLOWER" if flagged else "no slowdown flagged"))
    for m in missing:
        print(f"missing: {m}")

    if a.out:
        doc = {"meta": meta, "peak_gflops": peak, "peak_from": peak_side, "rows": rows,
               "graph_rows": graph_rows, "compile_rows": crows, "lowp_rows": lowp_rows,
               "checks": checks, "regressions": flagged, "compared_with": saved_path,
               "missing": missing, "info": info, "raw": raw}
        tmp = a.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
        os.replace(tmp, a.out)
        print(f"wrote {a.out}")
    if failed_checks:
        return 2
    return 3 if flagged else 0


if __name__ == "__main__":
    sys.exit(main())
