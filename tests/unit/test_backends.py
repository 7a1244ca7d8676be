"""Backend profiles and card facts: every launch variable explained, every peak sourced or marked unknown."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from trainops.cluster import CARDS
from trainops.plan import FLOPS_CONVENTIONS

BACKENDS = Path(__file__).resolve().parents[2] / "backends"


@pytest.mark.parametrize("name", ["musa", "cuda", "cpu"])
def test_profile_keys(name):
    profile = yaml.safe_load((BACKENDS / f"{name}.yml").read_text())
    assert profile["megatron_flops_convention"] in FLOPS_CONVENTIONS
    assert isinstance(profile["megatron_log_straggler"], bool) and isinstance(profile["flight_recorder"], bool)
    assert all(isinstance(v, str) for v in profile["launch_env"].values())


def test_every_musa_launch_variable_has_its_comment():
    lines = (BACKENDS / "musa.yml").read_text().splitlines()
    start = lines.index("launch_env:")
    body = []
    for line in lines[start + 1 :]:
        if not line.startswith("  "):
            break
        body.append(line)
    names = [line.split(":")[0].strip() for line in body if not line.lstrip().startswith("#")]
    assert "MUSA_DEVICE_MAX_CONNECTIONS" in names and "CUDA_DEVICE_MAX_CONNECTIONS" in names
    # each variable sits under its comment; two that belong together (CUDA_ and MUSA_DEVICE_MAX_CONNECTIONS) share one
    since_comment = None
    for line in body:
        if line.lstrip().startswith("#"):
            since_comment = 0
            continue
        assert since_comment is not None and since_comment < 2, f"no comment above {line.strip()}"
        since_comment += 1


def test_every_card_has_a_peak_per_precision():
    for card, facts in CARDS.items():
        assert set(facts["peak_tflops"]) == {"bf16", "fp8"}, card
    assert CARDS["S5000"]["peak_tflops"] == {"bf16": None, "fp8": None}
    assert CARDS["H100"]["peak_tflops"] == {"bf16": 989, "fp8": 1979}
