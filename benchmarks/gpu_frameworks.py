#!/usr/bin/env python3
"""PyTorch eager, PyTorch with torch.compile(mode="reduce-overhead") (CUDA graphs) and JAX jit on
one GPU, the other side of gpu_bench (tessel's backend::cuda); scripts/test-gpu.sh --bench runs
both in one call on the GPU machine (PyTorch 2.11 and JAX 0.11 are there).

    python3 benchmarks/gpu_frameworks.py [--epochs 3] [--steps 200] [--only torch|compile|jax]

- seeds/001's MLP (784 -> 256 relu -> 256 relu -> 10 logits, Glorot-uniform kernels, zero
  biases, Adam lr 1e-3 eps 1e-7, cross-entropy on logits, batch 32) on Fashion-MNIST: the first
  50,000 training images train (reshuffled each epoch), the last 10,000 validate at the end of
  each epoch inside its time, as Keras's fit and gpu_bench do. The data sits on the GPU; each
  step reads the loss back (as Keras's progress bar and tessel's fit do). Prints
      RESULT <name>_mlp seconds_per_epoch=... test_accuracy=... step_us=... peak_mib=...
  step_us: the median of --steps single steps, each waited for.
- the 4096-wide step (3 x Linear(4096, 4096), relu, relu, none; batch 512; Adam; mean squared
  error): RESULT <name>_wide ms_per_step=... tflops=... peak_mib=...
float32 throughout with TF32 off (torch.backends.cuda.matmul.allow_tf32 = False,
jax_default_matmul_precision "highest"), as tessel computes by default.
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import WIDE, WIDE_BATCH, WIDE_FLOP, load_fashion_mnist  # noqa: E402


def median(v):
    return sorted(v)[len(v) // 2]


def report(name, times, acc, step_times, peak):
    later = times[1:] or times
    print(f"RESULT {name}_mlp seconds_per_epoch={sum(later) / len(later):.3f} "
          f"first_epoch={times[0]:.3f} test_accuracy={acc:.4f} "
          f"step_us={median(step_times) * 1e6:.1f} peak_mib={peak:.1f}", flush=True)


# ---- PyTorch -----------------------------------------------------------------------------------

def torch_runs(args, data, compiled):
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    name = "torch_compile" if compiled else "torch"
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    torch.manual_seed(args.seed)

    def linear(i, o):
        layer = torch.nn.Linear(i, o)
        torch.nn.init.xavier_uniform_(layer.weight)
        torch.nn.init.zeros_(layer.bias)
        return layer

    x, y, xv, yv, xt, yt = (torch.from_numpy(a).to(dev) for a in data)
    y, yv, yt = y.long(), yv.long(), yt.long()
    model = torch.nn.Sequential(linear(784, 256), torch.nn.ReLU(), linear(256, 256),
                                torch.nn.ReLU(), linear(256, 10)).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=torch.tensor(1e-3) if compiled else 1e-3,
                           eps=1e-7, capturable=compiled and dev.type == "cuda")
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(xb, yb):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        return loss.detach()

    if compiled:
        step = torch.compile(step, mode="reduce-overhead")
    b = args.batch_size

    def evaluate(xs, ys):
        correct, total = 0, 0.0
        with torch.no_grad():
            for i in range(0, len(xs), b):
                logits = model(xs[i:i + b])
                total += loss_fn(logits, ys[i:i + b]).item() * len(logits)
                correct += (logits.argmax(1) == ys[i:i + b]).sum().item()
        return total / len(xs), correct / len(xs)

    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for epoch in range(args.epochs):
        t0 = time.perf_counter()
        order = torch.randperm(len(x), device=dev)
        xs, ys = x[order], y[order]
        for i in range(0, len(xs), b):
            step(xs[i:i + b], ys[i:i + b]).item()
        val = evaluate(xv, yv)
        sync()
        times.append(time.perf_counter() - t0)
        print(f"{name} epoch {epoch + 1}: {times[-1]:.3f} s, val_loss {val[0]:.4f}, "
              f"val_accuracy {val[1]:.4f}", flush=True)
    step_times = []
    for i in range(args.steps):
        xb, yb = x[(i * b) % (len(x) - b):][:b], y[(i * b) % (len(x) - b):][:b]
        t0 = time.perf_counter()
        step(xb, yb).item()
        step_times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated() / 2**20 if dev.type == "cuda" else 0.0
    report(name, times, evaluate(xt, yt)[1], step_times, peak)

    # The 4096-wide step.
    wide_model = torch.nn.Sequential(torch.nn.Linear(WIDE, WIDE), torch.nn.ReLU(),
                                     torch.nn.Linear(WIDE, WIDE), torch.nn.ReLU(),
                                     torch.nn.Linear(WIDE, WIDE)).to(dev)
    wide_opt = torch.optim.Adam(wide_model.parameters(),
                                lr=torch.tensor(1e-3) if compiled else 1e-3, eps=1e-7,
                                capturable=compiled and dev.type == "cuda")
    wx, wy = torch.randn(WIDE_BATCH, WIDE, device=dev), torch.randn(WIDE_BATCH, WIDE, device=dev)

    def wide_step():
        wide_opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(wide_model(wx), wy)
        loss.backward()
        wide_opt.step()
        return loss.detach()

    if compiled:
        wide_step = torch.compile(wide_step, mode="reduce-overhead")
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for _ in range(3):
        wide_step().item()
    wt = []
    for _ in range(max(args.steps // 10, 5)):
        t0 = time.perf_counter()
        wide_step().item()
        wt.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated() / 2**20 if dev.type == "cuda" else 0.0
    t = median(wt)
    print(f"RESULT {name}_wide ms_per_step={t * 1e3:.3f} tflops={WIDE_FLOP / t / 1e12:.1f} "
          f"peak_mib={peak:.1f}", flush=True)


# ---- JAX ---------------------------------------------------------------------------------------

def jax_run(args, data):
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_default_matmul_precision", "highest")
    key = jax.random.PRNGKey(args.seed)

    def glorot(k, i, o):
        limit = np.sqrt(6.0 / (i + o))
        return jax.random.uniform(k, (i, o), jnp.float32, -limit, limit), jnp.zeros((o,))

    def init(k, sizes):
        ks = jax.random.split(k, len(sizes) - 1)
        return [glorot(ks[i], sizes[i], sizes[i + 1]) for i in range(len(sizes) - 1)]

    def forward(params, xb):
        h = xb
        for i, (w, b) in enumerate(params):
            h = h @ w + b
            if i + 1 < len(params):
                h = jax.nn.relu(h)
        return h

    def xent(params, xb, yb):
        logits = forward(params, xb)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), yb[:, None], 1))

    def mse(params, xb, yb):
        return jnp.mean((forward(params, xb) - yb) ** 2)

    def make_step(loss_fn):
        @jax.jit
        def step(params, m, v, t, xb, yb):
            loss, g = jax.value_and_grad(loss_fn)(params, xb, yb)
            t = t + 1
            alpha = 1e-3 * jnp.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t)
            m = jax.tree_util.tree_map(lambda a, b: a + (b - a) * 0.1, m, g)
            v = jax.tree_util.tree_map(lambda a, b: a + (b * b - a) * 0.001, v, g)
            params = jax.tree_util.tree_map(lambda p, a, b: p - alpha * a / (jnp.sqrt(b) + 1e-7),
                                            params, m, v)
            return params, m, v, t, loss
        return step

    @jax.jit
    def eval_batch(params, xb, yb):
        logits = forward(params, xb)
        loss = -jnp.sum(jnp.take_along_axis(jax.nn.log_softmax(logits), yb[:, None], 1))
        return loss, jnp.sum(jnp.argmax(logits, 1) == yb)

    x, y, xv, yv, xt, yt = (jnp.asarray(a) for a in data)
    params = init(key, [784, 256, 256, 10])
    zeros = lambda p: jax.tree_util.tree_map(jnp.zeros_like, p)  # noqa: E731
    m, v, t = zeros(params), zeros(params), jnp.zeros((), jnp.float32)
    step = make_step(xent)
    b = args.batch_size

    def evaluate(xs, ys):
        total, correct = 0.0, 0
        for i in range(0, len(xs), b):
            lo, co = eval_batch(params, xs[i:i + b], ys[i:i + b])
            total, correct = total + float(lo), correct + int(co)
        return total / len(xs), correct / len(xs)

    times = []
    for epoch in range(args.epochs):
        t0 = time.perf_counter()
        key, k = jax.random.split(key)
        order = jax.random.permutation(k, len(x))
        xs, ys = x[order], y[order]
        for i in range(0, len(xs), b):
            params, m, v, t, loss = step(params, m, v, t, xs[i:i + b], ys[i:i + b])
            float(loss)
        val = evaluate(xv, yv)
        times.append(time.perf_counter() - t0)
        print(f"jax epoch {epoch + 1}: {times[-1]:.3f} s, val_loss {val[0]:.4f}, "
              f"val_accuracy {val[1]:.4f}", flush=True)
    step_times = []
    for i in range(args.steps):
        xb, yb = x[(i * b) % (len(x) - b):][:b], y[(i * b) % (len(x) - b):][:b]
        t0 = time.perf_counter()
        params, m, v, t, loss = step(params, m, v, t, xb, yb)
        float(loss)
        step_times.append(time.perf_counter() - t0)
    stats = jax.devices()[0].memory_stats() or {}
    report("jax", times, evaluate(xt, yt)[1], step_times,
           stats.get("peak_bytes_in_use", 0) / 2**20)

    wp = init(key, [WIDE, WIDE, WIDE, WIDE])
    wm, wv, wt_ = zeros(wp), zeros(wp), jnp.zeros((), jnp.float32)
    wide_step = make_step(mse)
    wx = jax.random.normal(key, (WIDE_BATCH, WIDE))
    wy = jax.random.normal(jax.random.split(key)[0], (WIDE_BATCH, WIDE))
    for _ in range(3):
        wp, wm, wv, wt_, loss = wide_step(wp, wm, wv, wt_, wx, wy)
        float(loss)
    ts = []
    for _ in range(max(args.steps // 10, 5)):
        t0 = time.perf_counter()
        wp, wm, wv, wt_, loss = wide_step(wp, wm, wv, wt_, wx, wy)
        float(loss)
        ts.append(time.perf_counter() - t0)
    stats = jax.devices()[0].memory_stats() or {}
    t_med = median(ts)
    print(f"RESULT jax_wide ms_per_step={t_med * 1e3:.3f} tflops={WIDE_FLOP / t_med / 1e12:.1f} "
          f"peak_mib={stats.get('peak_bytes_in_use', 0) / 2**20:.1f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", default=os.environ.get("TESSEL_FASHION_MNIST_DIR",
                                                         "/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--only", choices=["torch", "compile", "jax"])
    args = ap.parse_args()
    (x, y), (xv, yv), (xt, yt) = load_fashion_mnist(args.data_dir)
    data = (x, y, xv, yv, xt, yt)
    runs = {"torch": lambda: torch_runs(args, data, False),
            "compile": lambda: torch_runs(args, data, True),
            "jax": lambda: jax_run(args, data)}
    failed = []
    for name, run in runs.items():
        if args.only in (None, name):
            try:
                run()
            except Exception as e:  # one framework's failure does not hide the others' figures
                print(f"FAILED {name}: {type(e).__name__}: {e}", flush=True)
                if args.only:
                    raise
                failed.append(name)
    # A framework that failed fails the run (its figures are missing), after the others ran.
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
