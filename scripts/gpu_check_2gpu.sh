#!/usr/bin/env bash
# Sharded arrays on a machine with two CUDA GPUs (nvidia-h200-x2 through the device tool): build
# interop-core, then run every part below, whatever the earlier parts did, and report each one's
# exit status.  Logs and results go under $OUT (default: ./gpu2_out):
#
#   environment.txt   GPUs, driver, framework versions
#   build.txt         pip install -e . (the Cython build)
#   jax_two_gpus.txt  one process: jax sharded over cuda:0 and cuda:1 -> per-device views ->
#                     torch tensors on cuda:0 / cuda:1 (values and pointers), and back to jax;
#                     per-device consumer streams (tests/test_shards_gpu.py)
#   dtensor_nccl.txt  torch DTensor over 2 ranks (NCCL, two processes started by the test) ->
#                     each rank's shard (tests/test_shards_distributed.py, cuda)
#   jax_distributed.txt  2-process jax.distributed on this host, one GPU each: each process
#                     sees only its addressable shards (tests/test_shards_distributed.py, cuda)
#   multi_gpu.txt     every other test marked multi_gpu (cross-device streams, peer copies, ...)
#   bench_shards.txt  python -m interop_core bench --section shards (2 GPUs in-process, 2 and
#                     8 jax CPU devices in child interpreters); gpu2_shards.{md,json}
#   bench_check.txt   fails unless the bench measured the two-GPU groups, through the
#                     compiled sharded path validated on the GPUs; prints the shards budget rows
#   status.txt        one line per part: its name and exit status
#
# To publish the bench: copy $OUT/gpu2_shards.json to benchmarks/results/gpu2.json and run
# python benchmarks/publish.py (the two-GPU page, its charts and docs/performance.md).
#
#   OUT=/some/dir bash scripts/gpu_check_2gpu.sh [all|tests|bench]
#
# Expects the frameworks installed already (torch, jax with CUDA, numpy); installs only this
# package, without touching dependencies.  Exits non-zero if any part failed.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu2_out}
mkdir -p "$OUT"
step=${1:-all}
export PYTHONUNBUFFERED=1
# jax and torch share the GPUs in one process, and each worker process starts its own jax:
# no process may take most of a GPU's memory up front.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
# This machine's GPUs are shared: NVLink multicast stays off in NCCL, PyTorch and NVSHMEM.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
: > "$OUT/status.txt"
failed=0

# run NAME TIMEOUT_S COMMAND...: run a part with a time limit, log it, record its status.
run() {
  local name=$1 limit=$2
  shift 2
  echo "== $name"
  timeout --kill-after=15 "$limit" "$@" > "$OUT/$name.txt" 2>&1
  local code=$?
  tail -15 "$OUT/$name.txt"
  echo "$name $code" >> "$OUT/status.txt"
  [ "$code" -eq 0 ] || failed=1
}

{
  echo "== machine"; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv || true
  nvidia-smi topo -m || true
  python3 - <<'PY'
import importlib
for name in ("torch", "jax", "jaxlib", "numpy", "cupy"):
    try:
        print(f"{name} {importlib.import_module(name).__version__}")
    except Exception as exc:
        print(f"{name}: {type(exc).__name__}: {exc}")
try:
    import torch
    print("torch sees", torch.cuda.device_count(), "GPUs; NCCL",
          torch.distributed.is_nccl_available())
    import jax
    print("jax sees", jax.devices())
except Exception as exc:
    print(f"devices: {type(exc).__name__}: {exc}")
PY
} > "$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt"

# `python3 -m pip`, not `pip`: on the GPU image the two can belong to different interpreters.
run build 300 python3 -m pip install --no-build-isolation --no-deps -q -e .

if [ "$step" != bench ]; then
  run jax_two_gpus 240 python3 -m pytest tests/test_shards_gpu.py -v -rs -p no:cacheprovider
  run dtensor_nccl 240 python3 -m pytest tests/test_shards_distributed.py -v -rs \
    -p no:cacheprovider -m multi_gpu -k dtensor
  run jax_distributed 240 python3 -m pytest tests/test_shards_distributed.py -v -rs \
    -p no:cacheprovider -m multi_gpu -k jax
  run multi_gpu 300 python3 -m pytest -m multi_gpu -v -rs -p no:cacheprovider \
    --ignore tests/test_shards_gpu.py --ignore tests/test_shards_distributed.py
fi

if [ "$step" != tests ]; then
  run bench_shards 420 python3 -m interop_core bench --device all --section shards \
    --no-progress --markdown "$OUT/gpu2_shards.md" --json "$OUT/gpu2_shards.json"
  # The bench skips the GPU groups quietly where jax sees fewer than two GPUs: say so here.
  run bench_check 60 python3 - "$OUT/gpu2_shards.json" <<'PY'
import json
import sys

from interop_core.bench._harness import Measurement
from interop_core.bench._report import budget_rows, budget_text, within_budget

results = [Measurement(**r) for r in json.load(open(sys.argv[1]))["results"]]
found = {(r.group, r.name): r for r in results}
problems = []
for group, name in (("shards(jax over 2 cuda devices)", "interop_core shards(), per shard"),
                    ("assemble(jax over 2 cuda devices)",
                     "interop_core to(Shards.from_pieces(pieces), 'jax', sharding=)")):
    r = found.get((group, name))
    if r is None or r.ns is None:
        problems.append(f"{group}: {name} not measured ({r.note if r else 'no such result'})")
    elif group.startswith("shards") and not r.note.startswith("read_shards: validated"):
        problems.append(f"{group}: measured through {r.note!r}, not the validated compiled path")
for row in budget_rows(results):
    if row["line"].startswith(("shards(", "to(shards")) and row["group"] is not None:
        print(f"{row['line']} | {row['group']} | ours {row['ours_ns']:.0f} ns | "
              f"{budget_text(row)} | {'within' if within_budget(row) else 'OVER'}")
print("\n".join(problems) or "two-GPU groups measured through the validated compiled path")
sys.exit(1 if problems else 0)
PY
fi

echo "== status (part, exit status)"
cat "$OUT/status.txt"
exit $failed
