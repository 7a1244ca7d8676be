"""tools/card_check.py without a card: the plans, the rendered launches and their vectors (its CPU part).

The card part (running pretrain_gpt.py and the smoke job on CUDA cards) needs a card machine: see
benchmarks/RESULTS.md. With MEGATRON_LM_DIR and MEGATRON_PYTHON (as test_megatron_parser.py), Megatron's own
validate_args checks the plans too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _dry_run(out: Path, python: str = sys.executable, *extra: str) -> dict:
    done = subprocess.run(
        [python, str(ROOT / "tools" / "card_check.py"), "--dry-run", "--card", "H200", "--out", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((out / "card_check.json").read_text())


def test_the_card_checks_plans_and_rendered_launches(tmp_path):
    report = _dry_run(tmp_path)
    assert report["problems"] == [] and report["peak_bf16_tflops"] == 989
    assert set(report["models"]) == {"tiny", "llama3-8b-2l"}
    for case in report["models"].values():
        args = case["plan"]["megatron_args"]
        assert args[args.index("--transformer-impl") + 1] == "local" and "--bf16" in args
        assert "--mock-data" in args and "--data-path" not in args and "--save" not in args
        assert "--no-gradient-accumulation-fusion" in args and case["plan"]["attention"] == "local"
        script = Path(case["script"]).read_text()
        assert "export CUDA_VISIBLE_DEVICES=0" in script and "pretrain_gpt.py" in script
    slice_plan = report["models"]["llama3-8b-2l"]["plan"]
    assert 25 < slice_plan["memory_gib"] < 40  # 1.5 B parameters x 18 B, plus the activations with s x s scores
    smoke = Path(report["smoke"]["script"])
    script = smoke.read_text()
    assert "plugins/module_utils/trainops/node/smoke_train.py" in script and "--backend nccl" in script
    subprocess.run(
        [str(BIN / "shellcheck"), "--severity=style", *[c["script"] for c in report["models"].values()], str(smoke)],
        check=True,
    )


@pytest.mark.skipif(
    not (os.environ.get("MEGATRON_LM_DIR") and os.environ.get("MEGATRON_PYTHON")),
    reason="set MEGATRON_LM_DIR and MEGATRON_PYTHON to validate against Megatron-LM",
)
def test_megatron_accepts_the_card_checks_plans(tmp_path):
    report = _dry_run(tmp_path, os.environ["MEGATRON_PYTHON"], "--megatron", os.environ["MEGATRON_LM_DIR"])
    assert {case["megatron_validate_args"] for case in report["models"].values()} == {"1 passed, 0 failed"}
