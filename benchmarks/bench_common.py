"""What the framework scripts beside it share (keras_mlp_fashion_mnist.py runs in the Keras
virtual environment, torch_mlp_fashion_mnist.py in Debian's Python; both import this module from
their own directory): the command line, the IDX reader, and the timing of the 4096-wide step."""

import argparse
import gzip
import struct
import time

import numpy as np

WIDE, WIDE_BATCH = 4096, 512
# The GEMM work of one wide step: 3 forward, 3 kernel-gradient and 2 input-gradient GEMMs.
WIDE_FLOP = 8 * 2.0 * WIDE_BATCH * WIDE * WIDE


def arguments():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--wide", action="store_true")
    ap.add_argument("--steps", type=int, default=10)
    return ap.parse_args()


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    zero, dtype_code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype_code != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    dims = struct.unpack(">" + "I" * ndim, data[4 : 4 + 4 * ndim])
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if arr.size != int(np.prod(dims)):
        raise ValueError(f"{path}: {arr.size} values for shape {dims}")
    return arr.reshape(dims)


def load_fashion_mnist(data_dir):
    """seeds/001's data as every framework script splits it: the first 50,000 training images
    train, the last 10,000 validate, t10k tests; x (-1, 784) float32 / 255, y int32. Returns
    (x_train, y_train), (x_val, y_val), (x_test, y_test)."""
    def images(name):
        return read_idx(f"{data_dir}/{name}").reshape(-1, 784).astype(np.float32) / 255

    x = images("train-images-idx3-ubyte.gz")
    y = read_idx(f"{data_dir}/train-labels-idx1-ubyte.gz").astype(np.int32)
    x_test = images("t10k-images-idx3-ubyte.gz")
    y_test = read_idx(f"{data_dir}/t10k-labels-idx1-ubyte.gz").astype(np.int32)
    return (x[:-10000], y[:-10000]), (x[-10000:], y[-10000:]), (x_test, y_test)


def time_wide_step(name, step, steps):
    """Runs step() once to warm up (compilation, the optimizer's slots), then `steps` times;
    prints the median as RESULT <name> ms_per_step=... gflops=..."""
    step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    t = sorted(times)[len(times) // 2]
    print(f"RESULT {name} ms_per_step={t * 1e3:.2f} gflops={WIDE_FLOP / t / 1e9:.1f}", flush=True)
