#!/usr/bin/env bash
# Fetch what the production stack needs on the device machine (NVIDIA H200 image: Ubuntu 24.04, Python 3.12,
# x86-64, no network) beside what its image holds, into the ignored folder .srv/ that a run carries:
#   .srv/debs/    Redis 7.0 as Debian bookworm packages, unpacked there with `dpkg -x` (no apt, no root install);
#                 .srv/debs-fallback/ libraries unpacked only where the system lacks them (libatomic1)
#   .srv/wheels/  Postgres 16 (the pgserver wheel: initdb/postgres binaries; only its binaries are used) and
#                 the Celery / Redis / psycopg client stack that the image lacks (pins = pyproject.toml's)
# Every file is pinned by version and SHA-256; a mismatch fails the script. Total about 20 MiB.
# Usage: scripts/fetch-device-servers.sh   (then: bench/device_stack.sh on the device, carry [".whl", ".srv"])
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.srv
mkdir -p "$dest/debs" "$dest/wheels"

# package=version  sha256  pool path (fallback when apt's lists do not carry that version any more)
debs=(
  "redis-tools=5:7.0.15-1~deb12u10 f791cfcbf3054832bd6e786546acb0d4e046888f8e63bcf567c1c65fbfaf69e2 debian-security/pool/updates/main/r/redis/redis-tools_7.0.15-1~deb12u10_amd64.deb"
  "redis-server=5:7.0.15-1~deb12u10 784e17b51024ff878fd7d709a68346658fa9b21f6de740cb75e474f28790971c debian-security/pool/updates/main/r/redis/redis-server_7.0.15-1~deb12u10_amd64.deb"
  "libjemalloc2=5.3.0-1 a4117c23c5c8acf6c9678a6cb086f000b79476369da7efe8a78a70826956ad3d debian/pool/main/j/jemalloc/libjemalloc2_5.3.0-1_amd64.deb"
  "liblzf1=3.6-3 9854b0866201b63e04f1e446f45f01ef4a6f72c61f2250b75f944f6046cc7e8c debian/pool/main/libl/liblzf/liblzf1_3.6-3_amd64.deb"
  # only used where the system lacks libatomic.so.1 (bench/stack_servers.py checks with ldd first)
  "libatomic1=12.2.0-14+deb12u1 fbd4e154a6b444229ea002cc209df099209c0adc09102e5fd21239a3d2b55e2d debian/pool/main/g/gcc-12/libatomic1_12.2.0-14+deb12u1_amd64.deb"
)
for entry in "${debs[@]}"; do
  read -r pin sum pool <<<"$entry"
  sub=debs; case $pin in libatomic1=*) sub=debs-fallback;; esac
  mkdir -p "$dest/$sub"
  file="$dest/$sub/$(basename "$pool")"
  if [ -f "$file" ] && echo "$sum  $file" | sha256sum -c --quiet - 2>/dev/null; then continue; fi
  rm -f "$file"
  tmp=$(mktemp -d)
  if (cd "$tmp" && timeout 120 apt-get download -q "$pin" >/dev/null 2>&1) && ls "$tmp"/*.deb >/dev/null 2>&1; then
    mv "$tmp"/*.deb "$file"
  else  # the security pool drops superseded versions: snapshot.debian.org keeps every one
    timeout 120 curl -fsSL -o "$file" "https://deb.debian.org/$pool" \
      || timeout 300 curl -fsSL -o "$file" "https://snapshot.debian.org/archive/${pool%%/*}/20261001T000000Z/${pool#*/}"
  fi
  rm -rf "$tmp"
  echo "$sum  $file" | sha256sum -c --quiet - || { echo "checksum mismatch: $file" >&2; exit 1; }
done

# name==version  sha256   (py3 wheels or cp312 manylinux x86-64 ones)
wheels=(
  "celery==5.7.0 18310a9c919f9029e4735367484d93e6a25cdfd30afdc474622cc263d9b35f6e"
  "kombu==5.7.0 dede73bff4c89175be382c4203d2f167cf7017c384396ec75c36a1b5678f1587"
  "billiard==4.3.2 37735a7b4117aafa73532b3b493db4c02fb85c0e69d5f3447f113fd30ff27872"
  "vine==5.1.0 40fdf3c48b2cfe1c38a49e9ae2da6fda88e4794c810050a728bd7413811fb1dc"
  "amqp==5.4.2 e6e756b15c89c86818b48a4947a424706238afbf67d457428d3269bc4590db9e"
  "click-didyoumean==0.3.1 5c4bb6007cfea5f2fd6583a2fb6701a22a41eb98957e63d0fac41c10e7c3117c"
  "click-plugins==1.1.1.2 008d65743833ffc1f5417bf0e78e8d2c23aab04d9745ba817bd3e71b0feb6aa6"
  "click-repl==0.4.1 5cb10881d4c5ebaa8695eceb69911af3062ee78342812b713564b17aad333eb5"
  "prompt-toolkit==3.0.53 01c0891d7f9237d5e339f7d3e42cdae80b7534abb1c7c0e3352efba6231492f2"
  "wcwidth==0.9.4 b185c8b927b23af2721be1783499d1cfa5c028b098b0858951b4ae224477f1c2"
  "tzlocal==5.4.5 ecab534f6d65d9deb4c4ea52c121ab6dd5958e9b878e71dcb102578269752454"
  "redis==8.1.0 a4fe1aac3d3b3cc791d4b3d5931c5a956045dc951ee74d1c913ee3ac4d2ee9fb"
  "psycopg==3.3.9 d2d7d04a1ce6dab4f5b27316bea3b52585cafa2f2d631e5b09dd69823f5c26f6"
  "psycopg-binary==3.3.9 a99f0b9a19ed7a56bf5d6776456b8f15f5364db8853b0f5d184db394a45c391d"
  "pgserver==0.1.4 1a5d07c61d51f2abfef4ef61e2ef5cd014b994f7e09de8d3c140d2cf370e84a8"
)
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
pins=()
for entry in "${wheels[@]}"; do read -r pin _ <<<"$entry"; pins+=("$pin"); done
timeout 600 python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" -d "$dest/wheels" "${pins[@]}"
for entry in "${wheels[@]}"; do
  read -r pin sum <<<"$entry"
  name=${pin%%==*}; version=${pin#*==}
  file=$(ls "$dest/wheels/${name//-/_}-$version-"*.whl 2>/dev/null | head -1)
  [ -n "$file" ] || { echo "missing wheel for $pin" >&2; exit 1; }
  echo "$sum  $file" | sha256sum -c --quiet - || { echo "checksum mismatch: $file" >&2; exit 1; }
done
ls -1 "$dest/debs" "$dest/debs-fallback" "$dest/wheels"
du -sh "$dest"
