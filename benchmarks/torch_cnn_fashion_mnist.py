#!/usr/bin/env python3
"""PyTorch (eager, CPU) beside benchmarks/cnn_fashion_mnist_bench and keras_cnn_fashion_mnist.py:
the seeds/002 CNN on Fashion-MNIST, the same model, data and training.

    /usr/bin/python3 benchmarks/torch_cnn_fashion_mnist.py --seed 1 --epochs 3

PyTorch is Debian's (`apt-get install python3-torch`: 1.13, oneDNN, OpenMP), on 2 threads
(torch.set_num_threads(2), the machine's cores; --threads to change it), denormals flushed as
XLA and tessel do.

Data: Debian's fashion-mnist IDX files under /usr/share/datasets/fashion-mnist (nothing is
downloaded): all 60,000 training images train, t10k tests; pixel values 0..255 (the model
rescales).

Model, as Keras builds it: Rescaling(1/255) -> [Conv2d -> BatchNorm2d (center, no scale) -> ReLU]
x 3 (12 filters 3x3 same, no bias; 24 filters 6x6 stride 2 valid, no bias; 32 filters 6x6
stride 2 same, which for 12x12 inputs pads 2 on each side as Keras's "same" does) -> global
average pooling -> Linear(256) relu -> Dropout(0.5) -> Linear(10). Keras's initializers (Glorot
uniform kernels, zero biases). Batch normalization with Keras's epsilon 1e-3 and momentum 0.99
(PyTorch counts momentum the other way: 1 - 0.99 = 0.01), beta trainable and gamma held at 1
(scale=False). Adam(1e-3, epsilon 1e-7 as Keras), cross-entropy on logits, batch 64, a new
shuffle every epoch, the last partial batch kept (as Keras's fit); no validation. Tensors in
PyTorch's default NCHW memory: on this machine's 2 cores it runs a step in about half the time
of channels_last (NHWC), which oneDNN is said to prefer (--channels-last to compare: 17.6 against
34.5 ms a step over 100 steps).
The last line is

    RESULT torch_cnn seconds_per_epoch=<mean over the epochs> test_accuracy=<acc>
"""

import argparse
import os
import sys
import time

import torch
from torch import nn

from bench_common import read_idx


def glorot(layer):
    nn.init.xavier_uniform_(layer.weight)
    if layer.bias is not None:
        nn.init.zeros_(layer.bias)
    return layer


def batch_norm(channels):
    bn = nn.BatchNorm2d(channels, eps=1e-3, momentum=0.01)
    bn.weight.requires_grad_(False)  # scale=False: gamma stays 1
    return bn


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            glorot(nn.Conv2d(1, 12, 3, padding=1, bias=False)), batch_norm(12), nn.ReLU(),
            glorot(nn.Conv2d(12, 24, 6, stride=2, bias=False)), batch_norm(24), nn.ReLU(),
            glorot(nn.Conv2d(24, 32, 6, stride=2, padding=2)), batch_norm(32), nn.ReLU())
        self.head = nn.Sequential(glorot(nn.Linear(32, 256)), nn.ReLU(), nn.Dropout(0.5),
                                  glorot(nn.Linear(256, 10)))

    def forward(self, x):
        x = self.features(x * (1.0 / 255.0))
        return self.head(x.mean(dim=(2, 3)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    a = p.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    torch.set_flush_denormal(True)
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"mkldnn {torch.backends.mkldnn.is_available()}, {fmt}", flush=True)

    def images(name):
        x = torch.from_numpy(read_idx(os.path.join(a.data_dir, name)).astype("float32"))
        return x.reshape(-1, 1, 28, 28).contiguous(memory_format=fmt)

    def labels(name):
        return torch.from_numpy(read_idx(os.path.join(a.data_dir, name)).astype("int64"))

    x, y = images("train-images-idx3-ubyte.gz"), labels("train-labels-idx1-ubyte.gz")
    x_test, y_test = images("t10k-images-idx3-ubyte.gz"), labels("t10k-labels-idx1-ubyte.gz")
    model = Cnn().to(memory_format=fmt)
    opt = torch.optim.Adam([q for q in model.parameters() if q.requires_grad], lr=1e-3, eps=1e-7)
    loss_fn = nn.CrossEntropyLoss()
    b = 64
    start = time.perf_counter()
    for epoch in range(a.epochs):
        t0 = time.perf_counter()
        model.train()
        order = torch.randperm(len(x))
        total = 0.0
        for i in range(0, len(x), b):
            idx = order[i : i + b]
            xb = x[idx].contiguous(memory_format=fmt)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(xb), y[idx])
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        print(f"epoch {epoch + 1}: {time.perf_counter() - t0:.2f} s, loss {total / len(x):.4f}",
              flush=True)
    seconds = (time.perf_counter() - start) / a.epochs
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(x_test), b):
            correct += (model(x_test[i : i + b]).argmax(1) == y_test[i : i + b]).sum().item()
    print(f"RESULT torch_cnn seconds_per_epoch={seconds:.2f} "
          f"test_accuracy={correct / len(x_test):.4f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
