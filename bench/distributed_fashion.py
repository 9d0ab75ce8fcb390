"""What the PyTorch peers of distributed_compare.py share: Fashion-MNIST,
the MLPs, each worker's share of the batches, and the per-window timing
that traind's log lines report.

Runs under Debian's /usr/bin/python3 (torch 1.13, numpy).
"""
import gzip
import json
import statistics
import time

import numpy as np
import torch
from torch import nn

DATA_DIR = "/usr/share/datasets/fashion-mnist"


def load_train():
  """The 60000 training images as float32 [n, 784] in [0, 1] and int64 labels."""
  with gzip.open(f"{DATA_DIR}/train-images-idx3-ubyte.gz", "rb") as f:
    images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)
  with gzip.open(f"{DATA_DIR}/train-labels-idx1-ubyte.gz", "rb") as f:
    labels = np.frombuffer(f.read(), np.uint8, offset=8)
  return (torch.from_numpy(images.astype(np.float32) / 255.0),
          torch.from_numpy(labels.astype(np.int64)))


def mlp(widths):
  """784-w1-...-10 with ReLU between the dense layers, as traind's model specs."""
  layers = []
  for i in range(len(widths) - 1):
    layers.append(nn.Linear(widths[i], widths[i + 1]))
    if i < len(widths) - 2:
      layers.append(nn.ReLU())
  return nn.Sequential(*layers)


def worker_batches(images, labels, batch, worker, workers, seed):
  """Endless batches: worker i takes every workers-th batch of each epoch's
  shuffled order, as traind's input pipeline does."""
  per_epoch = images.shape[0] // batch
  epoch = 0
  while True:
    order = torch.randperm(images.shape[0], generator=torch.Generator().manual_seed(seed + epoch))
    for b in range(worker, per_epoch, workers):
      index = order[b * batch:(b + 1) * batch]
      yield images[index], labels[index]
    epoch += 1


class Windows:
  """examples/sec over every `every` steps, as traind's log lines, and when
  each window ended (wall clock, comparable between processes)."""

  def __init__(self, every, batch):
    self.every, self.batch = every, batch
    self.rates, self.ends, self.steps, self.start = [], [], 0, time.perf_counter()

  def step(self):
    self.steps += 1
    if self.steps % self.every == 0:
      now = time.perf_counter()
      self.rates.append(self.every * self.batch / (now - self.start))
      self.ends.append(time.time())
      self.start = now

  def report(self, **extra):
    """One JSON line on stdout: every window's rate and end, the examples
    per window, and the median rate after the first window."""
    rate = statistics.median(self.rates[1:]) if len(self.rates) > 1 else float("nan")
    print(json.dumps({"windows": self.rates, "ends": self.ends,
                      "examples_per_window": self.every * self.batch, "rate": rate, **extra}),
          flush=True)


def set_threads(threads):
  torch.set_num_threads(threads)
  torch.set_num_interop_threads(1)
