"""plan.yml end to end on the controller: real ansible-playbook, real templates, real bash."""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.playbook


def run_plan(*extra: str, inventory: str | None = "inventory/example") -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}",
    )
    cmd = [str(BIN / "ansible-playbook"), "playbooks/plan.yml", *extra]
    if inventory:
        cmd += ["-i", inventory]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def shellcheck(*paths: Path, exclude: str = "") -> None:
    cmd = [str(BIN / "shellcheck"), "--severity=style"] + (["--exclude", exclude] if exclude else [])
    result = subprocess.run(cmd + [str(p) for p in paths], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def runbook_plan(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("plan") / "p"
    # its own runs dir: a module's fixture comes before the tests' emptying of the incident record (conftest), and
    # plan.yml leaves out the nodes it implicates, as train.yml does
    runs = tmp_path_factory.mktemp("runs")
    result = run_plan(
        "-e", "tp=1", "-e", "pp=2", "-e", "recommend=true", "-e", f"plan_dir={out}", "-e", f"runs_dir={runs}"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def test_plan_writes_everything(runbook_plan):
    names = sorted(p.name for p in runbook_plan.iterdir())
    assert names == [
        "diagnose.sh",
        "fanout.sh",
        "hostfile",
        "launch-node1.sh",
        "launch-node2.sh",
        "on-node.sh",
        "plan.json",
        "probe.sh",
        "recommendations.json",
        "stop.sh",
    ]
    plan = json.loads((runbook_plan / "plan.json").read_text())
    assert (plan["world_size"], plan["dp"], plan["global_batch_size"]) == (16, 8, 1024)
    # the model (and its architecture's digest), sequence length and precision name the experiment, then the layout
    assert plan["exp_name"].startswith("llama3-8b-")
    assert plan["exp_name"].endswith("_seq4096_fp8_tp1_pp2_dp8_mbs1_numbs128_gbs1024_gpus16")
    assert (runbook_plan / "hostfile").read_text() == "10.10.142.133 slots=8\n10.10.142.134 slots=8\n"
    ranked = json.loads((runbook_plan / "recommendations.json").read_text())
    assert ranked[0]["rank"] == 1 and ranked[0]["fits"]


def test_a_new_plan_replaces_an_earlier_ones_files_and_writes_each_with_its_mode(runbook_plan, tmp_path):
    out = tmp_path / "p"
    shutil.copytree(runbook_plan, out)
    (out / "launch-node9.sh").write_text("# an earlier plan's node\n")
    (out / "hostfile").write_text("stale\n")
    result = run_plan("-e", "tp=1", "-e", "pp=2", "-e", f"plan_dir={out}")  # no recommendations this time
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(
        n for n in (p.name for p in runbook_plan.iterdir()) if n != "recommendations.json"
    )
    ids = [json.loads((d / "plan.json").read_text())["run_id"] for d in (runbook_plan, out)]
    for name in ("hostfile", "launch-node1.sh", "fanout.sh", "probe.sh"):  # the same plan but for its run id
        assert (out / name).read_text() == (runbook_plan / name).read_text().replace(*ids), name
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in out.iterdir()}
    assert modes["hostfile"] == modes["plan.json"] == "0o644"
    assert modes["launch-node1.sh"] == modes["stop.sh"] == modes["diagnose.sh"] == "0o755"
    assert not list(out.glob("*.tmp"))


def test_two_plans_started_together_get_two_runs_and_an_earlier_run_id_is_refused(tmp_path):
    """A generated run id is unique even for plans started in the same second on one experiment, and a run id that
    names an earlier run is refused on the controller, its plan left as it was (issue 38, point 3)."""
    same = ("-e", "tp=1", "-e", "pp=2", "-e", "exp=same", "-e", f"runs_dir={tmp_path}")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: run_plan(*same), range(2)))
    assert all(r.returncode == 0 for r in results), [r.stdout[-2000:] for r in results]
    runs = sorted((tmp_path / "same").iterdir())
    assert len(runs) == 2 and all(re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{4}", r.name) for r in runs), runs
    plans = [json.loads((r / "plan" / "plan.json").read_text()) for r in runs]
    assert [p["run_id"] for p in plans] == [r.name for r in runs]
    # the command the plan prints runs the same plan (issue 38, point 9): its options, given to plan.yml
    printed = next(line for line in results[0].stdout.splitlines() if line.startswith("train it:"))
    words = shlex.split(printed.split(":", 1)[1])
    assert words[:4] == ["ansible-playbook", "-i", "inventory/example", "train.yml"]
    again = run_plan(*words[4:], "-e", f"runs_dir={tmp_path / 'again'}")
    assert again.returncode == 0, again.stdout[-3000:]
    (copy,) = (tmp_path / "again").glob("*/*/plan/plan.json")
    replanned = json.loads(copy.read_text())
    first = plans[0]  # the two plans differ only in their run ids
    assert replanned["megatron_args"] == [
        a.replace(first["run_id"], replanned["run_id"]) for a in first["megatron_args"]
    ]
    before = (runs[0] / "plan" / "plan.json").read_bytes()
    again = run_plan(*same, "-e", f"run_id={runs[0].name}", "-e", "tp=2")
    assert again.returncode != 0
    assert f"plan.yml: run id {runs[0].name} names an earlier run of same on this controller" in again.stdout
    assert (runs[0] / "plan" / "plan.json").read_bytes() == before


def test_rendered_scripts_are_shellcheck_clean(runbook_plan):
    shellcheck(*runbook_plan.glob("*.sh"))


def test_launch_script_runs_torchrun_with_the_exact_plan(tmp_path):
    """Execute the launch script for real, with a recording torchrun, under a work dir full of
    shell metacharacters: the vector torchrun receives is plan.json's, byte for byte."""
    work = tmp_path / "work dir $(touch PWNED) `id` ; 'q' \"d\""
    out = tmp_path / "plan"
    result = run_plan("-e", json.dumps({"work_home": str(work), "plan_dir": str(out), "tp": 2, "pp": 1}))
    assert result.returncode == 0, result.stdout + result.stderr
    shellcheck(*out.glob("*.sh"), exclude="SC2016")  # SC2016: the $(...) here is literal on purpose
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "torchrun").write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\0" "$a"; done > "$RECORD"\n')
    (fake / "torchrun").chmod(0o755)
    record = tmp_path / "argv"
    # MTT_TRAIN_OPS_ENV set: the script keeps this environment instead of taking the container's first process's
    # (there is no container here; test_train.py compares the ranks' environments on the testbed)
    env = dict(os.environ, PATH=f"{fake}{os.pathsep}{os.environ['PATH']}", RECORD=str(record), MTT_TRAIN_OPS_ENV="test")
    # cd is stubbed: the image's Megatron-LM directory does not exist on the controller.
    subprocess.run(
        ["bash", "-c", 'cd() { :; }; source "$1"', "_", str(out / "launch-node2.sh")],
        env=env,
        cwd=tmp_path,
        check=True,
        timeout=60,
    )
    argv = record.read_bytes().split(b"\0")[:-1]
    plan = json.loads((out / "plan.json").read_text())
    entry = argv.index(b"/home/megatron-lm-musa-patch/examples/llama3/pretrain_gpt.py")
    assert [a.decode() for a in argv[entry + 1 :]] == plan["megatron_args"]
    launcher = [a.decode() for a in argv[:entry]]
    assert launcher[launcher.index("--node_rank") + 1] == "1"
    assert launcher[launcher.index("--nnodes") + 1] == "2"
    assert launcher[launcher.index("--redirects") + 1] == "3"
    assert launcher[launcher.index("--log_dir") + 1] == plan["run_dir"] + "/logs/node2"
    assert not list(tmp_path.rglob("PWNED")), "a metacharacter in a path was executed"
    assert (Path(plan["run_dir"]) / "pids" / "node2.pid").read_text().strip().isdigit()


def test_bad_layout_lists_every_problem_and_writes_nothing(tmp_path):
    out = tmp_path / "never"
    result = run_plan("-e", "tp=3", "-e", "gbs=1001", "-e", f"plan_dir={out}")
    assert result.returncode != 0
    text = result.stdout
    assert "tp=3 does not divide 32 attention heads; valid tp: 1, 2, 4, 8" in text
    assert "not divisible by tp*pp*cp" in text
    assert not out.exists()


def test_unknown_model_names_the_presets(tmp_path):
    result = run_plan("-e", "model=llama9", "-e", f"plan_dir={tmp_path / 'x'}")
    assert result.returncode != 0
    assert "-e model='llama9': no such preset file (" in result.stdout
    assert "available presets: llama3-70b, llama3-8b, tiny" in result.stdout


def test_does_not_fit_refused_unless_forced(tmp_path):
    args = ["-e", "tp=1", "-e", "pp=1", "-e", "recompute=none", "-e", "flash_attention=false", "-e", "mbs=4"]
    refused = run_plan(*args, "-e", f"plan_dir={tmp_path / 'a'}")
    assert refused.returncode != 0 and "layouts that fit" in refused.stdout
    forced = run_plan(*args, "-e", "force=true", "-e", f"plan_dir={tmp_path / 'b'}")
    assert forced.returncode == 0, forced.stdout
    assert json.loads((tmp_path / "b" / "plan.json").read_text())["forced"] is True


def test_inventory_problems_are_reported(tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text(
        "all:\n  children:\n    nodes:\n      hosts:\n"
        "        a: {ansible_host: 127.0.0.1, slots: 32, accelerator: musa}\n"
        "        b: {ansible_host: 127.0.0.1, slots: 8, accelerator: tpu}\n"
    )
    result = run_plan("-e", f"plan_dir={tmp_path / 'x'}", inventory=str(inv))
    assert result.returncode != 0
    for needle in (
        "inventory a: slots=32 must be a whole number >= 1 and <= 16",
        "inventory b: accelerator='tpu' must be one of cpu, cuda, musa",
        "accelerator differs between nodes (a='musa', b='tpu')",
    ):
        assert needle in result.stdout


def test_every_playbook_passes_syntax_check():
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    for playbook in sorted((ROOT / "playbooks").glob("*.yml")):
        result = subprocess.run(
            [str(BIN / "ansible-playbook"), "--syntax-check", str(playbook)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, result.stdout + result.stderr


def test_ansible_doc_shows_the_module():
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    result = subprocess.run(
        [str(BIN / "ansible-doc"), "megatron_layout"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert "Derives world size" in result.stdout
    assert "RETURN VALUES" in result.stdout and "EXAMPLES" in result.stdout


def test_a_sites_backend_env_and_peak_reach_the_launch(tmp_path):
    out = tmp_path / "p"
    site = {"backend_env": {"MCCL_ALGOS": "1", "OMP_NUM_THREADS": 8}, "accelerator_peak_tflops": 777}
    result = run_plan("-e", "tp=1", "-e", "pp=2", "-e", json.dumps(site), "-e", f"plan_dir={out}")
    assert result.returncode == 0, result.stdout + result.stderr
    launch = (out / "launch-node1.sh").read_text()
    for line in ("export MCCL_ALGOS=1", "export OMP_NUM_THREADS=8", "export MUSA_DEVICE_MAX_CONNECTIONS=1"):
        assert line in launch.splitlines()
    assert "export MUSA_KERNEL_TIMEOUT=3200000" in launch.splitlines()  # the profile's own stay
    plan = json.loads((out / "plan.json").read_text())
    assert plan["peak_tflops_per_card"] == 777.0 and plan["printed_flops_convention"] == "full"
    assert "peak         777 TFLOP/s set by -e accelerator_peak_tflops" in result.stdout

    refused = run_plan("-e", json.dumps({"backend_env": {"NOT A NAME": 1}}), "-e", f"plan_dir={tmp_path / 'r'}")
    assert refused.returncode != 0
    assert "-e backend_env={'NOT A NAME': 1} must map environment variable names" in refused.stdout
    assert not (tmp_path / "r").exists()


def test_the_vendor_recipe_plans_through_the_playbook(tmp_path):
    """-e recipe=vendor as a user gives it: the layout role passes train_iters and recompute only when given, so
    the recipe's sample-based schedule and its recompute none apply (the core's test calls the planner directly)."""
    result = run_plan("-e", "tp=1", "-e", "pp=2", "-e", "recipe=vendor", "-e", f"plan_dir={tmp_path}")
    assert result.returncode == 0, result.stdout[-3000:]
    args = json.loads((tmp_path / "plan.json").read_text())["megatron_args"]
    assert args[args.index("--train-samples") + 1] == "24414062" and "--train-iters" not in args
    assert "--recompute-granularity" not in args
    printed = next(line for line in result.stdout.splitlines() if line.startswith("train it:"))
    assert "-e recipe=vendor" in printed and "train_iters" not in printed
