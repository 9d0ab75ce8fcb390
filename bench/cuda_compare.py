#!/usr/bin/env python3
"""traind's CUDA train step against PyTorch's on the same GPU, same invocation.

  python3 bench/cuda_compare.py --cuda-step build-cuda/bench/cuda_step
  python3 bench/cuda_compare.py --cuda-step ... --models fashion_mlp --batches 100 --json out.json

For fashion_mlp (784-300-100-10, SGD) and fashion_cnn (two 3x3 convolutions,
max pool, 64, 10; Adam) at each batch size, times a train step (forward,
backward, optimizer) on random batches that are copied to the GPU from
pinned memory every step:

  traind graph   the device-resident trainer, the step one CUDA graph
  traind eager   the same trainer launching every kernel each step
  torch eager    PyTorch 2.x eager
  torch graph    PyTorch with the whole step (forward, backward and
                 optimizer.step, Adam capturable) captured as a CUDA graph

all in float32 with TF32 off on both sides (traind has no TF32 path). Each
figure is the median of --windows windows of --steps steps after a warm-up.
Also measures cuBLAS's float32 SGEMM rate (8192^3) in the same run and
reports each traind step's GFLOP/s against it. The issue's targets: traind
graph >= 2x torch graph and >= 8x torch eager at batch 100, >= 1.1x torch
graph at batch 1024.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

try:
  import torch
  import torch.nn.functional as F
  from torch import nn
except ImportError as e:
  sys.exit(f"cuda_compare.py needs PyTorch 2.x with CUDA in this python3 ({sys.executable}): {e}"
           " (pip install torch; Debian's python3-torch has no CUDA)")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class FashionMlp(nn.Module):
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
  """TensorFlow SAME padding as configs/models/fashion_cnn.yaml: the stride-2
  convolution's one pad pixel at the bottom/right (an explicit F.pad)."""

  def __init__(self):
    super().__init__()
    self.conv1 = nn.Conv2d(1, 32, 3, stride=1, padding=1)
    self.conv2 = nn.Conv2d(32, 64, 3, stride=2, padding=0)
    self.hidden = nn.Linear(7 * 7 * 64, 64)
    self.logits = nn.Linear(64, 10)

  def forward(self, x):
    x = F.relu(self.conv1(x))
    x = F.relu(self.conv2(F.pad(x, (0, 1, 0, 1))))
    x = F.max_pool2d(x, 2, 2)
    x = torch.flatten(x, 1)
    x = F.relu(self.hidden(x))
    return self.logits(x)


def build(model_name, capturable):
  model = {"fashion_mlp": FashionMlp, "fashion_cnn": FashionCnn}[model_name]().cuda()
  if model_name == "fashion_mlp":
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
  else:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7, capturable=capturable)
  return model, optimizer


def median_step_ms(run, warmup, windows, steps):
  step = 0
  for _ in range(warmup):
    run(step)
    step += 1
  torch.cuda.synchronize()
  times = []
  for _ in range(windows):
    start = time.perf_counter()
    for _ in range(steps):
      run(step)
      step += 1
    torch.cuda.synchronize()
    times.append((time.perf_counter() - start) * 1e3 / steps)
  return statistics.median(times)


def torch_step_ms(model_name, batch, graph, args):
  torch.manual_seed(0)
  model, optimizer = build(model_name, capturable=graph)
  hosts = [(torch.rand(batch, 1, 28, 28).pin_memory(),
            torch.randint(0, 10, (batch,)).pin_memory()) for _ in range(8)]
  x = torch.empty(batch, 1, 28, 28, device="cuda")
  y = torch.empty(batch, dtype=torch.int64, device="cuda")

  def load(step):
    hx, hy = hosts[step % len(hosts)]
    x.copy_(hx, non_blocking=True)
    y.copy_(hy, non_blocking=True)

  def eager_step(step):
    load(step)
    optimizer.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()
    optimizer.step()

  if not graph:
    return median_step_ms(eager_step, args.warmup, args.windows, args.steps)

  # PyTorch's recipe: warm up on a side stream, then capture one whole step.
  side = torch.cuda.Stream()
  side.wait_stream(torch.cuda.current_stream())
  with torch.cuda.stream(side):
    for step in range(3):
      eager_step(step)
  torch.cuda.current_stream().wait_stream(side)
  captured = torch.cuda.CUDAGraph()
  optimizer.zero_grad(set_to_none=True)
  with torch.cuda.graph(captured):
    F.cross_entropy(model(x), y).backward()
    optimizer.step()

  def graph_step(step):
    load(step)
    captured.replay()

  return median_step_ms(graph_step, args.warmup, args.windows, args.steps)


def traind_step(args, model_name, batch, mode):
  spec = os.path.join(REPO, "configs", "models", model_name + ".yaml")
  out = subprocess.run([args.cuda_step, "--model", spec, "--batch", str(batch), "--mode", mode,
                        "--warmup", str(args.warmup), "--windows", str(args.windows),
                        "--steps", str(args.steps)],
                       check=True, capture_output=True, text=True)
  return json.loads(out.stdout.strip().splitlines()[-1])


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--cuda-step", required=True, help="the cuda_step binary")
  parser.add_argument("--models", default="fashion_mlp,fashion_cnn")
  parser.add_argument("--batches", default="100,1024")
  parser.add_argument("--warmup", type=int, default=20)
  parser.add_argument("--windows", type=int, default=5)
  parser.add_argument("--steps", type=int, default=200)
  parser.add_argument("--json", help="also write the figures here")
  args = parser.parse_args()

  torch.backends.cuda.matmul.allow_tf32 = False
  torch.backends.cudnn.allow_tf32 = False
  torch.backends.cudnn.benchmark = True
  torch.set_float32_matmul_precision("highest")

  # cuda_step says why it cannot run (no GPU: exit 77) on stderr.
  probe = subprocess.run([args.cuda_step, "--gemm-peak"], capture_output=True, text=True)
  if probe.returncode != 0:
    sys.stderr.write(probe.stderr)
    sys.exit(probe.returncode)
  peak = json.loads(probe.stdout.strip())
  print(f"GPU {peak['gpu']}, torch {torch.__version__}, cuBLAS SGEMM float32 ceiling "
        f"{peak['gemm_peak_gflops'] / 1e3:.1f} TFLOP/s ({peak['size']}^3); TF32 off everywhere")
  header = (f"{'model':12} {'batch':>5} | {'traind graph':>12} {'traind eager':>12} "
            f"{'torch eager':>11} {'torch graph':>11} | {'x torch graph':>13} "
            f"{'x torch eager':>13} | {'GFLOP/s':>8} {'of SGEMM':>8} | targets")
  print(header)
  print("-" * len(header))
  rows = []
  for model_name in args.models.split(","):
    for batch in (int(b) for b in args.batches.split(",")):
      graph = traind_step(args, model_name, batch, "graph")
      eager = traind_step(args, model_name, batch, "eager")
      torch_eager = torch_step_ms(model_name, batch, False, args)
      torch_graph = torch_step_ms(model_name, batch, True, args)
      vs_graph = torch_graph / graph["step_ms"]
      vs_eager = torch_eager / graph["step_ms"]
      if batch <= 100:
        met = vs_graph >= 2.0 and vs_eager >= 8.0
        target = ">=2x graph, >=8x eager"
      else:
        met = vs_graph >= 1.1
        target = ">=1.1x graph"
      share = graph["gflops"] / peak["gemm_peak_gflops"]
      print(f"{model_name:12} {batch:>5} | {graph['step_ms']:>9.4f} ms {eager['step_ms']:>9.4f} ms "
            f"{torch_eager:>8.4f} ms {torch_graph:>8.4f} ms | {vs_graph:>12.2f}x "
            f"{vs_eager:>12.2f}x | {graph['gflops']:>8.0f} {share:>7.1%} | "
            f"{target}: {'met' if met else 'NOT met'}", flush=True)
      rows.append({"model": model_name, "batch": batch, "traind_graph_ms": graph["step_ms"],
                   "traind_eager_ms": eager["step_ms"], "torch_eager_ms": torch_eager,
                   "torch_graph_ms": torch_graph, "x_torch_graph": vs_graph,
                   "x_torch_eager": vs_eager, "traind_gflops": graph["gflops"],
                   "share_of_sgemm": share, "traind_last_loss": graph["last_loss"],
                   "target": target, "met": met})
  if args.json:
    with open(args.json, "w") as f:
      json.dump({"gpu": peak["gpu"], "torch": torch.__version__,
                 "sgemm_gflops": peak["gemm_peak_gflops"], "rows": rows}, f, indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(main())
