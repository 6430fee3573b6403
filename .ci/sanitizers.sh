#!/usr/bin/env bash
# Sanitizer legs (CMakePresets.json):
#   asan : ASan + UBSan (-fno-sanitize-recover=undefined), the FULL test suite; any
#          report (memory error, leak, undefined behaviour) fails its test.
#   tsan : ThreadSanitizer, the tests that start threads (the tsan test preset's list),
#          suppressions in tests/tsan.supp (Qt library frames only). The preset sets
#          OMP_NUM_THREADS=1: GCC's libgomp is not TSan-instrumented, so its barriers
#          look like races between OpenMP workers; with one OpenMP thread the kernels
#          run on the calling thread and every race between OUR threads (expert and
#          trunk readers, the engine worker, downloads) is still seen.
#          die_after_fork=0: tst_hub starts nginx with QProcess (fork + exec) while
#          threads run; TSan would otherwise stop the process at the fork.
# Usage: .ci/sanitizers.sh [asan] [tsan]   (default: both). One summary line per leg.
set -uo pipefail
cd "$(dirname "$0")/.."
legs=${*:-asan tsan}
failed=0
summary=()

leg() { # name, then the build targets (empty: all)
  local name=$1; shift
  local t0 log rc=0
  t0=$(date +%s)
  log=/tmp/k3chat-$name.log
  echo "=== sanitizers: $name"
  {
    cmake --preset "$name" > /tmp/k3chat-$name-configure.log 2>&1 ||
      { tail -30 /tmp/k3chat-$name-configure.log; exit 1; }
    if [ $# -gt 0 ]; then
      cmake --build --preset "$name" --target "$@"
    else
      cmake --build --preset "$name"
    fi > /tmp/k3chat-$name-build.log 2>&1 ||
      { grep -E -A5 'error|FAILED' /tmp/k3chat-$name-build.log | head -40; exit 1; }
    echo "$name: built in $(( $(date +%s) - t0 )) s"
    ctest --preset "$name"
  } 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  # A report in a test that still exited 0 (e.g. printed from a child process) fails too.
  if grep -qE '^(==[0-9]+==ERROR: (Address|Leak)Sanitizer|WARNING: ThreadSanitizer|SUMMARY: (Address|Undefined|Thread|Leak)Sanitizer)|runtime error:' "$log"; then
    echo "$name: a sanitizer report is in $log"
    rc=1
  fi
  local tests
  tests=$(grep -E 'tests passed|tests failed' "$log" | tail -1)
  [ "$rc" -eq 0 ] || failed=1
  summary+=("$name: $([ "$rc" -eq 0 ] && echo PASS || echo FAIL) in $(( $(date +%s) - t0 )) s; ${tests:-no ctest summary}")
}

for l in $legs; do
  case $l in
  asan) leg asan ;;
  # The tests whose code starts threads: the engine worker's QThread, the expert-cache
  # and trunk readers, downloads, the doctor's probe. Not the wizard and panel tests:
  # they only use Qt's own thread pool (QtConcurrent), whose locks (futexes inside an
  # uninstrumented libQt6Core) TSan cannot see, so it reports Qt's hand-overs as races.
  tsan) leg tsan tst_engineworker tst_expert_cache tst_session tst_memory_model \
            tst_model_gates tst_hub tst_doctor tst_pack tst_fault_injection ;;
  *) echo "sanitizers: unknown leg $l (asan, tsan)"; exit 2 ;;
  esac
done
echo "=== sanitizers summary"
printf '%s\n' "${summary[@]}"
exit "$failed"
