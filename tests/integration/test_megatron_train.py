"""train.yml runs Megatron-LM's own pretrain_gpt.py (core_v0.14.0, behind the testbed's CPU patch) on the 2-node
testbed with the argument vector the planner renders: TP inside a node, PP across the two, Megatron's own
iteration lines driving the progress and the report, its torch_dist checkpoints resumed by a second run.

Needs a stand-in image with a Megatron-LM tree (`make megatron-src`; .ci/run gives it the vendored tarball).
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from testbed import ROOT, clean_experiment, in_container, latest_run, no_rank_left, playbook

pytestmark = pytest.mark.testbed

#: Megatron on the testbed: the tiny preset on Megatron's mock data (a NullTokenizer needs no tokenizer file).
MEGATRON = (
    "-e", "smoke=false", "-e", "model=tiny", "-e", "data_path=mock", "-e", "seq_length=128", "-e", "gbs=8",
    "-e", "mbs=2", "-e", "progress_interval=2", "-e", json.dumps({"training": {"save_interval": 5, "eval_iters": 0}}),
)  # fmt: skip


def _has_megatron() -> bool:
    printed = subprocess.run([str(ROOT / "testbed" / "build-images.sh"), "--print"], capture_output=True, text=True)
    return bool(json.loads(printed.stdout).get("standin_megatron_tree"))


@pytest.fixture(scope="module")
def megatron(provisioned):
    if not _has_megatron():
        pytest.skip("the stand-in image has no Megatron-LM tree (make megatron-src MEGATRON_TARBALL=...)")
    assert "pretrain_gpt.py" in in_container("node1", "ls /home/Megatron-LM").stdout


@pytest.mark.parametrize(("tp", "pp", "dp"), [(2, 2, 1), (1, 2, 2)])
def test_train_runs_megatron_and_a_second_run_resumes_its_checkpoint(megatron, tp, pp, dp):
    exp = f"megatron-tp{tp}pp{pp}"
    clean_experiment(exp)
    first = playbook("train.yml", "-e", f"tp={tp}", "-e", f"pp={pp}", "-e", "train_iters=10", "-e", f"exp={exp}",
                     *MEGATRON)  # fmt: skip
    assert first.returncode == 0, first.stdout[-6000:]
    assert "job          Megatron-LM pretrain_gpt.py" in first.stdout
    assert f"layout       tp={tp} pp={pp} cp=1 vpp=- dp={dp}" in first.stdout
    assert re.search(r"iteration 10/10 \(100%\) \| lm loss [\d.]+ \| [\d,]+ ms/it", first.stdout), first.stdout[-3000:]
    run_dir = latest_run(exp)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["job"] == "megatron" and summary["state"] == "finished", summary.get("failure")
    assert summary["last_iteration"] == 10 and summary["failure"] is None
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["iteration"] for m in metrics] == list(range(1, 11))
    assert all(m["lm loss"] > 0 for m in metrics)
    # Megatron's own memory report of every rank's first iteration ("[Rank N] (after 1 iterations) memory (MB)")
    memory = [json.loads(line) for line in (run_dir / "memory.jsonl").read_text().splitlines()]
    assert memory, "no memory line of Megatron's was parsed"
    launch = in_container("node1", f"cat /data/mtt-train-ops/checkpoints/{exp}/latest_checkpointed_iteration.txt")
    assert launch.stdout.strip() == "10"
    no_rank_left()

    # the same experiment to 15 iterations: Megatron loads its own torch_dist checkpoint of iteration 10
    second = playbook("train.yml", "-e", f"tp={tp}", "-e", f"pp={pp}", "-e", "train_iters=15", "-e", f"exp={exp}",
                      "-e", json.dumps({"training": {"save_interval": 5, "eval_iters": 0, "lr_warmup_iters": 1}}),
                      *MEGATRON[:-2])  # fmt: skip
    assert second.returncode == 0, second.stdout[-6000:]
    assert "resume       from iteration 10" in second.stdout
    resumed = latest_run(exp)
    logs = "\n".join(p.read_text(errors="replace") for p in resumed.rglob("*.log"))
    assert "successfully loaded checkpoint from" in logs and "at iteration 10" in logs
    metrics = [json.loads(line) for line in (resumed / "metrics.jsonl").read_text().splitlines()]
    assert [m["iteration"] for m in metrics] == list(range(11, 16))
    no_rank_left()
