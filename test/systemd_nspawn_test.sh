#!/usr/bin/env bash
# traind's systemd unit (scripts/packaging/traind@.service) under a real
# systemd as PID 1, on a host whose own PID 1 need not be systemd.
#
# Boots a Debian bookworm rootfs (debootstrap, systemd 252) with
# systemd-nspawn, installs traind there with scripts/install.sh, and checks:
# the units start and send READY=1, STATUS= shows "step N, loss = ...", a job
# reaches max_steps and every unit exits 0, journald has the log, a resumed
# job restarts after a SIGKILLed ps (Restart=on-failure), `systemctl stop`
# gives a clean SIGTERM stop with a final checkpoint, a bad spec exits 2
# and a diverged run 3 without a restart (RestartPreventExitStatus=2 3), and
# a job that has ended, started again, exits 0 without a restart loop (each
# unit sends READY=1, if only as it ends). One PASS/FAIL line per
# check; exit 0 when all pass.
#
#   test/systemd_nspawn_test.sh build              # WORK=build/nspawn by default
#   KEEP=1 test/systemd_nspawn_test.sh build       # leave the container running; enter it
#                                                  #   with nsenter -t "$(cat $WORK/leader.pid)" -a bash
#
# Needs root, systemd-nspawn and debootstrap on the host, else exits 77
# (skipped): scripts/setup.sh --test installs them with --no-install-recommends
# (else libnss-mymachines comes too and adds "mymachines" to the host's
# /etc/nsswitch.conf). A host that cannot debootstrap or boot the container
# skips too, with the log's tail. The first run
# fetches the rootfs from the Debian mirror (about 1.5 min and 400 MB in
# /var/tmp/traind-nspawn, or ROOTFS); later runs reuse it and take about 30 s. Nothing in the source tree
# is written: it is bound read-only into the container as /src.
set -uo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:?usage: systemd_nspawn_test.sh BUILD_DIR}" && pwd)
WORK=${WORK:-$BUILD/nspawn}
ROOTFS=${ROOTFS:-/var/tmp/traind-nspawn/rootfs}   # shared by builds: made once
MIRROR=${MIRROR:-http://deb.debian.org/debian}
MACHINE=${MACHINE:-traind-test}
NICE=${NICE:-10}          # the container's processes run at this niceness
KEEP=${KEEP:-0}
DATA=/usr/share/datasets

PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
npass=0 nfail=0
pass() { echo "PASS $*"; npass=$((npass + 1)); }
fail() { echo "FAIL $*"; nfail=$((nfail + 1)); }
check() { local what=$1; shift; if "$@"; then pass "$what"; else fail "$what"; fi; }
info() { echo "---- $*"; }
die() { echo "FAIL $*"; echo "SUMMARY: $npass passed, $((nfail + 1)) failed"; exit 1; }

skip() { echo "systemd_nspawn_test: skipped: $*"; exit 77; }
# What this machine cannot give the test (no mirror to debootstrap from, a
# sandbox where nspawn cannot boot a container) is a skip, with its log; what
# fails once systemd runs in the container is traind's, and a FAIL.
skip_with_log() { tail -n 20 "$2"; skip "$1 (see $2)"; }
[[ $(id -u) == 0 ]] || skip "needs root"
command -v systemd-nspawn >/dev/null || skip "no systemd-nspawn (the systemd-container package)"
command -v debootstrap >/dev/null || skip "no debootstrap"
[[ -x $BUILD/daemon/traind && -x $BUILD/daemon/trainctl ]] || die "no $BUILD/daemon/traind; build first"
mkdir -p "$WORK"

# Without systemd on the host (no /run/systemd/system), nspawn can neither
# register with machined nor ask PID 1 for a scope: it needs --register=no
# --keep-unit, and then makes its payload/ and supervisor/ cgroups under
# the cgroup it runs in. Give it one of its own, so they are easy to remove.
host_systemd=0
[[ -d /run/systemd/system ]] && host_systemd=1
cg_dirs=()
if ((host_systemd == 0)); then
  if [[ $(stat -fc %T /sys/fs/cgroup) == cgroup2fs ]]; then
    cg_dirs=(/sys/fs/cgroup/$MACHINE)
  else
    for h in systemd unified; do
      [[ -d /sys/fs/cgroup/$h ]] && cg_dirs+=(/sys/fs/cgroup/$h/$MACHINE)
    done
  fi
fi
cg_cleanup() {
  local d
  for d in "${cg_dirs[@]}"; do
    [[ -d $d ]] || continue
    if [[ -z $(find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null) ]]; then
      find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
    fi
  done
}

# ----------------------------------------------------------------- container
nspid() { local p; p=$(cat "$WORK/nspawn.pid" 2>/dev/null) || return 1
  [[ -n $p ]] && { tr '\0' ' ' <"/proc/$p/cmdline"; } 2>/dev/null | grep -q "systemd-nspawn .*--machine=$MACHINE" && echo "$p"; }
in_ct() { nsenter -t "$LEADER" -a env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  TERM=dumb SYSTEMD_PAGER= SYSTEMD_COLORS=0 LANG=C.UTF-8 "$@"; }
poweroff_ct() {
  local p i; p=$(nspid) || return 0
  local l; l=$(ps --ppid "$p" -o pid= | head -1 | tr -d ' ')
  [[ -n $l ]] && nsenter -t "$l" -a systemctl poweroff 2>/dev/null
  for i in $(seq 1 60); do kill -0 "$p" 2>/dev/null || break; sleep 1; done
  if kill -0 "$p" 2>/dev/null; then kill -TERM "$p"; sleep 5; fi   # nspawn halts the container on SIGTERM
  kill -0 "$p" 2>/dev/null && kill -KILL "$p"
  rm -f "$WORK/nspawn.pid" "$WORK/leader.pid"
  cg_cleanup
}
finish() {
  if [[ $KEEP == 1 ]]; then
    info "container left running: nsenter -t $(cat "$WORK/leader.pid" 2>/dev/null) -a bash"
  else
    poweroff_ct
  fi
}

# A container of a previous run goes first.
poweroff_ct

# ------------------------------------------------------------------- rootfs
packages=systemd,systemd-sysv,dbus,libsystemd0,libnss-systemd,procps,iproute2,curl,ca-certificates,libdnnl2,libyaml-cpp0.7,libspdlog1.10,libfmt9,libcapnp-0.9.2,libprotobuf-lite32,libgomp1,ocl-icd-libopencl1,libcap2,zlib1g,libpng16-16,libjpeg62-turbo
# The marker holds the package list: a rootfs made with another is made again.
if [[ $(cat "$ROOTFS/.traind-rootfs-ok" 2>/dev/null) != "$packages" ]]; then
  info "debootstrap bookworm into $ROOTFS (log: $WORK/debootstrap.log)"
  rm -rf "$ROOTFS"
  mkdir -p "$(dirname "$ROOTFS")"
  nice -n "$NICE" debootstrap --variant=minbase --include="$packages" \
    bookworm "$ROOTFS" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 ||
    { rm -rf "$ROOTFS"; skip_with_log "debootstrap from $MIRROR failed" "$WORK/debootstrap.log"; }
  echo "$MACHINE" >"$ROOTFS/etc/hostname"
  : >"$ROOTFS/etc/machine-id"          # systemd initialises it on the first boot
  chroot "$ROOTFS" passwd -d root >/dev/null
  echo "$packages" >"$ROOTFS/.traind-rootfs-ok"
fi
binds=(--bind-ro="$REPO:/src" --bind-ro="$BUILD:/srcbuild")
if [[ -e $DATA/fashion-mnist/train-images-idx3-ubyte.gz ]]; then
  binds+=(--bind-ro="$DATA")
elif [[ ! -e $ROOTFS$DATA/fashion-mnist/train-images-idx3-ubyte.gz ]]; then
  info "installing dataset-fashion-mnist in the rootfs"
  chroot "$ROOTFS" sh -c 'apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q dataset-fashion-mnist' \
    >>"$WORK/debootstrap.log" 2>&1 ||
    skip_with_log "installing dataset-fashion-mnist in the rootfs failed" "$WORK/debootstrap.log"
fi
missing=$(for b in traind trainctl; do
  cp "$BUILD/daemon/$b" "$ROOTFS/tmp/ldd-check-$b"
  chroot "$ROOTFS" ldd "/tmp/ldd-check-$b" 2>&1 | grep "not found"
  rm -f "$ROOTFS/tmp/ldd-check-$b"
done)
check "rootfs has every library traind and trainctl link${missing:+: $missing}" test -z "$missing"

# --------------------------------------------------------------------- boot
nspawn_opts=(-D "$ROOTFS" --boot --machine="$MACHINE" --private-network "${binds[@]}")
((host_systemd == 0)) && nspawn_opts+=(--register=no --keep-unit)
info "systemd-nspawn ${nspawn_opts[*]} (console: $WORK/boot.log)"
(
  for d in "${cg_dirs[@]}"; do mkdir -p "$d" && echo "$BASHPID" >"$d/cgroup.procs"; done
  exec nice -n "$NICE" setsid systemd-nspawn "${nspawn_opts[@]}" </dev/null >"$WORK/boot.log" 2>&1
) &
echo $! >"$WORK/nspawn.pid"
trap finish EXIT
LEADER=
for i in $(seq 1 60); do
  LEADER=$(ps --ppid "$(cat "$WORK/nspawn.pid")" -o pid=,comm= | awk '$2 == "systemd" {print $1; exit}')
  [[ -n $LEADER ]] && break
  kill -0 "$(cat "$WORK/nspawn.pid")" 2>/dev/null || break
  sleep 1
done
[[ -n $LEADER ]] || skip_with_log "systemd-nspawn could not boot the container" "$WORK/boot.log"
echo "$LEADER" >"$WORK/leader.pid"
state=$(in_ct timeout 120 systemctl is-system-running --wait 2>&1)
case $state in
  running) pass "systemd 252 is PID 1 of the container and the boot finished: running" ;;
  degraded)  # a unit of the rootfs's own that this host's sandbox fails; traind's come later
    info "the container booted degraded; its failed units:"
    in_ct systemctl --failed --no-legend ;;
  *) skip "the container's boot did not finish within 120 s: $state" ;;
esac

# ------------------------------------------------------------------ install
in_ct systemctl stop 'traind@*' 2>/dev/null
in_ct systemctl reset-failed 'traind@*' 2>/dev/null
in_ct rm -rf /etc/traind /var/lib/private/traind /var/lib/traind
out=$(in_ct /src/scripts/install.sh --build /srcbuild 2>&1); rc=$?
check "scripts/install.sh inside the container (rc $rc): $out" test $rc = 0
check "install.sh wrote /etc/traind/cluster.yaml and model.yaml" \
  in_ct test -s /etc/traind/cluster.yaml -a -s /etc/traind/model.yaml
out=$(in_ct systemd-analyze verify /usr/local/lib/systemd/system/traind@.service 2>&1); rc=$?
check "systemd-analyze verify traind@.service (rc $rc)${out:+: $out}" test $rc = 0
exposure=$(in_ct systemd-analyze security --no-pager traind@ps-0.service 2>/dev/null |
  sed -n 's/.*Overall exposure level for traind@ps-0.service: \([0-9.]*\).*/\1/p')
# 7.0 ("MEDIUM") before the unit's sandboxing of 2026-11-25, 1.8 after.
check "systemd-analyze security: exposure ${exposure:-?} of 10, at most 2.5" \
  awk -v e="${exposure:-99}" 'BEGIN { exit !(e <= 2.5) }'

# The example cluster.yaml (1 ps, 2 workers on 127.0.0.1, checkpoints in
# /var/lib/traind/ckpt) as installed; the example model, with max_steps.
set_steps() { in_ct sed -i -E -e "s/^  (epochs|max_steps): .*/  max_steps: $1/" \
  -e 's/^  log_every: .*/  log_every: 50/' /etc/traind/model.yaml; }
cursor() { in_ct journalctl -q -n 0 --show-cursor | sed -n 's/^-- cursor: //p'; }
jsince() { in_ct journalctl -q --no-pager -o short-precise --after-cursor="$1" "${@:2}"; }
units=(traind@ps-0 traind@worker-0 traind@worker-1)
n_lines() { grep -cE "$1" <<<"$2"; }
wait_inactive() { local i; for i in $(seq 1 "$1"); do
  [[ -z $(in_ct systemctl list-units --no-legend --state=active,activating,deactivating 'traind@*') ]] && return 0
  sleep 1; done; return 1; }
latest() { in_ct cat /var/lib/private/traind/ckpt/latest 2>/dev/null; }
# After twice RestartSec: unit $1 failed with exit code $2, not restarted.
failed_unrestarted() {
  sleep 10
  local show
  show=$(in_ct systemctl show -p ActiveState,Result,ExecMainStatus,NRestarts "$1" | sort | tr '\n' ' ')
  check "exit $2, failed, no restart after 10 s: $show" \
    test "$show" = "ActiveState=failed ExecMainStatus=$2 NRestarts=0 Result=exit-code "
}
unit_log() { in_ct journalctl -q --no-pager -u "$1" --after-cursor="$2"; }
in_ct systemd-analyze log-level debug     # READY=1, STOPPING=1 and exit codes in the journal

# ---------------------------------------------- run 1: a job to max_steps
info "run 1: ${units[*]} with max_steps 300"
set_steps 300
c=$(cursor)
in_ct timeout 300 systemctl start "${units[@]}"; rc=$?
check "systemctl start ${units[*]} returns 0 (each unit sent READY=1)" test $rc = 0
check "the three units reached active within 5 min, then the job ended" wait_inactive 300
log=$(jsince "$c")
check "READY=1 from ps-0, worker-0 and worker-1" test "$(n_lines 'traind@(ps-0|worker-[01])\.service: Got notification message from PID [0-9]+ \(READY=1' "$log")" = 3
grep -E '\[worker 0\] done: ' <<<"$log" | cut -c1-220
check "the chief reached max_steps 300 (\"done: global step 30x\")" grep -qE '\[worker 0\] done: global step 30[0-9],' <<<"$log"
check "all three exited 0 (status=0/SUCCESS)" test "$(n_lines 'traind@(ps-0|worker-[01])\.service: Main process exited, code=exited, status=0/SUCCESS' "$log")" = 3
check "no unit was restarted" test "$(n_lines 'Scheduled restart job' "$log")" = 0
ck=$(latest)
check "final checkpoint /var/lib/private/traind/ckpt/$ck (latest) with model.safetensors" \
  in_ct test -s "/var/lib/private/traind/ckpt/$ck/model.safetensors"
check "/var/lib/traind is systemd's symlink to private/traind (DynamicUser + StateDirectory)" \
  test "$(in_ct readlink /var/lib/traind)" = private/traind
uid=$(in_ct stat -c %u /var/lib/private/traind/ckpt)
check "the checkpoints belong to a dynamic uid ($uid, in 61184..65519)" test "$uid" -ge 61184 -a "$uid" -le 65519
check "both workers moved tensors through shared memory (one dynamic user for every instance)" \
  test "$(n_lines '\[worker [01]\] ps 0 at 127.0.0.1:2221: tensors through shared memory' "$log")" = 2
wlog=$(unit_log traind@worker-0 "$c")
check "journalctl -u traind@worker-0 has the worker's step lines" grep -qE '\[worker 0\] step [0-9]+, loss = ' <<<"$wlog"

# ------------------------------- run 2: resume, STATUS=, restart, SIGTERM
info "run 2: resume with max_steps 1000000, kill -9 the ps, then systemctl stop"
set_steps 1000000
c=$(cursor)
in_ct timeout 300 systemctl start "${units[@]}"; rc=$?
check "systemctl start returns 0 again" test $rc = 0
status_step() { local i; for i in $(seq 1 "$1"); do
  [[ $(in_ct systemctl show -p StatusText --value traind@worker-0) =~ ^step\ [0-9]+,\ loss\ =\ [0-9.]+ ]] && return 0
  sleep 1; done; return 1; }
check "systemctl status traind@worker-0 shows Status: \"step N, loss = X ...\"" status_step 60
in_ct systemctl status --no-pager -n 0 traind@worker-0 | grep -E 'Active:|Status:'
log=$(jsince "$c")
check "the chief resumed from run 1's checkpoint ($ck)" grep -q "\[worker 0\] restored /var/lib/traind/ckpt/$ck" <<<"$log"
health=$(in_ct curl -s --max-time 5 http://127.0.0.1:9101/healthz)
check "GET /healthz on worker 0 answers: $health" test -n "$health"

in_ct systemctl kill -s SIGKILL traind@ps-0
restarted() { local i u; for i in $(seq 1 "$1"); do
  local ok=1
  for u in "${units[@]}"; do
    [[ $(in_ct systemctl show -p NRestarts --value "$u") -ge 1 &&
       $(in_ct systemctl show -p SubState --value "$u") == running ]] || ok=0
  done
  ((ok)) && status_step 1 && return 0
  sleep 1; done; return 1; }
check "after kill -9 of the ps, systemd restarted all three (Restart=on-failure, RestartSec=5) and training resumed" restarted 90
for u in "${units[@]}"; do echo "---- $u: $(in_ct systemctl show -p ActiveState,SubState,NRestarts,StatusText "$u" | tr '\n' ' ')"; done
log=$(jsince "$c")
check "the workers exited 1 when the ps died (lost the connection)" \
  test "$(n_lines 'traind@worker-[01]\.service: Main process exited, code=exited, status=1/FAILURE' "$log")" = 2

before=$(latest)
c=$(cursor)
t0=$(date +%s)
# Both workers at once: the chief waits for the other to push its last
# step and leave before its final checkpoint.
in_ct systemctl stop traind@worker-0 traind@worker-1; r1=$?
in_ct systemctl stop traind@ps-0; r2=$?                        # then the ps
check "systemctl stop worker-0 worker-1, then ps-0, return 0 ($r1 $r2) in $(($(date +%s) - t0)) s" test "$r1$r2" = 00
log=$(jsince "$c")
grep -E 'stop requested by SIGTERM|saved checkpoint|\] done: ' <<<"$log" | cut -c1-220
check "each task took SIGTERM (\"stop requested by SIGTERM\") and sent STOPPING=1" \
  test "$(n_lines '\] stop requested by SIGTERM$' "$log")" = 3 -a "$(n_lines 'Got notification message from PID [0-9]+ \(STOPPING=1' "$log")" = 3
check "all three exited 0 after SIGTERM" \
  test "$(n_lines 'traind@(ps-0|worker-[01])\.service: Main process exited, code=exited, status=0/SUCCESS' "$log")" = 3
check "no restart after systemctl stop" test "$(n_lines 'Scheduled restart job' "$log")" = 0
ck=$(latest)
newer_saved() { [[ $ck > $before ]] && grep -q "saved checkpoint /var/lib/traind/ckpt/$ck" <<<"$log"; }
check "the chief wrote a final checkpoint on SIGTERM ($before -> $ck)" newer_saved
check "no step lost (no \"in no checkpoint\" warning from the ps)" test "$(n_lines 'in no checkpoint' "$log")" = 0
in_ct ls -ln /var/lib/private/traind/ckpt | sed 's/^/---- /'

# ------------------------------------------- run 3: a bad spec, exit 2
info "run 3: an unknown field in model.yaml"
in_ct cp /etc/traind/model.yaml /etc/traind/model.yaml.good
in_ct sh -c 'echo "bogus_field: 1" >>/etc/traind/model.yaml'
c=$(cursor)
in_ct timeout 60 systemctl start traind@ps-0 2>/dev/null; rc=$?
check "systemctl start traind@ps-0 fails (rc $rc)" test $rc != 0
failed_unrestarted traind@ps-0 2
log=$(unit_log traind@ps-0 "$c")
grep -E "unknown field|status=2" <<<"$log" | cut -c1-220
check "journalctl -u traind@ps-0 names the file, line and field" \
  grep -qE "/etc/traind/model.yaml:[0-9]+:[0-9]+: unknown field 'bogus_field'" <<<"$log"
check "no restart job scheduled" test "$(jsince "$c" | grep -c 'Scheduled restart job')" = 0
in_ct mv /etc/traind/model.yaml.good /etc/traind/model.yaml
in_ct systemctl reset-failed traind@ps-0

# ------------------------- run 4: a job that has ended, started again (a reboot)
ck=$(latest)
info "run 4: the job started again with max_steps at its latest checkpoint ($ck)"
set_steps $((10#${ck#ckpt-}))
c=$(cursor)
in_ct timeout 300 systemctl start "${units[@]}"; rc=$?
check "systemctl start returns 0 (each unit sent READY=1, if only as it ended)" test $rc = 0
check "all three ended within 2 min" wait_inactive 120
sleep 10        # twice RestartSec
log=$(jsince "$c")
grep -E '\] done' <<<"$log" | cut -c1-220
check "all three exited 0 (status=0/SUCCESS), none failed for want of READY=1 (result 'protocol')" \
  test "$(n_lines 'traind@(ps-0|worker-[01])\.service: Main process exited, code=exited, status=0/SUCCESS' "$log")" = 3 \
  -a "$(n_lines "with result 'protocol'" "$log")" = 0
check "no unit was restarted" test "$(n_lines 'Scheduled restart job' "$log")" = 0

# ------------------------------------------- run 5: a diverged run, exit 3
info "run 5: learning_rate 1e30: the chief diverges"
in_ct cp /etc/traind/model.yaml /etc/traind/model.yaml.good
set_steps 1000000
in_ct sed -i -E 's/^  learning_rate: .*/  learning_rate: 1.0e+30/' /etc/traind/model.yaml
c=$(cursor)
in_ct timeout 300 systemctl start "${units[@]}"
exited_3() { local i; for i in $(seq 1 "$1"); do
  [[ $(in_ct systemctl show -p ExecMainStatus --value traind@worker-0) == 3 ]] && return 0
  sleep 1; done; return 1; }
check "the chief exited 3 (diverged) within 2 min" exited_3 120
failed_unrestarted traind@worker-0 3
log=$(unit_log traind@worker-0 "$c")
grep -E "lower the learning rate" <<<"$log" | cut -c1-220
check "journalctl -u traind@worker-0 says to lower the learning rate" \
  grep -q "lower the learning rate or check the data" <<<"$log"
# The chief stopped the job as diverged: the ps and the other worker (told
# by the ps, or diverged on their own) stop too, failed, and stay stopped.
check "the whole job stopped within 30 s" wait_inactive 30
failed_unrestarted traind@ps-0 3
failed_unrestarted traind@worker-1 3
check "journalctl -u traind@ps-0 says the chief's run diverged" \
  grep -q "the chief's run diverged" <<<"$(unit_log traind@ps-0 "$c")"
in_ct systemctl stop "${units[@]}"
in_ct systemctl reset-failed "${units[@]}" 2>/dev/null
in_ct mv /etc/traind/model.yaml.good /etc/traind/model.yaml
in_ct systemd-analyze log-level info

echo "SUMMARY: $npass passed, $nfail failed"
((nfail == 0))
