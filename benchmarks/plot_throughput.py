"""The table and plot of benchmarks/compare_frameworks.sh: training throughput (samples per
second of epoch time, validation included) of seeds/001's MLP by framework and batch size, the
median over rounds, with the GEMM floors (the step's GEMMs alone, per epoch).

usage: plot_throughput.py RESULTS CPU RAW_FLOOR_S TESSEL_FLOOR_S GEMM_BOUND_RATIO OUT_DIR
RESULTS: lines "<framework> <batch> <seconds per epoch> <test accuracy>".
"""
import statistics
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

TRAIN = 50000  # samples per epoch (60000 minus the 10000 held out for validation)

results, cpu, raw_floor, tessel_floor, bound_ratio, out = sys.argv[1:7]
runs = defaultdict(list)
accuracy = {}
with open(results) as f:
    for line in f:
        name, batch, seconds, acc = line.split()
        runs[(name, int(batch))].append(float(seconds))
        accuracy[(name, int(batch))] = float(acc)
names = [n for n in ("tessel", "before", "keras") if any(k[0] == n for k in runs)]
labels = {"tessel": "tessel", "before": "tessel before issue 12", "keras": "Keras 3 (JAX, CPU)"}
batches = sorted({b for _, b in runs})
median = {k: statistics.median(v) for k, v in runs.items()}

rows = ["| framework | batch | s/epoch (median) | samples/s | test accuracy | rounds |",
        "| --- | --- | --- | --- | --- | --- |"]
for b in batches:
    for n in names:
        if (n, b) in median:
            s = median[(n, b)]
            rows.append(f"| {labels[n]} | {b} | {s:.3f} | {TRAIN / s:,.0f} | "
                        f"{accuracy[(n, b)]:.4f} | {len(runs[(n, b)])} |")
ratios = []
for b in batches:
    if ("tessel", b) in median and ("keras", b) in median:
        ratios.append(f"batch {b}: tessel {median[('keras', b)] / median[('tessel', b)]:.2f}x "
                      "Keras's throughput")
    if ("tessel", b) in median and ("before", b) in median:
        ratios.append(f"batch {b}: {median[('before', b)] / median[('tessel', b)]:.2f}x the "
                      "build before")
text = [f"# CPU throughput: seeds/001's MLP on Fashion-MNIST ({cpu})", "",
        "Written by `benchmarks/compare_frameworks.sh`; epoch time includes the validation pass.",
        "", *rows, "", *[f"- {r}" for r in ratios],
        f"- the step's GEMMs alone at batch 32, per epoch: raw OpenBLAS {float(raw_floor):.3f} s, "
        f"tessel's GEMM {float(tessel_floor):.3f} s",
        f"- the 4096-wide GEMM-bound step: {float(bound_ratio):.3f} of raw sgemm's speed", ""]
with open(f"{out}/cpu_throughput.md", "w") as f:
    f.write("\n".join(text))

fig, ax = plt.subplots(figsize=(7, 4))
width = 0.8 / len(names)
for i, n in enumerate(names):
    xs = [j + i * width for j, b in enumerate(batches) if (n, b) in median]
    ys = [TRAIN / median[(n, b)] for b in batches if (n, b) in median]
    bars = ax.bar(xs, ys, width, label=labels[n])
    ax.bar_label(bars, fmt="%.0f", fontsize=8)
# Over the batch-32 group: the rate the step's GEMMs alone would allow (no other work).
if 32 in batches:
    j = batches.index(32)
    left, right = j - width / 2, j + width * (len(names) - 0.5)
    ax.hlines(TRAIN / float(raw_floor), left, right, colors="gray", linestyles="--",
              linewidth=1, label="batch 32: the step's GEMMs alone, raw OpenBLAS")
    ax.hlines(TRAIN / float(tessel_floor), left, right, colors="black", linestyles=":",
              linewidth=1, label="batch 32: the step's GEMMs alone, tessel's GEMM")
ax.set_xticks([j + width * (len(names) - 1) / 2 for j in range(len(batches))],
              [f"batch {b}" for b in batches])
ax.set_ylabel("training samples per second")
ax.set_title(f"seeds/001 MLP, Fashion-MNIST, {cpu}", fontsize=10)
top = max([TRAIN / v for v in median.values()] + [TRAIN / float(tessel_floor)])
ax.set_ylim(0, top * 1.55)
ax.legend(fontsize=8, loc="upper right")
fig.tight_layout()
fig.savefig(f"{out}/cpu_throughput.png", dpi=110)
print(f"wrote {out}/cpu_throughput.md and {out}/cpu_throughput.png")
print("\n".join(text))
