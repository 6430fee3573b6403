#!/usr/bin/env bash
# Makes (or reuses) a Debian 13 (trixie) chroot with every k3chat dependency,
# including KF6 SyntaxHighlighting and Qt 6.8, then builds and tests the project
# inside it. Usage: .ci/trixie-chroot.sh SOURCE_DIR
# Only the tree is copied in: the tests read nothing outside the repository, and the
# chroot has nothing beside /work/k3chat to read by mistake.
set -euo pipefail
src=$(cd "$1" && pwd)
root=${K3_TRIXIE_ROOT:-/var/cache/k3chat-ci/trixie}
mirror=${K3_TRIXIE_MIRROR:-http://deb.debian.org/debian}
stamp="$root/.k3chat-deps"
want=$(sha256sum "$src/packaging/debian-packages.txt" | cut -c1-16)

if [ ! -x "$root/usr/bin/apt-get" ]; then
  echo "trixie: creating chroot at $root (debootstrap, a few minutes)"
  rm -rf "$root"
  mkdir -p "$(dirname "$root")"
  debootstrap --variant=minbase trixie "$root" "$mirror" > "$root.debootstrap.log" 2>&1 ||
    { tail -30 "$root.debootstrap.log"; exit 1; }
else
  echo "trixie: reusing chroot at $root"
fi

mounts=()
cleanup() {
  for ((i=${#mounts[@]}-1; i>=0; i--)); do umount -l "${mounts[$i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
bind() { mkdir -p "$2"; mount --bind "$1" "$2"; mounts+=("$2"); }
mount -t proc proc "$root/proc"; mounts+=("$root/proc")
bind /dev "$root/dev"
# A copy of the tree (not a bind mount): the host's build/ never mixes with this one,
# and the chroot's build/ persists between runs for incremental builds.
mkdir -p "$root/work/k3chat" "$root/work/ccache"
find "$root/work/k3chat" -mindepth 1 -maxdepth 1 ! -name build -exec rm -rf {} +
# -m: the copies get the current time, so ninja never trusts an object built from an
# older tree whose sources happened to have older times (ccache keeps rebuilds cheap).
tar -C "$src" --exclude=./build --exclude=./.git -cf - . | tar -C "$root/work/k3chat" -m -xf -
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true

# Daemons (nginx) must not start inside the chroot while packages install.
printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"
chmod +x "$root/usr/sbin/policy-rc.d"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "trixie: installing dependencies from packaging/debian-packages.txt"
  chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    bash /work/k3chat/packaging/install-deps.sh > "$root.deps.log" 2>&1 ||
    { tail -30 "$root.deps.log"; exit 1; }
  echo "$want" > "$stamp"
fi

# tst_k3serve installs the openai npm client over the host's network: trust what the
# host trusts (an egress proxy's CA may be in the host's bundle only). Node keeps its own
# CAs and adds these; npm reads the same file.
hostca=()
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  mkdir -p "$root/etc/ssl"
  cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/k3chat-host-ca.crt"
  hostca=(NODE_EXTRA_CA_CERTS=/etc/ssl/k3chat-host-ca.crt
          npm_config_cafile=/etc/ssl/k3chat-host-ca.crt)
fi

# The build directory lives inside the chroot so it never mixes with the host's.
chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
  CCACHE_DIR=/work/ccache CI="${CI:-}" "${hostca[@]}" \
  bash -c 'cd /work/k3chat && bash .ci/build-and-test.sh'
