#!/usr/bin/env python3
"""TensorFlow's tf.distribute.MirroredStrategy on this machine's CPU, for benchmarks/strategy_bench:
seeds/001's program with the CPU split into --replicas logical devices (TensorFlow makes one
replica per device; on CPUs it reduces the gradients by copying them to one device), trained as
seeds/001 trains it (tf.data of the first 50,000 training images, global batch 32, Adam,
validation on the last 10,000).

    /tmp/tfenv/bin/python benchmarks/tf_mirrored_mlp_fashion_mnist.py --epochs 3 --replicas 2

Wall seconds per epoch by a callback (validation included). The first epoch includes tracing
and is reported apart. Last line:

    RESULT tf_mirrored replicas=<n> seconds_per_epoch=<mean after the first> first_epoch=<s>
           test_accuracy=<acc>
"""

import argparse
import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_common import load_fashion_mnist  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    args = ap.parse_args()

    import tensorflow as tf

    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(args.replicas)])
    import keras

    (x_train, y_train), (x_val, y_val), (x_test, y_test) = load_fashion_mnist(args.data_dir)
    devices = [f"/cpu:{i}" for i in range(args.replicas)]
    strategy = tf.distribute.MirroredStrategy(devices)
    print(f"tensorflow {tf.__version__}, keras {keras.__version__}, "
          f"Number of devices: {strategy.num_replicas_in_sync}, "
          f"cross-device ops {type(strategy.extended._cross_device_ops).__name__}, "
          f"os.cpu_count() {os.cpu_count()}", flush=True)
    batch = 32
    train = tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(batch)
    val = tf.data.Dataset.from_tensor_slices((x_val, y_val)).batch(batch)
    test = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(batch)
    with strategy.scope():
        inputs = keras.Input(shape=(784,))
        x = keras.layers.Dense(256, activation="relu")(inputs)
        x = keras.layers.Dense(256, activation="relu")(x)
        model = keras.Model(inputs, keras.layers.Dense(10)(x))
        model.compile(optimizer=keras.optimizers.Adam(),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=[keras.metrics.SparseCategoricalAccuracy()])

    class EpochTimer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.times = []

        def on_epoch_begin(self, epoch, logs=None):
            self._t0 = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.times.append(time.perf_counter() - self._t0)

    timer = EpochTimer()
    model.fit(train, epochs=args.epochs, validation_data=val, verbose=2, callbacks=[timer])
    _, acc = model.evaluate(test, verbose=0)
    later = timer.times[1:] or timer.times
    print(f"RESULT tf_mirrored replicas={args.replicas} "
          f"seconds_per_epoch={sum(later) / len(later):.3f} first_epoch={timer.times[0]:.3f} "
          f"test_accuracy={acc:.4f}", flush=True)


if __name__ == "__main__":
    main()
