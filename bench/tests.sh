#!/usr/bin/env bash
# Time the README's test command on a fresh clone of this repository's HEAD, install included (issue 24's
# target: 5 minutes on a 2-core machine). Prints the time and pytest's summary; writes them to OUT.json if given.
#   bash bench/tests.sh [OUT.json]      (TESTS_LOG=FILE keeps make test's output there; a failed run keeps
#   its log and failure screenshots in test-artifacts/bench-tests-COMMIT/)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git clone -q "$root" "$tmp/clone"
commit=$(git -C "$tmp/clone" rev-parse --short HEAD)  # the commit tested, even if the repository moves on meanwhile
# The processor: this machine class comes as an AMD EPYC or an Intel Xeon at 2 GHz, and a figure means little without
# it (2026-12-02: 265-370 s on the EPYC, 524-563 s on the Xeon, the same code)
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -1)
start=$(date +%s)
# make test's own lines as they come, and the second at which its set-up ended (scripts/setup.sh's last line)
(cd "$tmp/clone" && make test) 2>&1 | while IFS= read -r line || [ -n "$line" ]; do  # a last line without a newline too
  printf '%s\n' "$line"
  [ "$line" = "setup: .venv ready" ] && date +%s > "$tmp/setup-done"
done > "$tmp/log"
rc=${PIPESTATUS[0]}
seconds=$(( $(date +%s) - start ))
setup_s=null; [ -f "$tmp/setup-done" ] && setup_s=$(( $(cat "$tmp/setup-done") - start ))
[ -n "${TESTS_LOG:-}" ] && cp "$tmp/log" "$TESTS_LOG"
summary=$(grep -E "(passed|failed).* in [0-9.]+s" "$tmp/log" | tail -1 | tr -d '=' | sed 's/^ *//; s/ *$//')
echo "make test on a fresh clone: ${seconds} s (set-up ${setup_s} s), exit ${rc}: ${summary}" \
  "(${cpu:-processor unknown})"
if [ "$rc" != 0 ]; then  # a failed run keeps its whole log and the failures' screenshots (the clone is removed)
  tail -30 "$tmp/log"
  kept="$root/test-artifacts/bench-tests-$commit"
  mkdir -p "$kept" && cp "$tmp/log" "$kept/make-test.log"
  [ -d "$tmp/clone/test-artifacts/failures" ] && cp -r "$tmp/clone/test-artifacts/failures" "$kept/"
  echo "the run's log and failure screenshots: $kept"
fi
if [ -n "${1:-}" ]; then
  printf '{"make_test_s": %s, "setup_s": %s, "exit": %s, "summary": "%s", "cores": %s, "commit": "%s", "cpu": "%s"}\n' \
    "$seconds" "$setup_s" "$rc" "$summary" "$(nproc)" "$commit" "$cpu" > "$1"
fi
exit "$rc"
