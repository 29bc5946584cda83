#!/usr/bin/env bash
# tools/check-style.sh — checks the tracked C and C++ sources against
# .clang-format; exits 1 on any drift and prints where.
#
#   bash tools/check-style.sh            check (exit 0 clean, 1 drift, 2 no tool)
#   bash tools/check-style.sh --count    print how many lines a reformat changes
#   bash tools/check-style.sh --fix      reformat the files in place
#   bash tools/check-style.sh FILE...    only these files
#
# CLANG_FORMAT picks the binary (default: clang-format).
set -euo pipefail
cd "$(dirname "$0")/.."

CF=${CLANG_FORMAT:-clang-format}
mode=check
if [[ ${1:-} == --count || ${1:-} == --fix ]]; then
  mode=${1#--}
  shift
fi
if ! command -v "$CF" >/dev/null 2>&1; then
  echo "check-style: $CF not found (apt-get install clang-format)" >&2
  exit 2
fi

if [[ $# -gt 0 ]]; then
  files=("$@")
else
  mapfile -t files < <(git ls-files '*.c' '*.h' '*.cpp' '*.cc' '*.hpp' '*.cu')
fi
if [[ ${#files[@]} -eq 0 ]]; then
  echo "check-style: no files" >&2
  exit 2
fi

if [[ $mode == fix ]]; then
  "$CF" -i --style=file "${files[@]}"
  exit 0
fi

changed=0
bad=0
for f in "${files[@]}"; do
  n=$("$CF" --style=file "$f" | diff -U0 "$f" - | grep -cE '^[-+][^-+]' || true)
  if [[ $n -gt 0 ]]; then
    bad=$((bad + 1))
    changed=$((changed + n))
    [[ $mode == check ]] && echo "check-style: $f: $n lines differ from .clang-format"
  fi
done
if [[ $mode == count ]]; then
  echo "$changed lines in $bad of ${#files[@]} files"
  exit 0
fi
if [[ $bad -gt 0 ]]; then
  echo "check-style: $bad of ${#files[@]} files drift ($changed lines); see the diff with" >&2
  echo "  clang-format --style=file FILE | diff FILE -   (or bash tools/check-style.sh --fix)" >&2
  exit 1
fi
echo "check-style: ${#files[@]} files clean"
