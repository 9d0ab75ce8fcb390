#!/usr/bin/env python3
"""traind's distributed modes against standalone traind and against PyTorch,
side by side in one invocation per section, with ratios.

  python3 bench/distributed_compare.py --build-dir build cnn    # 1 ps + 1 worker vs standalone
  python3 bench/distributed_compare.py --build-dir build mlp    # 1 ps + 2 workers vs PyTorch
  python3 bench/distributed_compare.py --build-dir build wide   # the same, 784-1200-400-10
  python3 bench/distributed_compare.py --build-dir build transport  # shared memory vs TCP
  python3 bench/distributed_compare.py --build-dir build deep   # many small variables, 2 ps vs 1
  python3 bench/distributed_compare.py --build-dir build rss    # a ps's peak RSS, Adam, 64 MiB
  python3 bench/distributed_compare.py --build-dir build accuracy  # same examples, test accuracy

cnn   fashion_cnn: examples/sec of standalone traind (--threads T) and of a
      1 ps + 1 worker cluster (worker --threads T; the ps is one event-loop
      thread) in the same run (target: cluster >= 0.95 x standalone).
mlp   fashion_mlp, 1 ps + 2 workers, batch 100 per worker, one compute
      thread per process: traind async against an asynchronous parameter
      server over torch.distributed.rpc (bench/torch_ps.py; target >= 2.5x),
      traind sync (replicas_to_aggregate 2) against DistributedDataParallel
      over gloo with 2 processes (bench/torch_ddp.py; target >= 1.5x).
      Figures are the job's examples/sec: the examples all its workers did
      while every one of them was past its first window and still running,
      over the length of that interval. Beside them, two standalone traind
      at once (one thread each, no ps): the two workers' compute with
      nothing to send, which no job of two such workers beats here; the
      job's share of it says how much the ps and the transfers cost.
wide  the same on a 784-1200-400-10 MLP (its model spec is written to a
      temporary directory).
transport  traind's 1 ps + 2 workers on both MLPs, async and sync, with
      tensors through shared memory (transport.shared_memory: auto, the
      default on one host) against over TCP (off).
deep  placement: a model of --deep-layers dense layers of 10 units (many
      small variables, synthetic data, batch 32), async with one worker, on
      2 ps against 1 ps, over TCP and through shared memory. Small
      variables go to the shards in runs of consecutive layers, so a step
      is a few calls either way (target: 2 ps at >= 0.9 x 1 ps; spread one
      by one, each variable was a chunk of its own: 0.18 over TCP, 0.67
      through shared memory).
rss   the peak RSS (VmHWM) of a ps holding P bytes of parameters trained
      with Adam, after a short run of 1 ps + 1 or 2 workers, async and sync
      (target: <= 3.2 P + 30 MiB).
accuracy  fashion_mlp's test accuracy (all 10k test images) after the same
      number of training examples: standalone (--accuracy-steps batches of
      100), 1 ps + 2 workers async (as many global steps, each one worker's
      batch) and sync (half as many global steps of 2 x 100); target: within
      1 point of standalone. Not timed. The async job runs --rounds times
      (which worker's gradient lands first differs from run to run, and a
      single final evaluation swings by a point or two); standalone and
      sync are deterministic and run once.

Each run is timed in windows of log_every steps, as traind logs them; a
one-worker run's figure is the median of its windows after the first (the
warm-up). The sides take turns, their order alternating between rounds, and
each cell is the median [min-max] over --rounds rounds.

The machine may be shared. Every run holds /tmp/traind-bench.lock (flock),
so that benchmark runs of different people do not overlap; it first waits
(up to --max-wait s) for the others to use under --quiet cores, and runs
again (--retries) when they used more during it, keeping the quietest
attempt. "others" is the CPU the rest of the machine used during a run, in
cores; a cell keeps the quiet runs when there are any and says how many.
--nice -10 (as root) gives the measured processes most time slices beside
builds.

The PyTorch peers run under /usr/bin/python3 (Debian's torch 1.13) with
glibc malloc tuned as traind tunes it itself, so that neither side pays for
mmap/munmap of large buffers. Only the standard library is used here.
"""
import argparse
import contextlib
import datetime
import fcntl
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(REPO, "bench")
TORCH_PYTHON = "/usr/bin/python3"  # Debian's torch is invisible to a pyenv python3
TUNED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "1073741824"}
LOCK_FILE = "/tmp/traind-bench.lock"
BATCH = 100  # examples per worker step in fashion_mlp.yaml and the wide MLP
RUN_TIMEOUT = 240  # seconds; a run that takes longer is killed and reported
NICE = 0  # niceness of the measured processes, from --nice

TRAIND_WINDOW = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) \w+ (?:\[[^]]*\] )?step (\d+), loss = \S+.*"
    r"\(([\d.]+) examples/sec", re.MULTILINE)
FASHION_MLP = os.path.join(REPO, "configs", "models", "fashion_mlp.yaml")
FASHION_CNN = os.path.join(REPO, "configs", "models", "fashion_cnn.yaml")


# --- running jobs -----------------------------------------------------------

@contextlib.contextmanager
def bench_lock():
  with open(LOCK_FILE, "a") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(f, fcntl.LOCK_UN)


def busy_cpu_seconds():
  """CPU seconds the whole machine has spent busy since boot."""
  with open("/proc/stat") as f:
    fields = [int(v) for v in f.readline().split()[1:]]
  idle = fields[3] + fields[4]  # idle + iowait
  return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def memory_mib(pid):
  """(VmHWM, RssShmem) of a live process in MiB, None once it is gone.
  VmHWM, the peak RSS, also counts the pages of shared memory it maps (a ps
  maps each worker's region, rpc/shared_region.h); RssShmem is those pages
  now."""
  kib = {}
  try:
    with open(f"/proc/{pid}/status") as f:
      for line in f:
        key = line.split(":", 1)[0]
        if key in ("VmHWM", "RssShmem"):
          kib[key] = int(line.split()[1])
  except (FileNotFoundError, ProcessLookupError):
    return None
  if len(kib) != 2:
    return None
  return kib["VmHWM"] / 1024.0, kib["RssShmem"] / 1024.0


def others_load(seconds=1.0):
  """Cores the machine used over `seconds` while this script waited."""
  before = busy_cpu_seconds()
  time.sleep(seconds)
  return (busy_cpu_seconds() - before) / seconds


def measured(args, run):
  """run() -> (figure, others, ...) on a quiet machine if one comes: waits
  up to --max-wait s for the others to use under --quiet cores, and runs
  again (--retries) while they took more during the run, keeping the
  quietest attempt."""
  best = None
  for _ in range(1 + args.retries):
    deadline = time.monotonic() + args.max_wait
    while others_load() > args.quiet and time.monotonic() < deadline:
      time.sleep(1.0)
    result = run()
    if best is None or result[1] < best[1]:
      best = result
    if best[1] <= args.quiet:
      break
  return best


def free_ports(count):
  """Loopback ports that were free a moment ago."""
  sockets = [socket.socket() for _ in range(count)]
  try:
    for s in sockets:
      s.bind(("127.0.0.1", 0))
    return [s.getsockname()[1] for s in sockets]
  finally:
    for s in sockets:
      s.close()


class Job:
  """Processes started together and waited for together."""

  def __init__(self, name):
    self.name = name
    self.procs = []  # (label, argv, Popen, output file)
    self.background = set()  # pids

  def start(self, label, argv, env, background=False):
    """A background process runs until the others have exited, then gets
    SIGTERM and must exit 0."""
    if not self.procs:
      self.busy_before, self.started = busy_cpu_seconds(), time.monotonic()
    out = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(argv, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                            text=True, preexec_fn=(lambda: os.nice(NICE)) if NICE else None)
    self.procs.append((label, argv, proc, out))
    if background:
      self.background.add(proc.pid)
    return proc.pid

  def wait(self, watch_pid=None):
    """Waits for every process; returns {label: output}, wall seconds, the
    others' CPU in cores and, for watch_pid, (the largest VmHWM and the
    largest RssShmem seen, polled every 20 ms) and its ru_maxrss (MiB).
    Fails when a process fails or the job takes too long."""
    own_cpu, hwm, shmem, maxrss = 0.0, 0.0, 0.0, 0.0
    running = {proc.pid: label for label, _, proc, _ in self.procs}
    codes = {}
    stopping_background = False
    while running:
      if not stopping_background and set(running) <= self.background:
        stopping_background = True
        for pid in running:
          os.kill(pid, signal.SIGTERM)
      if time.monotonic() - self.started > RUN_TIMEOUT:
        for _, _, proc, _ in self.procs:
          proc.kill()
      if watch_pid in running:
        seen = memory_mib(watch_pid)
        if seen:
          hwm, shmem = max(hwm, seen[0]), max(shmem, seen[1])
      for pid in list(running):
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done == 0:
          continue
        codes[running.pop(pid)] = os.waitstatus_to_exitcode(status)
        own_cpu += usage.ru_utime + usage.ru_stime
        if pid == watch_pid:
          maxrss = usage.ru_maxrss / 1024.0
      time.sleep(0.02)
    wall = time.monotonic() - self.started
    others = max(0.0, (busy_cpu_seconds() - self.busy_before - own_cpu) / wall)
    outputs = {}
    for label, argv, proc, out in self.procs:
      proc.returncode = codes[label]
      out.seek(0)
      outputs[label] = out.read()
      if proc.returncode != 0:
        sys.exit(f"distributed_compare.py: {self.name}: {label} failed (exit {proc.returncode}): "
                 f"{' '.join(argv)}\n{outputs[label][-3000:]}")
    return outputs, wall, others, (hwm, shmem), maxrss


def traind_windows(output, what):
  """[(end time, examples/sec)] of a traind run's log lines."""
  windows = [(datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp(),
              float(m.group(3))) for m in TRAIND_WINDOW.finditer(output)]
  if len(windows) < 3:
    sys.exit(f"distributed_compare.py: {what}: fewer than three timing windows\n{output[-3000:]}")
  return windows


def window_rate(output, what):
  """The median of a traind run's window rates after the first."""
  return statistics.median(rate for _, rate in traind_windows(output, what)[1:])


def traind_curve(output, what):
  """A worker's examples done against time, from the end of its first
  window (the warm-up) on: a window's examples are its rate times the time
  since the previous line."""
  windows = traind_windows(output, what)
  curve = [(windows[0][0], 0.0)]
  for (before, _), (end, rate) in zip(windows, windows[1:]):
    curve.append((end, curve[-1][1] + rate * (end - before)))
  return curve


def torch_result(output, what):
  for line in reversed(output.strip().splitlines()):
    if line.startswith("{"):
      result = json.loads(line)
      if len(result["ends"]) < 3:
        sys.exit(f"distributed_compare.py: {what}: fewer than three timing windows\n{output[-3000:]}")
      return result
  sys.exit(f"distributed_compare.py: {what}: no result line\n{output[-3000:]}")


def torch_curve(result):
  """As traind_curve, from a PyTorch peer's window ends."""
  n = result["examples_per_window"]
  return [(end, i * n) for i, end in enumerate(result["ends"])]


def job_rate(curves, what):
  """The job's examples/sec while all its workers were past their warm-up
  and still running: the examples every worker did in that interval over its
  length (workers that start or stop at different times would otherwise
  count time one of them had the machine to itself)."""
  begin = max(curve[0][0] for curve in curves)
  end = min(curve[-1][0] for curve in curves)
  if end - begin <= 0:
    sys.exit(f"distributed_compare.py: {what}: the workers' timed windows do not overlap")

  def examples_at(curve, t):
    for (t0, e0), (t1, e1) in zip(curve, curve[1:]):
      if t0 <= t <= t1:
        return e0 + (e1 - e0) * (t - t0) / (t1 - t0) if t1 > t0 else e1
    raise ValueError("time outside the curve")

  return sum(examples_at(c, end) - examples_at(c, begin) for c in curves) / (end - begin)


def env_with_threads(threads, tuned_malloc=False):
  env = {k: v for k, v in os.environ.items() if k not in TUNED_MALLOC}
  env["OMP_NUM_THREADS"] = str(threads)
  if tuned_malloc:
    env.update(TUNED_MALLOC)
  return env


# --- traind and PyTorch sides -----------------------------------------------

def traind_flags(steps, log_every, threads):
  # An empty checkpoint directory turns checkpointing off: no writes inside
  # a timing window, and no checkpoint of an earlier run is resumed.
  return ["--max-steps", str(steps), "--log-every", str(log_every), "--eval-every", "0",
          "--threads", str(threads), "--checkpoint-dir", ""]


def with_training_field(tmp, model, key, value):
  """A copy of the model spec `model` in tmp with training.<key>: value."""
  with open(model) as f:
    text = f.read()
  if "\ntraining:\n" not in text or f"\n  {key}:" in text:
    sys.exit(f"cannot set training.{key} in {model}")
  text = text.replace("\ntraining:\n", f"\ntraining:\n  {key}: {value}\n", 1)
  name = os.path.splitext(os.path.basename(model))[0]
  tag = "".join(c for c in str(value) if c.isalnum())
  path = os.path.join(tmp, f"{name}_{key}_{tag}.yaml")
  with open(path, "w") as f:
    f.write(text)
  return path


def write_cluster(tmp, workers, mode, shared_memory=True, ps_tasks=1):
  ports = free_ports(ps_tasks + workers)
  path = os.path.join(tmp, f"cluster_{mode}_{ps_tasks}_{workers}"
                      f"{'' if shared_memory else '_tcp'}.yaml")
  with open(path, "w") as f:
    f.write("cluster:\n")
    f.write(f"  ps: [{', '.join(f'127.0.0.1:{p}' for p in ports[:ps_tasks])}]\n")
    f.write(f"  worker: [{', '.join(f'127.0.0.1:{p}' for p in ports[ps_tasks:])}]\n")
    f.write(f"training:\n  mode: {mode}\n")
    if mode == "sync":
      f.write(f"  replicas_to_aggregate: {workers}\n")
    if not shared_memory:
      f.write("transport:\n  shared_memory: off\n")
  return path


def run_standalone(args, model, steps, log_every, threads):
  job = Job(f"standalone {os.path.basename(model)}")
  with bench_lock():
    job.start("standalone",
              [args.traind, "--model", model] + traind_flags(steps, log_every, threads),
              env_with_threads(threads))
    outputs, _, others, _, _ = job.wait()
  return window_rate(outputs["standalone"], job.name), others


def run_standalone_pair(args, model, steps, log_every, threads, ps_pushes_per_sec=None):
  """Two standalone traind at once, `threads` compute threads each: two
  workers' compute with no ps and nothing to send, the most a job of two
  such workers reaches on this machine. With ps_pushes_per_sec, a third
  process (bench/ps_update_load) does a ps's work for that many pushes a
  second meanwhile, and nothing waits for it: the most an async job of
  the two workers and a ps reaches. Returns the pair's examples/sec
  (job_rate) and others' CPU."""
  job = Job(f"2 x standalone {os.path.basename(model)}")
  with bench_lock():
    if ps_pushes_per_sec:
      job.start("ps updates", [args.ps_update_load, "--model", model,
                               "--pushes-per-sec", f"{ps_pushes_per_sec:.1f}"],
                env_with_threads(1), background=True)
    for w in range(2):
      job.start(f"standalone {w}", [args.traind, "--model", model]
                + traind_flags(steps, log_every, threads), env_with_threads(threads))
    outputs, _, others, _, _ = job.wait()
  if ps_pushes_per_sec:
    load = json.loads(outputs["ps updates"].strip().splitlines()[-1])
    print(f"  ps updates: {load['pushes']} pushes at {ps_pushes_per_sec:.0f}/s asked, "
          f"{load['push_ms']:.3f} ms each", file=sys.stderr)
  return job_rate([traind_curve(outputs[f"standalone {w}"], job.name) for w in range(2)],
                  job.name), others


def run_cluster(args, tmp, model, workers, mode, steps, log_every, threads, timed=True,
                shared_memory=True, ps_tasks=1):
  """A `ps_tasks` ps + `workers` cluster; returns the job's examples/sec
  (one worker: its median window; more: job_rate; None unless `timed`),
  others' CPU, ps 0's (VmHWM, RssShmem) as Job.wait gives them, and its
  ru_maxrss."""
  cluster = write_cluster(tmp, workers, mode, shared_memory, ps_tasks)
  flags = traind_flags(steps, log_every, threads)
  job = Job(f"traind {mode} {ps_tasks} ps + {workers} workers {os.path.basename(model)}")
  common = [args.traind, "--cluster", cluster, "--model", model]
  with bench_lock():
    ps = job.start("ps", common + ["--job", "ps", "--task", "0"] + flags, env_with_threads(1))
    for t in range(1, ps_tasks):
      job.start(f"ps {t}", common + ["--job", "ps", "--task", str(t)] + flags,
                env_with_threads(1))
    for w in range(workers):
      job.start(f"worker {w}", common + ["--job", "worker", "--task", str(w)] + flags,
                env_with_threads(threads))
    outputs, _, others, hwm, maxrss = job.wait(watch_pid=ps)
  if not timed:
    rate = None
  elif workers == 1:
    rate = window_rate(outputs["worker 0"], job.name)
  else:
    rate = job_rate([traind_curve(outputs[f"worker {w}"], job.name) for w in range(workers)],
                    job.name)
  return rate, others, hwm, maxrss


def run_torch(args, script, widths, workers, steps, log_every, threads):
  """torch_ps.py (rank 0 the ps, then the workers) or torch_ddp.py; returns
  the job's examples/sec (job_rate) and others' CPU."""
  port = free_ports(1)[0]
  ranks = workers + 1 if script == "torch_ps.py" else workers
  job = Job(f"{script} {workers} workers {widths}")
  with bench_lock():
    for rank in range(ranks):
      job.start(f"rank {rank}",
                [TORCH_PYTHON, os.path.join(BENCH, script), "--rank", str(rank), "--workers",
                 str(workers), "--port", str(port), "--widths", widths, "--steps", str(steps),
                 "--log-every", str(log_every), "--threads", str(threads)]
                + (["--tcp"] if args.torch_rpc_tcp and script == "torch_ps.py" else []),
                env_with_threads(threads, tuned_malloc=not args.torch_default_malloc))
    outputs, _, others, _, _ = job.wait()
  worker_ranks = range(1, ranks) if script == "torch_ps.py" else range(ranks)
  rate = job_rate([torch_curve(torch_result(outputs[f"rank {r}"], job.name)) for r in worker_ranks],
                  job.name)
  return rate, others


# --- reporting --------------------------------------------------------------

def kept(args, values, others):
  """The quiet runs' figures (others <= --quiet) when there are any, else
  all of them, with the largest others among those kept."""
  quiet = [v for v, o in zip(values, others) if o <= args.quiet]
  if quiet:
    return quiet, max(o for o in others if o <= args.quiet)
  return values, max(others)


def median_kept(args, values, others):
  return statistics.median(kept(args, values, others)[0])


def print_row(args, name, values, others, baseline=None):
  """One side: median [min-max] of its kept runs and, against `baseline`
  (another side's (values, others)), the ratio of the medians."""
  shown, load = kept(args, values, others)
  text = f"{statistics.median(shown):8.0f} [{min(shown):.0f}-{max(shown):.0f}]"
  ratio = ""
  if baseline:
    ratio = f"{statistics.median(shown) / median_kept(args, *baseline):6.2f}"
  print(f"  {name:44s} {text:24s} {ratio:6s}  {len(shown)}/{len(values)} runs, others {load:.2f}")


def header(title, args):
  print(f"\n{title}")
  print(f"  {args.rounds} rounds; median [min-max] examples/sec of the quiet runs (others <= "
        f"{args.quiet} cores), or of all when none was quiet")


def alternate(round_index, sides):
  return sides if round_index % 2 == 0 else list(reversed(sides))


# --- sections ---------------------------------------------------------------

def section_cnn(args, tmp):
  """fashion_cnn: standalone against 1 ps + 1 worker."""
  steps, log_every, threads = args.cnn_steps, args.cnn_steps // 6, args.threads
  results = {"standalone": [], "cluster": []}
  others = {"standalone": [], "cluster": []}
  for r in range(args.rounds):
    for side in alternate(r, ["standalone", "cluster"]):
      if side == "standalone":
        rate, load = measured(args, lambda: run_standalone(args, FASHION_CNN, steps, log_every,
                                                            threads))
      else:
        rate, load, _, _ = measured(args, lambda: run_cluster(args, tmp, FASHION_CNN, 1, "async",
                                                              steps, log_every, threads))
      results[side].append(rate)
      others[side].append(load)
      print(f"  round {r + 1}: {side} {rate:.0f} examples/sec (others {load:.2f})", file=sys.stderr)
  header(f"fashion_cnn, {steps} steps, batch 100, windows of {log_every} steps: standalone "
         f"(--threads {threads}) against 1 ps + 1 worker (worker --threads {threads}, the ps one "
         f"event-loop thread)", args)
  print(f"  {'':44s} {'examples/sec':24s} {'ratio':6s}")
  print_row(args, "traind standalone", results["standalone"], others["standalone"])
  print_row(args, "traind 1 ps + 1 worker (async)", results["cluster"], others["cluster"],
            (results["standalone"], others["standalone"]))
  print("  ratio: cluster / standalone (target >= 0.95)")


def wide_model(tmp):
  """fashion_mlp's spec with 1200 and 400 hidden units."""
  with open(FASHION_MLP) as f:
    text = f.read()
  text = text.replace("name: fashion_mlp", "name: fashion_mlp_wide")
  text = text.replace("units: 300", "units: 1200").replace("units: 100,", "units: 400,")
  text = text.replace("/tmp/traind/fashion_mlp", os.path.join(tmp, "wide_checkpoints"))
  if "units: 1200" not in text or "units: 400," not in text:
    sys.exit(f"distributed_compare.py: cannot derive the wide MLP from {FASHION_MLP}")
  # Data paths in the spec are absolute, so the copy may live anywhere.
  path = os.path.join(tmp, "fashion_mlp_wide.yaml")
  with open(path, "w") as f:
    f.write(text)
  return path


def section_mlp(args, tmp, wide):
  model = wide_model(tmp) if wide else FASHION_MLP
  widths = "784,1200,400,10" if wide else "784,300,100,10"
  steps = args.wide_steps if wide else args.mlp_steps  # per worker
  log_every = steps // 6
  workers, threads = 2, 1
  # The last side needs the async job's push rate: round 1 runs it after
  # the async job, the rounds after use the async runs so far.
  sides = ["traind async", "torch rpc ps", "traind sync", "torch ddp", "2 x standalone",
           "2 x standalone + ps updates"]
  results = {s: [] for s in sides}
  others = {s: [] for s in sides}
  for r in range(args.rounds):
    for side in alternate(r, sides):
      if side == "traind async":
        # The global step advances once per push of either worker.
        rate, load, _, _ = measured(args, lambda: run_cluster(
            args, tmp, model, workers, "async", workers * steps, workers * log_every, threads))
      elif side == "traind sync":
        rate, load, _, _ = measured(args, lambda: run_cluster(
            args, tmp, model, workers, "sync", steps, log_every, threads))
      elif side == "2 x standalone":
        rate, load = measured(args, lambda: run_standalone_pair(args, model, steps, log_every,
                                                                threads))
      elif side == "2 x standalone + ps updates":
        # Each push is one worker's step of BATCH examples.
        pushes_per_sec = statistics.median(results["traind async"]) / BATCH
        rate, load = measured(args, lambda: run_standalone_pair(args, model, steps, log_every,
                                                                threads, pushes_per_sec))
      elif side == "torch rpc ps":
        rate, load = measured(args, lambda: run_torch(args, "torch_ps.py", widths, workers, steps,
                                                      log_every, threads))
      else:
        rate, load = measured(args, lambda: run_torch(args, "torch_ddp.py", widths, workers,
                                                      steps, log_every, threads))
      results[side].append(rate)
      others[side].append(load)
      print(f"  round {r + 1}: {side} {rate:.0f} examples/sec (others {load:.2f})", file=sys.stderr)
  header(f"{'wide MLP ' + widths if wide else 'fashion_mlp ' + widths}: 2 workers x batch 100, "
         f"{steps} steps per worker, windows of {log_every}; 1 compute thread per process; "
         f"job examples/sec", args)
  print(f"  {'':44s} {'examples/sec':24s} {'ratio':6s}")
  print_row(args, "torch.distributed.rpc ps + 2 workers (async)", results["torch rpc ps"],
            others["torch rpc ps"])
  print_row(args, "traind 1 ps + 2 workers async", results["traind async"], others["traind async"],
            (results["torch rpc ps"], others["torch rpc ps"]))
  print_row(args, "torch DDP gloo, 2 processes (sync)", results["torch ddp"], others["torch ddp"])
  print_row(args, "traind 1 ps + 2 workers sync (aggregate 2)", results["traind sync"],
            others["traind sync"], (results["torch ddp"], others["torch ddp"]))
  print_row(args, "traind 2 x standalone at once (no ps)", results["2 x standalone"],
            others["2 x standalone"])
  print_row(args, "  the same + a ps's updates, nothing waits",
            results["2 x standalone + ps updates"], others["2 x standalone + ps updates"])
  print("  ratios: traind async / torch rpc ps (target >= 2.5), traind sync / DDP (target >= 1.5)")
  median = {side: median_kept(args, results[side], others[side]) for side in sides}
  ceiling, bound = median["2 x standalone"], median["2 x standalone + ps updates"]
  print("  the compute's share: the job's examples/sec / 2 x standalone's (the two workers' "
        "compute\n  with nothing to send; no job of two such workers goes faster here): "
        f"traind async {median['traind async'] / ceiling:.2f}, "
        f"sync {median['traind sync'] / ceiling:.2f}")
  print("  with a ps's updates at the async job's push rate beside them (bench/ps_update_load, "
        "no\n  calls, no waits: the most an async job reaches here): "
        f"{bound / ceiling:.2f} of 2 x standalone; traind async "
        f"{median['traind async'] / bound:.2f} of it")


def section_transport(args, tmp):
  """traind's 1 ps + 2 workers with tensors through shared memory (the
  default on one host) against the same over TCP, alternating."""
  sides = ["shared memory", "tcp"]
  for name, model, steps in [("fashion_mlp", FASHION_MLP, args.mlp_steps),
                             ("wide MLP", wide_model(tmp), args.wide_steps)]:
    for mode in ("async", "sync"):
      # The async global step advances once per push of either worker.
      global_steps = 2 * steps if mode == "async" else steps
      results = {s: [] for s in sides}
      others = {s: [] for s in sides}
      for r in range(args.rounds):
        for side in alternate(r, sides):
          rate, load, _, _ = measured(args, lambda: run_cluster(
              args, tmp, model, 2, mode, global_steps, global_steps // 6, 1,
              shared_memory=side == "shared memory"))
          results[side].append(rate)
          others[side].append(load)
          print(f"  round {r + 1}: {name} {mode} {side} {rate:.0f} examples/sec "
                f"(others {load:.2f})", file=sys.stderr)
      header(f"{name}, traind 1 ps + 2 workers {mode}, {steps} steps per worker: "
             f"transport.shared_memory auto against off", args)
      print(f"  {'':44s} {'examples/sec':24s} {'ratio':6s}")
      print_row(args, "over TCP (shared_memory: off)", results["tcp"], others["tcp"])
      print_row(args, "through shared memory (auto)", results["shared memory"],
                others["shared memory"], (results["tcp"], others["tcp"]))


def deep_model(tmp, layers):
  """`layers` dense layers of 10 units on synthetic y = x^2 data, batch 32:
  many small variables, each far below a chunk."""
  lines = ["name: deep", "seed: 7", "input: [1]", "layers:"]
  lines += [f"  - {{type: dense, name: d{i}, units: 10, activation: tanh}}"
            for i in range(layers)]
  lines += ["  - {type: dense, name: output, units: 1}", "loss: mse",
            "optimizer: {type: sgd, learning_rate: 0.001}", "data:",
            "  synthetic: {type: regression, points: 1000, x_min: -1, x_max: 1, "
            "noise_stddev: 0.05}",
            "  batch_size: 32", "training: {max_steps: 300}", ""]
  path = os.path.join(tmp, f"deep_{layers}.yaml")
  with open(path, "w") as f:
    f.write("\n".join(lines))
  return path


def section_deep(args, tmp):
  """A deep model of small variables, async with one worker: 2 ps against
  1 ps, over TCP and through shared memory, alternating."""
  model = deep_model(tmp, args.deep_layers)
  steps = args.deep_steps
  sides = ["1 ps", "2 ps"]
  for shared_memory in (False, True):
    transport = "through shared memory" if shared_memory else "over TCP"
    results = {s: [] for s in sides}
    others = {s: [] for s in sides}
    for r in range(args.rounds):
      for side in alternate(r, sides):
        rate, load, _, _ = measured(args, lambda: run_cluster(
            args, tmp, model, 1, "async", steps, steps // 6, 1, shared_memory=shared_memory,
            ps_tasks=int(side.split()[0])))
        results[side].append(rate)
        others[side].append(load)
        print(f"  round {r + 1}: {side} {transport} {rate:.0f} examples/sec (others {load:.2f})",
              file=sys.stderr)
    header(f"{args.deep_layers} dense layers of 10 units, traind async, 1 worker, {steps} steps, "
           f"{transport}: 2 ps against 1 ps (target >= 0.9)", args)
    print(f"  {'':44s} {'examples/sec':24s} {'ratio':6s}")
    print_row(args, "1 ps", results["1 ps"], others["1 ps"])
    print_row(args, "2 ps", results["2 ps"], others["2 ps"], (results["1 ps"], others["1 ps"]))


def rss_model(tmp, hidden_units):
  """784 -> hidden_units -> 10 on Fashion-MNIST with Adam, batch 10, no test
  set (the chief's final evaluation of so wide a layer would take longer
  than the run)."""
  with open(FASHION_MLP) as f:
    lines = f.read().split("data:\n", 1)[1].split("training:\n", 1)[0].splitlines(True)
  test = next(i for i, line in enumerate(lines) if line.strip() == "test:")
  data = "".join(lines[:test] + lines[test + 3:])
  path = os.path.join(tmp, f"rss_model_{hidden_units}.yaml")
  with open(path, "w") as f:
    f.write(f"""name: rss_model_{hidden_units}
seed: 42
input: [28, 28, 1]
layers:
  - {{type: flatten}}
  - {{type: dense, name: big, units: {hidden_units}, activation: relu}}
  - {{type: dense, name: logits, units: 10}}
loss: softmax_cross_entropy
optimizer:
  type: adam
  learning_rate: 0.0001
data:
{data.replace("batch_size: 100", "batch_size: 10")}training:
  max_steps: 10
""")
  return path


def ps_peak_rss(args, tmp, model, mode, workers, shared_memory=True):
  """The ps's peaks in each of --rss-rounds runs, in MiB: (VmHWM, the larger
  of its polled value and ru_maxrss at exit, which are the same counter;
  its own memory at that peak: VmHWM less the pages of the workers'
  regions it touches, RssShmem, which once the first push has touched them
  all stays as it is to the end)."""
  steps = args.rss_steps * (workers if mode == "async" else 1)  # steps per worker
  peaks = []
  for _ in range(args.rss_rounds):
    _, _, (hwm, shmem), maxrss = run_cluster(args, tmp, model, workers, mode, steps, steps, 1,
                                             timed=False, shared_memory=shared_memory)
    peak = max(hwm, maxrss)
    peaks.append((peak, peak - shmem))
  return peaks


def section_rss(args, tmp):
  """The ps's peak RSS with P MiB of parameters and Adam's two slots."""
  mib = 1024 * 1024
  units = args.rss_mib * mib // (784 * 4)
  p_mib = (784 * units + units + units * 10 + 10) * 4 / mib
  target = 3.2 * p_mib + 30
  base = max(hwm for hwm, _ in ps_peak_rss(args, tmp, rss_model(tmp, 16), "async", 2, False))
  model = rss_model(tmp, units)
  print(f"\nps peak RSS with Adam, P = {p_mib:.1f} MiB of parameters (784-{units}-10), "
        f"{args.rss_steps} steps of batch 10 per worker, {args.rss_rounds} runs each; target <= "
        f"3.2 P + 30 MiB = {target:.0f} MiB")
  print(f"  the same ps with a 784-16-10 model peaks at {base:.0f} MiB (code, libraries, heap); "
        f"parameters and Adam's slots are 3 P = {3 * p_mib:.0f} MiB")
  print("  over TCP the peak is VmHWM; through shared memory VmHWM also counts the pages of "
        "each\n  worker's region (2 P, the worker's memory) that the ps maps, so the ps's own "
        "memory is\n  judged: VmHWM less those pages (RssShmem)")
  print(f"  {'mode':6s} {'workers':>7s} {'tensors':8s} {'VmHWM MiB':18s} {'own MiB':18s} "
        f"{'max/P':>6s}  {'max beyond 3 P + base':22s} target")
  for shared_memory in (False, True):
    for mode, workers in [("async", 1), ("async", 2), ("sync", 2)]:
      peaks = ps_peak_rss(args, tmp, model, mode, workers, shared_memory)
      hwm = [h for h, _ in peaks]
      own = [o for _, o in peaks]
      judged = own if shared_memory else hwm
      beyond = max(judged) - 3 * p_mib - base
      verdict = "met" if max(judged) <= target else "MISSED"
      def text(values):
        return f"{statistics.median(values):.0f} [{min(values):.0f}-{max(values):.0f}]"
      print(f"  {mode:6s} {workers:7d} {'shm' if shared_memory else 'tcp':8s} {text(hwm):18s} "
            f"{text(own) if shared_memory else '-':18s} {max(judged) / p_mib:6.2f}  "
            f"{beyond:6.0f} MiB ({beyond / p_mib:.2f} P)      {verdict}")


TEST_ACCURACY = re.compile(r"test accuracy = ([0-9.]+)")


def final_test_accuracy(output, what):
  found = TEST_ACCURACY.findall(output)
  if not found:
    sys.exit(f"distributed_compare.py: {what}: no test accuracy line\n{output[-3000:]}")
  return float(found[-1])


def section_accuracy(args, tmp):
  """fashion_mlp: test accuracy of standalone, async and sync after the same examples."""
  steps = args.accuracy_steps
  flags = ["--log-every", str(steps), "--eval-every", "0", "--threads", "1",
           "--checkpoint-dir", ""]
  job = Job("standalone fashion_mlp")
  job.start("standalone", [args.traind, "--model", FASHION_MLP, "--max-steps", str(steps)] + flags,
            env_with_threads(1))
  results = [("traind standalone", steps, final_test_accuracy(job.wait()[0]["standalone"],
                                                               job.name))]
  for mode, global_steps, rounds in (("async", steps, args.rounds), ("sync", steps // 2, 1)):
    accuracies = []
    for _ in range(rounds):
      cluster = write_cluster(tmp, 2, mode)
      common = [args.traind, "--cluster", cluster, "--model", FASHION_MLP,
                "--max-steps", str(global_steps)] + flags
      job = Job(f"traind {mode} 1 ps + 2 workers fashion_mlp")
      job.start("ps", common + ["--job", "ps", "--task", "0"], env_with_threads(1))
      for w in range(2):
        job.start(f"worker {w}", common + ["--job", "worker", "--task", str(w)],
                  env_with_threads(1))
      accuracies.append(final_test_accuracy(job.wait()[0]["worker 0"], job.name))
    results.append((f"traind 1 ps + 2 workers ({mode})", global_steps, accuracies))
  print(f"\nfashion_mlp, test accuracy after {steps * 100} training examples (batch 100 per "
        f"worker, one compute thread per process)")
  print(f"  {'':44s} {'global steps':>12s} {'test accuracy':>14s} {'difference':>11s}  runs")
  base = results[0][2]
  for name, global_steps, accuracy in results:
    runs = accuracy if isinstance(accuracy, list) else [accuracy]
    median = statistics.median(runs)
    listed = ", ".join(f"{100 * (a - base):+.2f}" for a in runs) if len(runs) > 1 else ""
    print(f"  {name:44s} {global_steps:12d} {median:14.4f} {100 * (median - base):+10.2f}pt  "
          f"{listed}")
  print("  difference: the median run against standalone, in points (target: within 1); runs: "
        "each run's")


def add_run_options(parser, rounds=3):
  """The options of every comparison that times traind runs with measured():
  where traind is, rounds, and the quiet-machine rules."""
  parser.add_argument("--build-dir", default="build", help="where daemon/traind was built")
  parser.add_argument("--rounds", type=int, default=rounds)
  parser.add_argument("--quiet", type=float, default=0.3,
                      help="a run is quiet when the others used at most this many cores")
  parser.add_argument("--max-wait", type=float, default=30,
                      help="seconds to wait for a quiet machine before each run")
  parser.add_argument("--retries", type=int, default=1, help="reruns of a noisy run")
  parser.add_argument("--nice", type=int, default=0,
                      help="niceness of the measured processes; negative (root) keeps most time "
                      "slices theirs on a busy machine")


def parse_run_options(parser, script):
  """Parses the command line; sets NICE and args.traind (exits if it is not built)."""
  global NICE
  args = parser.parse_args()
  NICE = args.nice
  args.traind = os.path.join(REPO, args.build_dir, "daemon", "traind")
  args.ps_update_load = os.path.join(REPO, args.build_dir, "bench", "ps_update_load")
  for binary in (args.traind, args.ps_update_load):
    if not os.access(binary, os.X_OK):
      sys.exit(f"{script}: no {binary}; build it first")
  return args


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("sections", nargs="+",
                      choices=["cnn", "mlp", "wide", "transport", "deep", "rss", "accuracy"])
  add_run_options(parser)
  parser.add_argument("--threads", type=int, default=2,
                      help="cnn: compute threads of standalone traind and of the worker")
  parser.add_argument("--cnn-steps", type=int, default=300)
  parser.add_argument("--mlp-steps", type=int, default=1200, help="fashion_mlp: steps per worker")
  parser.add_argument("--wide-steps", type=int, default=400, help="wide MLP: steps per worker")
  parser.add_argument("--deep-layers", type=int, default=2000, help="deep: dense layers")
  parser.add_argument("--deep-steps", type=int, default=300, help="deep: steps of the worker")
  parser.add_argument("--rss-mib", type=int, default=64, help="rss: the big kernel's MiB")
  parser.add_argument("--rss-steps", type=int, default=10)
  parser.add_argument("--rss-rounds", type=int, default=3)
  parser.add_argument("--accuracy-steps", type=int, default=1800,
                      help="accuracy: batches of 100 of the standalone run (1800: 3 epochs)")
  parser.add_argument("--torch-rpc-tcp", action="store_true",
                      help="the torch.distributed.rpc peer over TensorPipe's TCP transport only")
  parser.add_argument("--torch-default-malloc", action="store_true",
                      help="run the PyTorch peers with glibc's default malloc settings")
  args = parse_run_options(parser, "distributed_compare.py")
  with tempfile.TemporaryDirectory(prefix="distributed_compare.") as tmp:
    for section in args.sections:
      if section == "cnn":
        section_cnn(args, tmp)
      elif section in ("mlp", "wide"):
        section_mlp(args, tmp, wide=section == "wide")
      elif section == "transport":
        section_transport(args, tmp)
      elif section == "deep":
        section_deep(args, tmp)
      elif section == "rss":
        section_rss(args, tmp)
      else:
        section_accuracy(args, tmp)
      sys.stdout.flush()


if __name__ == "__main__":
  main()
