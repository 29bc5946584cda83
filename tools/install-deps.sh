#!/usr/bin/env bash
# tools/install-deps.sh — installs the Debian packages of tools/packages.txt
# that are missing (apt-get, as root or through sudo). Installs nothing and
# touches nothing when all are present, so every set-up command may call it.
#
# Usage: tools/install-deps.sh [--ci] [--list] [--device]
#   --ci      also the packages tagged "ci" (.ci/run)
#   --list    print the missing packages and exit (0 even when some are)
#   --device  print the names tagged "device" (for tools/device/fetch-deps.sh)
# Without root or sudo it names the missing packages and exits 1.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
list="$here/packages.txt"
want_ci=0 only_list=0 device=0
for a in "$@"; do
  case "$a" in
  --ci) want_ci=1 ;;
  --list) only_list=1 ;;
  --device) device=1 ;;
  -h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "install-deps: unknown option '$a' (try --help)" >&2; exit 2 ;;
  esac
done
if [ ! -r "$list" ]; then
  echo "install-deps: $list: cannot read the package list" >&2
  exit 1
fi

missing=()
while read -r name tags; do
  case "$name" in '' | '#'*) continue ;; esac
  tags=" ${tags%%#*} "
  if [ $device = 1 ]; then
    case "$tags" in *" device "*) echo "$name" ;; esac
    continue
  fi
  case "$tags" in *" ci "*) [ $want_ci = 1 ] || continue ;; esac
  cmd=$(printf '%s\n' $tags | sed -n 's/^cmd=//p')
  if [ -n "$cmd" ] && command -v "$cmd" >/dev/null 2>&1; then
    continue
  fi
  if [ "$(dpkg-query -W -f='${Status}' "$name" 2>/dev/null)" = "install ok installed" ]; then
    continue
  fi
  missing+=("$name")
done <"$list"
[ $device = 1 ] && exit 0

if [ ${#missing[@]} -eq 0 ]; then
  [ $only_list = 1 ] || echo "install-deps: all packages of tools/packages.txt are installed"
  exit 0
fi
if [ $only_list = 1 ]; then
  printf '%s\n' "${missing[@]}"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: no apt-get here; install these (Debian names): ${missing[*]}" >&2
  exit 1
fi
if [ "$(id -u)" = 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1; then
  sudo=(sudo)
else
  echo "install-deps: not root and no sudo; as root run: apt-get install ${missing[*]}" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
