#!/usr/bin/env python3
"""PyTorch (eager, CPU) reference timing for the seeds/001 MLP on Fashion-MNIST, and for the
4096-wide GEMM-bound step of gemm_bound_bench, the same models as tessel's benchmarks.

    /usr/bin/python3 benchmarks/torch_mlp_fashion_mnist.py --epochs 3 --batch-size 32
    /usr/bin/python3 benchmarks/torch_mlp_fashion_mnist.py --wide --steps 10

PyTorch is Debian's (`apt-get install python3-torch`: 1.13, oneDNN 2.6, OpenMP; PyPI's wheels
pull the CUDA libraries and the CPU wheels' index is not reachable here). Threads: as many as the
process may use (`torch.set_num_threads`), and denormals flushed (`torch.set_flush_denormal`),
as XLA and tessel do.

MLP: the data and the model of keras_mlp_fashion_mnist.py: the first 50,000 training images
train, the last 10,000 validate; 784 -> 256 relu -> 256 relu -> 10 logits, Glorot-uniform
kernels and zero biases (Keras's defaults), Adam with Keras's defaults (lr 1e-3, eps 1e-7),
cross-entropy on logits, a new shuffle every epoch, a validation pass at the end of each epoch
(as Keras's fit) inside the epoch's time. Batches are slices of one shuffled tensor (no
DataLoader, which would only be slower). The last line is

    RESULT torch seconds_per_epoch=<mean after the first> first_epoch=<s> test_accuracy=<acc>

--wide: three Linear(4096, 4096) (relu, relu, none), batch 512, Adam, mean squared error, as
gemm_bound_bench's step; prints the median step time over --steps steps and

    RESULT torch_wide ms_per_step=<median> gflops=<GEMM work per step / median>
"""

import os
import sys
import time

import torch

from bench_common import WIDE, WIDE_BATCH, arguments, load_fashion_mnist, time_wide_step


def glorot(layer):
    torch.nn.init.xavier_uniform_(layer.weight)
    torch.nn.init.zeros_(layer.bias)
    return layer


def mlp(args):
    (x, y), (x_val, y_val), (x_test, y_test) = (
        (torch.from_numpy(a), torch.from_numpy(b).long())
        for a, b in load_fashion_mnist(args.data_dir))

    model = torch.nn.Sequential(glorot(torch.nn.Linear(784, 256)), torch.nn.ReLU(),
                                glorot(torch.nn.Linear(256, 256)), torch.nn.ReLU(),
                                glorot(torch.nn.Linear(256, 10)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    loss_fn = torch.nn.CrossEntropyLoss()
    b = args.batch_size

    def evaluate(xs, ys):
        model.eval()
        correct, total = 0, 0.0
        with torch.no_grad():
            for i in range(0, len(xs), b):
                logits = model(xs[i : i + b])
                total += loss_fn(logits, ys[i : i + b]).item() * len(logits)
                correct += (logits.argmax(1) == ys[i : i + b]).sum().item()
        model.train()
        return total / len(xs), correct / len(xs)

    times = []
    for epoch in range(args.epochs):
        t0 = time.perf_counter()
        order = torch.randperm(len(x))
        xs, ys = x[order], y[order]
        for i in range(0, len(xs), b):
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(xs[i : i + b]), ys[i : i + b])
            loss.backward()
            opt.step()
        val_loss, val_acc = evaluate(x_val, y_val)
        times.append(time.perf_counter() - t0)
        print(f"epoch {epoch + 1}: {times[-1]:.3f} s, val_loss {val_loss:.4f}, "
              f"val_accuracy {val_acc:.4f}", flush=True)
    test_loss, test_acc = evaluate(x_test, y_test)
    later = times[1:] or times
    print(f"test loss {test_loss:.4f}, test accuracy {test_acc:.4f}")
    print(f"RESULT torch seconds_per_epoch={sum(later) / len(later):.3f} "
          f"first_epoch={times[0]:.3f} test_accuracy={test_acc:.4f}", flush=True)


def wide(args):
    w, batch = WIDE, WIDE_BATCH
    model = torch.nn.Sequential(torch.nn.Linear(w, w), torch.nn.ReLU(), torch.nn.Linear(w, w),
                                torch.nn.ReLU(), torch.nn.Linear(w, w))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    x, y = torch.randn(batch, w), torch.randn(batch, w)

    def step():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()

    time_wide_step("torch_wide", step, args.steps)


def main():
    args = arguments()
    torch.manual_seed(args.seed)
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    torch.set_flush_denormal(True)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"mkldnn {torch.backends.mkldnn.is_available()}", flush=True)
    wide(args) if args.wide else mlp(args)


if __name__ == "__main__":
    sys.exit(main())
