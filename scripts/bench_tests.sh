#!/usr/bin/env bash
# Time the README's test command on a fresh clone of this repository's HEAD, install included (issue 24's
# target: 5 minutes on a 2-core machine). Prints the time and pytest's summary; writes them to OUT.json if given.
#   bash scripts/bench_tests.sh [OUT.json]      (TESTS_LOG=FILE keeps make test's output there)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git clone -q "$root" "$tmp/clone"
commit=$(git -C "$tmp/clone" rev-parse --short HEAD)  # the commit tested, even if the repository moves on meanwhile
speed_before=$(python3 "$root/scripts/speed_probe.py")  # the machine's speed around the run (its docstring says why)
start=$(date +%s)
(cd "$tmp/clone" && make test) > "$tmp/log" 2>&1
rc=$?
seconds=$(( $(date +%s) - start ))
speed_after=$(python3 "$root/scripts/speed_probe.py")
[ -n "${TESTS_LOG:-}" ] && cp "$tmp/log" "$TESTS_LOG"
summary=$(grep -E "(passed|failed).* in [0-9.]+s" "$tmp/log" | tail -1 | tr -d '=' | sed 's/^ *//; s/ *$//')
echo "make test on a fresh clone: ${seconds} s, exit ${rc}: ${summary} (speed probe ${speed_before} s before, ${speed_after} s after)"
[ "$rc" = 0 ] || tail -30 "$tmp/log"
if [ -n "${1:-}" ]; then
  printf '{"make_test_s": %s, "exit": %s, "summary": "%s", "cores": %s, "commit": "%s", "speed_probe_s": [%s, %s]}\n' \
    "$seconds" "$rc" "$summary" "$(nproc)" "$commit" "$speed_before" "$speed_after" > "$1"
fi
exit "$rc"
