#!/usr/bin/env bash
# Installs a built traind (scripts/build.sh) for systemd:
#   PREFIX/bin/traind, PREFIX/bin/trainctl
#   UNITDIR/traind@.service                     (its ExecStart names PREFIX/bin/traind)
#   PREFIX/lib/traind/libtraind_cuda.so         the CUDA back end, where the build has one
#   PREFIX/share/traind/{models,clusters}/      example specs
#   PREFIX/share/doc/traind/                    the operator docs
# and, unless they exist, /etc/traind/{cluster,model}.yaml from the examples
# to edit. Run as root; then see docs/operations.md, "systemd".
#
#   scripts/install.sh [--prefix /usr/local] [--build build] [--destdir DIR]
#                      [--unit-dir UNITDIR]
#
# UNITDIR is where systemd looks for the unit: PREFIX/lib/systemd/system for
# the prefixes /usr and /usr/local, else /etc/systemd/system (systemd does
# not look under /opt/traind). --destdir stages everything under DIR
# (packaging, tests) and leaves systemd alone; otherwise systemd is told to
# reload its units.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
prefix=/usr/local build=$here/build destdir="" unit_dir=""
usage() { awk 'NR == 1 { next } !/^#/ { exit } { sub(/^# ?/, ""); print }' "$0" >&2; exit 2; }
while (($#)); do
  (($# >= 2)) || usage  # every option takes a value
  case $1 in
    --prefix) prefix=$2 ;;
    --build) build=$2 ;;
    --destdir) destdir=$2 ;;
    --unit-dir) unit_dir=$2 ;;
    *) usage ;;
  esac
  shift 2
done
[[ $prefix == /* ]] || { echo "install: --prefix must be absolute, got '$prefix'" >&2; exit 2; }
prefix=${prefix%/}
if [[ -z $unit_dir ]]; then
  case $prefix in
    /usr | /usr/local) unit_dir=$prefix/lib/systemd/system ;;
    *) unit_dir=/etc/systemd/system ;;
  esac
fi
[[ $unit_dir == /* ]] || { echo "install: --unit-dir must be absolute, got '$unit_dir'" >&2; exit 2; }
for binary in traind trainctl; do
  [[ -x $build/daemon/$binary ]] ||
    { echo "install: no $build/daemon/$binary; run scripts/build.sh" >&2; exit 2; }
done

root=$destdir$prefix
install -d "$root/bin" "$destdir$unit_dir" "$root/share/traind/models" \
  "$root/share/traind/clusters" "$root/share/doc/traind"
install -m 755 "$build/daemon/traind" "$build/daemon/trainctl" "$root/bin/"
# The CUDA back end, where this build has one: traind opens it from
# PREFIX/lib/traind when a run names a cuda:N device.
if [[ -e $build/devices/libtraind_cuda.so ]]; then
  install -d "$root/lib/traind"
  install -m 644 "$build/devices/libtraind_cuda.so" "$root/lib/traind/"
fi
sed -e "s|/usr/local/bin/traind|$prefix/bin/traind|g" \
    -e "s|/usr/local/share/doc/traind|$prefix/share/doc/traind|g" \
    "$here/scripts/packaging/traind@.service" >"$destdir$unit_dir/traind@.service"
chmod 644 "$destdir$unit_dir/traind@.service"
install -m 644 "$here"/configs/models/*.yaml "$root/share/traind/models/"
install -m 644 "$here"/configs/clusters/*.yaml "$here/scripts/packaging/cluster-compose.yaml" \
  "$root/share/traind/clusters/"
install -m 644 "$here"/docs/*.md "$root/share/doc/traind/"

# The files every instance reads: examples to edit, never overwritten.
etc=$destdir/etc/traind
install -d "$etc"
[[ -e $etc/cluster.yaml ]] || install -m 644 "$here/scripts/packaging/cluster-systemd.yaml" "$etc/cluster.yaml"
[[ -e $etc/model.yaml ]] || install -m 644 "$here/configs/models/fashion_mlp.yaml" "$etc/model.yaml"

if [[ -z $destdir ]] && command -v systemctl >/dev/null && [[ -d /run/systemd/system ]]; then
  systemctl daemon-reload
fi
echo "install: traind in $root/bin, unit traind@.service in $destdir$unit_dir"
