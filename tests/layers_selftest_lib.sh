# layers_selftest_lib.sh — sourced by the layer check's self-tests
# (layers_floors_selftest.sh, layers_walls_selftest.sh): one case of
# tools/check-layers.sh, its exit status against the one expected.
# Needs $here (the repository), $NM and $fail (set to 1 on a mismatch).

# expect_layers WANT LABEL HEADER LIST: check-layers.sh on HEADER's layer
# list and the objects LIST names must exit WANT.
expect_layers() {
  local want=$1 label=$2 out rc=0
  out=$(bash "$here/tools/check-layers.sh" "$3" "$4" "$NM" 2>&1) || rc=$?
  if [[ $rc -ne $want ]]; then
    echo "FAIL $label: rc $rc, want $want"
    echo "$out"
    fail=1
  else
    echo "ok   $label: $(tail -1 <<<"$out")"
  fi
}
