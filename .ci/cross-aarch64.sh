#!/usr/bin/env bash
# The aarch64 leg: the engine cross-compiled with Debian's aarch64 toolchain
# (cmake/cross, cmake/toolchains/aarch64-linux-gnu.cmake) and its Qt-free tests run under
# qemu-user (tests/cross). By default the fast part: tst_platform and tst_kernels_paths
# (NEON against scalar, bit for bit, at every shape edge), built from the platform and
# kernel sources alone. K3_CI_FULL=1 also builds the whole engine and runs
# tst_model_exactness (the tiny checkpoints' reference ids on NEON and scalar, the same
# bits at several budgets and chunk sizes), linked against the target's simdjson and
# xxHash from Debian's arm64 packages, downloaded into the build folder (never installed:
# the host's dpkg is not told about arm64).
set -uo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
build=${K3_AARCH64_BUILD:-build/aarch64}
full=${K3_CI_FULL:-0}
for tool in aarch64-linux-gnu-g++ qemu-aarch64 ninja; do
  command -v "$tool" >/dev/null || { echo "aarch64: $tool is missing (packaging/install-deps.sh)"; exit 1; }
done

# target_libs DIR: the arm64 shared libraries the whole engine links, unpacked under DIR;
# prints them as a CMake list.
target_libs() {
  local dir=$1 apt_dir=$1/apt
  local -a pkgs=(libsimdjson14 libxxhash0)
  local -a opts=(-o APT::Architecture=arm64 -o APT::Architectures::=arm64
    -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o Dir::State::status=/dev/null)
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$dir/root"
  if ! ls "$dir"/*.deb >/dev/null 2>&1; then
    apt-get -q "${opts[@]}" update >&2 || return 1
    (cd "$dir" && apt-get -q "${opts[@]}" download "${pkgs[@]}" >&2) || return 1
  fi
  for deb in "$dir"/*.deb; do dpkg-deb -x "$deb" "$dir/root" || return 1; done
  local libs
  libs=$(ls "$dir"/root/usr/lib/aarch64-linux-gnu/libsimdjson.so.* \
    "$dir"/root/usr/lib/aarch64-linux-gnu/libxxhash.so.0 | tr '\n' ';')
  echo "${libs%;}"
}

cmake_args=(-S cmake/cross -B "$build" -G Ninja
  -DCMAKE_TOOLCHAIN_FILE="$src/cmake/toolchains/aarch64-linux-gnu.cmake")
targets=(tst_platform tst_kernels_paths)
tests='^(tst_platform|tst_kernels_paths)$'
if [ "$full" = 1 ]; then
  libs=$(target_libs "$(realpath -m "$build")/target-libs") || { echo "aarch64: the arm64 libraries could not be fetched"; exit 1; }
  cmake_args+=(-DK3_CROSS_ENGINE_TESTS=ON "-DK3_CROSS_TARGET_LIBS=$libs")
  targets+=(tst_model_exactness)
  tests='^(tst_platform|tst_kernels_paths|tst_model_exactness)$'
else
  cmake_args+=(-DK3_CROSS_ENGINE_TESTS=OFF)
fi
t0=$(date +%s)
cmake "${cmake_args[@]}" >/dev/null || { echo "aarch64: configure failed"; exit 1; }
nice -n 10 cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" || { echo "aarch64: build failed"; exit 1; }
echo "aarch64: built ${targets[*]} in $(( $(date +%s) - t0 )) s"
# qemu-user runs the programs (CMAKE_CROSSCOMPILING_EMULATOR); ctest's summary line is the verdict.
ctest --test-dir "$build" -R "$tests" --output-on-failure
