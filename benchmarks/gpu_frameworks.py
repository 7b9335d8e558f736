#!/usr/bin/env python3
"""PyTorch eager, PyTorch with torch.compile(mode="reduce-overhead") (CUDA graphs) and JAX jit on
one GPU, the other side of gpu_bench (tessel's backend::cuda); scripts/test-gpu.sh --bench runs
both in one call on the GPU machine (PyTorch 2.11 and JAX 0.11 are there).

    python3 benchmarks/gpu_frameworks.py [--epochs 3] [--steps 200] [--cnn-steps 100]
                                         [--only torch|compile|jax] [--what mlp,wide,cnn]

--what (a comma-separated list among mlp, wide, cnn; all three by default) picks the parts each
framework runs, in the order mlp, cnn, wide; --only picks one framework.

- seeds/001's MLP (784 -> 256 relu -> 256 relu -> 10 logits, Glorot-uniform kernels, zero
  biases, Adam lr 1e-3 eps 1e-7, cross-entropy on logits, batch 32) on Fashion-MNIST: the first
  50,000 training images train (reshuffled each epoch), the last 10,000 validate at the end of
  each epoch inside its time, as Keras's fit and gpu_bench do. The data sits on the GPU; each
  step reads the loss back (as Keras's progress bar and tessel's fit do). Prints
      RESULT <name>_mlp seconds_per_epoch=... test_accuracy=... step_us=... peak_mib=...
  step_us: the median of --steps single steps, each waited for.
- the 4096-wide step (3 x Linear(4096, 4096), relu, relu, none; batch 512; Adam; mean squared
  error): RESULT <name>_wide ms_per_step=... tflops=... peak_mib=...
- seeds/002's CNN training step, as Keras builds it (the model of torch_cnn_fashion_mnist.py and
  cnn_fashion_mnist_bench): Rescaling(1/255) -> [Conv -> BatchNorm (beta only, epsilon 1e-3,
  momentum 0.99) -> ReLU] x 3 (12 3x3 same, 24 6x6 stride 2 valid, 32 6x6 stride 2 same with
  bias) -> global average pooling -> Dense(256) relu -> Dropout(0.5) -> Dense(10) logits;
  Glorot-uniform kernels, zero biases, Adam lr 1e-3 eps 1e-7, cross-entropy on logits, batch 64,
  in training mode (batch statistics, moving statistics updated, dropout on). Pixels 0..255 of
  the first 50,000 training images on the GPU, NCHW for PyTorch, NHWC for JAX; after a few
  warm-up steps (the compilations), the median of --cnn-steps single steps over consecutive
  batches, each waited for by reading the loss back:
      RESULT <name>_cnn step_us=... steps_per_s=... peak_mib=...
peak_mib: PyTorch's max_memory_allocated since the part began (what is still allocated then
included); JAX's peak_bytes_in_use, the process's peak so far (it cannot be reset).
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


# The CNN part: batch, warm-up steps, and the trainable parameters of the model, the same in both
# frameworks: conv kernels 1*12*9 = 108, 12*24*36 = 10368, 24*32*36 = 27648 and the third conv's
# bias 32; the batch normalizations' betas 12 + 24 + 32 (gamma held at 1, the moving statistics
# are not trained); dense 32*256 + 256 and 256*10 + 10.
CNN_BATCH, CNN_WARMUP = 64, 5
CNN_PARAMS = 108 + 10368 + 27648 + 32 + (12 + 24 + 32) + (32 * 256 + 256) + (256 * 10 + 10)
# (stride, padding) of the three convolutions on 28x28 -> 28x28 -> 12x12 -> 6x6; the third's is
# Keras's "same" for a 12x12 input (2 on each side).
CNN_CONVS = ((1, ((1, 1), (1, 1))), (2, "VALID"), (2, ((2, 2), (2, 2))))


def cnn_pixels(x, shape):
    """The training images as the CNN takes them: pixel values 0..255 (load_fashion_mnist divided
    them by 255; rint recovers the bytes exactly), in `shape`."""
    return np.rint(x * 255).astype(np.float32).reshape(shape)


def report_cnn(name, step_times, losses, peak):
    step_us = median(step_times) * 1e6
    print(f"{name} cnn: loss {losses[0]:.4f} at the first timed step, {losses[-1]:.4f} at the "
          f"last", flush=True)
    print(f"RESULT {name}_cnn step_us={step_us:.1f} steps_per_s={1e6 / step_us:.0f} "
          f"peak_mib={peak:.1f}", flush=True)


def median(v):
    return sorted(v)[len(v) // 2]


def report(name, times, acc, step_times, peak):
    later = times[1:] or times
    print(f"RESULT {name}_mlp seconds_per_epoch={sum(later) / len(later):.3f} "
          f"first_epoch={times[0]:.3f} test_accuracy={acc:.4f} "
          f"step_us={median(step_times) * 1e6:.1f} peak_mib={peak:.1f}", flush=True)


# ---- PyTorch -----------------------------------------------------------------------------------

def torch_training_step(model, params, compiled, dev):
    """Adam(1e-3, eps 1e-7) over `params` and one step of cross-entropy on logits, returning
    the loss (not read back); with `compiled`, the step through torch.compile(mode=
    "reduce-overhead") (CUDA graphs: Adam's learning rate a tensor, its state capturable).
    Returns (loss_fn, step)."""
    import torch

    opt = torch.optim.Adam(params, lr=torch.tensor(1e-3) if compiled else 1e-3, eps=1e-7,
                           capturable=compiled and dev.type == "cuda")
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(xb, yb):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        return loss.detach()

    return loss_fn, (torch.compile(step, mode="reduce-overhead") if compiled else step)


def torch_runs(args, data, compiled):
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    name = "torch_compile" if compiled else "torch"
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    torch.manual_seed(args.seed)

    if "mlp" in args.what:
        def linear(i, o):
            layer = torch.nn.Linear(i, o)
            torch.nn.init.xavier_uniform_(layer.weight)
            torch.nn.init.zeros_(layer.bias)
            return layer

        x, y, xv, yv, xt, yt = (torch.from_numpy(a).to(dev) for a in data)
        y, yv, yt = y.long(), yv.long(), yt.long()
        model = torch.nn.Sequential(linear(784, 256), torch.nn.ReLU(), linear(256, 256),
                                    torch.nn.ReLU(), linear(256, 10)).to(dev)
        loss_fn, step = torch_training_step(model, model.parameters(), compiled, dev)
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

    if "cnn" in args.what:
        torch_cnn(args, data, dev, name, compiled)

    # The 4096-wide step.
    if "wide" in args.what:
        wide_model = torch.nn.Sequential(torch.nn.Linear(WIDE, WIDE), torch.nn.ReLU(),
                                         torch.nn.Linear(WIDE, WIDE), torch.nn.ReLU(),
                                         torch.nn.Linear(WIDE, WIDE)).to(dev)
        wide_opt = torch.optim.Adam(wide_model.parameters(),
                                    lr=torch.tensor(1e-3) if compiled else 1e-3, eps=1e-7,
                                    capturable=compiled and dev.type == "cuda")
        wx = torch.randn(WIDE_BATCH, WIDE, device=dev)
        wy = torch.randn(WIDE_BATCH, WIDE, device=dev)

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


def torch_cnn(args, data, dev, name, compiled):
    """The CNN step in PyTorch (NCHW), eager or through torch.compile(mode="reduce-overhead") as
    the MLP's step is: RESULT <name>_cnn. Its tensors go when it returns."""
    import torch
    from torch_cnn_fashion_mnist import Cnn  # the CPU script's model and Keras's initializers

    torch.manual_seed(args.seed)
    # cuDNN tries its algorithms for each convolution shape once and keeps the fastest, as a
    # PyTorch user timing a CNN turns on (XLA chooses by autotuning too).
    torch.backends.cudnn.benchmark = True
    b = CNN_BATCH
    x = torch.from_numpy(cnn_pixels(data[0], (-1, 1, 28, 28))).to(dev)
    y = torch.from_numpy(data[1]).to(dev).long()
    model = Cnn().to(dev).train()  # batch statistics, moving statistics updated, dropout on
    trainable = [q for q in model.parameters() if q.requires_grad]  # not the BNs' gammas
    count = sum(q.numel() for q in trainable)
    if count != CNN_PARAMS:
        raise RuntimeError(f"the PyTorch CNN has {count} trainable parameters, not {CNN_PARAMS}")
    _, step = torch_training_step(model, trainable, compiled, dev)

    def batch(i):  # consecutive batches, a view each
        s = (i * b) % (len(x) - b)
        return x[s:s + b], y[s:s + b]

    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for i in range(CNN_WARMUP):
        step(*batch(i)).item()
    step_times, losses = [], []
    for i in range(args.cnn_steps):
        xb, yb = batch(i)
        t0 = time.perf_counter()
        losses.append(step(xb, yb).item())
        step_times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated() / 2**20 if dev.type == "cuda" else 0.0
    report_cnn(name, step_times, losses, peak)


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

    def adam(params, g, m, v, t):
        """One Adam update (lr 1e-3, beta1 0.9, beta2 0.999, epsilon 1e-7, as Keras's)."""
        t = t + 1
        alpha = 1e-3 * jnp.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t)
        m = jax.tree_util.tree_map(lambda a, b: a + (b - a) * 0.1, m, g)
        v = jax.tree_util.tree_map(lambda a, b: a + (b * b - a) * 0.001, v, g)
        params = jax.tree_util.tree_map(lambda p, a, b: p - alpha * a / (jnp.sqrt(b) + 1e-7),
                                        params, m, v)
        return params, m, v, t

    def make_step(loss_fn):
        @jax.jit
        def step(params, m, v, t, xb, yb):
            loss, g = jax.value_and_grad(loss_fn)(params, xb, yb)
            params, m, v, t = adam(params, g, m, v, t)
            return params, m, v, t, loss
        return step

    @jax.jit
    def eval_batch(params, xb, yb):
        logits = forward(params, xb)
        loss = -jnp.sum(jnp.take_along_axis(jax.nn.log_softmax(logits), yb[:, None], 1))
        return loss, jnp.sum(jnp.argmax(logits, 1) == yb)

    zeros = lambda p: jax.tree_util.tree_map(jnp.zeros_like, p)  # noqa: E731
    if "mlp" in args.what:
        x, y, xv, yv, xt, yt = (jnp.asarray(a) for a in data)
        params = init(key, [784, 256, 256, 10])
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

    if "cnn" in args.what:
        jax_cnn(args, data, glorot, adam)
    if "wide" in args.what:
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
        print(f"RESULT jax_wide ms_per_step={t_med * 1e3:.3f} "
              f"tflops={WIDE_FLOP / t_med / 1e12:.1f} "
              f"peak_mib={stats.get('peak_bytes_in_use', 0) / 2**20:.1f}", flush=True)


def jax_cnn(args, data, glorot, adam):
    """The CNN step in JAX (NHWC), one jitted function of (parameters, batch-normalization state,
    Adam state, key, xb, yb): RESULT jax_cnn. Its arrays go when it returns."""
    import jax
    import jax.numpy as jnp

    b = CNN_BATCH
    x = jnp.asarray(cnn_pixels(data[0], (-1, 28, 28, 1)))
    y = jnp.asarray(data[1])
    ks = jax.random.split(jax.random.PRNGKey(args.seed), 6)

    def kernel(k, size, cin, cout):  # Glorot uniform over HWIO: fans size*size*cin, size*size*cout
        limit = np.sqrt(6.0 / (size * size * (cin + cout)))
        return jax.random.uniform(k, (size, size, cin, cout), jnp.float32, -limit, limit)

    channels = (12, 24, 32)
    params = {"conv": [kernel(ks[0], 3, 1, 12), kernel(ks[1], 6, 12, 24),
                       kernel(ks[2], 6, 24, 32)],
              "conv_bias": jnp.zeros((32,)),  # the third convolution's
              "beta": [jnp.zeros((c,)) for c in channels],
              "dense": [glorot(ks[3], 32, 256), glorot(ks[4], 256, 10)]}
    count = sum(a.size for a in jax.tree_util.tree_leaves(params))
    if count != CNN_PARAMS:
        raise RuntimeError(f"the JAX CNN has {count} trainable parameters, not {CNN_PARAMS}")
    # The moving mean and variance, as Keras starts them; not trained.
    bn = [(jnp.zeros((c,)), jnp.ones((c,))) for c in channels]
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    opt_state = (zeros, zeros, jnp.zeros((), jnp.float32))  # Adam's m, v and step count
    key = ks[5]

    def forward(params, bn, key, xb):
        """Training mode: the logits and the updated moving statistics."""
        h = xb * (1.0 / 255.0)
        new_bn = []
        for i, (stride, padding) in enumerate(CNN_CONVS):
            h = jax.lax.conv_general_dilated(h, params["conv"][i], (stride, stride), padding,
                                             dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                             precision=jax.lax.Precision.HIGHEST)
            if i == 2:
                h = h + params["conv_bias"]
            # Batch normalization on the batch's statistics (the biased variance), gamma 1.
            mean = jnp.mean(h, (0, 1, 2))
            var = jnp.mean(jnp.square(h - mean), (0, 1, 2))
            h = jax.nn.relu((h - mean) * jax.lax.rsqrt(var + 1e-3) + params["beta"][i])
            moving_mean, moving_var = bn[i]
            new_bn.append((moving_mean * 0.99 + jax.lax.stop_gradient(mean) * 0.01,
                           moving_var * 0.99 + jax.lax.stop_gradient(var) * 0.01))
        h = jnp.mean(h, (1, 2))  # global average pooling
        (w1, b1), (w2, b2) = params["dense"]
        h = jax.nn.relu(h @ w1 + b1)
        keep = jax.random.bernoulli(key, 0.5, h.shape)  # Dropout(0.5), inverted as Keras's
        h = jnp.where(keep, h * 2.0, 0.0)
        return h @ w2 + b2, new_bn

    @jax.jit
    def step(params, bn, opt_state, key, xb, yb):
        key, dropout_key = jax.random.split(key)  # a fresh dropout key each step

        def loss_fn(params):
            logits, new_bn = forward(params, bn, dropout_key, xb)
            loss = -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), yb[:, None], 1))
            return loss, new_bn

        (loss, bn), g = jax.value_and_grad(loss_fn, has_aux=True)(params)
        params, m, v, t = adam(params, g, *opt_state)
        return params, bn, (m, v, t), key, loss

    def batch(i):  # consecutive batches, one slice each
        s = (i * b) % (len(x) - b)
        return x[s:s + b], y[s:s + b]

    for i in range(CNN_WARMUP):
        params, bn, opt_state, key, loss = step(params, bn, opt_state, key, *batch(i))
        float(loss)
    step_times, losses = [], []
    for i in range(args.cnn_steps):
        xb, yb = batch(i)
        t0 = time.perf_counter()
        params, bn, opt_state, key, loss = step(params, bn, opt_state, key, xb, yb)
        losses.append(float(loss))
        step_times.append(time.perf_counter() - t0)
    stats = jax.devices()[0].memory_stats() or {}
    report_cnn("jax", step_times, losses, stats.get("peak_bytes_in_use", 0) / 2**20)


def parts(text):
    """--what's value: a set of part names among mlp, wide, cnn."""
    what = {p.strip() for p in text.split(",") if p.strip()}
    unknown = what - {"mlp", "wide", "cnn"}
    if not what or unknown:
        raise argparse.ArgumentTypeError(f"not a list among mlp, wide, cnn: {text!r}")
    return what


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", default=os.environ.get("TESSEL_FASHION_MNIST_DIR",
                                                         "/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--only", choices=["torch", "compile", "jax"])
    ap.add_argument("--what", type=parts, default="mlp,wide,cnn",
                    help="the parts each framework runs, a comma-separated list among "
                         "mlp, wide, cnn (default all three)")
    ap.add_argument("--cnn-steps", type=int, default=100,
                    help="the CNN steps timed after the warm-up (default 100)")
    args = ap.parse_args()
    data = None
    if args.what & {"mlp", "cnn"}:  # the wide step alone needs no data
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
