#!/usr/bin/env python3
"""Keras 3 (JAX backend, CPU) beside benchmarks/cnn_fashion_mnist_bench: the seeds/002 CNN on
Fashion-MNIST through fit.

    KERAS_BACKEND=jax JAX_PLATFORMS=cpu /work/keras-venv/bin/python \
        benchmarks/keras_cnn_fashion_mnist.py --seed 1 --epochs 3

Data: Debian's fashion-mnist files under /usr/share/datasets/fashion-mnist; nothing is
downloaded. x is (-1, 28, 28, 1) float32 pixel values 0..255 (the model rescales).

Model: Rescaling(1/255) -> [Conv2D -> BatchNormalization(center, no scale) -> ReLU] x 3 (12
filters 3x3 same no bias; 24 filters 6x6 stride 2 no bias; 32 filters 6x6 stride 2 same) ->
GlobalAveragePooling2D -> Dense(256, relu) -> Dropout(0.5) -> Dense(10); Adam(1e-3),
SparseCategoricalCrossentropy(from_logits=True), accuracy; fit(batch_size=64, shuffled), then
evaluate on the test set. The last line is

    RESULT keras_cnn seconds_per_epoch=<mean over the epochs> test_accuracy=<acc>
"""
import argparse
import gzip
import os
import time

os.environ.setdefault("KERAS_BACKEND", "jax")
import keras  # noqa: E402
import numpy as np  # noqa: E402


def load(directory, name):
    with gzip.open(os.path.join(directory, name), "rb") as f:
        data = f.read()
    return np.frombuffer(data, np.uint8, offset=16 if "images" in name else 8)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    a = p.parse_args()
    xtr = load(a.data_dir, "train-images-idx3-ubyte.gz").reshape(-1, 28, 28, 1).astype("float32")
    ytr = load(a.data_dir, "train-labels-idx1-ubyte.gz").astype("int32")
    xte = load(a.data_dir, "t10k-images-idx3-ubyte.gz").reshape(-1, 28, 28, 1).astype("float32")
    yte = load(a.data_dir, "t10k-labels-idx1-ubyte.gz").astype("int32")
    keras.utils.set_random_seed(a.seed)
    inputs = keras.Input(shape=(28, 28, 1))
    x = keras.layers.Rescaling(1.0 / 255.0)(inputs)
    x = keras.layers.Conv2D(12, 3, padding="same", use_bias=False)(x)
    x = keras.layers.BatchNormalization(scale=False, center=True)(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.Conv2D(24, 6, strides=2, use_bias=False)(x)
    x = keras.layers.BatchNormalization(scale=False, center=True)(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.Conv2D(32, 6, strides=2, padding="same", name="large_k")(x)
    x = keras.layers.BatchNormalization(scale=False, center=True)(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    x = keras.layers.Dense(256, activation="relu")(x)
    x = keras.layers.Dropout(0.5)(x)
    outputs = keras.layers.Dense(10)(x)
    model = keras.Model(inputs, outputs)
    model.compile(keras.optimizers.Adam(1e-3),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    start = time.perf_counter()
    model.fit(xtr, ytr, batch_size=64, epochs=a.epochs, verbose=2)
    seconds = (time.perf_counter() - start) / a.epochs
    _, accuracy = model.evaluate(xte, yte, batch_size=64, verbose=0)
    print(f"RESULT keras_cnn seconds_per_epoch={seconds:.2f} test_accuracy={accuracy:.4f}")


if __name__ == "__main__":
    main()
