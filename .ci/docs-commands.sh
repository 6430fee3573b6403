#!/usr/bin/env bash
# The README's other commands, after the test command has built build/dev:
#  - the app command (the main job), with the window offscreen and a timed quit;
#  - the portable release preset (configured and its k3 built and run);
#  - the screenshots script (real windows under Xvfb);
#  - the oracle label on its own.
# The asan workflow runs in .ci/sanitizers.sh. docs/user-guide.md maps each command to
# the test or CI step that runs it.
set -euo pipefail
cd "$(dirname "$0")/.."

app=$(grep -m1 -E '^packaging/install-deps.sh && cmake --workflow --preset app' README.md)
[ -n "$app" ] || { echo "README.md has no app command"; exit 1; }
echo "+ $app   (offscreen, --quit-after 4000)"
home=$(mktemp -d)
QT_QPA_PLATFORM=offscreen XDG_CONFIG_HOME="$home/config" XDG_DATA_HOME="$home/data" \
  bash -c "$app --quit-after 4000" 2>&1 | tee /tmp/k3chat-first-start.log
rm -rf "$home"
# The first start (a fresh HOME) says when the demo model is ready to chat.
grep -m1 'ready to chat' /tmp/k3chat-first-start.log ||
  { echo "k3chat did not get the demo model ready within its 4 s run"; exit 1; }

echo "+ the app workflow on a clean checkout builds only the app and the command line"
# A clone of this checkout, built with the README's app workflow: ninja's log lists every
# output it built, and none may belong to a test (issue 38: the first command was half tests).
clone=build/appcheck
rm -rf "$clone"
git clone -q . "$clone"
t0=$(date +%s)
(cd "$clone" && cmake --workflow --preset app > ../appcheck.log 2>&1) ||
  { tail -30 build/appcheck.log; exit 1; }
built=$(grep -v '^#' "$clone/build/dev/.ninja_log" | cut -f4 | sort -u)
steps=$(printf '%s\n' "$built" | grep -c . || true)
tests=$(printf '%s\n' "$built" | grep -E '(^|/)(tst_|fuzz_|bench_)|^tests/' || true)
[ -x "$clone/build/dev/app/k3chat" ] && [ -x "$clone/build/dev/app/k3" ] ||
  { echo "the app workflow did not build k3chat and k3"; exit 1; }
if [ -n "$tests" ]; then
  echo "the app workflow built test outputs:"; printf '%s\n' "$tests" | head -20; exit 1
fi
echo "app workflow: $steps outputs, no test target, $(( $(date +%s) - t0 )) s (ccache shared)"
rm -rf "$clone"

echo "+ cmake --preset release && cmake --build build/release --target k3"
cmake --preset release > /tmp/k3chat-release-configure.log
cmake --build build/release -j2 --target k3 > /tmp/k3chat-release-build.log ||
  { tail -30 /tmp/k3chat-release-build.log; exit 1; }
build/release/app/k3 --version

echo "+ docs/make-screenshots.sh (real windows under Xvfb)"
bash docs/make-screenshots.sh build/dev
python3 - <<'PY'
import struct
for name in ("docs/screenshot-wizard.png", "docs/screenshot-main.png"):
    with open(name, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", name + " is not a PNG"
    w, h = struct.unpack(">II", head[16:24])
    assert w >= 800 and h >= 500, "%s is only %dx%d" % (name, w, h)
    print("%s: %dx%d" % (name, w, h))
PY

echo "+ ctest --test-dir build/dev -L oracle"
ctest --test-dir build/dev -L oracle --output-on-failure --timeout 600 | tail -3
