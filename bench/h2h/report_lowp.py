"""The reduced-precision part of the head-to-head report (issue 17): the lowp group's table, with
GFLOP/s as shares of the bfloat16 (int8) matmul peak measured in the harness, and the int8 and
bfloat16 lines of the infer and cnn groups against their targets. report.py calls
print_reduced_precision with its own row builder and renderer."""
from workloads import CONV, R18, TRAIN

# Reduced precision (issue 17, kiln_h2h / torch_h2h.py --group=lowp): float32 rows beside their
# bfloat16 twins, GFLOP/s as a share of this machine's measured bfloat16 matmul peak.
LOWP_ROWS = [
    ("lp_sgemm_1024", "matmul 1024 float32", "ms", "time", 1e-3, 2 * 1024 ** 3, ("kiln", "torch")),
    ("lp_bf16gemm_1024", "matmul 1024 bfloat16", "ms", "time", 1e-3, 2 * 1024 ** 3,
     ("kiln", "torch")),
    ("lp_int8gemm_1024", "matmul 1024 int8 (u8 x s8, GOP/s)", "ms", "time", 1e-3, 2 * 1024 ** 3,
     ("kiln",)),
    ("lp_conv_fwd_f32", "conv3x3 forward float32", "ms", "time", 1e-3, CONV, ("kiln",)),
    ("lp_conv_fwd_bf16", "conv3x3 forward bfloat16", "ms", "time", 1e-3, CONV, ("kiln", "torch")),
    ("lp_conv_bwd_data_f32", "conv3x3 backward-data float32", "ms", "time", 1e-3, CONV,
     ("kiln",)),
    ("lp_conv_bwd_data_bf16", "conv3x3 backward-data bfloat16", "ms", "time", 1e-3, CONV,
     ("kiln", "torch")),
    ("lp_conv_bwd_weight_f32", "conv3x3 backward-weights float32", "ms", "time", 1e-3, CONV,
     ("kiln",)),
    ("lp_conv_bwd_weight_bf16", "conv3x3 backward-weights bfloat16", "ms", "time", 1e-3, CONV,
     ("kiln", "torch")),
    ("lp_resnet18_train_step_f32", "ResNet-18 train step b128 float32", "img/s", "rate", 128,
     TRAIN * R18 * 128, ("kiln", "torch")),
    ("lp_resnet18_train_step_bf16", "ResNet-18 train step b128 bf16 autocast", "img/s", "rate",
     128, TRAIN * R18 * 128, ("kiln", "torch")),
]
LOWP_TARGETS = {
    "lp_resnet18_train_step_bf16": [(">= 1.5x PyTorch bf16 autocast",
                                     lambda f: f["torch"] / f["kiln"] >= 1.5)],
}


def print_reduced_precision(figures, info, build_rows, render, fmt):
    """Prints the section; returns the lowp rows for the JSON report."""
    lowp_rows, _, _ = build_rows(figures, LOWP_ROWS, LOWP_TARGETS)
    kinfo = info.get("kiln", {})
    bf16_peak = kinfo.get("peak_bf16_gflops")
    if any(r["figures"] for r in lowp_rows):
        int8_peak = kinfo.get("peak_int8_gops")
        for r in lowp_rows:  # shares of the bfloat16 (int8) peak instead of the sgemm one
            p = int8_peak if "int8" in r["key"] else bf16_peak
            r["peak_fraction"] = {s: g / p for s, g in r["gflops"].items()} if p else {}
        print(f"reduced precision: oneDNN ISA {kinfo.get('onednn_isa', '?')} (native bfloat16: "
              f"{kinfo.get('native_bf16', '?')}); matmul peaks measured here: float32 "
              f"{fmt(kinfo.get('peak_f32_gflops'))}, bfloat16 {fmt(bf16_peak)} GFLOP/s, int8 "
              f"{fmt(int8_peak)} GOP/s; GFLOP/s cells show the % of the bfloat16 peak (int8 "
              f"rows: of the int8 peak)")
        print(render(lowp_rows, bf16_peak, "kiln", False))
        f32 = figures.get("lp_resnet18_train_step_f32", {}).get("kiln")
        b16 = figures.get("lp_resnet18_train_step_bf16", {}).get("kiln")
        if f32 and b16:
            speedup = f32["median"] / b16["median"]
            print(f"ResNet-18 train step, kiln bf16 vs kiln float32: {speedup:.2f}x "
                  f"(target >= 3x: {'met' if speedup >= 3 else 'not met'})")
        print()
    int8_b1 = figures.get("resnet18_infer_b1", {})
    int8_b64 = figures.get("resnet18_infer_b64", {})
    if "kiln8" in int8_b1 and "ort" in int8_b1:
        # Issue 17: int8 (kiln quantize's path) against ONNX Runtime's float32, same weights.
        b1 = int8_b1["kiln8"]["median"] / int8_b1["ort"]["median"]
        print(f"int8 inference (kiln quantize; oneDNN ISA {kinfo.get('onednn_isa', '?')}): "
              f"ResNet-18 b1 {int8_b1['kiln8']['median'] * 1e3:.2f} ms, "
              f"{b1:.2f}x ONNX RT float32's {int8_b1['ort']['median'] * 1e3:.2f} ms "
              f"(target <= 0.4x: {'met' if b1 <= 0.4 else 'not met'}); kiln float32 "
              f"{int8_b1['kiln']['median'] * 1e3:.2f} ms")
        if "kiln8" in int8_b64 and "ort" in int8_b64:
            print(f"  b64 {64 / int8_b64['kiln8']['median']:.0f} img/s, "
                  f"{int8_b64['ort']['median'] / int8_b64['kiln8']['median']:.2f}x ONNX RT "
                  f"float32's {64 / int8_b64['ort']['median']:.0f} img/s; int8 logits vs "
                  f"float32: max |diff| / max |ref| = "
                  f"{kinfo.get('int8_logits_max_rel_err', float('nan')):.3f}")
        print()
    bf_b1 = figures.get("resnet18_infer_b1", {})
    bf_b64 = figures.get("resnet18_infer_b64", {})
    if "kilnbf" in bf_b64 and "ort" in bf_b64:
        # Issue 17: bfloat16 (a frozen graph traced under autocast) against ONNX RT's float32.
        ratio = bf_b64["ort"]["median"] / bf_b64["kilnbf"]["median"]
        gf = R18 * 64 / bf_b64["kilnbf"]["median"] / 1e9
        share = f", {100 * gf / bf16_peak:.0f}% of the bfloat16 peak" if bf16_peak else ""
        print(f"bfloat16 inference (compiled under autocast; native bfloat16: "
              f"{kinfo.get('native_bf16', '?')}, oneDNN ISA {kinfo.get('onednn_isa', '?')}): "
              f"ResNet-18 b64 {64 / bf_b64['kilnbf']['median']:.0f} img/s ({gf:.0f} GFLOP/s"
              f"{share}), {ratio:.2f}x ONNX RT float32's {64 / bf_b64['ort']['median']:.0f} "
              f"img/s (target >= 4x: {'met' if ratio >= 4 else 'not met'})"
              + (f"; kiln compiled float32 {64 / bf_b64['kilnc']['median']:.0f} img/s"
                 if "kilnc" in bf_b64 else ""))
        if "kilnbf" in bf_b1:
            print(f"  b1 {bf_b1['kilnbf']['median'] * 1e3:.2f} ms; bf16 logits vs float32: "
                  f"max |diff| / max |ref| = "
                  f"{kinfo.get('bf16_logits_max_rel_err', float('nan')):.3f}")
        print()
    cnn = figures.get("cnn_epoch", {})
    if "kilnbf" in cnn and "kiln" in cnn:
        r = cnn["kilnbf"]["median"] / cnn["kiln"]["median"]
        print(f"small CNN epoch under bfloat16 autocast: {cnn['kilnbf']['median']:.1f} s, "
              f"{r:.2f}x kiln float32's {cnn['kiln']['median']:.1f} s (target <= 0.5x: "
              f"{'met' if r <= 0.5 else 'not met'})")
        print()
    return lowp_rows
