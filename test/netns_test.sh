#!/usr/bin/env bash
# A cluster on several hosts: one ps and two workers, each in its own
# network namespace (its own interfaces, addresses and loopback), joined by
# a bridge in a fourth namespace, talking over 10.213.0.0/24. The addresses
# live only inside these namespaces and are never routed anywhere else.
#
#   test/netns_test.sh build/daemon/traind train       # fashion_mlp, 100 async steps:
#                                                      # every node exits 0
#   test/netns_test.sh build/daemon/traind partition   # the ps host's cable is cut
#                                                      # mid-run: both workers fail (exit 1)
#                                                      # within rpc/peer_silence.h's bound,
#                                                      # naming the ps; the ps lives on and
#                                                      # stops cleanly on SIGTERM
#
# Needs root and `ip` with network namespaces; exits 77 (skipped) without.
# The namespaces are removed whatever happens.
set -uo pipefail
traind=${1:?usage: netns_test.sh TRAIND train|partition}
scenario=${2:-train}
source_dir=$(cd "$(dirname "$0")/.." && pwd)
skip() { echo "netns_test: skipped: $*"; exit 77; }

[[ $(id -u) -eq 0 ]] || skip "needs root to create network namespaces"
command -v ip >/dev/null || skip "no 'ip' command (iproute2)"
[[ -r /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]] ||
  skip "no Fashion-MNIST (the dataset-fashion-mnist package)"

prefix=traind-t$$
hub=$prefix-hub
nodes=("$prefix-ps0" "$prefix-w0" "$prefix-w1")
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for ns in "${nodes[@]}" "$hub"; do ip netns del "$ns" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT

ip netns add "$hub" 2>"$work/err" || skip "cannot create a network namespace: $(cat "$work/err")"
ip -n "$hub" link add br0 type bridge 2>"$work/err" || skip "no bridge device: $(cat "$work/err")"
ip -n "$hub" link set br0 up
for i in "${!nodes[@]}"; do
  ns=${nodes[i]}
  ip netns add "$ns" || skip "cannot create namespace $ns"
  # The veth pair is born in the hub; its eth0 end moves straight into the node.
  ip -n "$hub" link add "v$i" type veth peer name eth0 netns "$ns" 2>"$work/err" ||
    skip "no veth pair: $(cat "$work/err")"
  ip -n "$hub" link set "v$i" master br0 up
  ip -n "$ns" addr add "10.213.0.$((i + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
done

mode=async
[[ $scenario == partition ]] && mode=sync
cat >"$work/cluster.yaml" <<SPEC
cluster:
  ps: [10.213.0.1:2221]
  worker: [10.213.0.2:2222, 10.213.0.3:2222]
training:
  mode: $mode
checkpoint:
  dir: $work/ckpt
http:
  ps: [10.213.0.1:9100]
  worker: [10.213.0.2:9100, 10.213.0.3:9100]
# The namespaces share this machine's kernel and pid namespace, so the
# tasks could move tensors through shared memory; as hosts apart they must
# send them over the network.
transport:
  shared_memory: off
SPEC
model=$source_dir/configs/models/fashion_mlp.yaml
max_steps=100
[[ $scenario == partition ]] && max_steps=1000000
run() {  # namespace, job, task
  timeout -s KILL 50 ip netns exec "$1" "$traind" --cluster "$work/cluster.yaml" --model "$model" --job "$2" \
    --task "$3" --max-steps $max_steps --threads 1 --log-every 20 >"$work/$2$3.log" 2>&1 &
  pids+=($!)
}
run "${nodes[0]}" ps 0
run "${nodes[1]}" worker 0
run "${nodes[2]}" worker 1

status=0
names=("ps 0" "worker 0" "worker 1")
expect_exit() {  # index, expected code
  wait "${pids[$1]}"
  local code=$?
  echo "netns_test: ${names[$1]} (in ${nodes[$1]}, 10.213.0.$(($1 + 1))) exited $code, expected $2"
  ((code == $2)) || status=1
}

if [[ $scenario == partition ]]; then
  for _ in $(seq 100); do
    grep -q "step 20," "$work/worker0.log" 2>/dev/null && break
    sleep 0.2
  done
  # The ps's host drops off the network without a word: no FIN, no RST.
  ip -n "$hub" link set v0 down
  cut=$SECONDS
  expect_exit 1 1
  expect_exit 2 1
  echo "netns_test: the workers gave up $((SECONDS - cut)) s after the cut"
  for log in worker0 worker1; do
    grep -q "lost the connection to ps 0 at 10.213.0.1:2221" "$work/$log.log" ||
      { echo "netns_test: $log does not name the ps it lost"; status=1; }
  done
  kill -0 "${pids[0]}" 2>/dev/null || { echo "netns_test: the ps did not live on"; status=1; }
  kill -TERM "${pids[0]}"
  expect_exit 0 0
else
  # Every node exits by itself once the job reaches step 100 (the chief
  # stops the ps); timeout kills one still running after 50 s (exit 137): a hang.
  for i in "${!pids[@]}"; do expect_exit "$i" 0; done
  grep -q "done: global step" "$work/worker0.log" || { echo "netns_test: the chief logged no summary"; status=1; }
fi
pids=()
for log in ps0 worker0 worker1; do
  echo "--- $log"
  tail -n 5 "$work/$log.log"
done
exit "$status"
