#!/usr/bin/env bash
# Runs every Fuzz* target in the module for a short time (default 15s each).
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-15s}
found=0
while IFS= read -r -d '' file; do
  dir=$(dirname "$file")
  for target in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)\(' "$file" | sed -E 's/^func (Fuzz[A-Za-z0-9_]+)\(/\1/'); do
    found=1
    echo "fuzz: $dir $target for $fuzztime"
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "./$dir"
  done
done < <(git ls-files -z '*_test.go')
[ "$found" = 1 ] || { echo "fuzz: no Fuzz targets found" >&2; exit 1; }
