"""The table and plot of benchmarks/compare_frameworks.sh: training throughput (samples per
second of epoch time, validation included) of seeds/001's MLP by framework and batch size, with
the GEMM floors (an epoch's GEMMs alone at batch 32, validation included), the GFLOP/s of the
4096-wide step by framework against raw sgemm, and the training throughput and test accuracy of
seeds/002's CNN by framework; medians over the rounds.

usage: plot_throughput.py RESULTS CPU OUT_DIR
RESULTS: lines "<framework> <batch> <seconds per epoch> <test accuracy>" (the MLP),
"wide <framework> <GFLOP/s>" (the 4096-wide step; framework "sgemm" for raw sgemm),
"floor <raw|tessel> <seconds per epoch>" (the GEMM floors, through raw OpenBLAS and tessel's GEMM)
and "cnn <framework> <seconds per epoch> <test accuracy>" (the CNN). A part without lines is left
out.
"""
import statistics
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

TRAIN = 50000  # samples per epoch (60000 minus the 10000 held out for validation)
CNN_TRAIN = 60000  # the CNN trains on every training image, without validation

results, cpu, out = sys.argv[1:4]
runs = defaultdict(list)
accuracy = {}
wide = defaultdict(list)
floors = defaultdict(list)
cnn = defaultdict(list)
cnn_accuracy = defaultdict(list)
with open(results) as f:
    for line in f:
        fields = line.split()
        if not fields:
            continue
        if fields[0] == "cnn":
            if len(fields) == 4:
                cnn[fields[1]].append(float(fields[2]))
                cnn_accuracy[fields[1]].append(float(fields[3]))
            continue
        if fields[0] in ("wide", "floor"):
            if len(fields) == 3 and fields[2]:
                (wide if fields[0] == "wide" else floors)[fields[1]].append(float(fields[2]))
            continue
        name, batch, seconds, acc = fields
        runs[(name, int(batch))].append(float(seconds))
        accuracy[(name, int(batch))] = float(acc)
labels = {"tessel": "tessel", "before": "tessel, earlier build", "keras": "Keras 3 (JAX, CPU)",
          "torch": "PyTorch (eager, CPU)", "sgemm": "raw sgemm (OpenBLAS), same GEMMs"}
names = [n for n in ("tessel", "before", "keras", "torch") if any(k[0] == n for k in runs)]
batches = sorted({b for _, b in runs})
median = {k: statistics.median(v) for k, v in runs.items()}
wide_median = {k: statistics.median(v) for k, v in wide.items()}
has_floors = bool(floors["raw"]) and bool(floors["tessel"])
raw_floor, tessel_floor = ((statistics.median(floors[k]) if has_floors else 0.0)
                           for k in ("raw", "tessel"))
best_floor = min(raw_floor, tessel_floor)
cnn_median = {k: statistics.median(v) for k, v in cnn.items()}

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
    for other, what in (("keras", "Keras's"), ("torch", "PyTorch's"), ("before", "the build before's")):
        if ("tessel", b) in median and (other, b) in median:
            ratios.append(f"batch {b}: tessel {median[(other, b)] / median[('tessel', b)]:.2f}x "
                          f"{what} throughput")
wide_rows = []
if wide_median:
    wide_rows = ["", "The 4096-wide step (3 x dense(4096), batch 512, Adam; 137.4 GFLOP of GEMM "
                 "per step), GFLOP/s of the whole step:", "",
                 "| framework | GFLOP/s (median) | ms/step | rounds |", "| --- | --- | --- | --- |"]
    for n in ("tessel", "keras", "torch", "sgemm"):
        if n in wide_median:
            g = wide_median[n]
            wide_rows.append(f"| {labels[n]} | {g:.1f} | {137.4e3 / g:.0f} | {len(wide[n])} |")
    for other, what in (("sgemm", "raw sgemm's speed"), ("keras", "Keras's"),
                        ("torch", "PyTorch's")):
        if "tessel" in wide_median and other in wide_median:
            ratios.append(f"4096-wide step: tessel {wide_median['tessel'] / wide_median[other]:.2f}"
                          f"x {what}")
cnn_labels = {"tessel": "tessel (2 processes, data parallel)", "keras": "Keras 3 (JAX, CPU)",
              "torch": "PyTorch (eager, CPU)"}
cnn_names = [n for n in ("tessel", "keras", "torch") if n in cnn_median]
cnn_rows = []
if cnn_names:
    cnn_rows = ["", "## seeds/002's CNN on Fashion-MNIST", "",
                "Conv2D 12 3x3 same -> BatchNormalization -> ReLU -> Conv2D 24 6x6 stride 2 -> "
                "BatchNormalization -> ReLU -> Conv2D 32 6x6 stride 2 same -> BatchNormalization -> "
                "ReLU -> GlobalAveragePooling2D -> Dense 256 relu -> Dropout 0.5 -> Dense 10; Adam, "
                "batch 64, shuffled, 60,000 images an epoch (no validation), the mean of the "
                "epochs (the first included); test accuracy after the run.", "",
                "| framework | s/epoch (median) | samples/s | test accuracy (median) | rounds |",
                "| --- | --- | --- | --- | --- |"]
    for n in cnn_names:
        s = cnn_median[n]
        cnn_rows.append(f"| {cnn_labels[n]} | {s:.2f} | {CNN_TRAIN / s:,.0f} | "
                        f"{statistics.median(cnn_accuracy[n]):.4f} | {len(cnn[n])} |")
    cnn_rows.append("")
    for other, what in (("keras", "Keras's"), ("torch", "PyTorch's")):
        if "tessel" in cnn_median and other in cnn_median:
            cnn_rows.append(f"- CNN: tessel {cnn_median[other] / cnn_median['tessel']:.2f}x "
                            f"{what} throughput")
text = [f"# CPU throughput: seeds/001's MLP and seeds/002's CNN on Fashion-MNIST ({cpu})", "",
        "Written by `benchmarks/compare_frameworks.sh`; the MLP's epoch time includes the "
        "validation pass.", ""]
if rows[2:] or wide_rows:
    text += ["## seeds/001's MLP", "", *rows, *wide_rows, "", *[f"- {r}" for r in ratios]]
    if has_floors:
        text += [f"- an epoch's GEMMs alone at batch 32 (validation included), median of "
                 f"{len(floors['raw'])}: raw OpenBLAS {raw_floor:.3f} s, tessel's GEMM "
                 f"{tessel_floor:.3f} s",
                 *([f"- batch 32: tessel's epoch takes {median[('tessel', 32)] / best_floor:.2f}x "
                    f"the best of them"] if ("tessel", 32) in median else [])]
text += [*cnn_rows, ""]
with open(f"{out}/cpu_throughput.md", "w") as f:
    f.write("\n".join(text))

panels = (1 if names else 0) + (1 if wide_median else 0) + (1 if cnn_names else 0)
fig, axes = plt.subplots(1, max(panels, 1), figsize=(5.5 * max(panels, 1) + 0.5, 4.2),
                         squeeze=False)
axes = list(axes[0])
if names:
    ax = axes.pop(0)
    width = 0.8 / len(names)
    for i, n in enumerate(names):
        xs = [j + i * width for j, b in enumerate(batches) if (n, b) in median]
        ys = [TRAIN / median[(n, b)] for b in batches if (n, b) in median]
        bars = ax.bar(xs, ys, width, label=labels[n])
        ax.bar_label(bars, fmt="%.0f", fontsize=7)
    # Over the batch-32 group: the rate the step's GEMMs alone would allow (no other work).
    if 32 in batches and has_floors:
        j = batches.index(32)
        left, right = j - width / 2, j + width * (len(names) - 0.5)
        ax.hlines(TRAIN / raw_floor, left, right, colors="gray", linestyles="--",
                  linewidth=1, label="batch 32: the GEMMs alone, raw OpenBLAS")
        ax.hlines(TRAIN / tessel_floor, left, right, colors="black", linestyles=":",
                  linewidth=1, label="batch 32: the GEMMs alone, tessel's GEMM")
    ax.set_xticks([j + width * (len(names) - 1) / 2 for j in range(len(batches))],
                  [f"batch {b}" for b in batches])
    ax.set_ylabel("training samples per second")
    ax.set_title(f"seeds/001 MLP, Fashion-MNIST, {cpu}", fontsize=10)
    top = max([TRAIN / v for v in median.values()] + ([TRAIN / best_floor] if has_floors else []))
    ax.set_ylim(0, top * 1.6)
    ax.legend(fontsize=7, loc="upper right")
if wide_median:
    bx = axes.pop(0)
    order = [n for n in ("tessel", "keras", "torch") if n in wide_median]
    bars = bx.bar(range(len(order)), [wide_median[n] for n in order],
                  color=[f"C{names.index(n)}" if n in names else "gray" for n in order])
    bx.bar_label(bars, fmt="%.0f", fontsize=7)
    if "sgemm" in wide_median:
        bx.axhline(wide_median["sgemm"], color="gray", linestyle="--", linewidth=1,
                   label=labels["sgemm"])
        bx.legend(fontsize=7, loc="lower right")
    bx.set_ylim(0, max(wide_median.values()) * 1.15)
    bx.set_xticks(range(len(order)), [labels[n].split(" (")[0] for n in order])
    bx.set_ylabel("GFLOP/s of the whole step")
    bx.set_title("3 x dense(4096), batch 512, Adam", fontsize=10)
if cnn_names:
    cx = axes.pop(0)
    bars = cx.bar(range(len(cnn_names)), [CNN_TRAIN / cnn_median[n] for n in cnn_names],
                  color=[f"C{i}" for i in range(len(cnn_names))])
    cx.bar_label(bars, labels=[f"{CNN_TRAIN / cnn_median[n]:.0f}\nacc "
                               f"{statistics.median(cnn_accuracy[n]):.3f}" for n in cnn_names],
                 fontsize=7)
    cx.set_ylim(0, max(CNN_TRAIN / v for v in cnn_median.values()) * 1.3)
    cx.set_xticks(range(len(cnn_names)), [cnn_labels[n].split(" (")[0] for n in cnn_names])
    cx.set_ylabel("training samples per second")
    cx.set_title("seeds/002 CNN, batch 64", fontsize=10)
fig.tight_layout()
fig.savefig(f"{out}/cpu_throughput.png", dpi=110)
