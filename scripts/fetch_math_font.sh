#!/usr/bin/env bash
# Fetch the math font the Objectives tab's formula is drawn in (workbench/ui/mathml.py) from npm: STIX Two Math,
# the Latin subset that fontsource publishes (it keeps the font's MATH table and its Greek and operators), under the
# SIL Open Font License 1.1. Writes workbench/ui/assets/stix-two-math.woff2 and OFL.txt; needs npm.
#   bash scripts/fetch_math_font.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack -q @fontsource/stix-two-math@5.3.0 >/dev/null && tar xzf fontsource-stix-two-math-5.3.0.tgz)
cp "$tmp/package/files/stix-two-math-latin-400-normal.woff2" "$root/workbench/ui/assets/stix-two-math.woff2"
cp "$tmp/package/LICENSE" "$root/workbench/ui/assets/OFL.txt"
sha256sum "$root/workbench/ui/assets/stix-two-math.woff2"
