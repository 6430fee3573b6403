#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, clang, ASan+UBSan) and runs each for a
# bounded time from its committed seed corpus. New inputs go to a scratch folder, never
# into tests/fuzz/corpus. Any crash, leak, timeout, out-of-memory or sanitizer report
# fails the script, naming the target and the saved crashing input.
#   K3_FUZZ_SECONDS  seconds per target (default 30)
#   K3_FUZZ_BUILD    build folder (default build/fuzz)
#   K3_FUZZ_TARGETS  space-separated subset (default: every target)
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=${K3_FUZZ_SECONDS:-30}
build=${K3_FUZZ_BUILD:-build/fuzz}
start=$(date +%s)

command -v clang++ > /dev/null || { echo "fuzz: clang++ is missing (packaging/debian-packages.txt)"; exit 1; }
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DK3_FUZZ=ON -DK3_BUILD_GUI=OFF -DK3_BUILD_TESTS=OFF > "$build.configure.log" 2>&1 ||
  { tail -30 "$build.configure.log"; echo "fuzz: configure failed"; exit 1; }
cmake --build "$build" -j2 --target k3_fuzz_all > "$build.build.log" 2>&1 ||
  { grep -E "error|Error" "$build.build.log" | head -30; echo "fuzz: build failed"; exit 1; }
echo "fuzz: built in $(( $(date +%s) - start )) s"

targets=${K3_FUZZ_TARGETS:-$(cd tests/fuzz && ls fuzz_*.cpp | sed 's/\.cpp$//')}
scratch=$(mktemp -d /tmp/k3fuzz.XXXXXX)
# Every report aborts; leaks are reported at exit of each input batch by libFuzzer.
export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1:allocator_may_return_null=0:symbolize=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
failed=0
summary=()
for t in $targets; do
  mkdir -p "$scratch/$t/corpus" "$scratch/$t/artifacts"
  log="$scratch/$t.log"
  "$build/tests/fuzz/$t" "$scratch/$t/corpus" "tests/fuzz/corpus/$t" \
    -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$scratch/$t/artifacts/" > "$log" 2>&1
  rc=$?
  runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+')
  seeds=$(ls "tests/fuzz/corpus/$t" | wc -l)
  if [ "$rc" -ne 0 ] || grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:' "$log"; then
    failed=1
    artifact=$(ls -t "$scratch/$t/artifacts/"* 2>/dev/null | head -1)
    summary+=("FAIL  $t (exit $rc): crashing input ${artifact:-none saved}; log $log")
    grep -E 'ERROR:|runtime error:|SUMMARY:|invariant broken|terminate called' "$log" | head -5 | sed 's/^/      /'
  else
    summary+=("ok    $t: ${runs:-?} runs in ${seconds}s, coverage ${cov:-?}, ${seeds} seeds")
  fi
done

echo "=== fuzz summary ($(( $(date +%s) - start )) s, ${seconds}s per target)"
printf '%s\n' "${summary[@]}"
if [ "$failed" -ne 0 ]; then
  echo "fuzz: FAILED (scratch kept in $scratch)"
  exit 1
fi
rm -rf "$scratch"
echo "fuzz: every target ran clean"
