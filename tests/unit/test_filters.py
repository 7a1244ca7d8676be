"""The Jinja filters: thin wrappers that turn core errors into clear filter errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from bundle_filters import FILTER_DIR, all_filters, filter_files

ROOT = Path(__file__).resolve().parents[2]
FILTERS = all_filters()


def test_parsers_return_core_results():
    text = (ROOT / "tests" / "fixtures" / "mthreads-gmi" / "s5000-x8-gmi2.4.1.txt").read_text()
    assert len(FILTERS["parse_mthreads_gmi"](text)) == 8
    assert FILTERS["parse_mthreads_gmi_full"](text)["driver_version"] == "5.1.0-server"


@pytest.mark.parametrize(
    ("name", "args"),
    [("parse_mthreads_gmi", ("garbage",)), ("parse_nvidia_smi", ("x",)), ("parse_allreduce_perf", ("",))],
)
def test_garbage_becomes_a_filter_error_naming_the_filter(name, args):
    with pytest.raises(AnsibleFilterError, match=f"^{name}: "):
        FILTERS[name](*args)


def test_cluster_in_rank_order():
    nodes = [
        {"name": "a", "ansible_host": "10.0.0.1", "slots": 4},
        {"name": "b", "ansible_host": "10.0.0.2", "slots": 4, "master": True},
    ]
    cluster = FILTERS["trainops_cluster"](nodes)
    assert (cluster["master"], cluster["world_size"]) == ("b", 8)
    with pytest.raises(AnsibleFilterError, match="invalid inventory"):
        FILTERS["trainops_cluster"]([dict(nodes[0], accelerator="tpu")])


def test_shell_arg_lines_quote_every_value():
    text = FILTERS["trainops_shell_arg_lines"](["--data-path", "/d $(x)", "--swiglu"], 2)
    assert text == "  --data-path '/d $(x)' \\\n  --swiglu"


def test_each_filter_file_keeps_to_one_concern_and_imports_the_core_it_wraps():
    """One file per concern, no name twice (all_filters checks), and each file's core imports visible at its top."""
    files = filter_files()
    assert set(files) == {"trainops_cluster", "trainops_provision", "trainops_render", "trainops_run", "trainops_slurm"}
    assert all(name.startswith(("trainops_", "parse_")) for filters in files.values() for name in filters)
    for path in FILTER_DIR.glob("*.py"):
        text = path.read_text()
        assert "importlib" not in text, f"{path.name} loads the core through importlib: import it at the top"
        assert "from trainops" in text, f"{path.name} imports nothing of the core"
