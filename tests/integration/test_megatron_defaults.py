"""The defaults a user gets, run as rendered: Megatron-LM's own pretrain_gpt.py (core_v0.14.0, through the vendor's
entry point path in the stand-in) trains on the testbed's real indexed dataset with its Hugging Face tokenizer and
the training options exactly as the bundle renders them by default; only the counts are scaled down (iterations,
evaluation and save intervals): two evaluations and two saves to `finished`; a longer run (another learning-rate
schedule) is refused before any node is contacted; with the saved schedule chosen, it resumes from the verified save
(its saved arguments, the tokenizer's vocabulary included, match the plan) to its end, where Megatron saves again.

What the other testbed tests override, and why (keep this list short):
- `data_path=mock` (test_megatron_train.py): Megatron's mock data needs no tokenizer, and its runs compare losses
  across layouts and resumes; this module trains on the real dataset instead.
- `eval_iters: 0` or 2 (test_megatron_train.py): fewer forward passes on a CPU; this module keeps the default 10.
- `precision=fp32` (the tp1 pp2 dp2 run): a resume must reproduce an uninterrupted run's losses exactly.
- `gbs`, `mbs`, `num_microbatches=none`: the layouts under test need a global batch that every dp divides.
- `hang_timeout`, `progress_interval`, `train_iters`, `save_interval`, `eval_interval`: counts and times, scaled to
  a CPU.
The testbed inventory itself sets what a CPU cannot run otherwise: the tiny model at seq 128, bf16 without FP8,
`transformer_impl=local`, no flash attention (docs/megatron-on-cpu.md).
"""

from __future__ import annotations

import json
import re

import pytest

from testbed import clean_experiment, has_megatron, in_container, latest_run, nodes_contacted, playbook

pytestmark = pytest.mark.testbed

EXP = "defaults-real-data"
#: the counts, scaled down: 8 iterations, then a resume to 10; a validation and a save every 4
INTERVALS = ("-e", json.dumps({"training": {"save_interval": 4, "eval_interval": 4}}))


def _evaluated(run_id: str) -> list[int]:
    """The iterations the last rank's log of this run reports a validation loss at."""
    log = in_container("node2", f"cat /data/mtt-train-ops/runs/{EXP}/{run_id}/logs/node2/*/attempt_0/1/stdout.log")
    return [int(i) for i in re.findall(r"validation loss at iteration (\d+) \| lm loss value", log.stdout)]


def test_the_default_launch_trains_megatron_on_real_data_through_evaluations_saves_and_a_resume(provisioned):
    if not has_megatron():
        pytest.skip("the stand-in image has no Megatron-LM tree (make megatron-src MEGATRON_TARBALL=...)")
    clean_experiment(EXP)
    # a dataset copy cut short on one node (a copy that did not finish) is refused before the launch, by node and
    # file, against the size its manifest says was written (-e health=off: the check under test comes after it)
    data = "/data/datasets/testbed_text_document.bin"
    in_container("node2", f"cp -p {data} /tmp/whole.bin && truncate -s -4096 {data}")
    try:
        cut = playbook("train.yml", "-e", "smoke=false", "-e", f"exp={EXP}", "-e", "health=off", *INTERVALS)
    finally:
        in_container("node2", f"mv -f /tmp/whole.bin {data}")
    assert cut.returncode != 0
    text = " ".join(cut.stdout.split())
    cut_short = rf"node2: {data} is [\d,]+ bytes, but its manifest .* says data.yml wrote [\d,]+"
    assert re.search(cut_short, text), text[-3000:]
    assert "nothing was started" in text and "Start every node's launch" not in text
    done = playbook("train.yml", "-e", "smoke=false", "-e", f"exp={EXP}", "-e", "train_iters=8", *INTERVALS)
    assert done.returncode == 0, done.stdout[-6000:]
    assert "evaluation   10 iterations every 4 on the validation part of split '98,2,0'" in done.stdout
    assert re.search(r"recompute\s+auto: none", done.stdout), done.stdout[-6000:]
    run_dir = latest_run(EXP)
    plan = json.loads((run_dir / "plan" / "plan.json").read_text())
    args = plan["megatron_args"]
    # the real dataset and its Hugging Face tokenizer, with evaluation on (not the tests' mock data, eval_iters 0)
    assert "--mock-data" not in args and args[args.index("--data-path") + 1] == "/data/datasets/testbed_text_document"
    assert args[args.index("--tokenizer-type") + 1] == "HuggingFaceTokenizer"
    assert args[args.index("--eval-iters") + 1] == "10" and args[args.index("--split") + 1] == "98,2,0"
    assert "--recompute-granularity" not in args
    launch = (run_dir / "plan" / "launch-node2.sh").read_text()
    assert "/home/megatron-lm-musa-patch/examples/llama3/pretrain_gpt.py" in launch
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["job"] == "megatron" and summary["state"] == "finished", summary.get("failure_text")
    assert summary["last_iteration"] == 8 and summary["nan_iterations"] == 0
    assert [s["iteration"] for s in summary["checkpoints"]["saved"]] == [4, 8]
    assert _evaluated(run_dir.name)[:2] == [4, 8]
    assert summary["last_validation"]["iteration"] == 8 and summary["last_validation"]["losses"]["lm loss"] > 0
    # the vocabulary Megatron builds is the tokenizer's (the dataset's manifest says 257), so the plan's save size is
    # Megatron's and every save is verified (with the preset's 4096 the sizes were 2 x apart and every save "bad")
    assert plan["vocab_size"] == 257 and plan["padded_vocab_size"] == 384 and plan["dataset"]["tokens"] > 0
    assert "vocabulary 257 (the tokenizer's (dataset manifest)), padded to 384" in done.stdout
    ledger = json.loads((run_dir / "checkpoints.json").read_text())
    assert [(s["iteration"], s["verdict"]) for s in ledger["saves"]] == [(4, "verified"), (8, "verified")], ledger

    # a longer run of the experiment changes the learning-rate schedule (the warm-up is a tenth of train_iters, the
    # decay all of it), which Megatron's scheduler refuses to load: refused on the controller from its records
    longer = ("-e", "smoke=false", "-e", f"exp={EXP}", "-e", "train_iters=10")
    refused = playbook("train.yml", *longer, *INTERVALS)
    assert refused.returncode != 0, refused.stdout[-4000:]
    text = " ".join(refused.stdout.split())
    assert "the learning-rate schedule differs from the one iteration 8's save was trained with" in text, text[-3000:]
    assert "lr_decay_steps: saved 64, planned 80" in text and "no node was contacted" in text
    assert nodes_contacted(refused.stdout) == set(), refused.stdout[-3000:]
    # with the schedule chosen (the save's kept), it resumes from the verified save (the saved arguments match the
    # plan, the vocabulary included; the master compares the schedule as Megatron recorded it) and trains on to
    # the end, where Megatron saves again
    keep = json.dumps({"training": {"save_interval": 4, "eval_interval": 4, "lr_schedule_on_resume": "checkpoint"}})
    resumed = playbook("train.yml", *longer, "-e", keep)
    assert resumed.returncode == 0, resumed.stdout[-6000:]
    assert "resume       from iteration 8 in" in resumed.stdout, resumed.stdout[-6000:]
    kept = r"checkpoint   the learning-rate schedule differs from iteration 8's save \(.*lr_decay_steps: saved 64, "
    assert re.search(kept + r"planned 80.*\): the save's is kept", resumed.stdout), resumed.stdout[-6000:]
    run_dir = latest_run(EXP)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["state"] == "finished" and summary["last_iteration"] == 10, summary.get("failure_text")
    assert [m["iteration"] for m in summary["checkpoints"]["loaded"]] == [8], summary["checkpoints"]
    assert [s["iteration"] for s in summary["checkpoints"]["saved"]] == [10]
