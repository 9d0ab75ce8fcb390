#!/usr/bin/env bash
# The CUDA back end's checks on a GPU machine in one call: its tests, a
# standalone fashion_mlp and fashion_cnn run on cuda:0 (fashion_mlp on the
# CPU beside it, and with a moving average on both), a fashion_cnn run
# resumed from its checkpoint against one of the same steps at once, one
# stopped by SIGTERM and resumed, fashion_mlp with concurrent_steps 1, 2
# and 4 on cuda:0, and bench/cuda_compare.py against PyTorch.
#
# Here (the development machine, with the CUDA build):
#   bench/gpu_session.sh pack [BUILD_DIR]   # default build-cuda
# builds traind, cuda_layers_test and cuda_step, and puts them with the
# libraries the GPU machine lacks (../shared/tools/device-libs) and the
# Fashion-MNIST files into .gpu/ (ignored by git, about 45 MiB).
#
# There (the device tool: run with carry [".gpu"], timeout 600):
#   bash bench/gpu_session.sh run
#   bash bench/gpu_session.sh cluster   # a second call: 1 ps + 1 GPU worker
# writes into $OUT: nvidia-smi.txt, cuda_tests.txt, standalone.txt (the
# standalone runs' accuracy lines), standalone_logs.txt, cuda_compare.txt,
# cuda_compare.json and summary.txt (each part's exit status and time);
# `cluster` writes cluster.txt, cluster_logs.txt and cluster_ps.txt.
set -u
cd "$(dirname "$0")/.."

pack() {
  local build=${1:-build-cuda}
  set -e
  CCACHE_BASEDIR=$PWD ninja -C "$build" -j2 traind cuda_layers_test cuda_step
  rm -rf .gpu
  mkdir -p .gpu/stage/bin .gpu/stage/lib .gpu/data
  # libtraind_cuda.so beside the binaries: traind opens it from there.
  for b in daemon/traind test/cuda_layers_test bench/cuda_step devices/libtraind_cuda.so; do
    cp "$build/$b" .gpu/stage/bin/
  done
  strip .gpu/stage/bin/*
  ../shared/tools/device-libs .gpu/stage/lib .gpu/stage/bin/*
  tar -C .gpu/stage -cJf .gpu/bundle.tar.xz bin lib
  rm -rf .gpu/stage
  cp /usr/share/datasets/fashion-mnist/*.gz .gpu/data/
  local exclude
  exclude=$(git rev-parse --git-path info/exclude)
  mkdir -p "$(dirname "$exclude")"
  grep -qx '/.gpu/' "$exclude" || echo '/.gpu/' >>"$exclude"
  du -sh .gpu
}

# One part: its output into $OUT/$2, its status and seconds into summary.txt.
part() {
  local name=$1 file=$2 limit=$3
  shift 3
  local start=$SECONDS
  timeout -k 5 "$limit" "$@" >>"$OUT/$file" 2>&1
  local status=$?
  echo "$name: exit $status, $((SECONDS - start)) s" | tee -a "$OUT/summary.txt"
  return $status
}

# Unpacks the bundle into $root and the data into its place.
unpack() {
  : "${OUT:?OUT must name the folder to write into}"
  # Before anything is unpacked or installed: on a machine without a GPU
  # every cuda:0 part would fail, and the CPU parts alone mean nothing.
  if ! nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1; then
    echo "no NVIDIA GPU here (nvidia-smi failed: $OUT/nvidia-smi.txt): run and cluster are for" \
      "the GPU machine" >>"$OUT/summary.txt"
    cat "$OUT/summary.txt" >&2
    exit 77
  fi
  root=/tmp/traind-gpu
  rm -rf "$root" && mkdir -p "$root"
  tar -C "$root" -xJf .gpu/bundle.tar.xz
  # cuBLAS and NCCL from the machine: its system's where ldconfig knows
  # them, else the copies in PyTorch's wheels (the H200 image).
  local lib libs="$root/lib:$root/bin" found
  for lib in libcublas.so.13 libnccl.so.2; do
    ldconfig -p | grep -qF "$lib" && continue
    found=$(find / -xdev -name "$lib" -print -quit 2>/dev/null)
    if [ -n "$found" ]; then
      libs="$libs:$(dirname "$found")"
    else
      echo "$lib: not on this machine" >>"$OUT/summary.txt"
    fi
  done
  # The shipped libraries for traind's binaries only: set for the whole
  # shell they would shadow the machine's own for python3 and nvidia-smi.
  local b
  for b in traind cuda_layers_test cuda_step; do
    printf '#!/bin/sh\nexport LD_LIBRARY_PATH=%s\nexec %s "$@"\n' "$libs" "$root/bin/$b" >"$root/$b"
    chmod +x "$root/$b"
  done
  LD_LIBRARY_PATH=$libs ldd "$root"/bin/* | grep "not found" >>"$OUT/summary.txt"
  # The configs read Fashion-MNIST from the Debian package's place.
  mkdir -p /usr/share/datasets/fashion-mnist
  cp .gpu/data/*.gz /usr/share/datasets/fashion-mnist/
}

run() {
  unpack

  # Time limits that add up to under the device tool's 10 minutes a call.
  part "cuda tests" cuda_tests.txt 90 "$root/cuda_layers_test" --durations yes

  # fashion_cnn's CPU accuracy is in docs/benchmarks.md: its CPU run would
  # not fit in the call.
  for run in "fashion_mlp cuda:0 45" "fashion_mlp cpu 30" "fashion_cnn cuda:0 60" \
    "fashion_mlp cuda:0,cuda:0 30"; do
    set -- $run
    echo "== $1 on $2" >>"$OUT/standalone_logs.txt"
    part "standalone $1 $2" standalone_logs.txt "$3" \
      "$root/traind" --model "configs/models/$1.yaml" --devices "$2" --checkpoint-dir "" \
      --threads 16
  done
  # A moving average on the GPU (the resident trainer's) against the CPU's.
  { cat configs/models/fashion_mlp.yaml; printf 'moving_average:\n  decay: 0.99\n'; } \
    >"$root/fashion_mlp_average.yaml"
  for run in "cuda:0 30" "cpu 30"; do
    set -- $run
    echo "== fashion_mlp with a moving average on $1" >>"$OUT/standalone_logs.txt"
    part "moving average $1" standalone_logs.txt "$2" \
      "$root/traind" --model "$root/fashion_mlp_average.yaml" --devices "$1" \
      --checkpoint-dir "" --threads 16
  done
  # The resident trainer's model and Adam slots through a checkpoint:
  # fashion_cnn for 600 steps at once, and for 300 then 300 more from the
  # checkpoint, must end at the same test figures.
  local at_once resumed
  at_once=$(mktemp -d) resumed=$(mktemp -d)
  echo "== fashion_cnn cuda:0 600 steps, then 300 + 300 resumed" >>"$OUT/standalone_logs.txt"
  for run in "$at_once 600" "$resumed 300" "$resumed 600"; do
    set -- $run
    part "resume $2 steps" standalone_logs.txt 30 \
      "$root/traind" --model configs/models/fashion_cnn.yaml --devices cuda:0 --checkpoint-dir "$1" \
      --threads 16 --max-steps "$2" --eval-every 0
  done
  grep -h "done: global step 600," "$OUT/standalone_logs.txt" | sed 's/.*steps in [^)]*), //' |
    uniq -c | tee -a "$OUT/summary.txt"
  # A SIGTERM mid-run: exit 0 with a checkpoint of the step it stopped at,
  # which a second run restores and trains on from for 200 steps.
  local stopped stop_step
  stopped=$(mktemp -d)
  echo "== fashion_cnn cuda:0 stopped by SIGTERM, then resumed" >>"$OUT/standalone_logs.txt"
  "$root/traind" --model configs/models/fashion_cnn.yaml --devices cuda:0 --checkpoint-dir "$stopped" \
    --threads 16 --max-steps 100000000 --log-every 1000 --eval-every 0 \
    >>"$OUT/standalone_logs.txt" 2>&1 &
  local traind=$!
  sleep 3
  kill -TERM "$traind"
  wait "$traind"
  echo "stopped by SIGTERM: exit $?" | tee -a "$OUT/summary.txt"
  stop_step=$(grep -o "stop requested at step [0-9]*" "$OUT/standalone_logs.txt" | tail -1 |
    grep -o "[0-9]*$")
  part "resumed at step ${stop_step:-?}" standalone_logs.txt 30 \
    "$root/traind" --model configs/models/fashion_cnn.yaml --devices cuda:0 --checkpoint-dir "$stopped" \
    --threads 16 --max-steps $((${stop_step:-0} + 200)) --eval-every 0
  # Issue 7: concurrent_steps K = 1, 2, 4 on one GPU (each step its own
  # replica and stream); target K = 4 >= 2x the examples/sec of K = 1.
  local k
  for k in 1 2 4; do
    sed "s/^training:/training:\n  concurrent_steps: $k/" configs/models/fashion_mlp.yaml \
      >"$root/fashion_mlp_k$k.yaml"
    echo "== fashion_mlp cuda:0 concurrent_steps $k" >>"$OUT/standalone_logs.txt"
    part "concurrent_steps $k" standalone_logs.txt 15 \
      "$root/traind" --model "$root/fashion_mlp_k$k.yaml" --devices cuda:0 \
      --checkpoint-dir "" --threads 16 --max-steps 1800 --log-every 300
  done
  grep -iE "^==|accuracy|examples/s|error" "$OUT/standalone_logs.txt" >"$OUT/standalone.txt"

  part "cuda_compare" cuda_compare.txt 150 env PYTHONUNBUFFERED=1 python3 bench/cuda_compare.py \
    --cuda-step "$root/cuda_step" --steps 100 --json "$OUT/cuda_compare.json"
  cat "$OUT/summary.txt"
}

# 1 ps (CPU) + 1 worker on cuda:0 over loopback: `clusterRun NAME LIMIT
# MODEL [WORKER FLAGS...]`, the worker's log into cluster_logs.txt, the ps's
# into cluster_ps.txt.
clusterRun() {
  local name=$1 limit=$2 model=$3
  shift 3
  local dir
  dir=$(mktemp -d)
  printf 'cluster:\n  ps: [127.0.0.1:24211]\n  worker: [127.0.0.1:24212]\ntraining:\n  mode: async\n' \
    >"$dir/cluster.yaml"
  echo "== $name" | tee -a "$OUT/cluster_ps.txt" >>"$OUT/cluster_logs.txt"
  timeout -k 5 $((limit + 10)) "$root/traind" --cluster "$dir/cluster.yaml" --model "$model" \
    --job ps --task 0 --checkpoint-dir "" --threads 4 >>"$OUT/cluster_ps.txt" 2>&1 &
  local ps=$!
  part "$name" cluster_logs.txt "$limit" \
    "$root/traind" --cluster "$dir/cluster.yaml" --model "$model" \
    --job worker --task 0 --devices cuda:0 --checkpoint-dir "" --threads 4 "$@" ||
    kill -TERM "$ps"  # the chief stops the ps when it finishes, not when it fails
  wait "$ps"
  echo "ps: exit $?" | tee -a "$OUT/summary.txt"
}

# Issue 6: 1 ps (CPU) + 1 GPU worker on loopback trains fashion_cnn, each
# layer's gradient sent as the GPU finishes it, to the accuracy of the
# standalone GPU run beside it (the same steps). Then 1800 steps each
# without evaluations, with gradients sent after the step (the runs that
# found the ps's denormal floats: docs/benchmarks.md#cuda) and with two
# steps in flight (one step's push and pull beside the other's compute).
cluster() {
  unpack
  echo "== fashion_cnn standalone on cuda:0" >>"$OUT/cluster_logs.txt"
  part "standalone fashion_cnn cuda:0" cluster_logs.txt 60 \
    "$root/traind" --model configs/models/fashion_cnn.yaml --devices cuda:0 --checkpoint-dir "" \
    --threads 4
  clusterRun "fashion_cnn 1 ps + 1 worker on cuda:0" 90 configs/models/fashion_cnn.yaml
  clusterRun "the same, 1800 steps, no evaluation before the end" 40 \
    configs/models/fashion_cnn.yaml --max-steps 1800 --eval-every 0
  sed "s/^training:/training:\n  gradient_push: after_step/" configs/models/fashion_cnn.yaml \
    >configs/models/fashion_cnn_after_step.yaml
  clusterRun "the same, 1800 steps, gradients sent after the step" 40 \
    configs/models/fashion_cnn_after_step.yaml --max-steps 1800
  sed "s/^training:/training:\n  concurrent_steps: 2/" configs/models/fashion_cnn.yaml \
    >configs/models/fashion_cnn_k2.yaml
  clusterRun "the same, 1800 steps, two steps in flight" 40 \
    configs/models/fashion_cnn_k2.yaml --max-steps 1800
  grep -iE "^==|accuracy|examples/s|error" "$OUT/cluster_logs.txt" >"$OUT/cluster.txt"
  cat "$OUT/summary.txt"
}

case "${1:-}" in
  pack) shift; pack "$@" ;;
  run) run ;;
  cluster) cluster ;;
  *) echo "usage: $0 pack [BUILD_DIR] | run | cluster" >&2; exit 2 ;;
esac
