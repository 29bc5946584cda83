#!/usr/bin/env bash
# check-layers.sh — a module's files call down its floors, never up.
#
# Every module's internal header lists its layers (floors), bottom first,
# each with its files (core/src/core_internal.h, http/src/http_internal.h,
# store/src/store_internal.h, runtime/src/runtime_internal.h,
# adapt/layers.h): the block that starts "Layers, bottom first"; lines
# "layer N name:" followed by file names, continued on the next lines. This
# script reads, from the module's object files, which file defines each
# global symbol and which files use it (nm), and fails when a file uses a
# symbol that a file of a higher layer defines, or when a compiled file is in
# no layer. Calls inside one layer are allowed.
#
#   bash tools/check-layers.sh <internal header> <objects list file> [nm]
#
# The objects list (one path a line; CMake writes it at generate time for
# the ctests test_core_layers and test_layers_<module>) names object files as
# CMake does, .../<target>.dir/[src/]<file>.c.o, so that <file>.c is the
# path under the module's src/ (adapt: under adapt/, e.g. loop/loop.c).
#
# It also checks the walls: the header's block that starts "Walls" lists,
# per subsystem, "wall <name>: <private header> <field>... | <files>", and a
# file under core/src that is not one of the subsystem's files fails when it
# includes the private header (by any path) or names one of the fields as a
# member (`->f` or `.f`, macros included; comments and strings removed), so
# that a subsystem's state is reached only through its short header. A
# header without a Walls block (every module but core) is checked for its
# layers alone.
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
  f=${obj#*.dir/}
  f=${f#src/}
  f=${f%.o}
  if [[ ! -r $obj ]]; then
    echo "check-layers: cannot read $obj" >&2
    exit 2
  fi
  if [[ -z ${rank[$f]:-} ]]; then
    echo "check-layers: $f is in no layer of $header" >&2
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

# The walls: "wall name: private.h field... | file.c ...", continued on
# the next lines.
src=$(dirname "$header")
# Comments go through GCC's own lexer (-fpreprocessed: no includes
# expanded); clang has no such mode, so GCC is preferred whatever CC is.
strip_cmd=()
for cand in gcc "${CC:-}" cc; do
  [[ -z $cand ]] && continue
  read -r -a try <<<"$cand"
  if command -v "${try[0]}" >/dev/null &&
    echo 'int x; /* c */' | "${try[@]}" -fpreprocessed -dD -E -P -x c - >/dev/null 2>&1; then
    strip_cmd=("${try[@]}")
    break
  fi
done
has_walls=1
if ! grep -q "Walls (" "$header"; then
  has_walls=0
  strip_cmd=(none) # no walls to check: no compiler needed
fi
if [[ ${#strip_cmd[@]} -eq 0 ]]; then
  echo "check-layers: no GCC-compatible compiler with -fpreprocessed (gcc, \$CC, cc) to strip comments for the walls" >&2
  exit 2
fi
# Every file under the header's directory once (when it has walls):
# comments out (the compiler's own lexer: no includes expanded), then string
# literals and #include lines (they name files, not fields; other
# directives, macros among them, stay), into $bodies/<n>; the walls below
# read those.
bodies=$(mktemp -d)
trap 'rm -f "$syms"; rm -rf "$bodies"' EXIT
declare -A body_of
nb=0
while [[ $has_walls -eq 1 ]] && IFS= read -r path; do
  nb=$((nb + 1))
  if ! "${strip_cmd[@]}" -fpreprocessed -dD -E -P -x c "$path" 2>/dev/null |
    sed -E 's/"([^"\\]|\\.)*"/""/g; /^[[:space:]]*#[[:space:]]*include/d' >"$bodies/$nb"; then
    echo "check-layers: ${strip_cmd[*]} could not read $path" >&2
    exit 2
  fi
  body_of[$path]=$bodies/$nb
done < <(find "$src" -name '*.c' -o -name '*.h' | sort)
nwall=0
nbreach=0
while IFS='|' read -r name priv files; do
  nwall=$((nwall + 1))
  read -r -a privs <<<"$priv"
  hdr=${privs[0]}
  declare -A own=()
  for f in $files; do own[$f]=1; done
  own[$hdr]=1
  fields=$(IFS='|'; echo "${privs[*]:1}")
  while IFS= read -r path; do
    f=${path#"$src"/}
    [[ -n ${own[$f]:-} ]] && continue
    if grep -qE "^[[:space:]]*#[[:space:]]*include[[:space:]]*[\"<]([^\">]*/)?${hdr//./\\.}[\">]" "$path"; then
      echo "check-layers: $f includes $hdr, the $name subsystem's private header"
      nbreach=$((nbreach + 1))
    fi
    [[ -z $fields ]] && continue
    while IFS= read -r fld; do
      echo "check-layers: $f reaches ${fld}, a field of the $name subsystem (use its header)"
      nbreach=$((nbreach + 1))
    done < <(grep -oE "(->|\.)[[:space:]]*(${fields})([^A-Za-z0-9_]|$)" "${body_of[$path]}" |
      sed -E 's/^(->|\.)[[:space:]]*//; s/[^A-Za-z0-9_]$//' | sort -u)
  done < <(find "$src" -name '*.c' -o -name '*.h' | sort)
  unset own
done < <(awk '
  /Walls \(/ { on = 1; next }
  on && /^ \*\/?[[:space:]]*$/ { exit }
  on {
    line = $0; sub(/^ \*[[:space:]]*/, "", line)
    if (line ~ /^wall [A-Za-z0-9_]+:/) {
      if (cur != "") print cur
      sub(/^wall /, "", line); sub(/:/, "|", line); cur = line
    } else if (cur != "") cur = cur " " line
  }
  END { if (cur != "") print cur }' "$header")
if [[ $nwall -eq 0 ]] && grep -q "Walls (" "$header"; then
  echo "check-layers: an empty Walls block in $header" >&2
  exit 2
fi
if [[ $nbreach -gt 0 ]]; then
  echo "check-layers: $nbreach breaches of a subsystem's wall: go through its header (docs/core.md, \"Walls\")"
  bad=1
fi

if [[ $nup -gt 0 ]]; then
  echo "check-layers: $nup upward uses: move the caller up or the callee down (the layer list in $header)"
  bad=1
fi
if [[ $bad -ne 0 ]]; then
  exit 1
fi
echo "check-layers: $nobj files, ${#def[@]} symbols, no upward use; $nwall walls, no breach"
