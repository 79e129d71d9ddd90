#!/usr/bin/env bash
# Install the Debian packages the tests need and start Postgres/Redis when they are down.
# Idempotent: a machine that already has everything spends well under a second here.
set -euo pipefail

need_pkgs=()
command -v cc >/dev/null || need_pkgs+=(gcc)
command -v c++ >/dev/null || need_pkgs+=(g++)
command -v pg_ctlcluster >/dev/null || need_pkgs+=(postgresql)
command -v redis-server >/dev/null || need_pkgs+=(redis-server)
command -v docker-compose >/dev/null || need_pkgs+=(docker-compose)  # tests/deploy: `docker-compose config`
test -x /usr/bin/chromium || need_pkgs+=(chromium)  # the dashboard's browser test (Playwright drives it)
command -v llvm-objdump-15 >/dev/null || need_pkgs+=(llvm-15)  # gfx906/gfx90a disassembly, readelf cross-check
command -v hipcc >/dev/null || need_pkgs+=(hipcc)  # gfx906/gfx90a code objects (HIP_PLATFORM=amd)
dpkg -s rocm-device-libs >/dev/null 2>&1 || need_pkgs+=(rocm-device-libs)  # device bitcode hipcc links
for extra in ${TUNEBASE_EXTRA_PKGS:-}; do
  dpkg -s "$extra" >/dev/null 2>&1 || need_pkgs+=("$extra")
done
if ((${#need_pkgs[@]})); then
  echo "ensure-system: installing ${need_pkgs[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${need_pkgs[@]}"
fi

if ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
  echo "ensure-system: starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
  for _ in $(seq 1 30); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 1; done
fi
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  echo "ensure-system: starting Redis"
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
  for _ in $(seq 1 30); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 1; done
fi
