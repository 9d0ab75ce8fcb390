#!/usr/bin/python3
"""The PyTorch peer of traind's Fashion-MNIST models, for bench/compare.py.

Runs with Debian's python3-torch, which only Debian's own interpreter sees:

  /usr/bin/python3 bench/torch_peer.py --model fashion_cnn --threads 2 --steps 300
  /usr/bin/python3 bench/torch_peer.py --model fashion_mlp --epochs 3
  /usr/bin/python3 bench/torch_peer.py --gemm-peak --threads 2

The models are those of configs/models/fashion_{mlp,cnn}.yaml: same layers,
batch, optimizer, initialisers (Glorot-uniform kernels, zero biases) and
input scaling (pixels / 255). The CNN's activations are channels-last
(--layout nhwc) by default: torch 1.13's oneDNN convolutions then skip the
reorders to and from blocked layouts that NCHW costs them, 10-15% of the
step here.

Throughput mode (--steps N) times windows of --log-every steps, as traind
logs them, and reports the median window rate after the first window (the
warm-up). Accuracy mode (--epochs E) reshuffles the training set every
epoch and evaluates on the full 10k test set after each. Either way the
last line of stdout is one JSON object.
"""
import argparse
import gzip
import json
import os
import resource
import statistics
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

DATA_DIR = "/usr/share/datasets/fashion-mnist"


def read_idx(path, expected_dims):
  """Reads an IDX file (gzip), checking its header against its length."""
  with gzip.open(path, "rb") as f:
    raw = f.read()
  if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
    raise ValueError(f"{path}: not an unsigned-byte IDX file")
  dims = raw[3]
  if dims != expected_dims:
    raise ValueError(f"{path}: expected {expected_dims} dimensions, found {dims}")
  shape = struct.unpack(f">{dims}I", raw[4:4 + 4 * dims])
  offset = 4 + 4 * dims
  if len(raw) - offset != int(np.prod(shape)):
    raise ValueError(f"{path}: header says {shape}, file holds {len(raw) - offset} bytes")
  return np.frombuffer(raw, dtype=np.uint8, offset=offset).reshape(shape)


def load_split(data_dir, prefix):
  images = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"), 3)
  labels = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"), 1)
  x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)  # N,1,28,28
  y = torch.from_numpy(labels.astype(np.int64))
  return x, y


class FashionMlp(nn.Module):
  """784-300-100-10, relu; SGD 0.1."""

  def __init__(self):
    super().__init__()
    self.hidden1 = nn.Linear(784, 300)
    self.hidden2 = nn.Linear(300, 100)
    self.logits = nn.Linear(100, 10)

  def forward(self, x):
    x = torch.flatten(x, 1)
    x = F.relu(self.hidden1(x))
    x = F.relu(self.hidden2(x))
    return self.logits(x)


class FashionCnn(nn.Module):
  """conv 32 3x3 s1 SAME relu, conv 64 3x3 s2 SAME relu, maxpool 2, 64 relu, 10."""

  def __init__(self):
    super().__init__()
    self.conv1 = nn.Conv2d(1, 32, 3, stride=1, padding=1)
    self.conv2 = nn.Conv2d(32, 64, 3, stride=2, padding=0)
    self.hidden = nn.Linear(7 * 7 * 64, 64)
    self.logits = nn.Linear(64, 10)

  def forward(self, x):
    x = F.relu(self.conv1(x))
    # TensorFlow SAME with stride 2 on 28 pixels: 14 outputs, the one pad
    # pixel at the bottom/right.
    x = F.relu(self.conv2(F.pad(x, (0, 1, 0, 1))))
    x = F.max_pool2d(x, 2, 2)
    x = torch.flatten(x, 1)
    x = F.relu(self.hidden(x))
    return self.logits(x)


def build(model_name, layout="nchw"):
  model = {"fashion_mlp": FashionMlp, "fashion_cnn": FashionCnn}[model_name]()
  for m in model.modules():
    if isinstance(m, (nn.Linear, nn.Conv2d)):
      nn.init.xavier_uniform_(m.weight)  # Glorot uniform, fans as TensorFlow's
      nn.init.zeros_(m.bias)
  if layout == "nhwc":
    model = model.to(memory_format=torch.channels_last)
  if model_name == "fashion_mlp":
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
  else:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
  return model, optimizer


def train_step(model, optimizer, x, y):
  optimizer.zero_grad(set_to_none=True)
  loss = F.cross_entropy(model(x), y)
  loss.backward()
  optimizer.step()
  return loss


@torch.no_grad()
def evaluate(model, x, y, batch_size):
  model.eval()
  correct = 0
  loss_sum = 0.0
  for i in range(0, x.shape[0], batch_size):
    logits = model(x[i:i + batch_size])
    loss_sum += float(F.cross_entropy(logits, y[i:i + batch_size], reduction="sum"))
    correct += int((logits.argmax(1) == y[i:i + batch_size]).sum())
  model.train()
  return correct / x.shape[0], loss_sum / x.shape[0]


def blas_in_use():
  """The BLAS library mapped into this process (what nn.Linear runs on)."""
  with open("/proc/self/maps") as maps:
    libs = {line.split()[-1] for line in maps if "blas" in line}
  return sorted(os.path.basename(p) for p in libs)


def max_rss_mib():
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run_throughput(args, model, optimizer, train_x, train_y, test_x, test_y):
  """Trains --steps steps; the rate of each window of --log-every steps."""
  g = torch.Generator().manual_seed(args.seed)
  steps_per_epoch = train_x.shape[0] // args.batch
  order = torch.randperm(train_x.shape[0], generator=g)
  rates = []
  window_start = time.perf_counter()
  for step in range(args.steps):
    i = step % steps_per_epoch
    if i == 0 and step > 0:
      order = torch.randperm(train_x.shape[0], generator=g)
    idx = order[i * args.batch:(i + 1) * args.batch]
    loss = train_step(model, optimizer, train_x[idx], train_y[idx])
    if (step + 1) % args.log_every == 0:
      now = time.perf_counter()
      rates.append(args.log_every * args.batch / (now - window_start))
      if args.verbose:
        print(f"step {step + 1}, loss = {float(loss):.4f} ({rates[-1]:.1f} examples/sec)",
              flush=True)
      window_start = time.perf_counter()
  steady = rates[1:] if len(rates) > 1 else rates
  if args.profile:
    profile_steps(args, model, optimizer, train_x, train_y)
  # Evaluate once at the end, as traind does, so peak RSS covers the same work.
  accuracy, _ = evaluate(model, test_x, test_y, args.batch)
  return {
      "examples_per_sec": statistics.median(steady) if steady else 0.0,
      "window_rates": [round(r, 1) for r in rates],
      "test_accuracy": round(accuracy, 4),
  }


def profile_steps(args, model, optimizer, train_x, train_y):
  """Prints, on stderr, where --profile more steps spend their time, per op."""
  from torch.profiler import ProfilerActivity, profile
  with profile(activities=[ProfilerActivity.CPU]) as prof:
    for step in range(args.profile):
      i = step * args.batch
      train_step(model, optimizer, train_x[i:i + args.batch], train_y[i:i + args.batch])
  table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20)
  print(f"{args.model}: {args.profile} steps profiled\n{table}", file=sys.stderr)


def run_accuracy(args, model, optimizer, train_x, train_y, test_x, test_y):
  g = torch.Generator().manual_seed(args.seed)
  steps_per_epoch = train_x.shape[0] // args.batch
  accuracies = []
  start = time.perf_counter()
  for epoch in range(args.epochs):
    order = torch.randperm(train_x.shape[0], generator=g)
    for i in range(steps_per_epoch):
      idx = order[i * args.batch:(i + 1) * args.batch]
      train_step(model, optimizer, train_x[idx], train_y[idx])
    accuracy, loss = evaluate(model, test_x, test_y, args.batch)
    accuracies.append(round(accuracy, 4))
    if args.verbose:
      print(f"epoch {epoch + 1}, test loss = {loss:.4f}, test accuracy = {accuracy:.4f}",
            flush=True)
  seconds = time.perf_counter() - start
  return {"test_accuracy_per_epoch": accuracies, "seconds": round(seconds, 1)}


def gemm_peak(threads, sizes=(1024, 2048), repeats=5):
  """torch.mm GFLOP/s (best of repeats) for square single-precision GEMMs."""
  result = {}
  for n in sizes:
    a = torch.randn(n, n)
    b = torch.randn(n, n)
    c = torch.mm(a, b)
    best = float("inf")
    reps = max(1, int(2e10 / (2 * n ** 3)))  # about 20 GFLOP per timing
    for _ in range(repeats):
      t = time.perf_counter()
      for _ in range(reps):
        torch.mm(a, b, out=c)
      best = min(best, (time.perf_counter() - t) / reps)
    result[str(n)] = round(2 * n ** 3 / best / 1e9, 1)
  return {"peer": "torch.mm", "threads": threads, "gflops_by_size": result,
          "gflops": max(result.values()), "blas": blas_in_use()}


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--model", choices=["fashion_mlp", "fashion_cnn"])
  parser.add_argument("--threads", type=int, default=2)
  mode = parser.add_mutually_exclusive_group(required=True)
  mode.add_argument("--steps", type=int, help="throughput mode: train this many steps")
  mode.add_argument("--epochs", type=int, help="accuracy mode: train this many epochs")
  mode.add_argument("--gemm-peak", action="store_true", help="time torch.mm and exit")
  parser.add_argument("--log-every", type=int, default=100,
                      help="steps per timing window (throughput mode)")
  parser.add_argument("--batch", type=int, default=100)
  parser.add_argument("--layout", choices=["nhwc", "nchw"], default="nhwc",
                      help="activation memory format (channels-last or torch's default)")
  parser.add_argument("--seed", type=int, default=42)
  parser.add_argument("--data-dir", default=DATA_DIR)
  parser.add_argument("--profile", type=int, default=0, metavar="N",
                      help="after a throughput run, profile N more steps (table on stderr)")
  parser.add_argument("--verbose", action="store_true", help="a line per window or epoch")
  args = parser.parse_args()

  torch.set_num_threads(args.threads)
  if args.gemm_peak:
    print(json.dumps(gemm_peak(args.threads)))
    return
  if not args.model:
    parser.error("--model is required with --steps or --epochs")
  if args.steps is not None and args.steps < 2 * args.log_every:
    parser.error("--steps must cover at least two --log-every windows (the first is warm-up)")

  torch.manual_seed(args.seed)
  train_x, train_y = load_split(args.data_dir, "train")
  test_x, test_y = load_split(args.data_dir, "t10k")
  if args.layout == "nhwc":
    train_x = train_x.contiguous(memory_format=torch.channels_last)
    test_x = test_x.contiguous(memory_format=torch.channels_last)
  model, optimizer = build(args.model, args.layout)
  runner = run_throughput if args.steps is not None else run_accuracy
  result = {"peer": "torch", "torch": torch.__version__, "model": args.model,
            "threads": args.threads, "batch": args.batch, "layout": args.layout,
            "blas": blas_in_use()}
  result.update(runner(args, model, optimizer, train_x, train_y, test_x, test_y))
  result["max_rss_mib"] = round(max_rss_mib(), 1)
  result["malloc_tuned"] = "MALLOC_MMAP_THRESHOLD_" in os.environ
  print(json.dumps(result), flush=True)


if __name__ == "__main__":
  main()
