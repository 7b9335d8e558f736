#!/usr/bin/env python3
"""Keras 3 (JAX backend, CPU) reference timing for the seeds/001 MLP on Fashion-MNIST.

    KERAS_BACKEND=jax JAX_PLATFORMS=cpu /work/keras-venv/bin/python \
        benchmarks/keras_mlp_fashion_mnist.py --epochs 2

Data: Debian's fashion-mnist files (IDX, gzip) under /usr/share/datasets/fashion-mnist
(`--data-dir` to change); nothing is downloaded. The first 50,000 training images train,
the last 10,000 validate, the 10,000 t10k images test. x is (-1, 784) float32 / 255.

Model: Input(784) -> Dense(256, relu) -> Dense(256, relu) -> Dense(10);
Adam(); SparseCategoricalCrossentropy(from_logits=True); [SparseCategoricalAccuracy()];
fit(batch_size=32, epochs=N, validation_data=(x_val, y_val), verbose=2), then evaluate
on the test set.

Wall seconds per epoch are taken by a callback (time.perf_counter between on_epoch_begin and
on_epoch_end, so they include the validation pass that fit runs at the end of each epoch).
The first epoch includes XLA compilation and is reported apart. The last line is

    RESULT keras seconds_per_epoch=<mean of epochs after the first, or the only one>
           first_epoch=<s> test_accuracy=<acc> steps_per_epoch=<n>

(on one line). Threads are left as they come (XLA's CPU client uses its own thread pool
over all visible cores).

--wide: gemm_bound_bench's step instead: three Dense(4096) (relu, relu, linear), batch 512,
Adam, mean squared error, timed with train_on_batch; prints the median over --steps steps and

    RESULT keras_wide ms_per_step=<median> gflops=<GEMM work per step / median>
"""

import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np  # noqa: E402

from bench_common import WIDE, WIDE_BATCH, arguments, load_fashion_mnist, time_wide_step  # noqa: E402


def wide(steps):
    import keras

    w, batch = WIDE, WIDE_BATCH
    model = keras.Sequential([keras.Input(shape=(w,)), keras.layers.Dense(w, activation="relu"),
                              keras.layers.Dense(w, activation="relu"), keras.layers.Dense(w)])
    model.compile(optimizer=keras.optimizers.Adam(), loss="mean_squared_error")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, w), dtype=np.float32)
    y = rng.standard_normal((batch, w), dtype=np.float32)
    time_wide_step("keras_wide", lambda: model.train_on_batch(x, y), steps)


def main():
    args = arguments()
    if args.wide:
        return wide(args.steps)

    import jax
    import keras

    print(
        f"keras {keras.__version__}, jax {jax.__version__}, backend {keras.backend.backend()}, "
        f"devices {jax.devices()}, os.cpu_count() {os.cpu_count()}, "
        f"affinity {len(os.sched_getaffinity(0))} cores",
        flush=True,
    )
    keras.utils.set_random_seed(args.seed)

    (x_train, y_train), (x_val, y_val), (x_test, y_test) = load_fashion_mnist(args.data_dir)
    print(
        f"train {x_train.shape}, val {x_val.shape}, test {x_test.shape}", flush=True
    )

    model = keras.Sequential(
        [
            keras.Input(shape=(784,)),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(10),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy()],
    )

    class EpochTimer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.times = []
            self._t0 = None

        def on_epoch_begin(self, epoch, logs=None):
            self._t0 = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.times.append(time.perf_counter() - self._t0)

    timer = EpochTimer()
    t0 = time.perf_counter()
    model.fit(
        x_train,
        y_train,
        batch_size=args.batch_size,
        epochs=args.epochs,
        validation_data=(x_val, y_val),
        verbose=2,
        callbacks=[timer],
    )
    fit_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    test_loss, test_acc = model.evaluate(x_test, y_test, batch_size=args.batch_size, verbose=0)
    eval_s = time.perf_counter() - t1

    steps = -(-len(x_train) // args.batch_size)
    first = timer.times[0]
    later = timer.times[1:] or timer.times
    per_epoch = sum(later) / len(later)
    for i, t in enumerate(timer.times):
        print(f"epoch {i + 1}: {t:.3f} s ({t / steps * 1e3:.3f} ms/step incl. validation)")
    print(f"fit total {fit_s:.3f} s; evaluate (test) {eval_s:.3f} s; "
          f"test loss {test_loss:.4f}, test accuracy {test_acc:.4f}")
    print(
        f"RESULT keras seconds_per_epoch={per_epoch:.3f} first_epoch={first:.3f} "
        f"test_accuracy={test_acc:.4f} steps_per_epoch={steps}",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
