#!/usr/bin/env python3
"""traind against PyTorch on fashion_mlp and fashion_cnn, side by side.

  python3 bench/compare.py --build-dir build               # throughput, 2 threads
  python3 bench/compare.py --build-dir build --threads 1 --rounds 5
  python3 bench/compare.py --build-dir build --accuracy    # epochs: cnn 1/3/10, mlp 1/3

Throughput mode runs, for each round and model, traind, then the PyTorch peer
(bench/torch_peer.py under /usr/bin/python3, where Debian's python3-torch
lives) with glibc malloc tuned as traind tunes it itself (mallopt at
start-up), then the peer untuned; the order alternates between rounds. Each
run reports the median of its per-window rates after the first window (the
warm-up); the table shows the median over rounds with its range. GFLOP/s
counts the multiply-adds each training step does (see flops_per_example)
and is set against the single-precision GEMM peak measured in the same
invocation (bench/gemm_peak on dnnl_sgemm; torch.mm for comparison). Peak
RSS comes from the kernel's accounting of each child (wait4).

The machine is shared: "others" is the CPU the rest of the machine used
during a run, in cores. OpenMP threads that wait by spinning lose whole
time slices when a core is taken from them, so a run beside a compiler can
be 10x slower. Each run therefore waits (up to --max-wait s) for a quiet
machine and is repeated (--retries) if others took more than --quiet cores
during it; the quietest attempt is kept and the table shows the worst
"others" among the runs it summarises. On a machine that stays busy,
--nice -10 (as root) gives the measured processes about 9 times the CPU
weight of the builds beside them, which keeps most time slices theirs.

Accuracy mode trains each model for its epoch schedule once per side and
prints the full-test-set accuracy after the epochs the issue names, beside
the PyTorch figures it quotes.

Only the Python standard library is used, so any python3 runs this script.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_PYTHON = "/usr/bin/python3"  # Debian's torch is invisible to a pyenv python3
TORCH_PEER = os.path.join(REPO, "bench", "torch_peer.py")
TUNED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "1073741824"}
STEPS_PER_EPOCH = 600  # 60k training examples, batch 100

# Layers as (kind, multiply-adds per example). The first layer's data
# gradient is never computed (nothing upstream needs it), by either side.
MODELS = {
    "fashion_mlp": [("dense", 784 * 300), ("dense", 300 * 100), ("dense", 100 * 10)],
    "fashion_cnn": [
        ("conv", 28 * 28 * 32 * 3 * 3 * 1),   # conv1: 28x28 out, 32 filters, 3x3x1
        ("conv", 14 * 14 * 64 * 3 * 3 * 32),  # conv2: stride 2, 14x14 out
        ("dense", 7 * 7 * 64 * 64),           # after the 2x2 max pool
        ("dense", 64 * 10),
    ],
}
# Throughput defaults: steps per run and steps per timing window.
RUN_STEPS = {"fashion_mlp": (1000, 100), "fashion_cnn": (300, 50)}
# Accuracy mode: epochs trained, epochs reported, and PyTorch's figures
# quoted in the issue for those epochs.
ACCURACY_SCHEDULE = {
    "fashion_cnn": (10, [1, 3, 10], ["0.86", "0.89-0.90", "0.915"]),
    "fashion_mlp": (3, [1, 3], ["0.81", "0.845"]),
}

TRAIND_WINDOW = re.compile(r"step (\d+), loss = \S+.*\(([\d.]+) examples/sec")
TRAIND_EVAL = re.compile(r"step (\d+), test loss = \S+, test accuracy = ([\d.]+)")


def flops_per_example(model):
  """Training FLOPs of one example: forward, weight gradient, data gradient."""
  macs = [m for _, m in MODELS[model]]
  return 2 * (sum(macs) + sum(macs) + sum(macs[1:]))


def busy_cpu_seconds():
  """CPU seconds the whole machine has spent busy since boot."""
  with open("/proc/stat") as f:
    fields = [int(v) for v in f.readline().split()[1:]]
  idle = fields[3] + fields[4]  # idle + iowait
  return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


CHILD_NICE = 0  # set from --nice


def renice_child():
  """In a fresh child of its own session: lower its niceness to CHILD_NICE.
  With autogroup scheduling (sched_autogroup_enabled) the CPU is shared
  between sessions first, so the session's group is reniced as well."""
  os.nice(CHILD_NICE)
  try:
    with open("/proc/self/autogroup", "w") as f:
      f.write(str(CHILD_NICE))
  except OSError:
    pass  # no autogroup: the process niceness alone decides


def run_child(argv, env, cwd=REPO):
  """Runs argv; returns (combined output, exit code, peak RSS MiB, others' CPU in cores)."""
  busy_before = busy_cpu_seconds()
  start = time.monotonic()
  proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True,
                          start_new_session=bool(CHILD_NICE),
                          preexec_fn=renice_child if CHILD_NICE else None)
  output = proc.stdout.read()
  _, status, usage = os.wait4(proc.pid, 0)
  proc.returncode = os.waitstatus_to_exitcode(status)
  wall = time.monotonic() - start
  own_cpu = usage.ru_utime + usage.ru_stime
  others = max(0.0, (busy_cpu_seconds() - busy_before - own_cpu) / wall)
  return output, proc.returncode, usage.ru_maxrss / 1024.0, others


def others_load(seconds=1.0):
  """Cores the machine keeps busy over `seconds` while this script sleeps."""
  before = busy_cpu_seconds()
  time.sleep(seconds)
  return (busy_cpu_seconds() - before) / seconds


def wait_for_quiet(args):
  """Waits (up to --max-wait seconds) until the others use under --quiet cores."""
  deadline = time.monotonic() + args.max_wait
  while others_load() > args.quiet and time.monotonic() < deadline:
    time.sleep(2.0)


def measured(args, run):
  """run() on a quiet machine if one comes: retried while others took over
  --quiet cores during it, keeping the quietest attempt."""
  best = None
  for _ in range(1 + args.retries):
    wait_for_quiet(args)
    result = run()
    if best is None or result["others"] < best["others"]:
      best = result
    if best["others"] <= args.quiet:
      break
  return best


def child_env(threads, malloc_tuned):
  env = {k: v for k, v in os.environ.items() if k not in TUNED_MALLOC}
  env["OMP_NUM_THREADS"] = str(threads)
  if malloc_tuned:
    env.update(TUNED_MALLOC)
  return env


def fail(what, argv, output):
  sys.exit(f"compare.py: {what} failed: {' '.join(argv)}\n{output[-3000:]}")


def traind_argv(args, model, steps, log_every, eval_every):
  # An empty checkpoint directory turns checkpointing off: no file writes in
  # a timing window, and no stale checkpoint of the model's default
  # directory is restored instead of training from scratch.
  return [args.traind, "--model", os.path.join(REPO, "configs", "models", model + ".yaml"),
          "--max-steps", str(steps), "--threads", str(args.threads), "--log-every",
          str(log_every), "--eval-every", str(eval_every), "--checkpoint-dir", ""]


def run_traind(args, model, steps, log_every):
  argv = traind_argv(args, model, steps, log_every, 0)
  output, code, rss, others = run_child(argv, child_env(args.threads, False))
  if code != 0:
    fail("traind", argv, output)
  rates = [float(m.group(2)) for m in TRAIND_WINDOW.finditer(output)]
  if len(rates) < 2:
    fail("traind (fewer than two timing windows)", argv, output)
  return {"rate": statistics.median(rates[1:]), "windows": rates, "rss": rss, "others": others}


def run_torch(args, model, steps, log_every, malloc_tuned):
  argv = [TORCH_PYTHON, TORCH_PEER, "--model", model, "--threads", str(args.threads), "--steps",
          str(steps), "--log-every", str(log_every), "--layout", args.torch_layout]
  output, code, rss, others = run_child(argv, child_env(args.threads, malloc_tuned))
  if code != 0:
    fail("torch peer", argv, output)
  result = json.loads(output.strip().splitlines()[-1])
  return {"rate": result["examples_per_sec"], "windows": result["window_rates"], "rss": rss,
          "others": others, "blas": result["blas"]}


def gemm_peaks(args):
  """{"dnnl_sgemm": {threads: GFLOP/s}, "torch.mm": {...}} for 1 and --threads threads."""
  thread_counts = sorted({1, args.threads})
  peaks = {}
  def peak(name, argv, threads):
    def run():
      output, code, _, others = run_child(argv, child_env(threads, False))
      if code != 0:
        fail(name, argv, output)
      return {"gflops": json.loads(output.strip().splitlines()[-1])["gflops"], "others": others}
    result = measured(args, run)
    peaks.setdefault(name, {})[threads] = result["gflops"]
    print(f"GEMM peak {name:10} {threads} threads {result['gflops']:6.1f} GFLOP/s  "
          f"others {result['others']:.2f} cores", file=sys.stderr, flush=True)

  if not os.path.exists(args.gemm_peak):
    print(f"note: {args.gemm_peak} not built; the peak is torch.mm's", file=sys.stderr)
  for t in thread_counts:
    if os.path.exists(args.gemm_peak):
      peak("dnnl_sgemm", [args.gemm_peak, "--threads", str(t)], t)
    peak("torch.mm", [TORCH_PYTHON, TORCH_PEER, "--gemm-peak", "--threads", str(t)], t)
  return peaks


def spread(values, fmt="{:.0f}"):
  med = statistics.median(values)
  if len(values) == 1:
    return fmt.format(med)
  return f"{fmt.format(med)} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def throughput(args):
  peaks = gemm_peaks(args)
  peak_source = "dnnl_sgemm" if "dnnl_sgemm" in peaks else "torch.mm"
  peak = peaks[peak_source][args.threads]
  sides = ["traind", "torch", "torch untuned"]
  runs = {m: {s: [] for s in sides} for m in args.models}
  for r in range(args.rounds):
    for model in args.models:
      steps, log_every = RUN_STEPS[model]
      steps = args.steps or steps
      log_every = args.log_every or log_every
      order = sides if r % 2 == 0 else list(reversed(sides))
      for side in order:
        if side == "traind":
          result = measured(args, lambda: run_traind(args, model, steps, log_every))
        else:
          result = measured(args, lambda: run_torch(args, model, steps, log_every,
                                                    malloc_tuned=(side == "torch")))
        runs[model][side].append(result)
        print(f"round {r + 1} {model:12} {side:14} {result['rate']:9.1f} ex/s  "
              f"peak RSS {result['rss']:6.1f} MiB  others {result['others']:.2f} cores",
              file=sys.stderr, flush=True)

  print(f"\nthreads {args.threads}, {args.rounds} rounds; median over rounds (min-max)")
  for source, by_threads in peaks.items():
    print(f"GEMM peak {source}: " +
          ", ".join(f"{t} thread{'s' if t > 1 else ''} {g:.1f} GFLOP/s"
                    for t, g in sorted(by_threads.items())))
  print(f"% of peak is against {peak_source} at {args.threads} threads: {peak:.1f} GFLOP/s")
  blas = runs[args.models[0]]["torch"][0]["blas"]
  print(f"torch dense layers on: {', '.join(blas)}; activations {args.torch_layout}\n")

  header = ("| model | traind ex/s | torch ex/s | ratio | torch untuned ex/s | ratio | "
            "traind GFLOP/s (% peak) | torch GFLOP/s (% peak) | others, max (cores) |")
  print(header)
  print("|" + "---|" * (header.count("|") - 1))
  table = {}
  for model in args.models:
    f = flops_per_example(model)
    t = [x["rate"] for x in runs[model]["traind"]]
    p = [x["rate"] for x in runs[model]["torch"]]
    u = [x["rate"] for x in runs[model]["torch untuned"]]
    ratio = [a / b for a, b in zip(t, p)]  # per round: the A/B pairs ran back to back
    ratio_u = [a / b for a, b in zip(t, u)]
    gt = statistics.median(t) * f / 1e9
    gp = statistics.median(p) * f / 1e9
    others = [x["others"] for side in sides for x in runs[model][side]]
    print(f"| {model} | {spread(t)} | {spread(p)} | {spread(ratio, '{:.2f}')} | {spread(u)} | "
          f"{spread(ratio_u, '{:.2f}')} | {gt:.1f} ({100 * gt / peak:.0f}%) | "
          f"{gp:.1f} ({100 * gp / peak:.0f}%) | {max(others):.2f} |")
    table[model] = {"traind": t, "torch": p, "torch_untuned": u, "ratio": ratio,
                    "flops_per_example": f}

  print("\n| model | traind peak RSS MiB | torch peak RSS MiB | torch untuned peak RSS MiB |")
  print("|---|---|---|---|")
  for model in args.models:
    rss = {s: max(x["rss"] for x in runs[model][s]) for s in sides}
    print(f"| {model} | {rss['traind']:.0f} | {rss['torch']:.0f} | {rss['torch untuned']:.0f} |")
    table[model]["rss_mib"] = rss
  print(f"\nFLOPs per training example: " +
        ", ".join(f"{m} {flops_per_example(m) / 1e6:.2f} M" for m in args.models))
  if args.json:
    with open(args.json, "w") as f:
      json.dump({"threads": args.threads, "peaks": peaks, "models": table, "runs": runs}, f,
                indent=1)


def accuracy(args):
  rows = []
  for model in args.models:
    epochs, report, reference = ACCURACY_SCHEDULE[model]
    argv = traind_argv(args, model, epochs * STEPS_PER_EPOCH, STEPS_PER_EPOCH, STEPS_PER_EPOCH)
    start = time.monotonic()
    output, code, _, _ = run_child(argv, child_env(args.threads, False))
    traind_seconds = time.monotonic() - start
    if code != 0:
      fail("traind", argv, output)
    by_step = {int(m.group(1)): float(m.group(2)) for m in TRAIND_EVAL.finditer(output)}
    traind_acc = [by_step.get(e * STEPS_PER_EPOCH) for e in range(1, epochs + 1)]

    argv = [TORCH_PYTHON, TORCH_PEER, "--model", model, "--threads", str(args.threads),
            "--epochs", str(epochs), "--layout", args.torch_layout]
    output, code, _, _ = run_child(argv, child_env(args.threads, True))
    if code != 0:
      fail("torch peer", argv, output)
    peer = json.loads(output.strip().splitlines()[-1])
    torch_acc = peer["test_accuracy_per_epoch"]
    print(f"{model}: traind {traind_seconds:.0f} s, torch {peer['seconds']:.0f} s; "
          f"accuracy per epoch traind {traind_acc}, torch {torch_acc}", file=sys.stderr)
    for e, ref in zip(report, reference):
      rows.append((model, e, traind_acc[e - 1], torch_acc[e - 1], ref))

  print("\n| model | epochs | traind test accuracy | torch test accuracy | PyTorch (issue) |")
  print("|---|---|---|---|---|")
  for model, e, a, b, ref in rows:
    a_text = f"{a:.4f}" if a is not None else "missing"
    print(f"| {model} | {e} | {a_text} | {b:.4f} | {ref} |")


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--build-dir", default=os.path.join(REPO, "build"),
                      help="where traind and bench/gemm_peak were built")
  parser.add_argument("--threads", type=int, default=2)
  parser.add_argument("--rounds", type=int, default=3, help="A/B rounds (throughput)")
  parser.add_argument("--models", default="fashion_mlp,fashion_cnn")
  parser.add_argument("--steps", type=int, help="steps per run (default: mlp 1000, cnn 300)")
  parser.add_argument("--log-every", type=int, help="steps per timing window (mlp 100, cnn 50)")
  parser.add_argument("--torch-layout", choices=["nhwc", "nchw"], default="nhwc",
                      help="the peer's activation layout (channels-last is its faster one here)")
  parser.add_argument("--quiet", type=float, default=0.15,
                      help="others' CPU (cores) under which a run counts as quiet")
  parser.add_argument("--max-wait", type=float, default=60,
                      help="seconds to wait for a quiet machine before each run")
  parser.add_argument("--retries", type=int, default=2, help="reruns of a noisy run")
  parser.add_argument("--nice", type=int, default=0,
                      help="niceness of the measured processes; negative (root) lets them "
                           "preempt builds sharing the cores")
  parser.add_argument("--accuracy", action="store_true", help="run the epoch schedules instead")
  parser.add_argument("--json", help="also write every run's figures to this file")
  args = parser.parse_args()
  global CHILD_NICE
  CHILD_NICE = args.nice
  args.models = args.models.split(",")
  for m in args.models:
    if m not in MODELS:
      parser.error(f"--models: unknown model {m!r}; expected one of {', '.join(MODELS)}")
  args.traind = os.path.join(args.build_dir, "daemon", "traind")
  args.gemm_peak = os.path.join(args.build_dir, "bench", "gemm_peak")
  if not os.path.exists(args.traind):
    parser.error(f"{args.traind} not found; build it: ninja -C {args.build_dir} traind")
  if not os.path.exists(TORCH_PYTHON):
    parser.error(f"{TORCH_PYTHON} not found (Debian's python3 with python3-torch)")
  if args.steps and args.log_every and args.steps < 2 * args.log_every:
    parser.error("--steps must cover at least two --log-every windows (the first is warm-up)")
  (accuracy if args.accuracy else throughput)(args)


if __name__ == "__main__":
  main()
