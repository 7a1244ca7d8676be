"""Every bad input is refused on the controller before any node is contacted, naming the option, and writes
nothing: a table of bad inputs to every playbook (provision, plan, train, stop, status, report, data), bad
inventories, and the inputs that must pass (an unknown card with its memory, allow_unknown, a FIFO at the
tokenizer path).

The inventory's hosts are on loopback at port 9 (nothing listens there): a playbook that got as far as
contacting them would list them in its PLAY RECAP (unreachable). No testbed needed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed import nodes_contacted, recap

pytestmark = pytest.mark.playbook

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
NODES = "        node1: {ansible_host: 127.0.0.1, slots: 8}\n        node2: {ansible_host: 127.0.0.2, slots: 8}\n"
DATA = ("-e", "input=/data/raw.jsonl", "-e", "output_prefix=/data/datasets/x", "-e", "tokenizer=/data/tok")


def _e(**values: object) -> tuple[str, str]:
    return ("-e", json.dumps(values))


# (id, playbook, extra arguments, what the message must say)
CASES = [
    # the layout (plan.yml; train.yml plans the same way)
    ("tp-not-divisor", "playbooks/plan.yml", ("-e", "tp=3"), "tp=3 does not divide 32 attention heads"),
    ("tp-zero", "playbooks/plan.yml", ("-e", "tp=0"), "-e tp='0' must be a whole number >= 1"),
    ("tp-word", "playbooks/plan.yml", ("-e", "tp=two"), "-e tp='two' is not an integer"),
    ("tp-empty", "playbooks/plan.yml", ("-e", "tp="), "-e tp= is empty"),
    ("pp-empty", "playbooks/plan.yml", ("-e", "pp="), "-e pp= is empty"),
    ("pp-negative", "playbooks/plan.yml", ("-e", "pp=-1"), "-e pp='-1' must be a whole number >= 1"),
    ("pp-float", "playbooks/plan.yml", _e(pp=1.5), "-e pp=1.5 is not an integer"),
    ("cp-seq", "playbooks/plan.yml", ("-e", "cp=2", "-e", "seq_length=4098"), "not divisible by 2*cp"),
    ("vpp-word", "playbooks/plan.yml", ("-e", "vpp=x"), "-e vpp='x' is not an integer"),
    ("mbs-zero", "playbooks/plan.yml", ("-e", "mbs=0"), "-e mbs='0' must be a whole number >= 1"),
    ("mbs-empty", "playbooks/plan.yml", ("-e", "mbs="), "-e mbs= is empty"),
    ("gbs-indivisible", "playbooks/plan.yml", ("-e", "gbs=7"), "gbs"),
    (
        "microbatches-word",
        "playbooks/plan.yml",
        ("-e", "num_microbatches=x"),
        "-e num_microbatches='x' is not an integer",
    ),
    ("seq-too-long", "playbooks/plan.yml", ("-e", "seq_length=100000"), "exceeds the model's max_position_embeddings"),
    ("seq-sp", "playbooks/plan.yml", ("-e", "tp=2", "-e", "seq_length=4095"), "not divisible by tp=2"),
    ("seq-empty", "playbooks/plan.yml", ("-e", "seq_length="), "-e seq_length= is empty"),
    ("precision", "playbooks/plan.yml", ("-e", "precision=fp16"), "-e precision='fp16' must be one of bf16, fp8"),
    (
        "recompute",
        "playbooks/plan.yml",
        ("-e", "recompute=some"),
        "-e recompute='some' must be one of auto, none, selective, full",
    ),
    (
        "distopt-bool",
        "playbooks/plan.yml",
        ("-e", "distributed_optimizer=maybe"),
        "-e distributed_optimizer='maybe' must be true or false",
    ),
    (
        "sp-bool",
        "playbooks/plan.yml",
        ("-e", "sequence_parallel=maybe"),
        "-e sequence_parallel='maybe' must be true or false",
    ),
    (
        "flash-bool",
        "playbooks/plan.yml",
        ("-e", "flash_attention=maybe"),
        "-e flash_attention='maybe' must be true or false",
    ),
    ("impl", "playbooks/plan.yml", ("-e", "transformer_impl=te"), "-e transformer_impl='te' must be one of"),
    ("fp8-local", "playbooks/plan.yml", ("-e", "transformer_impl=local"), "precision=fp8 runs in Transformer Engine"),
    ("version", "playbooks/plan.yml", ("-e", "megatron_version=abc"), "megatron_version 'abc'"),
    ("first-stage", "playbooks/plan.yml", ("-e", "pp=2", "-e", "first_stage_layers=40"), "first_stage_layers"),
    ("iters-zero", "playbooks/plan.yml", ("-e", "train_iters=0"), "-e train_iters='0' must be a whole number >= 1"),
    ("model-unknown", "playbooks/plan.yml", ("-e", "model=llama9"), "-e model='llama9': no such preset file"),
    ("model-empty", "playbooks/plan.yml", ("-e", "model="), "-e model= is empty"),
    ("exp-slash", "playbooks/plan.yml", _e(exp="a/b"), "-e exp='a/b' must be one directory name"),
    ("exp-dots", "playbooks/plan.yml", _e(exp=".."), "-e exp='..' must be one directory name"),
    ("work-home-relative", "playbooks/plan.yml", ("-e", "work_home=data"), "-e work_home='data' must be an absolute"),
    ("data-relative", "playbooks/plan.yml", ("-e", "data_path=ds/x"), "-e data_path='ds/x' must be an absolute"),
    ("tok-relative", "playbooks/plan.yml", ("-e", "tokenizer_path=tok"), "-e tokenizer_path='tok' must be an absolute"),
    ("work-home-empty", "playbooks/plan.yml", ("-e", "work_home="), "-e work_home= is empty"),
    ("path-too-long", "playbooks/plan.yml", _e(data_path="/" + "x" * 300), "longer than the file system allows"),
    (
        "port-low",
        "playbooks/plan.yml",
        ("-e", "master_port=80"),
        "-e master_port='80' must be a whole number >= 1024 and <= 65534",
    ),
    ("port-word", "playbooks/plan.yml", ("-e", "master_port=abc"), "-e master_port='abc' is not an integer"),
    (
        "headroom",
        "playbooks/plan.yml",
        ("-e", "memory_headroom_fraction=2"),
        "-e memory_headroom_fraction='2' must be a number >= 0 and <= 0.99",
    ),
    (
        "headroom-none",
        "playbooks/plan.yml",
        ("-e", "memory_headroom_fraction=none"),
        "-e memory_headroom_fraction='none' must be set",
    ),
    ("port-none", "playbooks/plan.yml", ("-e", "master_port=none"), "-e master_port='none' must be set"),
    (
        "memory-word",
        "playbooks/plan.yml",
        ("-e", "accelerator_memory_gib=lots"),
        "-e accelerator_memory_gib='lots' is not a number",
    ),
    (
        "peak-negative",
        "playbooks/plan.yml",
        ("-e", "accelerator_peak_tflops=-3"),
        "-e accelerator_peak_tflops='-3' must be a number > 0",
    ),
    ("force-bool", "playbooks/plan.yml", ("-e", "force=maybe"), "-e force='maybe' must be true or false"),
    ("recommend-bool", "playbooks/plan.yml", ("-e", "recommend=maybe"), "-e recommend='maybe' must be true or false"),
    ("smoke-bool", "playbooks/plan.yml", ("-e", "smoke=maybe"), "-e smoke='maybe' must be true or false"),
    ("tokenizer-type", "playbooks/plan.yml", ("-e", "tokenizer_type=Foo"), "-e tokenizer_type='Foo' must be one of"),
    (
        "training-unknown",
        "playbooks/plan.yml",
        _e(training={"lrr": 1}),
        "training.lrr is not a training setting; did you mean training.lr?",
    ),
    ("warmup", "playbooks/plan.yml", _e(training={"lr_warmup_iters": 10}, train_iters=10), "lr_warmup_iters=10"),
    ("save-negative", "playbooks/plan.yml", _e(training={"save_interval": -1}), "save_interval must be"),
    ("timeout-zero", "playbooks/plan.yml", ("-e", "distributed_timeout_minutes=0"), "distributed_timeout_minutes"),
    (
        "backend-env",
        "playbooks/plan.yml",
        _e(backend_env={"BAD NAME": 1}),
        "-e backend_env={'BAD NAME': 1} must map environment variable names",
    ),
    ("plan-dir-empty", "playbooks/plan.yml", ("-e", "plan_dir="), "-e plan_dir= is empty"),
    # train.yml's own options, before the plan and before any node
    ("train-tp", "train.yml", ("-e", "tp=3"), "tp=3 does not divide 32 attention heads"),
    ("hang-word", "train.yml", ("-e", "hang_timeout=soon"), "-e hang_timeout='soon' is not a number"),
    ("hang-empty", "train.yml", ("-e", "hang_timeout="), "-e hang_timeout= is empty"),
    ("hang-zero", "train.yml", ("-e", "hang_timeout=0"), "-e hang_timeout='0' must be a number > 0 or auto"),
    ("on-hang", "train.yml", ("-e", "on_hang=kill"), "-e on_hang='kill' must be one of stop, warn"),
    ("ratio", "train.yml", ("-e", "straggler_ratio=1"), "-e straggler_ratio='1' must be a number > 1"),
    ("wait-bool", "train.yml", ("-e", "wait=maybe"), "-e wait='maybe' must be true or false"),
    ("fresh-bool", "train.yml", ("-e", "fresh=maybe"), "-e fresh='maybe' must be true or false"),
    ("train-wait", "train.yml", ("-e", "train_wait=-5"), "-e train_wait='-5' must be a number >= 0"),
    ("poll", "train.yml", ("-e", "poll_interval=0"), "-e poll_interval='0' must be a number >= 1"),
    ("progress", "train.yml", ("-e", "progress_interval=x"), "-e progress_interval='x' is not a number"),
    ("start-timeout", "train.yml", ("-e", "start_timeout=0"), "-e start_timeout='0' must be a number >= 1"),
    ("runs-dir-empty", "train.yml", ("-e", "runs_dir="), "-e runs_dir= is empty"),
    ("restarts-word", "train.yml", ("-e", "max_restarts=x"), "-e max_restarts='x' is not an integer"),
    ("elastic-bool", "train.yml", ("-e", "elastic=maybe"), "-e elastic='maybe' must be true or false"),
    ("elastic-alone", "train.yml", ("-e", "elastic=true"), "give -e max_restarts=N (N >= 1) too"),
    ("min-nodes", "train.yml", ("-e", "max_restarts=1", "-e", "min_nodes=0"), "-e min_nodes='0' must be a whole"),
    ("train-exp", "train.yml", _e(exp="a/b"), "-e exp='a/b' must be one directory name"),
    # -e launcher and its slurm_* options (docs/slurm.md); Slurm's own refusals are in test_slurm.py
    ("launcher", "train.yml", ("-e", "launcher=k8s"), "-e launcher='k8s' must be one of ssh, slurm"),
    ("slurm-no-login", "train.yml", ("-e", "launcher=slurm"), "needs a slurm_login group in the inventory"),
    ("slurm-opt-ssh", "train.yml", ("-e", "slurm_nodes=1"), "-e slurm_nodes need -e launcher=slurm"),
    ("slurm-nodes", "train.yml", ("-e", "launcher=slurm", "-e", "slurm_nodes=3"), "slurm_nodes='3' must be a whole"),
    ("slurm-time", "train.yml", ("-e", "launcher=slurm", "-e", "slurm_time=1:75:00"), "minutes or seconds of 60"),
    ("slurm-time-word", "train.yml", ("-e", "launcher=slurm", "-e", "slurm_time=soon"), "must be minutes (90)"),
    ("slurm-partition", "train.yml", _e(launcher="slurm", slurm_partition="a b"), "is not a partition name"),
    (
        "slurm-queue",
        "train.yml",
        ("-e", "launcher=slurm", "-e", "slurm_queue_timeout=0"),
        "-e slurm_queue_timeout='0' must be a number > 0",
    ),
    (
        "slurm-gpus",
        "train.yml",
        ("-e", "launcher=slurm", "-e", "slurm_gpus_per_node=8"),
        "-e slurm_gpus_per_node='8' must be one of auto, true, false",
    ),
    # every playbook checks first (stop.yml and status.yml contacted every node before; report.yml checked -e run)
    ("stop-grace", "stop.yml", ("-e", "stop_grace=soon"), "-e stop_grace='soon' is not an integer"),
    ("stop-launcher", "stop.yml", ("-e", "launcher=k8s"), "-e launcher='k8s' must be one of ssh, slurm"),
    ("stop-remove", "stop.yml", ("-e", "remove_container=perhaps"), "-e remove_container='perhaps' must be true"),
    ("stop-typo", "stop.yml", ("-e", "stop_grase=5"), "-e stop_grase: no such option; did you mean stop_grace?"),
    ("status-hang", "playbooks/status.yml", ("-e", "hang_timeout=soon"), "-e hang_timeout='soon' is not a number"),
    ("status-ratio", "playbooks/status.yml", ("-e", "straggler_ratio=0.5"), "-e straggler_ratio='0.5' must be"),
    ("status-slurm", "playbooks/status.yml", ("-e", "launcher=slurm"), "needs a slurm_login group"),
    ("incidents-limit", "train.yml", ("-e", "incident_limit=-1"), "-e incident_limit='-1' must be"),
    (
        "incidents-window",
        "playbooks/incidents.yml",
        ("-e", "incident_window_days=0"),
        "-e incident_window_days='0' must be",
    ),
    ("incidents-clear", "playbooks/incidents.yml", ("-e", "clear=a/b"), "-e clear='a/b'"),
    ("incidents-typo", "playbooks/incidents.yml", ("-e", "claer=node2"), "did you mean clear?"),
    # health.yml and train.yml's choice of nodes (docs/health.md)
    ("health-level", "playbooks/health.yml", ("-e", "level=deep"), "-e level='deep' must be one of quick"),
    ("health-policy", "train.yml", ("-e", "health=maybe"), "-e health='maybe' must be one of off, warn, exclude"),
    ("health-exclude-name", "train.yml", ("-e", "exclude_nodes=node2;rm"), "-e exclude_nodes='node2;rm' must be"),
    ("health-exclude-unknown", "train.yml", ("-e", "exclude_nodes=node9"), "no such node in the inventory: node9"),
    ("health-use-unknown", "train.yml", ("-e", "use_nodes=node1,nodeX"), "no such node in the inventory: nodeX"),
    ("health-every-node-out", "train.yml", ("-e", "exclude_nodes=node1,node2"), "every node is left out"),
    ("health-free-gib", "playbooks/health.yml", ("-e", "health_min_free_gib=-1"), "health_min_free_gib='-1' must be"),
    ("health-clear", "playbooks/health.yml", ("-e", "clear=a/b"), "-e clear='a/b'"),
    ("report-missing", "playbooks/report.yml", (), "-e run=... is required"),
    ("report-empty", "playbooks/report.yml", ("-e", "run="), "-e run= is empty"),
    ("report-not-a-run", "playbooks/report.yml", ("-e", "run=/"), "has no plan/plan.json"),
    ("provision-recreate", "provision.yml", ("-e", "recreate=maybe"), "-e recreate='maybe' must be true or false"),
    ("provision-recheck", "provision.yml", ("-e", "recheck=2"), "-e recheck='2' must be true or false"),
    ("provision-port", "provision.yml", ("-e", "container_ssh_port=70000"), "-e container_ssh_port='70000' must"),
    ("provision-name", "provision.yml", ("-e", "container_name=a;b"), "-e container_name='a;b' must be one dir"),
    ("provision-typo", "provision.yml", ("-e", "recrate=true"), "-e recrate: no such option; did you mean recreate?"),
    # values that reach a script or a path
    ("run-id-newline", "playbooks/plan.yml", _e(run_id="r1\ntouch /tmp/x #"), "-e run_id='r1\\ntouch"),
    ("run-id-up", "playbooks/plan.yml", ("-e", "run_id=../../../x"), "-e run_id='../../../x' must be one directory"),
    ("run-id-space", "train.yml", _e(run_id="a b"), "-e run_id='a b' must be one directory name"),
    ("exp-subst", "train.yml", _e(exp="$(id)"), "-e exp='$(id)' must be one directory name"),
    ("exp-long", "playbooks/plan.yml", _e(exp="e" * 101), "must be one directory name of at most 100"),
    ("work-home-tab", "train.yml", _e(work_home="/data\tx"), "contains a control character"),
    ("env-newline", "playbooks/plan.yml", _e(backend_env={"A": "1\nB"}), "to one-line strings or numbers"),
    ("env-launch-sets", "playbooks/plan.yml", _e(backend_env={"PYTHONPATH": "/x"}), "backend_env sets PYTHONPATH"),
    ("model-up", "playbooks/plan.yml", ("-e", "model=../../etc/x"), "-e model='../../etc/x' must be a preset name"),
    ("model-abs-not-yml", "playbooks/plan.yml", ("-e", "model=/etc/passwd"), "must name a .yml file"),
    # the checker's own odd values, empty and non-finite values
    ("training-word", "playbooks/plan.yml", ("-e", "training=foo"), "-e training='foo' is not a mapping"),
    ("exp-empty", "playbooks/plan.yml", ("-e", "exp="), "-e exp= is empty"),
    ("launcher-empty", "train.yml", ("-e", "launcher="), "-e launcher= is empty"),
    ("memory-inf", "playbooks/plan.yml", ("-e", "accelerator_memory_gib=inf"), "is not a finite number"),
    ("memory-nan", "playbooks/plan.yml", ("-e", "accelerator_memory_gib=nan", "-e", "force=true"), "not a finite"),
    ("tp-superscript", "playbooks/plan.yml", ("-e", "tp=\u00b2"), "-e tp='\u00b2' is not an integer"),
    ("ratio-inf", "train.yml", ("-e", "straggler_ratio=inf"), "-e straggler_ratio='inf' is not a finite number"),
    # unknown options
    ("unknown-tpp", "playbooks/plan.yml", ("-e", "tpp=2"), "-e tpp: no such option; did you mean tp?"),
    ("unknown-restart", "train.yml", ("-e", "max_restart=3"), "-e max_restart: no such option; did you mean max_"),
    ("unknown-far", "train.yml", ("-e", "zzqx=3"), "-e zzqx: no such option (docs/options.md"),
    ("tokenizer-dir", "playbooks/plan.yml", ("-e", "tokenizer_path=/tmp"), "the controller has this path"),
    # data.yml
    ("data-missing", "playbooks/data.yml", (), "-e input=... is required"),
    (
        "data-relative",
        "playbooks/data.yml",
        ("-e", "input=raw.jsonl", *DATA[2:]),
        "-e input='raw.jsonl' must be an absolute",
    ),
    ("data-bin", "playbooks/data.yml", (*DATA[:2], "-e", "output_prefix=/d/x.bin", *DATA[4:]), "must not end in .bin"),
    ("data-workers", "playbooks/data.yml", (*DATA, "-e", "workers=-1"), "-e workers='-1' must be a whole number >= 0"),
    (
        "data-bad-lines",
        "playbooks/data.yml",
        (*DATA, "-e", "max_bad_lines=x"),
        "-e max_bad_lines='x' is not an integer",
    ),
    ("data-json-key", "playbooks/data.yml", (*DATA, "-e", "json_key="), "-e json_key= is empty"),
    (
        "data-input-is-output",
        "playbooks/data.yml",
        ("-e", "input=/data/x.bin", "-e", "output_prefix=/data/x", "-e", "tokenizer=/t"),
        "-e input='/data/x.bin' is what -e output_prefix='/data/x' writes",
    ),
    # inputs as written: an -e split by a space, YAML's rewrites in an -e, a role's own parameter
    ("e-split", "train.yml", ("-e", "exclude_nodes=node1, node2"), "-e 'exclude_nodes=node1, node2': a space split"),
    ("e-yaml-off", "train.yml", ("-e", "{health: off}"), "-e '{health: off}': health: off is read by YAML 1.1 as"),
    ("e-role-own", "playbooks/plan.yml", ("-e", "render_dest=/tmp/x"), "-e render_dest: no such option; it is a"),
    # options that need or exclude others (trainops.options.RULES), all at once
    ("keep-every-alone", "train.yml", ("-e", "keep_every=5"), "-e keep_every=5 keeps milestone saves from retention"),
    (
        "keep-unverified",
        "train.yml",
        ("-e", "keep_checkpoints=2", "-e", "verify_checkpoints=false", "-e", "keep_dry_run=true"),
        "-e keep_checkpoints=2 removes only saves older than the newest verified one",
    ),
    ("min-nodes-alone", "train.yml", ("-e", "min_nodes=2"), "-e min_nodes=2 is the fewest nodes an elastic re-plan"),
    (
        "min-nodes-above",
        "train.yml",
        ("-e", "elastic=true", "-e", "max_restarts=1", "-e", "min_nodes=3"),
        "-e min_nodes=3 is more than the 2 node(s) the run starts on",
    ),
    ("burn-in-quick", "playbooks/health.yml", ("-e", "health_burn_in_s=3"), "-e health_burn_in_s=3 is the full level"),
]

# (id, the nodes group's hosts, what the message must say): plan.yml with these inventories
INVENTORIES = [
    ("name-path", '        "a/../b": {ansible_host: 127.0.0.1, slots: 8}\n', "node 'a/../b': an inventory host name"),
    ("name-shell", '        "n;touch x": {ansible_host: 127.0.0.1}\n', "node 'n;touch x': an inventory host name"),
    (
        "address",
        '        n1: {ansible_host: "bad host", slots: 8}\n',
        "inventory n1: ansible_host='bad host' is neither an IP",
    ),
    (
        "node-addr",
        "        n1: {ansible_host: 127.0.0.1, node_addr: 10.0.0.300}\n",
        "inventory n1: node_addr='10.0.0.300' is neither",
    ),
    (
        "slots",
        "        n1: {ansible_host: 127.0.0.1, slots: 0}\n",
        "inventory n1: slots=0 must be a whole number >= 1 and <= 16",
    ),
    (
        "slots-word",
        "        n1: {ansible_host: 127.0.0.1, slots: eight}\n",
        "inventory n1: slots='eight' is not an integer",
    ),
    (
        "accelerator",
        "        n1: {ansible_host: 127.0.0.1, accelerator: tpu}\n",
        "inventory n1: accelerator='tpu' must be one of cpu, cuda, musa",
    ),
    (
        "two-masters",
        "        n1: {ansible_host: 127.0.0.1, master: true}\n        n2: {ansible_host: 127.0.0.2, master: true}\n",
        "more than one node sets master: true",
    ),
    (
        "same-address",
        "        n1: {ansible_host: 127.0.0.1}\n        n2: {ansible_host: 127.0.0.1}\n",
        "share the address",
    ),
    (
        "mixed",
        "        n1: {ansible_host: 127.0.0.1, accelerator: cuda}\n        n2: {ansible_host: 127.0.0.2}\n",
        "accelerator differs between nodes (n1='cuda', n2='musa')",
    ),
    (
        "master-word",
        "        n1: {ansible_host: 127.0.0.1, master: maybe}\n",
        "inventory n1: master='maybe' must be true or false",
    ),
    (
        "address-space",
        '        n1: {ansible_host: "127.0.0.1 "}\n',
        "inventory n1: ansible_host='127.0.0.1 ' has spaces",
    ),
    (
        "slots-superscript",
        '        n1: {ansible_host: 127.0.0.1, slots: "\u00b2"}\n',
        "slots='\u00b2' is not an integer",
    ),
    (
        "unknown-card",
        "        n1: {ansible_host: 127.0.0.1, accelerator: cuda, accelerator_card: A100}\n",
        "card 'A100' has no known memory size; set accelerator_memory_gib",
    ),
    (
        "env-per-host",
        '        n1: {ansible_host: 127.0.0.1, backend_env: {A: "1"}}\n        n2: {ansible_host: 127.0.0.2}\n',
        "backend_env differs between nodes (n1={'A': '1'}, n2={})",
    ),
    (
        "slurm-name",
        '        n1: {ansible_host: 127.0.0.1, slurm_node_name: "n 1"}\n',
        "inventory n1: slurm_node_name='n 1' is neither an IP address nor a valid host name",
    ),
]


def _inventory(tmp_path: Path, hosts: str) -> Path:
    path = tmp_path / "inventory.yml"
    path.write_text(f"all:\n  vars:\n    ansible_port: 9\n  children:\n    nodes:\n      hosts:\n{hosts}")
    return path


def _refused(tmp_path: Path, playbook: str, extra: tuple[str, ...], words: str, hosts: str = NODES) -> str:
    writes = {"runs_dir": tmp_path / "runs", "plan_dir": tmp_path / "plan"}
    defaults = [a for key, path in writes.items() if f"{key}=" not in " ".join(extra) for a in ("-e", f"{key}={path}")]
    result = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(_inventory(tmp_path, hosts)), playbook, *defaults, *extra],
        cwd=ROOT,
        env=dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    assert words in output, output[-3000:]
    assert not nodes_contacted(output), "a node was contacted before the input was checked"
    assert "Traceback" not in output and "argument_spec_data" not in output, output[-3000:]
    assert "validate_argument_spec" not in output and "has no attribute" not in output, output[-3000:]
    assert not any(path.exists() for path in writes.values()), "a refused input wrote files"
    return output


def _keys(extra: tuple[str, ...]) -> set[str]:
    """The option names an argument vector sets (-e key=value, or -e with a JSON or YAML object)."""
    keys: set[str] = set()
    for value in extra[1::2]:
        keys |= set(yaml.safe_load(value)) if value.startswith("{") else {value.split("=", 1)[0]}
    return keys


def _batches() -> list[tuple[str, tuple[str, ...], list[str]]]:
    """The cases whose message names their option, packed into as few runs as can hold them: one playbook, no
    option set twice, none that moves the runs or plan dir. The input check lists every problem at once, so one
    run names each of its cases' options (a case whose message needs the other inputs valid, as the layout's
    maths does, is run alone)."""
    batches: list[tuple[str, set[str], list[str], list[str]]] = []  # playbook, its keys, cases, arguments
    for case, playbook, extra, words in CASES:
        keys = _keys(extra)
        # only a message that names its option ("-e tp='0' must be ...", "tp=3 does not divide ..."), so that it
        # cannot come from another case of the run
        named = words.startswith("-e ") or any(key in words and words != key for key in keys)
        if not named or keys & {"runs_dir", "plan_dir"}:
            continue
        fit = next((b for b in batches if b[0] == playbook and not b[1] & keys), None)
        if fit is None:
            batches.append(fit := (playbook, set(), [], []))
        fit[1].update(keys)
        fit[2].append(case)
        fit[3].extend(extra)
    return [(playbook, tuple(arguments), cases) for playbook, _, cases, arguments in batches]


@pytest.fixture(scope="module")
def batch_outputs(tmp_path_factory) -> dict[str, tuple[str, str]]:
    """Each batched case's (output of its batch's refused run, problem with it or ""), one run per batch."""
    outputs = {}
    for playbook, extra, cases in _batches():
        tmp_path = tmp_path_factory.mktemp("batch")
        try:
            text, problem = _refused(tmp_path, playbook, extra, ""), ""  # each case looks for its own words below
        except AssertionError as error:
            text, problem = "", str(error)
        outputs.update({case: (text, problem) for case in cases})
    return outputs


@pytest.mark.parametrize(("case", "playbook", "extra", "words"), CASES, ids=[c[0] for c in CASES])
def test_a_bad_option_is_refused_before_any_node(tmp_path, batch_outputs, case, playbook, extra, words):
    output, problem = batch_outputs.get(case, ("", "not batched"))
    if problem or words not in output:  # not batched, or its message needs the other inputs valid: alone
        _refused(tmp_path, playbook, extra, words)


@pytest.mark.parametrize(("case", "hosts", "words"), INVENTORIES, ids=[c[0] for c in INVENTORIES])
def test_a_bad_inventory_is_refused_before_any_node(tmp_path, case, hosts, words):
    _refused(tmp_path, "playbooks/plan.yml", (), words, hosts)


@pytest.mark.parametrize("playbook", ["provision.yml", "train.yml", "stop.yml", "playbooks/status.yml"])
def test_the_whole_inventory_is_checked_by_every_playbook(tmp_path, playbook):
    hosts = "        n1: {ansible_host: 127.0.0.1, slots: 0}\n"
    _refused(tmp_path, playbook, (), "inventory n1: slots=0 must be a whole number", hosts)


def _run(tmp_path: Path, playbook: str, *extra: str, inventory: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", inventory or str(_inventory(tmp_path, NODES)), playbook, *extra],
        cwd=ROOT,
        env=dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("playbook", ["provision.yml", "train.yml", "stop.yml", "playbooks/data.yml"])
def test_a_missing_inventory_or_nodes_group_is_one_plain_sentence(tmp_path, playbook):
    missing = _run(tmp_path, playbook, *DATA, inventory=str(tmp_path / "inventroy"))
    assert missing.returncode != 0
    assert f"-i {tmp_path / 'inventroy'}: no such inventory file or directory" in missing.stdout
    other = tmp_path / "other.yml"
    other.write_text("all:\n  children:\n    gpus:\n      hosts:\n        a: {ansible_host: 127.0.0.1}\n")
    no_group = _run(tmp_path, playbook, *DATA, inventory=str(other))
    assert no_group.returncode != 0
    assert "has no host in the group 'nodes': the inventory must list every training server" in no_group.stdout
    for result in (missing, no_group):
        assert "validate_argument_spec" not in result.stdout and "has no attribute" not in result.stdout
        assert not nodes_contacted(result.stdout)


def test_a_model_preset_outside_models_is_checked_key_by_key(tmp_path):
    preset = dict(yaml.safe_load((ROOT / "models" / "tiny.yml").read_text()), norm_epsilon="abc")
    (tmp_path / "mine.yml").write_text(yaml.safe_dump(preset))
    words = "'norm_epsilon' must be a finite number > 0, got 'abc'"
    _refused(tmp_path, "playbooks/plan.yml", ("-e", f"model={tmp_path / 'mine.yml'}"), words)


def test_what_must_pass_passes(tmp_path):
    """An unknown card with its memory; an unknown option with allow_unknown; an option another playbook reads (a
    warning); a FIFO at the tokenizer path (not read on the controller: it would block)."""
    cuda = _inventory(tmp_path, "        n1: {ansible_host: 127.0.0.1, accelerator: cuda, accelerator_card: A100}\n")
    card = _run(tmp_path, "playbooks/plan.yml", "-e", "accelerator_memory_gib=80", "-e", f"plan_dir={tmp_path / 'a'}",
                inventory=str(cuda))  # fmt: skip
    assert card.returncode == 0, card.stdout[-3000:]
    assert json.loads((tmp_path / "a" / "plan.json").read_text())["card"] == "A100"
    lenient = _run(tmp_path, "playbooks/plan.yml", "-e", "tpp=2", "-e", "allow_unknown=true", "-e",
                   f"plan_dir={tmp_path / 'b'}")  # fmt: skip
    assert lenient.returncode == 0, lenient.stdout[-3000:]
    assert "-e tpp: no such option; did you mean tp?" in lenient.stdout + lenient.stderr
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    piped = _run(tmp_path, "playbooks/plan.yml", "-e", f"tokenizer_path={fifo}", "-e", f"plan_dir={tmp_path / 'c'}")
    assert piped.returncode == 0, piped.stdout[-3000:]
    assert "not on the controller, not checked" in piped.stdout
    other = _run(tmp_path, "stop.yml", "-e", "tp=2")
    assert "-e tp is not read by stop.yml (it is read by plan.yml, train.yml); ignored" in other.stdout + other.stderr
    assert nodes_contacted(other.stdout) == {"node1", "node2"}  # a warning, not a refusal: stop.yml went on


AS_WRITTEN = """\
all:
  vars:
    ansible_port: 9
    exp: no
    megatron_version: 0.10
    hang_timout: 60
  children:
    nodes:
      vars:
        max_restarts: 2
      hosts:
        node1: {ansible_host: 127.0.0.1, slots: 010}
        node2: {ansible_host: 127.0.0.2, slots: 8}
        node1: {ansible_host: 127.0.0.3, slots: 8}
"""


def test_the_inventory_is_checked_as_written(tmp_path):
    """YAML 1.1's rewrites, a host listed twice, a run option on a group and a typo in all.vars: each named with its
    file and line, in one refusal before any node."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "hosts.yml").write_text(AS_WRITTEN)
    result = _run(tmp_path, "train.yml", "-e", f"runs_dir={tmp_path / 'runs'}", inventory=str(tmp_path / "site"))
    output = result.stdout + result.stderr
    assert result.returncode != 0 and not nodes_contacted(output), output[-3000:]
    for words in (
        "hosts.yml:14: host node1 is listed twice in one mapping (lines 12 and 14)",
        'hosts.yml:4 (all.vars): exp: no is read by YAML 1.1 as the boolean false, not as written; quote it: exp: "no"',
        "hosts.yml:5 (all.vars): megatron_version: 0.10 is read by YAML 1.1 as the number 0.1",
        "hosts.yml:6 (all.vars): hang_timout: no such option; did you mean hang_timeout?",
        "hosts.yml:10 (the vars of group nodes): max_restarts: not read here: a run option",
        "hosts.yml:12 (host node1): slots: 010 is read by YAML 1.1 as the octal number 8",
    ):
        assert words in output, output[-3000:]
    assert "must be a text value" not in output and "_AnsibleTagged" not in output


def test_an_excluded_node_is_not_contacted(tmp_path):
    """train.yml -e exclude_nodes=node2 plans on node1 and reaches for it alone (node1 does not answer here)."""
    result = _run(tmp_path, "train.yml", "-e", "exclude_nodes=node2", "-e", "model=tiny", "-e", "seq_length=128",
                  "-e", f"runs_dir={tmp_path / 'runs'}", "-e", f"health_dir={tmp_path / 'health'}")  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "node1 (127.0.0.1) is unreachable" in output, output[-3000:]
    assert "127.0.0.2" not in output, output[-3000:]
    assert recap(output)["node2"] == {"ok": 0, "changed": 0, "unreachable": 0, "failed": 0}
