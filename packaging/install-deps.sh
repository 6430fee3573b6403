#!/usr/bin/env bash
# Installs every build and test dependency of k3chat on Debian 12/13 or Ubuntu.
# The list lives in packaging/debian-packages.txt (one place, with the reason for each);
# KF6 SyntaxHighlighting is added where the distribution has it (Debian 13+).
# Extra arguments are installed too. Does nothing when everything is already there.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
mapfile -t pkgs < <(sed -e 's/#.*//' -e 's/[[:space:]]*$//' "$here/debian-packages.txt" | grep -v '^$')
pkgs+=("$@")

installed() {
  dpkg-query -W -f='${Status}\n' "$1" 2>/dev/null | grep -q '^install ok installed$' && return 0
  # NodeSource's nodejs bundles npm (it Provides and Conflicts with Debian's npm).
  [ "$1" = npm ] && command -v npm >/dev/null 2>&1 && return 0
  return 1
}
missing=()
for p in "${pkgs[@]}"; do installed "$p" || missing+=("$p"); done
kf6=libkf6syntaxhighlighting-dev
if ! installed "$kf6" && apt-cache show "$kf6" >/dev/null 2>&1; then missing+=("$kf6"); fi
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages already installed"
  exit 0
fi

export DEBIAN_FRONTEND=noninteractive
if [ "${K3_SKIP_APT_UPDATE:-0}" != 1 ]; then
  $SUDO apt-get update
fi
# After an update the KF6 package may have become visible.
if ! installed "$kf6" && ! printf '%s\n' "${missing[@]}" | grep -qx "$kf6"; then
  if apt-cache show "$kf6" >/dev/null 2>&1; then
    missing+=("$kf6")
  else
    echo "install-deps: $kf6 is not in this distribution; code blocks will not be highlighted"
  fi
fi
echo "install-deps: installing ${missing[*]}"
# What apt will do, before it starts: how many packages with their dependencies, how
# much it downloads (what apt's cache already holds is not downloaded) and the disk used.
apt-get install --print-uris --no-install-recommends "${missing[@]}" 2>/dev/null |
  grep -E '^[0-9]+ upgraded|^Need to get|^After this operation' | sed 's/^/install-deps: /' || true
$SUDO apt-get install -y --no-install-recommends "${missing[@]}"
