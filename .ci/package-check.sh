#!/usr/bin/env bash
# Validates the desktop metadata, builds the .deb from BUILD_DIR, installs it with apt,
# runs the installed k3 and k3chat, and removes it again. Usage: package-check.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
build=$1
desktop-file-validate packaging/io.github.k3chat.k3chat.desktop
appstreamcli validate --no-net packaging/io.github.k3chat.k3chat.metainfo.xml
# The Flatpak manifest parses, names our app id, and never asks for home or host files.
flatpak-builder --show-manifest packaging/flatpak/io.github.k3chat.k3chat.yml |
  python3 -c '
import json, sys
m = json.load(sys.stdin)
assert m["id"] == "io.github.k3chat.k3chat", m["id"]
assert m["runtime"] == "org.kde.Platform", m["runtime"]
wide = [a for a in m["finish-args"] if a.startswith("--filesystem")]
assert not wide, "flatpak manifest asks for files: %s" % wide
print("flatpak manifest: %s on %s//%s, %d modules, no --filesystem" %
      (m["id"], m["runtime"], m["runtime-version"], len(m["modules"])))'
(cd "$build" && cpack -G DEB > cpack.log 2>&1) || { tail -20 "$build/cpack.log"; exit 1; }
deb=$(ls "$build"/k3chat_*.deb | head -1)
echo "package: $deb ($(du -h "$deb" | cut -f1)); depends: $(dpkg-deb -f "$deb" Depends)"
apt-get install -y --no-install-recommends "$(realpath "$deb")" > /tmp/k3chat-deb-install.log 2>&1 ||
  { tail -20 /tmp/k3chat-deb-install.log; exit 1; }
trap 'apt-get remove -y k3chat > /dev/null 2>&1 || true' EXIT
/usr/bin/k3 --version
home=$(mktemp -d)
QT_QPA_PLATFORM=offscreen XDG_CONFIG_HOME="$home" /usr/bin/k3chat --quit-after 300
rm -rf "$home"
test -f /usr/share/applications/io.github.k3chat.k3chat.desktop
test -f /usr/share/metainfo/io.github.k3chat.k3chat.metainfo.xml
test -f /usr/share/icons/hicolor/256x256/apps/io.github.k3chat.k3chat.png
test -f /usr/share/icons/hicolor/scalable/apps/io.github.k3chat.k3chat.svg
apt-get remove -y k3chat > /dev/null
trap - EXIT
! test -e /usr/bin/k3
echo "package check: installed, ran k3 and k3chat, removed"
