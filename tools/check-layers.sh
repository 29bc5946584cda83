#!/usr/bin/env bash
# check-layers.sh — core's files call down, never up.
#
# core/src/core_internal.h lists core's layers, bottom first, each with its
# files (the block that starts "Layers, bottom first"; lines "layer N name:"
# followed by file names, continued on the next lines). This script reads,
# from the object files of aa_core, which file defines each global symbol and
# which files use it (nm), and fails when a file uses a symbol that a file of
# a higher layer defines, or when a compiled file is in no layer. Calls
# inside one layer are allowed.
#
#   bash tools/check-layers.sh <core_internal.h> <objects list file> [nm]
#
# The objects list (one path a line; CMake writes it at generate time for
# the ctest test_core_layers) names object files as CMake does,
# .../src/<file>.c.o, so that <file>.c is the path under core/src.
set -euo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: check-layers.sh <core_internal.h> <objects list file> [nm]" >&2
  exit 2
fi
header=$1
list=$2
NM=${3:-nm}

if [[ ! -r $header ]]; then
  echo "check-layers: cannot read $header" >&2
  exit 2
fi
if [[ ! -r $list ]]; then
  echo "check-layers: cannot read the objects list $list" >&2
  exit 2
fi

# file -> "rank name", from the header's layer block.
declare -A rank lname
while read -r r n f; do
  if [[ -n ${rank[$f]:-} ]]; then
    echo "check-layers: $f is listed twice in $header" >&2
    exit 2
  fi
  rank[$f]=$r
  lname[$f]=$n
done < <(awk '
  /Layers, bottom first/ { on = 1; next }
  on && /^ \*\/?[[:space:]]*$/ { exit }
  on {
    for (i = 2; i <= NF; i++) {
      if ($i == "layer" && i + 2 <= NF && $(i + 2) ~ /:$/) {
        r = $(i + 1); n = $(i + 2); sub(/:$/, "", n); i += 2; continue
      }
      if ($i ~ /\.c$/ && r != "") print r, n, $i
    }
  }' "$header")
if [[ ${#rank[@]} -eq 0 ]]; then
  echo "check-layers: no layer list (\"Layers, bottom first\") in $header" >&2
  exit 2
fi

# One line per symbol use or definition: "D file sym" / "U file sym".
syms=$(mktemp)
trap 'rm -f "$syms"' EXIT
bad=0
nobj=0
while read -r obj; do
  [[ -z $obj ]] && continue
  f=${obj##*/src/}
  f=${f%.o}
  if [[ ! -r $obj ]]; then
    echo "check-layers: cannot read $obj" >&2
    exit 2
  fi
  if [[ -z ${rank[$f]:-} ]]; then
    echo "check-layers: core/src/$f is in no layer of $header" >&2
    bad=1
  fi
  nobj=$((nobj + 1))
  "$NM" -P "$obj" | awk -v f="$f" '
    $2 == "U" { print "U", f, $1; next }
    $2 ~ /^[TDBRCVWGS]$/ { print "D", f, $1 }' >>"$syms"
done <"$list"
if [[ $nobj -eq 0 ]]; then
  echo "check-layers: no object files in $list" >&2
  exit 2
fi

declare -A def
while read -r k f s; do
  [[ $k == D ]] && def[$s]=$f
done <"$syms"

nup=0
while read -r k f s; do
  [[ $k == U ]] || continue
  d=${def[$s]:-}
  [[ -z $d || $d == "$f" ]] && continue
  [[ -z ${rank[$f]:-} || -z ${rank[$d]:-} ]] && continue
  if ((rank[$f] < rank[$d])); then
    echo "check-layers: $f (layer ${rank[$f]} ${lname[$f]}) uses $s, defined in $d (layer ${rank[$d]} ${lname[$d]})"
    nup=$((nup + 1))
  fi
done < <(sort -u "$syms")

if [[ $nup -gt 0 ]]; then
  echo "check-layers: $nup upward uses: move the caller up or the callee down (docs/core.md, \"Layers\")"
  bad=1
fi
if [[ $bad -ne 0 ]]; then
  exit 1
fi
echo "check-layers: $nobj files, ${#def[@]} symbols, no upward use"
