"""What an export (issue 37, export.yml's node program) costs: time and peak memory of writing the Hugging Face
directory layer by layer, and of the parity check, for two model sizes, and the projection for Llama3-8B.

    . .venv/bin/activate; make megatron-src MEGATRON_TARBALL=...; testbed/build-images.sh
    python benchmarks/export_hf.py [--rounds 3]

One container of the testbed's stand-in image (no network) saves each model with Megatron-LM's own
pretrain_gpt.py (one iteration, bf16, mock data, tp=2 pp=2 on four CPU ranks: a sharded torch_dist save), then runs
``trainops/node/export_hf.py`` on it ``--rounds`` times, each into a new directory. The figures are the program's
own (export.json): the seconds and the peak resident memory (ru_maxrss) when the weights are written, and with the
parity check. The write's memory beyond the interpreter's is compared with the largest shard (one layer, with the
embeddings on the first): bounded by a layer, it grows with the layer, not with the model.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from testbed import images  # noqa: E402

PATCH = "/home/megatron-lm-musa-patch/examples/llama3/pretrain_gpt.py"
EXPORT = "/bench/trainops/node/export_hf.py"
#: The interpreter's resident memory with torch and safetensors imported, nothing else.
BASELINE = (
    "import resource, json, torch, safetensors.torch; "
    "print(json.dumps(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))"
)
COMMON = (
    "--seq-length 128 --max-position-embeddings 128 --position-embedding-type rope --no-position-embedding "
    "--swiglu --normalization RMSNorm --untie-embeddings-and-output-weights --disable-bias-linear "
    "--group-query-attention --tokenizer-type NullTokenizer --mock-data --micro-batch-size 1 --global-batch-size 2 "
    "--train-iters 1 --lr 1e-4 --transformer-impl local --use-distributed-optimizer --ckpt-format torch_dist "
    "--distributed-backend gloo --no-gradient-accumulation-fusion --no-masked-softmax-fusion --no-bias-gelu-fusion "
    "--no-bias-dropout-fusion --no-rope-fusion --no-persist-layer-norm --eval-iters 0 --save-interval 1 --bf16 "
    "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2"
)
#: name -> (layers, hidden, ffn, heads, query groups, vocabulary)
MODELS = {
    "tiny": (4, 128, 352, 8, 4, 300),
    "mid": (8, 1024, 2816, 16, 4, 32000),
}
#: Llama3-8B: its safetensors (bf16) and its largest shard as export_hf.py cuts it (the embeddings and layer 0).
LLAMA3_8B_BYTES = 16_060_522_496
LLAMA3_8B_FIRST_SHARD = (128256 * 4096 + 4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336 + 2 * 4096) * 2


def sh(container: str, command: str, timeout: int = 1800) -> str:
    done = subprocess.run(["docker", "exec", container, "bash", "-c", command], capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip
    if done.returncode not in (0, 3):
        raise SystemExit(f"{command[:200]}... failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    built = images()
    name = f"mtt-bench-export-{uuid.uuid4().hex[:8]}"
    subprocess.run(["docker", "run", "-d", "--rm", "--name", name, "--network", "none", "--shm-size", "2g",
                    "-e", "PYTHONDONTWRITEBYTECODE=1", built["standin_image"], "sleep", "infinity"], check=True,
                   capture_output=True)  # fmt: skip
    try:
        sh(name, "mkdir -p /bench")
        subprocess.run(["docker", "cp", str(ROOT / "plugins" / "module_utils" / "trainops"), f"{name}:/bench/"],
                       check=True)  # fmt: skip
        helpers = (ROOT / "plugins/module_utils/trainops/node/dataset_helpers.py").read_text()
        subprocess.run(["docker", "exec", name, "python3", "-c", helpers, "--megatron-home=/home/Megatron-LM",
                        "--mode=build"], check=True, capture_output=True)  # fmt: skip
        rows = []
        for model, (layers, hidden, ffn, heads, groups, vocab) in MODELS.items():
            shape = (f"--num-layers {layers} --hidden-size {hidden} --ffn-hidden-size {ffn} --num-attention-heads "
                     f"{heads} --num-query-groups {groups} --vocab-size {vocab}")  # fmt: skip
            sh(name, f"OMP_NUM_THREADS=1 torchrun --nproc-per-node 4 --master-port 29511 {PATCH} {COMMON} {shape} "
                     f"--save /bench/ckpt-{model} > /bench/train-{model}.log 2>&1")  # fmt: skip
            results = []
            for round_ in range(options.rounds):
                save, out_dir = f"/bench/ckpt-{model}/iter_0000001", f"/bench/hf-{model}-{round_}"
                out = sh(name, f"cd / && PYTHONPATH=/home/Megatron-LM python3 -W ignore {EXPORT} --save {save} "
                               f"--out {out_dir} 2>/dev/null")  # fmt: skip
                results.append(json.loads(out.strip().splitlines()[-1]))
            index = json.loads(sh(name, f"cat /bench/hf-{model}-0/model.safetensors.index.json"))
            shards = sh(name, f"stat -c %s /bench/hf-{model}-0/model-*.safetensors").split()
            baseline = json.loads(sh(name, f"python3 -c '{BASELINE}'"))
            row = {
                "model": model,
                "bytes": index["metadata"]["total_size"],
                "largest_shard": max(int(s) for s in shards),
                "verified": all(r["verified"] for r in results),
                "write_s": statistics.median(r["write_seconds"] for r in results),
                "write_peak_mib": statistics.median(r["write_peak_rss_mib"] for r in results),
                "total_s": statistics.median(r["seconds"] for r in results),
                "total_peak_mib": statistics.median(r["peak_rss_mib"] for r in results),
                "torch_baseline_mib": baseline,
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
        mid = rows[-1]
        rate = mid["bytes"] / mid["write_s"]
        per_shard = (mid["write_peak_mib"] - mid["torch_baseline_mib"]) * 2**20 / mid["largest_shard"]
        print(json.dumps({
            "llama3_8b_write_s_at_this_rate": round(LLAMA3_8B_BYTES / rate),
            "write_memory_over_baseline_per_largest_shard_byte": round(per_shard, 2),
            "llama3_8b_write_peak_mib_projected": round(mid["torch_baseline_mib"]
                                                        + per_shard * LLAMA3_8B_FIRST_SHARD / 2**20),
            "llama3_8b_parity_needs_mib_at_least": round(2 * LLAMA3_8B_BYTES * 2 / 2**20),
        }))  # fmt: skip
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


if __name__ == "__main__":
    main()
