#!/bin/bash
# tools/device/ddp-run.sh — the two-GPU NCCL run of examples/ddp_train.py
# (issue #25 item 4), on the device machine, the package already installed:
# GPT-2 small under DDP over NCCL, one rank per GPU, with adaptalloc in both
# ranks and again with PyTorch's allocator (--baseline); prints each rank's
# /stats line, each rank's peak reserved and the loss comparison
# (--compare: NCCL's reductions are not bit for bit, hence its tolerance).
# With fewer than 2 GPUs visible it says so and exits 0 (nothing run).
#
# Usage: tools/device/ddp-run.sh PYTHON OUTDIR
#   AA_DDP_STEPS (30), AA_DDP_BATCH (8), AA_DDP_SEQ (512), AA_DDP_BASE (9300)
set -uo pipefail
py=${1:?usage: ddp-run.sh PYTHON OUTDIR}
out=${2:?usage: ddp-run.sh PYTHON OUTDIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
n=$("$py" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
if [ "${n:-0}" -lt 2 ]; then
  echo "ddp: SKIPPED: needs 2 GPUs, torch sees ${n:-0} (the one-GPU check is tests/gpu/test_ddp_ranks.py)"
  exit 0
fi
mkdir -p "$out" || exit 1
base=${AA_DDP_BASE:-9300}
args=(--steps "${AA_DDP_STEPS:-30}" --batch "${AA_DDP_BATCH:-8}" --seq "${AA_DDP_SEQ:-512}")
run() { # tag extra...
  local tag=$1
  shift
  env OMP_NUM_THREADS=1 ADAPTALLOC_HTTP="127.0.0.1:$base+rank" \
    ADAPTALLOC_DB="$out/aa-rank{rank}.db" ADAPTALLOC_MODEL=gpt2-small \
    "$py" -m torch.distributed.run --nproc_per_node=2 --standalone \
    "$root/examples/ddp_train.py" "${args[@]}" --json "$out/$tag-rank{rank}.json" "$@" \
    > "$out/$tag.log" 2>&1
  local rc=$?
  echo "ddp: $tag run rc=$rc ($out/$tag.log)"
  [ $rc -eq 0 ] || tail -30 "$out/$tag.log"
  return $rc
}
echo "ddp: $n GPUs; GPT-2 small, NCCL, ${args[*]}"
run adaptalloc || exit 1
run pytorch --baseline || exit 1
grep '/stats on port' "$out/adaptalloc.log"
"$py" - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
for tag in ("adaptalloc", "pytorch"):
    for r in range(2):
        d = json.load(open(os.path.join(out, "%s-rank%d.json" % (tag, r))))
        st = d.get("stats") or {}
        extra = ""
        if tag == "adaptalloc":
            pools = ["%s(device %s)" % (p["name"], p["device"]) for p in st.get("pools", [])]
            extra = ", /stats rank %s local_rank %s world_size %s pools %s%s" % (
                st.get("rank"), st.get("local_rank"), st.get("world_size"), " ".join(pools),
                "" if d.get("stats_error") is None else " ERROR " + d["stats_error"])
        print("ddp: %-10s rank %d on cuda:%d peak reserved %.1f MiB%s" % (
            tag, r, d["device"], d["peak_reserved_bytes"] / 2**20, extra))
PY
"$py" "$root/examples/ddp_train.py" --compare "$out/adaptalloc.log" "$out/pytorch.log"
