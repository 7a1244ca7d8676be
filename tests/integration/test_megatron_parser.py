"""Rendered argument vectors against Megatron-LM's own parser (optional: needs a checkout).

Megatron-LM is not on PyPI and is not part of this project, so this runs only when
MEGATRON_LM_DIR points at a checkout (e.g. tag core_v0.14.0) and MEGATRON_PYTHON at a
Python with torch (CPU) and numpy<2, packaging, six, regex, pyyaml. Otherwise it is
skipped, saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from presets import load_preset, make_plan

ROOT = Path(__file__).resolve().parents[2]
MEGATRON = os.environ.get("MEGATRON_LM_DIR")
PYTHON = os.environ.get("MEGATRON_PYTHON")

pytestmark = pytest.mark.skipif(
    not (MEGATRON and PYTHON), reason="set MEGATRON_LM_DIR and MEGATRON_PYTHON to check against Megatron-LM"
)

LAYOUTS = [
    ("llama3-8b", 2, {"tp": 1, "pp": 2}),
    ("llama3-8b", 1, {"tp": 1, "pp": 2}),
    ("llama3-8b", 2, {"tp": 1, "pp": 1}),
    ("llama3-8b", 2, {"tp": 2, "pp": 4, "vpp": 2, "precision": "bf16", "recompute": "selective"}),
    ("llama3-8b", 3, {"tp": 4, "pp": 3, "gbs": 96}),
    ("llama3-8b", 2, {"tp": 2, "cp": 2, "seq_length": 8192, "recompute": "none"}),
    ("llama3-70b", 4, {"tp": 8, "pp": 4, "gbs": 64}),
    ("llama3-70b", 16, {"tp": 8, "pp": 8, "vpp": 5, "gbs": 128, "seq_length": 8192}),
    # the straggler report and the collective timeout (hang detection's companions), on 2 and 16 ranks
    ("llama3-8b", 2, {"tp": 1, "pp": 2, "training": {"log_straggler": True, "distributed_timeout_minutes": 30}}),
    ("llama3-8b", 1, {"tp": 4, "pp": 2, "training": {"log_straggler": True}}),
    # fp32 (no --bf16) with Megatron's own layers, as the testbed's resume comparisons run
    ("llama3-8b", 2, {"tp": 2, "pp": 2, "precision": "fp32", "transformer_impl": "local", "flash_attention": False}),
]


def test_megatron_accepts_every_plan(tmp_path):
    paths = []
    for i, (model, nodes, request) in enumerate(LAYOUTS):
        hosts = [{"name": f"n{k}", "ansible_host": f"10.0.0.{k + 1}", "slots": 8} for k in range(nodes)]
        layout = {k: v for k, v in request.items() if k != "training"}
        plan = make_plan(
            model=load_preset(model),
            hosts=hosts,
            layout=layout,
            training=request.get("training"),
            run_id="check",
            force=True,
        )
        path = tmp_path / f"plan{i}.json"
        path.write_text(json.dumps(plan))
        paths.append(str(path))
    result = subprocess.run(
        [PYTHON, str(ROOT / "tools" / "check_megatron_args.py"), "--megatron", MEGATRON, *paths],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(paths)} passed, 0 failed" in result.stdout
