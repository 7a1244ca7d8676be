"""Backend profiles and card facts: every launch variable explained, every peak sourced or marked unknown."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from presets import BACKENDS as PROFILES
from trainops.backend import PEAK_PRECISIONS, card_problems, load_profile
from trainops.cluster import REFERENCE_CARD, REFERENCE_PEAK_TFLOPS
from trainops.errors import PlanError
from trainops.plan import FLOPS_CONVENTIONS

BACKENDS = Path(__file__).resolve().parents[2] / "backends"
NAMES = sorted(path.stem for path in BACKENDS.glob("*.yml"))


@pytest.mark.parametrize("name", NAMES)
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


@pytest.mark.parametrize("name", NAMES)
def test_every_card_states_its_facts_and_their_source(name):
    profile = PROFILES[name]
    assert profile["default_card"] in profile["cards"]
    for card, facts in profile["cards"].items():
        assert set(facts["peak_tflops"]) == set(PEAK_PRECISIONS), card
        assert facts["memory_gib"] > 0 and facts["intra_busbw_gbps"] > 0 and facts["source"].strip(), card


def test_peaks_as_their_sources_state_them():
    assert PROFILES["musa"]["cards"]["S5000"]["peak_tflops"] == {"bf16": None, "fp8": None, "fp32": None}
    assert PROFILES["musa"]["cards"]["S4000"]["peak_tflops"] == {"bf16": 100, "fp8": None, "fp32": 25}
    assert PROFILES["cuda"]["cards"]["H100"]["peak_tflops"] == {"bf16": 989, "fp8": 1979, "fp32": 67}
    # the cost model's stand-in rate for an unknown peak is the cuda profile's H100, not a figure of its own
    assert PROFILES["cuda"]["cards"][REFERENCE_CARD]["peak_tflops"] == REFERENCE_PEAK_TFLOPS


def test_a_card_without_its_facts_is_refused_naming_the_file_and_card(tmp_path):
    profile = dict(PROFILES["cuda"], default_card="B200")
    profile["cards"] = {
        "H100": {"memory_gib": 80, "peak_tflops": {"bf16": 989}, "intra_busbw_gbps": 360, "source": "datasheet"},
        "H20": {"memory_gib": 0, "peak_tflops": {"bf16": 148, "fp8": 296, "fp32": 44}, "intra_busbw_gbps": 360},
    }
    assert card_problems("cuda.yml", profile) == [
        "cuda.yml: default_card 'B200' is not one of its cards (H100, H20)",
        "cuda.yml: card H100: peak_tflops must give bf16, fp8, fp32, each a number or null",
        "cuda.yml: card H20 lacks source",
        "cuda.yml: card H20: memory_gib must be a positive number",
    ]
    (tmp_path / "cuda.yml").write_text(yaml.safe_dump(profile))
    with pytest.raises(PlanError, match="card H20 lacks source"):
        load_profile(str(tmp_path), "cuda")
