#!/usr/bin/env bash
# Install and configure a container engine for `make compose-test` on a Debian 12 machine (root or sudo).
# Podman is used where no Docker daemon runs: runc instead of crun (crun fails on hosts with a mixed
# cgroup v1/v2 layout), cgroupfs (no systemd), file events, and default ulimits that root may set in a sandbox.
# Idempotent; a machine that already has it all spends well under a second here.
set -euo pipefail

SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
need=()
# docker-compose (1.29) drives podman through its Docker API (`podman system service`): unlike Debian's
# podman-compose 1.0.3 it honours profiles and depends_on conditions. debootstrap makes the local base image.
for tool in podman debootstrap runc docker-compose; do
  command -v "$tool" >/dev/null || need+=("$tool")
done
# CNI's dnsname plugin: compose service names resolve as hosts on the project network.
[ -x /usr/lib/cni/dnsname ] || need+=(golang-github-containernetworking-plugin-dnsname)
if ((${#need[@]})); then
  echo "container-engine: installing ${need[*]}"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

conf=/etc/containers/containers.conf.d/50-tunebase.conf
want='[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"'
if [ "$(cat "$conf" 2>/dev/null)" != "$want" ]; then
  echo "container-engine: writing $conf"
  $SUDO mkdir -p "$(dirname "$conf")"
  printf '%s\n' "$want" | $SUDO tee "$conf" >/dev/null
fi
