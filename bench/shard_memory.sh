#!/usr/bin/env bash
# A cluster worker's peak memory with the whole training set and with its
# own share (data.shard_by_worker), side by side in one invocation: 1 ps +
# 2 async workers of a model spec (fashion_mlp by default) on 127.0.0.1,
# each process under /usr/bin/time, then the workers' peak RSS and their
# ratio. docs/distributed.md, "Each worker its own share of the data".
#
#   bench/shard_memory.sh [--traind build/daemon/traind] [--model SPEC] [--steps 1200]
#
# Run from the repository's root (the defaults are relative to it). Each
# task has 5 minutes; if a worker fails, the ps is stopped and the logs are
# kept.
set -euo pipefail

traind=build/daemon/traind
model=configs/models/fashion_mlp.yaml
steps=1200
while [[ $# -gt 0 ]]; do
  case "$1" in
    --traind) traind=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    *) echo "usage: $0 [--traind PATH] [--model SPEC] [--steps N]" >&2; exit 2 ;;
  esac
done
[[ -x /usr/bin/time ]] || { echo "$0: needs /usr/bin/time (apt-get install time)" >&2; exit 2; }
[[ -f "$model" ]] || { echo "$0: $model: no such model spec" >&2; exit 2; }
grep -q "^  batch_size:" "$model" ||
  { echo "$0: $model: expected a data section with '  batch_size:' to add shard_by_worker to" >&2; exit 2; }
! grep -q "^  shard_by_worker:" "$model" ||
  { echo "$0: $model: sets shard_by_worker already; give a spec without it" >&2; exit 2; }

work=$(mktemp -d)
keep_logs=0
trap '[[ $keep_logs == 1 ]] || rm -rf "$work"' EXIT
awk '{ print } /^  batch_size:/ { print "  shard_by_worker: true" }' "$model" > "$work/sharded.yaml"

# Three free ports on 127.0.0.1, asked of the kernel.
ports=($(python3 -c 'import socket
s = [socket.socket() for _ in range(3)]
for x in s: x.bind(("127.0.0.1", 0))
print(" ".join(str(x.getsockname()[1]) for x in s))'))
cat > "$work/cluster.yaml" <<YAML
cluster:
  ps: [127.0.0.1:${ports[0]}]
  worker: [127.0.0.1:${ports[1]}, 127.0.0.1:${ports[2]}]
training:
  mode: async
YAML

# Runs the cluster on one spec into $work/NAME; sets rss (KiB) to the peaks
# of ps, worker 0 and worker 1.
run_cluster() {
  local spec=$1 run=$work/$2 ps workers=() failed=0
  mkdir -p "$run"
  timeout 300 /usr/bin/time -f %M -o "$run/ps.rss" "$traind" --cluster "$work/cluster.yaml" \
    --model "$spec" --job ps --task 0 > "$run/ps.log" 2>&1 &
  ps=$!
  for task in 0 1; do
    timeout 300 /usr/bin/time -f %M -o "$run/w$task.rss" "$traind" --cluster "$work/cluster.yaml" \
      --model "$spec" --job worker --task $task --threads 1 --max-steps "$steps" --eval-every 0 \
      --checkpoint-dir "$run/ckpt" > "$run/w$task.log" 2>&1 &
    workers+=($!)
  done
  for pid in "${workers[@]}"; do wait "$pid" || failed=1; done
  # The chief stops the ps at the job's end; without it, the ps would wait.
  [[ $failed == 0 ]] || kill "$ps" 2> /dev/null || true
  wait "$ps" || failed=1
  if [[ $failed == 1 ]]; then
    keep_logs=1
    echo "$0: a task failed or timed out; logs in $run" >&2
    exit 1
  fi
  rss=("$(tail -1 "$run/ps.rss")" "$(tail -1 "$run/w0.rss")" "$(tail -1 "$run/w1.rss")")
}

mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
run_cluster "$model" whole
whole=("${rss[@]}")
run_cluster "$work/sharded.yaml" sharded
sharded=("${rss[@]}")
echo "$(basename "$model"), 1 ps + 2 async workers, $steps global steps; peak RSS in MiB:"
printf '  %-26s ps %7s   worker 0 %7s   worker 1 %7s\n' "whole training set" \
  "$(mib "${whole[0]}")" "$(mib "${whole[1]}")" "$(mib "${whole[2]}")"
printf '  %-26s ps %7s   worker 0 %7s   worker 1 %7s\n' "shard_by_worker: true" \
  "$(mib "${sharded[0]}")" "$(mib "${sharded[1]}")" "$(mib "${sharded[2]}")"
awk -v a="${sharded[1]}" -v b="${sharded[2]}" -v c="${whole[1]}" -v d="${whole[2]}" \
  'BEGIN { printf "  worker peak, shard / whole: %.2f\n", (a + b) / (c + d) }'
