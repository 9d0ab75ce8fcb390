#!/usr/bin/env bash
# scripts/run-local-cluster as its users run it: one ps and two workers of
# fashion_mlp on free 127.0.0.1 ports.
#
#   test/local_cluster_test.sh TRAIND stop       # SIGTERM mid-run: every task stops
#                                                # cleanly, the chief's checkpoint is
#                                                # written before the script exits 0
#   test/local_cluster_test.sh TRAIND port-taken # the ps's port is held: the ps exits 2
#                                                # naming the spec's line, the script
#                                                # stops the workers and exits 2 at once,
#                                                # none left running
#   test/local_cluster_test.sh TRAIND stop-at-start
#                                                # 1 ps + 11 workers, SIGTERM as the
#                                                # first task starts: none is left
#                                                # running, exit 0
#   test/local_cluster_test.sh TRAIND killed-while-stopping
#                                                # a worker paused, the script stopped,
#                                                # the worker killed: reported, exit 137
#   test/local_cluster_test.sh TRAIND chief-stopped-alone
#                                                # SIGTERM to the chief only: the script
#                                                # stops the others 30 s later, exit 0
set -uo pipefail
traind=${1:?usage: local_cluster_test.sh TRAIND stop|port-taken|stop-at-start|killed-while-stopping|chief-stopped-alone}
scenario=${2:-stop}
source_dir=$(cd "$(dirname "$0")/.." && pwd)
fail() { echo "local_cluster_test: FAILED: $*"; echo "--- log:"; cat "$dir/log"; exit 1; }

dir=$(mktemp -d /tmp/traind-local-cluster.XXXXXX)
holder=""
cleanup() { [[ -n $holder ]] && kill "$holder" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT

# Free ports: bound by Python, released just before the run.
workers=2
[[ $scenario == stop-at-start ]] && workers=11
read -r p0 worker_ports < <(python3 -c "
import socket
s = [socket.socket() for _ in range(1 + $workers)]
for x in s: x.bind(('127.0.0.1', 0))
print(*[x.getsockname()[1] for x in s])")
worker_list=$(printf '127.0.0.1:%s, ' $worker_ports)
cat >"$dir/c.yaml" <<YAML
cluster:
  ps: [127.0.0.1:$p0]
  worker: [${worker_list%, }]
training:
  mode: async
YAML
launcher=("$source_dir/scripts/run-local-cluster" "$dir/c.yaml"
  "$source_dir/configs/models/fashion_mlp.yaml" --threads 1 --eval-every 0
  --checkpoint-dir "$dir/ckpt")
export TRAIND=$traind

# The launcher in the background ($script), once the first step's figures
# are in its log.
start_training() {
  "${launcher[@]}" --max-steps 1000000 >"$dir/log" 2>&1 &
  script=$!
  for _ in $(seq 600); do grep -q ", loss = " "$dir/log" 2>/dev/null && break; sleep 0.1; done
  grep -q ", loss = " "$dir/log" || fail "no step figures within 60 s"
}
# The pid of this cluster's worker $1 only: tests beside this one run such
# workers too.
worker_pid() {
  local pid
  pid=$(pgrep -f -- "--cluster $dir/c.yaml .*--job worker --task $1 ")
  [[ $pid =~ ^[0-9]+$ ]] || fail "expected one pid of worker $1, got '$pid'" >&2
  echo "$pid"
}

case $scenario in
stop)
  start_training
  kill -TERM "$script"
  wait "$script"
  status=$?
  ((status == 0)) || fail "exit status $status, expected 0"
  grep -q "saved checkpoint" "$dir/log" || fail "the chief wrote no checkpoint"
  ls "$dir"/ckpt/ckpt-* >/dev/null 2>&1 || fail "no checkpoint in $dir/ckpt"
  pgrep -f "$dir/c.yaml" >/dev/null && fail "tasks still running after the script exited"
  ;;
port-taken)
  python3 -c "import socket, time
s = socket.socket(); s.bind(('127.0.0.1', $p0)); s.listen(); time.sleep(120)" &
  holder=$!
  sleep 0.5
  start=$SECONDS
  "${launcher[@]}" --max-steps 100 >"$dir/log" 2>&1
  status=$?
  ((status == 2)) || fail "exit status $status, expected 2 (the ps's)"
  ((SECONDS - start < 30)) || fail "took $((SECONDS - start)) s: the workers waited"
  grep -q "c.yaml:2:.*cluster.ps\[0\]: 127.0.0.1:$p0: cannot listen" "$dir/log" ||
    fail "the ps's error does not name the spec's line and address"
  grep -q "run-local-cluster: stopping every task" "$dir/log" || fail "the workers were not stopped"
  # A worker stops with "done: stopped before training", or, when the
  # SIGTERM comes before it has set up its handlers, at once and silently.
  pgrep -f "$dir/c.yaml" >/dev/null && fail "tasks still running after the script exited"
  ;;
stop-at-start)
  "${launcher[@]}" --max-steps 1000000 >"$dir/log" 2>&1 &
  script=$!
  # A task, not the script's own "traind check --cluster": a task has --model after it.
  for _ in $(seq 1000); do pgrep -f -- "--cluster $dir/c.yaml --model" >/dev/null && break; sleep 0.005; done
  kill -TERM "$script"
  wait "$script"
  status=$?
  ((status == 0)) || fail "exit status $status, expected 0"
  pgrep -f "$dir/c.yaml" >/dev/null && fail "tasks still running after the script exited"
  ;;
killed-while-stopping)
  start_training
  worker1=$(worker_pid 1) || exit 1
  kill -STOP "$worker1"
  kill -TERM "$script"
  sleep 1
  kill -KILL "$worker1"
  wait "$script"
  status=$?
  ((status == 137)) || fail "exit status $status, expected 137 (the killed worker's)"
  grep -q "run-local-cluster: worker 1 (pid $worker1) exited with status 137" "$dir/log" ||
    fail "the killed worker was not reported"
  pgrep -f "$dir/c.yaml" >/dev/null && fail "tasks still running after the script exited"
  ;;
chief-stopped-alone)
  start_training
  chief=$(worker_pid 0) || exit 1
  kill -TERM "$chief"
  wait "$script"
  status=$?
  ((status == 0)) || fail "exit status $status, expected 0 (the chief's)"
  grep -q "run-local-cluster: the chief (worker 0) ended 30 s ago, the other tasks have not" \
    "$dir/log" || fail "the others were not stopped for the chief's end"
  pgrep -f "$dir/c.yaml" >/dev/null && fail "tasks still running after the script exited"
  ;;
*) echo "unknown scenario $scenario" >&2; exit 2 ;;
esac
echo "local_cluster_test: $scenario passed"
