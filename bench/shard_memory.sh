#!/usr/bin/env bash
# A cluster worker's peak memory with the whole training set and with its
# own share (data.shard_by_worker), side by side in one invocation: 1 ps +
# 2 async workers of a model spec (fashion_mlp by default) on 127.0.0.1,
# each process under /usr/bin/time, then the workers' peak RSS and their
# ratio. docs/distributed.md, "Each worker its own share of the data".
#
#   bench/shard_memory.sh [--traind build/daemon/traind] [--model SPEC] [--steps 1200]
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
grep -q "^  batch_size:" "$model" ||
  { echo "$0: $model: expected a data section with '  batch_size:' to add shard_by_worker to" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sed 's/^  batch_size:.*/&\n  shard_by_worker: true/' "$model" > "$work/sharded.yaml"

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

# Runs the cluster on one spec; prints the peak RSS in KiB of ps, worker 0, worker 1.
peaks() {
  local spec=$1 run=$work/$2
  mkdir -p "$run"
  /usr/bin/time -f %M -o "$run/ps.rss" "$traind" --cluster "$work/cluster.yaml" --model "$spec" \
    --job ps --task 0 > "$run/ps.log" 2>&1 &
  local ps=$!
  for task in 1 0; do
    /usr/bin/time -f %M -o "$run/w$task.rss" "$traind" --cluster "$work/cluster.yaml" \
      --model "$spec" --job worker --task $task --threads 1 --max-steps "$steps" --eval-every 0 \
      --checkpoint-dir "$run/ckpt" > "$run/w$task.log" 2>&1 &
    eval "w$task=\$!"
  done
  wait "$w0" "$w1" "$ps" || { echo "$0: a task failed; logs in $run" >&2; trap - EXIT; exit 1; }
  echo "$(tail -1 "$run/ps.rss") $(tail -1 "$run/w0.rss") $(tail -1 "$run/w1.rss")"
}

read -r whole_ps whole_w0 whole_w1 < <(peaks "$model" whole)
read -r share_ps share_w0 share_w1 < <(peaks "$work/sharded.yaml" sharded)
mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
echo "$(basename "$model"), 1 ps + 2 async workers, $steps global steps; peak RSS in MiB:"
printf '  %-26s ps %7s   worker 0 %7s   worker 1 %7s\n' "whole training set" \
  "$(mib "$whole_ps")" "$(mib "$whole_w0")" "$(mib "$whole_w1")"
printf '  %-26s ps %7s   worker 0 %7s   worker 1 %7s\n' "shard_by_worker: true" \
  "$(mib "$share_ps")" "$(mib "$share_w0")" "$(mib "$share_w1")"
awk -v a="$share_w0" -v b="$share_w1" -v c="$whole_w0" -v d="$whole_w1" \
  'BEGIN { printf "  worker peak, shard / whole: %.2f\n", (a + b) / (c + d) }'
