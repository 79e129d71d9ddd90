#!/usr/bin/env bash
# Make `localhost/debian:bookworm` from Debian packages with debootstrap, for machines that reach Debian's
# package mirror but no container registry. The Dockerfiles take it as BASE_IMAGE (docker/README.md).
# Usage: scripts/local-base-image.sh [IMAGE]   (skips the work when the image already exists)
set -euo pipefail

image=${1:-localhost/debian:bookworm}
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
if $SUDO podman image exists "$image"; then
  echo "local-base-image: $image exists"; exit 0
fi
command -v debootstrap >/dev/null || {
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap
}
# The mirror apt already uses (deb822 or one-line sources), so this works wherever `apt-get install` does.
mirror=$(grep -hoE '^URIs: *\S+' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' \
  | grep -v security | head -n1 || true)
[ -n "$mirror" ] || mirror=$(grep -hoE '^deb +\S+' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' \
  | grep -v security | head -n1 || true)
mirror=${mirror:-http://deb.debian.org/debian}
rootfs=$(mktemp -d /var/tmp/tunebase-rootfs.XXXXXX)
trap '$SUDO rm -rf "$rootfs"' EXIT
echo "local-base-image: debootstrap bookworm from $mirror"
$SUDO debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >/dev/null
$SUDO rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb
# The image trusts what this machine trusts (a host behind a TLS-inspecting proxy has its CA in this bundle);
# pip and Python's ssl read it through the environment, whatever ca-certificates later does in the image.
bundle=/etc/ssl/certs/ca-certificates.crt
trust=()
if [ -s "$bundle" ]; then
  $SUDO install -D -m 0644 "$bundle" "$rootfs/etc/ssl/host-ca-bundle.crt"
  for var in SSL_CERT_FILE PIP_CERT REQUESTS_CA_BUNDLE; do
    trust+=(--change "ENV $var=/etc/ssl/host-ca-bundle.crt")
  done
fi
$SUDO tar -C "$rootfs" -c . \
  | $SUDO podman import --quiet "${trust[@]}" --change 'CMD ["/bin/bash"]' - "$image" >/dev/null
echo "local-base-image: made $image"
