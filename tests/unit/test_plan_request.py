"""PlanRequest: the one definition of megatron_layout's options, the -e conversions, make_plan's two call forms."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml
from presets import BACKENDS, load_preset, make_plan
from trainops.plan_request import PlanRequest

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "plugins" / "modules" / "megatron_layout.py"
HOSTS = [{"name": "node1", "ansible_host": "10.0.0.1", "slots": 2, "accelerator": "cpu"}]
LAYOUT = {"train_iters": 20, "seq_length": 256, "gbs": 8, "precision": "bf16"}


def module_documentation() -> dict:
    """DOCUMENTATION as ansible-doc reads it: statically, without importing the module."""
    for node in ast.parse(MODULE.read_text()).body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == [
            "DOCUMENTATION"
        ]:
            return yaml.safe_load(ast.literal_eval(node.value))
    raise AssertionError("megatron_layout.py has no DOCUMENTATION")


def test_documentation_states_the_request_definition():
    documented = module_documentation()["options"]
    keys = ("type", "elements", "required", "default", "choices")
    stated = {name: {k: option[k] for k in keys if k in option} for name, option in documented.items()}
    assert stated == PlanRequest.argument_spec()
    assert list(stated) == list(PlanRequest.argument_spec()), "the documentation lists the options in field order"


def test_argument_spec_types():
    spec = PlanRequest.argument_spec()
    # strings from -e reach the core, which converts them and names the option of a bad one
    assert {n for n, s in spec.items() if s["type"] == "raw"} == {
        "master_port",
        "accelerator_memory_gib",
        "accelerator_peak_tflops",
        "memory_headroom_fraction",
        "force",
        "recommend",
        "smoke",
    }
    assert spec["hosts"] == {"type": "list", "elements": "dict", "required": True}
    assert spec["tokenizer_path_given"] == {"type": "bool", "default": True}
    assert all(s["type"] in ("str", "int", "float", "bool", "dict", "list", "raw") for s in spec.values())


def test_every_option_has_a_one_line_description():
    for f in PlanRequest.options():
        assert f.metadata["doc"].strip() and "\n" not in f.metadata["doc"], f.name


def test_the_layout_role_passes_only_options_of_the_request():
    tasks = yaml.safe_load((ROOT / "roles" / "layout" / "tasks" / "main.yml").read_text())
    (task,) = [t for t in tasks if "megatron_layout" in t]
    spec = PlanRequest.argument_spec()
    assert set(task["megatron_layout"]) <= set(spec)
    assert {n for n, s in spec.items() if s.get("required")} <= set(task["megatron_layout"])


def test_from_options_converts_strings_and_keeps_defaults():
    request = PlanRequest.from_options(
        {
            "model": {},
            "hosts": [],
            "backends": {},
            "run_id": "r",
            "master_port": "14389",
            "force": "yes",
            "smoke": "off",
        }
        | {"accelerator_memory_gib": "48", "memory_headroom_fraction": "0.2", "recommend": True}
    )
    assert (request.master_port, request.force, request.smoke, request.recommend) == (14389, True, False, True)
    assert (request.accelerator_memory_gib, request.memory_headroom_fraction) == (48.0, 0.2)
    assert request.accelerator_peak_tflops is None and request.layout == {} and request.training == {}
    assert request.printed_flops_convention == "causal" and request.tokenizer_path_given is True
    assert request.problems == ()


def test_from_options_names_every_value_that_does_not_convert():
    request = PlanRequest.from_options(
        {
            "model": {},
            "hosts": [],
            "backends": {},
            "run_id": "r",
            "master_port": "abc",
            "force": "maybe",
            "recommend": "",
        }
        | {"accelerator_peak_tflops": "fast", "smoke": "null"}
    )
    assert request.problems == (
        "master_port must be an integer, got 'abc'",
        "accelerator_peak_tflops must be a number, got 'fast'",
        "force must be true or false, got 'maybe'",
        "-e recommend= is empty: give a value, or leave recommend out for its default",
        "smoke must be true or false, got 'null'",
    )
    assert request.master_port is None and request.force is False and request.smoke is False


def test_from_options_refuses_unknown_and_missing_options_as_keyword_arguments_would():
    with pytest.raises(TypeError, match=r"unknown plan option\(s\) \['want_recommendations'\]"):
        PlanRequest.from_options(
            {"model": {}, "hosts": [], "backends": {}, "run_id": "r", "want_recommendations": True}
        )
    with pytest.raises(TypeError, match=r"missing plan option\(s\) \['hosts', 'backends', 'run_id'\]"):
        PlanRequest.from_options({"model": {}})


def test_make_plan_takes_a_request_or_its_options():
    options = {"model": load_preset("tiny"), "hosts": HOSTS, "backends": BACKENDS, "layout": LAYOUT, "run_id": "r1"}
    options["smoke"] = "true"
    assert make_plan(PlanRequest.from_options(options)) == make_plan(**options)
    with pytest.raises(TypeError, match="not both"):
        make_plan(PlanRequest.from_options(options), run_id="r2")


def test_the_requests_problems_come_first_with_every_other():
    from trainops.errors import PlanError

    with pytest.raises(PlanError) as info:
        make_plan(model=load_preset("tiny"), hosts=HOSTS, layout=dict(LAYOUT, tp="x"), run_id="r", force="maybe")
    assert info.value.problems == ["force must be true or false, got 'maybe'", "tp must be an integer, got 'x'"]
