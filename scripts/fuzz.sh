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
    # go test -fuzz can end a clean run with a bare "context deadline exceeded"
    # when its time runs out while a worker is still busy with a new input (a
    # known toolchain flake on a loaded machine). Only that case is tried once
    # more; a failing input (testdata/fuzz/...) always fails the run.
    out=$(mktemp)
    if ! go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "./$dir" 2>&1 | tee "$out"; then
      if grep -q 'context deadline exceeded' "$out" && ! grep -q 'Failing input written' "$out"; then
        echo "fuzz: $dir $target: the fuzzer's own deadline, not a failing input; once more"
        go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "./$dir" || { rm -f "$out"; exit 1; }
      else
        rm -f "$out"; exit 1
      fi
    fi
    rm -f "$out"
  done
done < <(git ls-files -z '*_test.go')
[ "$found" = 1 ] || { echo "fuzz: no Fuzz targets found" >&2; exit 1; }
