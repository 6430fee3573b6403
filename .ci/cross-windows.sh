#!/usr/bin/env bash
# The Windows leg: the engine cross-compiled with Debian's MinGW-w64 (cmake/cross,
# cmake/toolchains/mingw-w64.cmake) and its plain C++ tests run under wine. By default the
# fast part: tst_platform and tst_kernels_paths (scalar and AVX2 against each other, bit
# for bit), built from the platform and kernel sources alone. K3_CI_FULL=1 also builds the
# whole engine and k3.exe and runs tst_model_exactness (the tiny checkpoints' reference
# ids) and k3.exe on the demo checkpoint, whose ids must equal the Linux k3's.
#
# Debian has no MinGW builds of the engine's libraries. simdjson, PCRE2 and cpp-httplib
# are built here from Debian's source packages (apt-get source, into the build folder,
# cached there); xxHash is used header-only (XXH_INLINE_ALL). libcurl and OpenSSL (the hub
# and the remote client) and libpng, libjpeg and libwebp (image input) are left out:
# cmake/cross/unavailable/ stands in for them, so `k3 download`, `k3 chat --remote` and
# images fail with "not in this build" (cmake/cross/CMakeLists.txt, K3_CROSS_NETWORK and
# K3_CROSS_IMAGES).
set -uo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
build=${K3_MINGW_BUILD:-build/mingw}
full=${K3_CI_FULL:-0}
toolchain=$src/cmake/toolchains/mingw-w64.cmake
for tool in x86_64-w64-mingw32-g++-posix wine ninja cmake; do
  command -v "$tool" >/dev/null || { echo "windows: $tool is missing (packaging/install-deps.sh)"; exit 1; }
done
# wine's own set-up and its "fixme" chatter stay out of the log; a private prefix in the
# build folder, never the user's ~/.wine.
export WINEPREFIX=${WINEPREFIX:-$(realpath -m "$build")/wineprefix} WINEDEBUG=${WINEDEBUG:--all}
export WINEDLLOVERRIDES="mscoree,mshtml="

# target_deps DIR: simdjson, PCRE2 (static, CMake layout) and cpp-httplib's header-only
# httplib.h cross-built from Debian's source packages into DIR/prefix; kept there.
target_deps() {
  local dir=$1 apt_dir=$1/apt prefix=$1/prefix
  local stamp=$prefix/.k3-deps-simdjson-pcre2-httplib
  [ -e "$stamp" ] && return 0
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$dir/src"
  echo "deb-src http://deb.debian.org/debian bookworm main" >"$apt_dir/sources.list"
  local -a opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/nonexistent
    -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache")
  if ! ls "$dir"/src/simdjson_*.orig.tar.* "$dir"/src/pcre2_*.orig.tar.* \
      "$dir"/src/cpp-httplib_*.orig.tar.* >/dev/null 2>&1; then
    apt-get -q "${opts[@]}" update >&2 || return 1
    (cd "$dir/src" && apt-get -q "${opts[@]}" source --download-only simdjson pcre2 cpp-httplib >&2) ||
      return 1
  fi
  # The .orig tarballs are the upstream sources; Debian's packaging patches none of the
  # library code (simdjson has no patches, pcre2's touch only pcre2-config.in).
  local name tarball tree
  for name in simdjson pcre2 cpp-httplib; do
    tarball=$(ls "$dir"/src/${name}_*.orig.tar.* | head -1)
    tree=$dir/src/$name
    rm -rf "$tree" && mkdir -p "$tree" && tar -xf "$tarball" -C "$tree" --strip-components=1 || return 1
  done
  local -a cmake_common=(-G Ninja -DCMAKE_TOOLCHAIN_FILE="$toolchain" -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_INSTALL_PREFIX="$prefix" -DBUILD_SHARED_LIBS=OFF)
  cmake -S "$dir/src/simdjson" -B "$dir/build/simdjson" "${cmake_common[@]}" \
    -DSIMDJSON_DEVELOPER_MODE=OFF -DSIMDJSON_ENABLE_THREADS=ON >/dev/null &&
    cmake --build "$dir/build/simdjson" -j"$(nproc)" --target install >/dev/null || return 1
  cmake -S "$dir/src/pcre2" -B "$dir/build/pcre2" "${cmake_common[@]}" \
    -DPCRE2_BUILD_PCRE2_8=ON -DPCRE2_BUILD_PCRE2_16=OFF -DPCRE2_BUILD_PCRE2_32=OFF \
    -DPCRE2_SUPPORT_JIT=ON -DPCRE2_SUPPORT_UNICODE=ON -DPCRE2_BUILD_PCRE2GREP=OFF \
    -DPCRE2_BUILD_TESTS=OFF >/dev/null &&
    cmake --build "$dir/build/pcre2" -j"$(nproc)" --target install >/dev/null || return 1
  mkdir -p "$prefix/include" && cp "$dir/src/cpp-httplib/httplib.h" "$prefix/include/" || return 1
  touch "$stamp"
}

cmake_args=(-S cmake/cross -B "$build" -G Ninja -DCMAKE_TOOLCHAIN_FILE="$toolchain")
targets=(tst_platform tst_kernels_paths)
tests='^(tst_platform|tst_kernels_paths)$'
if [ "$full" = 1 ]; then
  t0=$(date +%s)
  deps=$(realpath -m "$build")/deps
  target_deps "$deps" || { echo "windows: building simdjson/PCRE2 from Debian's sources failed"; exit 1; }
  echo "windows: simdjson, PCRE2, httplib.h ready in $(( $(date +%s) - t0 )) s ($deps/prefix)"
  cmake_args+=(-DK3_CROSS_ENGINE_TESTS=ON "-DK3_CROSS_DEPS_PREFIX=$deps/prefix")
  targets+=(tst_model_exactness k3)
  tests='^(tst_platform|tst_kernels_paths|tst_model_exactness)$'
else
  cmake_args+=(-DK3_CROSS_ENGINE_TESTS=OFF -DK3_CROSS_DEPS_PREFIX=)
fi
t0=$(date +%s)
cmake "${cmake_args[@]}" >/dev/null || { echo "windows: configure failed"; exit 1; }
nice -n 10 cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" || { echo "windows: build failed"; exit 1; }
echo "windows: built ${targets[*]} in $(( $(date +%s) - t0 )) s"
# wine runs the programs (CMAKE_CROSSCOMPILING_EMULATOR); ctest's summary line is the verdict.
ctest --test-dir "$build" -R "$tests" --output-on-failure
rc=$?
[ "$full" = 1 ] || exit "$rc"

# k3.exe: --help, then the demo model's greedy ids for the reference prompt: 48 steps,
# whose first ones must be expected.json's greedy answer (up to its [EOS]) and all of
# which must equal the Linux k3's (build/dev/app/k3, when the host leg built it).
k3exe=$build/app/k3.exe
wine "$k3exe" --help >"$build/k3-help.txt" 2>&1 && grep -q "MODEL_DIR" "$build/k3-help.txt" ||
  { echo "windows: k3.exe --help failed"; cat "$build/k3-help.txt"; exit 1; }
echo "windows: k3.exe --help ok ($(wc -l <"$build/k3-help.txt") lines)"
expected_json=resources/demo/expected.json
prompt=$(python3 -c 'import json, sys; print(",".join(map(str, json.load(open(sys.argv[1]))["prompt_ids"])))' "$expected_json")
# demo_ids K3...: the ids of the run's JSON report (--out -: the report alone on stdout).
demo_ids() {
  "$@" resources/demo --ids "$prompt" --gen 48 --out - 2>/dev/null |
    python3 -c 'import json, sys; print(",".join(map(str, json.load(sys.stdin)["ids"])))'
}
windows_ids=$(demo_ids wine "$k3exe")
echo "windows: k3.exe demo ids: $windows_ids"
demo_rc=0
python3 - "$expected_json" "$windows_ids" <<'PY' || demo_rc=1
import json, sys
want = json.load(open(sys.argv[1]))["greedy"]["full_sequence"]
got = [int(t) for t in sys.argv[2].split(",") if t]
if got[:len(want)] != want:
    sys.exit(f"windows: FAIL: expected.json's greedy answer is {want}")
print(f"windows: the first {len(want)} ids are expected.json's greedy answer")
PY
if [ -x build/dev/app/k3 ]; then
  linux_ids=$(demo_ids build/dev/app/k3)
  if [ "$windows_ids" = "$linux_ids" ]; then
    echo "windows: all 48 ids equal the Linux k3's"
  else
    echo "windows: FAIL: the Linux k3 says $linux_ids"
    demo_rc=1
  fi
fi
[ "$rc" = 0 ] && [ "$demo_rc" = 0 ]
