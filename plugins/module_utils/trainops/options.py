"""The one schema of every user-facing input: each ``-e`` option and inventory field, with its type, range or
choices, default, whether it may be empty, the playbooks that read it and a one-line description.

:data:`OPTIONS` is the table; :func:`convert` checks and converts one value against its option, naming the
option as the user wrote it, the value and the fix. :mod:`.inputs` runs it over everything a playbook reads
before any node is contacted; the watcher's options (:mod:`.watch`), data.yml's request (:mod:`.data_request`)
and the planner's conversions use the same rules, and ``docs/options.md`` is generated from this table
(``tools/options_table.py``). A new option is one entry here.

Kinds: ``int``, ``float``, ``bool``, ``choice``, ``str``, ``name`` (one path component of safe characters: it
names a directory and appears in every script), ``container_path`` (absolute, inside the containers),
``controller_path``, ``address`` (an IP address or a host name), ``map``, ``env`` (environment variable names to
values), ``model`` (a preset name or an absolute path to a preset file), ``slurm_time``.
"""

from __future__ import annotations

import datetime
import difflib
import ipaddress
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .slurm import time_limit

PLAYBOOKS = (
    "provision",
    "plan",
    "train",
    "stop",
    "status",
    "report",
    "data",
    "incidents",
    "health",
    "export",
    "monitoring",
)

#: Run ids, experiment names, container names: one path component, at most 100 of these characters.
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+=@-]{0,99}$")
#: Inventory host names (they name logs/<node>/ and appear in every script).
NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
HOSTNAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$"
)
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PRESET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
SLURM_PARTITION = re.compile(r"^[A-Za-z0-9_.-]+$")
_INTEGER = re.compile(r"^[+-]?[0-9]+$")
_NUMBER = re.compile(r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$")
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")
_NONE = ("none", "null")
#: Linux's limits: a path, and one of its components.
PATH_MAX, NAME_MAX = 4096, 255
#: Characters that end a line of a script or a log (or are invisible there).
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

TRAIN = ("plan", "train")
WATCH = ("train", "status")
SLURM = ("train", "stop", "status")
#: Playbooks that work in the training containers; those that plan or read the cluster's layout.
CONTAINER = ("provision", "train", "stop", "status", "report", "data", "export")
CLUSTER = ("provision", "plan", "train", "status", "data")
RENDER = ("provision", "plan", "train")


@dataclass(frozen=True)
class Option:
    """One user-facing input."""

    name: str
    kind: str
    doc: str
    playbooks: tuple[str, ...]
    default: Any = None
    #: ``-e`` (a run option, or all.vars of the inventory), ``host`` (per inventory host), ``cluster`` (-e or the
    #: inventory, the same on every node).
    where: str = "-e"
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    #: The minimum is excluded (``> minimum``).
    above: bool = False
    #: Words that stand for a setting of their own (``hang_timeout=auto``).
    words: tuple[str, ...] = ()
    #: How to fix a bad value, when the kind's own sentence is not enough.
    fix: str = ""
    #: Where the docs say more.
    docs: str = "docs/options.md"
    #: Its value may hold a token (a webhook's URL): never shown, in a refusal or anywhere else.
    secret: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def optional(self) -> bool:
        """No default: leaving it out (or ``none``) means "not set"."""
        return self.default is None


#: Upper bounds no real run reaches (a value above one is a slip of the keyboard, not a plan): 2^20 sequences in
#: a global batch (Llama 3 405B's largest was 2,048 of 8,192 tokens) or a micro-batch; 2^20 tokens in a sequence;
#: 10^8 iterations (Llama 3 8B: about 1.2 x 10^6).
MAX_BATCH = 2**20
MAX_SEQ_LENGTH = 2**20
MAX_ITERATIONS = 10**8


def _number_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _o(name: str, kind: str, doc: str, playbooks: Sequence[str], default: Any = None, **kw: Any) -> Option:
    return Option(name=name, kind=kind, doc=doc, playbooks=tuple(playbooks), default=default, **kw)


OPTIONS: dict[str, Option] = {
    o.name: o
    for o in (
        # --- the layout (the planner) ------------------------------------------------------------------------------
        _o("model", "model", "Model preset: models/<name>.yml, or an absolute path to a preset file.", TRAIN,
           "llama3-8b", docs="docs/models.md"),
        _o("tp", "int", "Tensor-parallel size.", TRAIN, 1, minimum=1, docs="docs/plan.md"),
        _o("pp", "int", "Pipeline-parallel size.", TRAIN, 1, minimum=1, docs="docs/plan.md"),
        _o("cp", "int", "Context-parallel size.", TRAIN, 1, minimum=1, docs="docs/plan.md"),
        _o("vpp", "int", "Virtual pipeline stages per rank (interleaved schedule); unset: none.", TRAIN,
           minimum=1, docs="docs/plan.md"),
        _o("mbs", "int", "Micro-batch size.", TRAIN, 1, minimum=1, maximum=MAX_BATCH, docs="docs/plan.md"),
        _o("num_microbatches", "int", "Micro-batches per iteration; with neither it nor gbs: 128.", TRAIN,
           minimum=1, maximum=MAX_BATCH, docs="docs/plan.md"),
        _o("gbs", "int", "Global batch size; keeps the training maths fixed across layouts.", TRAIN, minimum=1,
           maximum=MAX_BATCH, docs="docs/plan.md"),
        _o("seq_length", "int", "Sequence length in tokens.", TRAIN, 4096, minimum=1, maximum=MAX_SEQ_LENGTH,
           docs="docs/plan.md"),
        _o("precision", "choice", "Training precision (fp32: Megatron's default, without --bf16).", TRAIN, "fp8",
           choices=("bf16", "fp8", "fp32"),
           docs="docs/plan.md"),
        _o("recompute", "choice", "Activation recomputation; auto: the least (none < selective < full) whose memory "
           "estimate fits the card less the headroom.", TRAIN, "auto", choices=("auto", "none", "selective", "full"),
           docs="docs/plan.md"),
        _o("distributed_optimizer", "bool", "Megatron's distributed optimizer.", TRAIN, True, docs="docs/plan.md"),
        _o("sequence_parallel", "bool", "Sequence parallelism; unset: on when tp > 1.", TRAIN, docs="docs/plan.md"),
        _o("flash_attention", "bool", "A fused attention kernel through Transformer Engine.", TRAIN, True,
           docs="docs/plan.md"),
        _o("transformer_impl", "choice", "Megatron's --transformer-impl.", TRAIN, "transformer_engine",
           choices=("transformer_engine", "local"), docs="docs/plan.md"),
        _o("megatron_version", "str", "Megatron core version whose rules the planner applies (0.14, 0.16).", TRAIN,
           "0.14", docs="docs/plan.md"),
        _o("first_stage_layers", "int", "Layers of the first pipeline stage (overrides the computed split).", TRAIN,
           minimum=1, docs="docs/plan.md"),
        _o("last_stage_layers", "int", "Layers of the last pipeline stage (overrides the computed split).", TRAIN,
           minimum=1, docs="docs/plan.md"),
        _o("train_iters", "int", "Training iterations.", TRAIN, 100000, minimum=1, maximum=MAX_ITERATIONS,
           docs="docs/plan.md"),
        _o("recipe", "choice", "default: the bundle's choices; vendor: the vendor's Llama3-8B script (sample-based "
           "schedule, RoPE base 10000, its fusion flags and stage split).", TRAIN, "default",
           choices=("default", "vendor"), docs="docs/plan.md"),
        _o("training", "map", "Optimiser and schedule overrides (lr, min_lr, save_interval, ...), as JSON.", TRAIN,
           {}, fix='give a mapping, as -e \'{"training": {"lr": 3e-4}}\'', docs="docs/plan.md"),
        _o("distributed_timeout_minutes", "int", "Megatron's --distributed-timeout-minutes.", TRAIN, 10, minimum=1,
           docs="docs/train.md"),
        _o("log_straggler", "bool", "Megatron's --log-straggler; unset: the backend profile's.", TRAIN,
           docs="docs/train.md"),
        _o("force", "bool", "Accept a layout that does not fit in memory.", TRAIN, False, docs="docs/plan.md"),
        _o("recommend", "bool", "Also rank every valid layout of the cluster.", TRAIN, False, docs="docs/plan.md"),
        _o("smoke", "bool", "Launch the project's smoke job instead of pretrain_gpt.py; unset: the backend profile's "
           "default_job (cpu: smoke, unless the testbed's image has Megatron-LM).", TRAIN, docs="docs/train.md"),
        _o("memory_headroom_fraction", "float", "Share of the card kept free for the allocator and workspaces.",
           TRAIN, 0.1, minimum=0.0, maximum=0.99, docs="docs/cost-model.md"),
        _o("exp", "name", "Experiment name (one directory level of the run and checkpoint dirs); unset: from the "
           "layout.", TRAIN),
        _o("run_id", "name", "The run's identifier (names the run directory; an earlier run's is refused); unset: the "
           "UTC time and four random hex digits.", TRAIN),
        _o("plan_dir", "controller_path", "Where plan.yml writes the plan, on the controller.", ("plan",),
           docs="docs/plan.md"),
        _o("runs_dir", "controller_path", "Directory of every run on the controller; unset: <project>/runs.",
           ("plan", "train", "report", "incidents", "health")),
        # --- paths inside the containers, cluster facts -----------------------------------------------------------
        _o("work_home", "container_path", "Directory inside the containers for runs and checkpoints.",
           ("plan", "train", "stop", "status"), "/data/mtt-train-ops", where="cluster"),
        _o("data_path", "container_path", "Megatron data prefix inside the containers (.bin/.idx added); mock: "
           "Megatron's mock data.", ("plan", "train", "provision"), "/data/datasets/llama3_text_document",
           words=("mock",), docs="docs/data.md"),
        _o("tokenizer_path", "container_path", "Tokenizer file or directory inside the containers.",
           ("plan", "train", "provision"), "/data/llama3-tokenizer", docs="docs/data.md"),
        _o("tokenizer_type", "choice", "Megatron tokenizer type; unset: the manifest's, detected, or the preset's.",
           TRAIN, choices=("TikTokenizer", "SentencePieceTokenizer", "HuggingFaceTokenizer"), docs="docs/data.md"),
        _o("master_port", "int", "Rendezvous port on the master (the CPU backend's gloo check uses the next one).",
           ("plan", "train", "provision"), 14388, where="cluster", minimum=1024, maximum=65534),
        _o("container_name", "name", "Name of the training container on every node.", CONTAINER, "train",
           where="cluster"),
        _o("container_ssh_port", "int", "Port of the containers' own sshd (22 is the host's).", RENDER, 2222,
           where="cluster", minimum=1, maximum=65535),
        _o("accelerator", "choice", "Backend profile: backends/<accelerator>.yml.", CLUSTER + ("stop",), "musa",
           where="cluster",
           docs="docs/inventory.md"),
        _o("accelerator_card", "str", "Card name (memory and peak for the planner); unset: the backend's default.",
           CLUSTER, where="cluster", docs="docs/inventory.md"),
        _o("accelerator_memory_gib", "float", "Memory of one card in GiB; unset: by card.", TRAIN, where="cluster",
           minimum=0.0, above=True, docs="docs/inventory.md"),
        _o("accelerator_peak_tflops", "float", "Dense peak TFLOP/s of one card at the run's precision; unset: by "
           "card.", TRAIN, where="cluster", minimum=0.0, above=True, docs="docs/cost-model.md"),
        _o("backend_env", "env", "Environment variables of every launch, over the backend profile's launch_env.",
           ("plan", "train", "provision"), {}, where="cluster", docs="docs/inventory.md"),
        # --- the inventory's hosts --------------------------------------------------------------------------------
        _o("ansible_host", "address", "How the controller reaches the node.", CLUSTER + ("stop",), where="host",
           docs="docs/inventory.md"),
        _o("node_addr", "address", "How the other nodes reach it (a fast fabric address); unset: ansible_host.",
           CLUSTER, where="host", docs="docs/inventory.md"),
        _o("slots", "int", "Cards used on the node (torchrun's nproc_per_node).", CLUSTER + ("stop",), 8,
           where="host", minimum=1,
           maximum=16, docs="docs/inventory.md"),
        _o("master", "bool", "The rendezvous master (at most one host; unset: the first).", CLUSTER, False,
           where="host", docs="docs/inventory.md"),
        _o("spare", "bool", "A spare: provisioned and health-checked, it gets no rank in any plan until it takes "
           "the place of a node left out; never the master; with launcher=slurm the job excludes it.",
           ("plan", "train"), False, where="host", docs="docs/health.md"),
        _o("slurm_node_name", "address", "The node's name in Slurm; unset: the inventory name.", ("train",),
           where="host", docs="docs/slurm.md"),
        # --- train.yml's watcher and restarts ---------------------------------------------------------------------
        _o("wait", "bool", "Watch the run until it ends (false: return once it runs).", ("train",), True,
           docs="docs/train.md"),
        _o("fresh", "bool", "Start anew: move the experiment's checkpoints aside instead of resuming.", ("train",),
           False, docs="docs/train.md"),
        _o("train_wait", "float", "Seconds this terminal follows the run before returning while it goes on (its "
           "supervisor watches on).", ("train", "status"), 86400.0, minimum=0.0, docs="docs/train.md"),
        _o("follow", "bool", "status.yml: attach to each live run's supervisor and follow it until its watch ends "
           "(or train_wait).", ("status",), False, docs="docs/train.md"),
        _o("poll_interval", "float", "Seconds between probes.", ("train",), 5.0, minimum=1.0, docs="docs/train.md"),
        _o("progress_interval", "float", "Seconds between progress lines.", ("train",), 30.0, minimum=0.0,
           docs="docs/train.md"),
        _o("start_timeout", "float", "Seconds a node may take to start its launch.", ("train",), 120.0, minimum=1.0,
           docs="docs/train.md"),
        _o("hang_timeout", "float", "Seconds without an iteration line before the run is diagnosed as hung; auto: "
           "max(10 x p90 time between lines, 300 s).", WATCH, "auto", minimum=0.0, above=True, words=("auto",),
           docs="docs/train.md"),
        _o("on_hang", "choice", "What a hang does: stop the run, or warn and go on.", ("train",), "stop",
           choices=("stop", "warn"), docs="docs/train.md"),
        _o("straggler_ratio", "float", "A rank this much slower than the median is a straggler.",
           ("train", "status", "report"), 1.2, minimum=1.0, above=True, docs="docs/train.md"),
        _o("max_restarts", "int", "Attempts after a failed one (0: none).", ("train",), 0, minimum=0,
           docs="docs/train.md"),
        _o("elastic", "bool", "Re-plan on the nodes that remain at a restart (needs max_restarts).", ("train",),
           False, docs="docs/train.md"),
        _o("min_nodes", "int", "The fewest nodes an elastic re-plan may use.", ("train",), 1, minimum=1,
           docs="docs/train.md"),
        _o("incident_limit", "int", "Incidents within incident_window_days that leave a node out of the next run "
           "(0: never).", ("plan", "train", "incidents"), 2, minimum=0, docs="docs/incidents.md"),
        _o("incident_window_days", "float", "The days over which a node's incidents count (status.yml: how far back "
           "it looks for a run whose end no terminal followed, to report it and record its incidents).",
           ("plan", "train", "incidents", "status"),
           14.0,
           minimum=0.0, above=True, docs="docs/incidents.md"),
        # --- train.yml's checkpoints ------------------------------------------------------------------------------
        _o("verify_checkpoints", "bool", "Verify every save and resume only from a verified one (false: trust the "
           "tracker file).", ("train",), True, docs="docs/checkpoints.md"),
        _o("keep_checkpoints", "int", "Keep the newest N verified saves, removing older ones while the run goes on "
           "(0: keep all).", ("train",), 0, minimum=0, docs="docs/checkpoints.md"),
        _o("keep_every", "int", "With keep_checkpoints: also keep every save whose iteration is a multiple of M.",
           ("train",), 0, minimum=0, docs="docs/checkpoints.md"),
        _o("keep_dry_run", "bool", "With keep_checkpoints: only say what would be removed and freed.", ("train",),
           False, docs="docs/checkpoints.md"),
        _o("stop_grace", "int", "Seconds between SIGTERM and SIGKILL when a run is stopped.", ("train", "stop"), 30,
           minimum=0, docs="docs/train.md", extra={"slurm_default": 20}),
        _o("supervisor_host", "str", "train.yml: the node of the inventory, or the host of its supervisors group (a "
           "login node), whose training container runs the run's supervisor (unset: the master's), for example a "
           "spare that gets no rank. status.yml: move the supervision "
           "of each run whose supervisor's node does not answer to this node (the run's master, which holds a copy "
           "of its record).", ("train", "status"), docs="docs/train.md"),
        _o("metrics_port", "int", "The TCP port on which the run's supervisor serves the run's metrics to "
           "Prometheus, on every address of its node (0: none).", ("train", "monitoring"), 9465, minimum=0,
           maximum=65535, docs="docs/monitoring.md"),
        _o("card_metrics_port", "int", "The TCP port on which each node's card exporter serves its cards' metrics "
           "to Prometheus, on every address of the node (0: none; provision.yml stops one serving).",
           ("provision", "monitoring"), 9466, minimum=0, maximum=65535, docs="docs/monitoring.md"),
        _o("prometheus_port", "int", "The TCP port of the Prometheus that monitoring.yml runs on the monitoring "
           "host.", ("monitoring",), 9090, minimum=1, maximum=65535, docs="docs/monitoring.md"),
        _o("alertmanager_port", "int", "The TCP port of the Alertmanager that monitoring.yml runs on the monitoring "
           "host.", ("monitoring",), 9093, minimum=1, maximum=65535, docs="docs/monitoring.md"),
        _o("scrape_interval_s", "int", "Seconds between two scrapes of every endpoint, and between two evaluations "
           "of the alert rules.", ("monitoring",), 15, minimum=1, maximum=3600, docs="docs/monitoring.md"),
        _o("monitoring_retention_days", "int", "Days of metrics the monitoring host's Prometheus keeps.",
           ("monitoring",), 30, minimum=1, docs="docs/monitoring.md"),
        _o("monitoring_dir", "host_path", "The directory on the monitoring host that holds its Prometheus' and "
           "Alertmanager's configuration, data and logs.", ("monitoring",), "/var/lib/mtt-train-ops/monitoring",
           docs="docs/monitoring.md"),
        _o("alert_webhook_url", "url", "Where Alertmanager sends the alerts, as its JSON webhook (unset: it keeps "
           "them on its web page and API and sends none). It may hold a token: it is written only into the "
           "monitoring host's alertmanager.yml and never printed.", ("monitoring",), docs="docs/monitoring.md",
           secret=True),
        _o("notify", "notify_urls", "Where the run's supervisor sends the run's events (started, milestones, a hang, "
           "a node lost, a restart, a straggler, a save not verified, disk low, the end): one or more Apprise URLs "
           "(Slack, DingTalk, WeCom, Feishu/Lark, e-mail, json://...), separated by commas. They may hold tokens: "
           "never printed, kept only in the supervisor's request on its node.", ("train",),
           docs="docs/monitoring.md", secret=True),
        # --- the launcher -----------------------------------------------------------------------------------------
        _o("launcher", "choice", "How train.yml starts a run and stop.yml ends it.", SLURM, "ssh",
           choices=("ssh", "slurm"), docs="docs/slurm.md"),
        _o("slurm_nodes", "int", "Nodes to allocate; unset: every node of the inventory.", ("train",), minimum=1,
           docs="docs/slurm.md"),
        _o("slurm_partition", "str", "Slurm partition; unset: Slurm's default.", ("train",), docs="docs/slurm.md"),
        _o("slurm_time", "slurm_time", "Time limit (minutes, or [D-]HH:MM:SS); unset: the partition's.", ("train",),
           docs="docs/slurm.md"),
        _o("slurm_queue_timeout", "float", "Seconds to wait for the allocation.", ("train",), 3600.0, minimum=0.0,
           above=True, docs="docs/slurm.md"),
        _o("slurm_go_timeout", "float", "Seconds each node's task waits for the run's files.", ("train",), 900.0,
           minimum=0.0, above=True, docs="docs/slurm.md"),
        _o("slurm_gpus_per_node", "choice", "Ask for --gpus-per-node (auto: where the partition has GPU GRES).",
           ("train",), "auto", choices=("auto", "true", "false"), docs="docs/slurm.md"),
        _o("slurm_output_dir", "container_path", "Where the batch host writes the job's output.", ("train",), "/tmp",
           docs="docs/slurm.md"),
        # --- provision.yml, stop.yml, report.yml ------------------------------------------------------------------
        _o("recreate", "bool", "Recreate the training container even when it is up to date.", ("provision",),
           False, docs="docs/provision.md"),
        _o("recheck", "bool", "Run the collective checks even when a passing result is recorded.", ("provision",),
           False, docs="docs/provision.md"),
        _o("remove_container", "bool", "Also remove the training container.", ("stop",), False),
        _o("run", "controller_path", "The run directory to report on or export from (runs/<exp>/<run_id>).",
           ("report", "export"), docs="docs/train.md"),
        _o("init_from", "container_path", "A Hugging Face Llama directory on the master whose weights a fresh start "
           "begins from (imported and checked before the launch).", TRAIN, docs="docs/export.md"),
        # --- export.yml -------------------------------------------------------------------------------------------
        _o("iteration", "int", "The save to export (its iteration); unset: the run's newest verified save.",
           ("export",), minimum=1, docs="docs/export.md"),
        _o("export_unverified", "bool", "Export a save the run's checkpoint ledger does not call verified.",
           ("export",), False, docs="docs/export.md"),
        _o("export_path", "container_path", "Where the export is written on the master; unset: "
           "<work_home>/exports/<exp>/<run_id>-iter_NNNNNNN.", ("export",), docs="docs/export.md"),
        _o("export_dir", "controller_path", "Fetch the export to this new directory on the controller.",
           ("export",), docs="docs/export.md"),
        _o("export_parity", "bool", "Check the export against Megatron's own model (false: written, not verified).",
           ("export",), True, docs="docs/export.md"),
        # --- incidents.yml, health.yml ----------------------------------------------------------------------------
        _o("clear", "name", "A node whose incidents so far are cleared, after a repair.", ("incidents", "health"),
           docs="docs/incidents.md"),
        _o("level", "choice", "How deep health.yml looks: quick (seconds per node, no rendezvous) or full (also "
           "every card's burn-in against the fleet's).", ("health",), "quick", choices=("quick", "full"),
           docs="docs/health.md"),
        _o("health_burn_in_s", "float", "Seconds each card multiplies matrices at health.yml -e level=full.",
           ("health",), 10.0, minimum=1.0, docs="docs/health.md"),
        _o("health_min_busbw_gbps", "float", "Bus bandwidth (GB/s) the full level's all-reduce across every checked "
           "node must reach; under it, or when it fails, every pair of nodes is tested to name the slow one. Unset: "
           "the backend profile's collective_min_busbw_gbps (0 on cpu: pairs only after a failure).", ("health",),
           minimum=0.0, docs="docs/health.md"),
        _o("health_max_age", "float", "Hours a full health check's results stand: train.yml's quick check carries "
           "them (0: not at all).", ("train",), 24.0, minimum=0.0, docs="docs/health.md"),
        _o("health", "choice", "What train.yml does with a sick node before a launch: leave it out (exclude), only "
           "name it (warn), or skip the check (off).", ("train",), "exclude", choices=("off", "warn", "exclude"),
           docs="docs/health.md"),
        _o("exclude_nodes", "names", "Nodes train.yml (and plan.yml) leave out, whatever their health.",
           ("plan", "train"),
           docs="docs/health.md"),
        _o("use_nodes", "names", "The only nodes train.yml plans on (over the health check and the incident "
           "record); plan.yml too.", ("plan", "train"), docs="docs/health.md"),
        _o("health_min_free_gib", "float", "Free GiB where checkpoints go below which health.yml and provision.yml "
           "call a node sick (train.yml compares with its plan's checkpoint size).", ("health", "provision"), 0.0,
           minimum=0.0, docs="docs/health.md"),
        _o("health_dir", "controller_path", "Where health checks are recorded (<health_dir>/<time>/health.json); "
           "unset: <project>/health.", ("health", "provision", "train"), docs="docs/health.md"),
        # --- data.yml ---------------------------------------------------------------------------------------------
        _o("input", "container_path", "Raw JSONL inside the training container.", ("data",), docs="docs/data.md"),
        _o("output_prefix", "container_path", "Output prefix inside the container (.bin/.idx are added).",
           ("data",), docs="docs/data.md"),
        _o("tokenizer", "container_path", "Tokenizer file or directory inside the container.", ("data",),
           docs="docs/data.md"),
        _o("json_key", "str", "The JSON key holding each document's text.", ("data",), "text", docs="docs/data.md"),
        _o("workers", "int", "Tokenizer worker processes (0: the container's CPUs - 1, at least 1).", ("data",), 0,
           minimum=0, docs="docs/data.md"),
        _o("max_bad_lines", "int", "Unreadable input lines tolerated before the build fails.", ("data",), 100,
           minimum=0, docs="docs/data.md"),
        _o("data_on_every_node", "bool", "Build on every node (storage not shared) instead of the master.",
           ("data",), False, docs="docs/data.md"),
        _o("use_megatron_preprocess", "bool", "Use Megatron's tools/preprocess_data.py instead of the builder.",
           ("data",), False, docs="docs/data.md"),
        # --- this check itself ------------------------------------------------------------------------------------
        _o("allow_unknown", "bool", "Turn the refusal of an unknown -e option into a warning.", PLAYBOOKS, False),
    )
}  # fmt: skip

#: data.yml's required options.
REQUIRED = {"data": ("input", "output_prefix", "tokenizer"), "report": ("run",), "export": ("run",)}

#: The roles' parameters a site may set (in the inventory or with -e), typed by the roles' argument specs: the
#: training container, its sshd, the checks' limits and paths in the image. Every other role parameter is the
#: roles' own, set by the playbooks from the options above (layout_nodes, render_dest, data_build_input, ...):
#: given with -e or in the inventory, it is refused as an unknown option, since it would bypass this schema.
SITE_SETTINGS = (
    # the training container (roles/container), its sshd (roles/container_ssh) and py-spy in it
    "container_image", "container_image_archive", "container_image_load_timeout", "container_privileged",
    "container_env", "container_extra_env", "container_network_mode", "container_volumes", "container_command",
    "container_restart_policy", "container_ipc_mode", "container_shm_size", "container_ulimits", "container_init",
    "container_ssh_address_family", "container_ssh_cluster_name", "container_ssh_key_dir", "container_ssh_key_path",
    "container_ssh_known_hosts_path", "container_ssh_config_path", "container_ssh_connect_timeout", "py_spy_path",
    # provision.yml's and health.yml's checks
    "accelerator_tool", "accelerator_idle_memory_mib", "collective_test_path", "collective_max_bytes",
    "collective_min_busbw_gbps", "collective_require_test", "collective_inter_node", "collective_timeout_s",
    "collective_gloo_bytes", "collective_gloo_iters", "collective_recheck_after_s",
    "collective_record_path", "network_probe_timeout_s", "dataset_check", "dataset_helpers_build",
    "dataset_helpers_megatron_home", "dataset_helpers_tree_required", "health_check_device_tool",
    "health_check_megatron_home", "health_collective_test_path", "health_collective_max_bytes",
    "health_collective_gloo_bytes", "health_collective_timeout_s", "diagnostics_py_spy_source", "diagnostics_node_dir",
    # data.yml's builder
    "data_build_megatron_home", "data_build_work_dir", "data_build_poll_s", "data_build_timeout_s",
)  # fmt: skip


@dataclass(frozen=True)
class Rule:
    """``option``, given with -e with a value ``when`` holds of, means something only when
    ``holds`` holds of the converted options (``needs`` says which, in words); otherwise the check refuses it,
    saying ``why``."""

    option: str
    needs: str
    holds: Any
    why: str
    when: Any = bool


def _positive(value: Any) -> bool:
    return bool(value) and value > 0


def _saves_on(options: Mapping[str, Any]) -> bool:
    return _integer((options["training"] or {}).get("save_interval", 1)) != 0


#: Which options need or exclude which others: checked on the controller, all at once, before any node.
RULES = (
    Rule("keep_checkpoints", "verify_checkpoints=true", lambda o: o["verify_checkpoints"],
         "removes only saves older than the newest verified one, and verify_checkpoints=false verifies none: drop "
         "one of them", when=_positive),
    Rule("keep_checkpoints", "saves (training.save_interval > 0)", _saves_on,
         "removes old saves, and training.save_interval=0 makes none: drop one of them", when=_positive),
    Rule("keep_every", "keep_checkpoints >= 1", lambda o: o["keep_checkpoints"] > 0,
         "keeps milestone saves from retention, and there is none without keep_checkpoints: give "
         "keep_checkpoints=N (N >= 1), or drop keep_every", when=_positive),
    Rule("keep_dry_run", "keep_checkpoints >= 1", lambda o: o["keep_checkpoints"] > 0,
         "says what retention would remove, and there is none without keep_checkpoints: give keep_checkpoints=N "
         "(N >= 1), or drop keep_dry_run"),
    Rule("min_nodes", "elastic=true", lambda o: o["elastic"],
         "is the fewest nodes an elastic re-plan may use, and there is no re-plan without elastic=true (with "
         "max_restarts=N): give both, or drop min_nodes"),
    Rule("use_nodes", "no node of exclude_nodes", lambda o: not set(o["use_nodes"]) & set(o["exclude_nodes"] or ()),
         "and exclude_nodes name the same node: name each node in one of them"),
    Rule("health_max_age", "health=exclude or warn", lambda o: o["health"] != "off",
         "is how long a full health check stands for train.yml's quick one, and health=off skips the check: drop "
         "one of them"),
    Rule("health_burn_in_s", "level=full", lambda o: o["level"] == "full",
         "is the full level's burn-in, and the quick level burns nothing in: give level=full, or drop it"),
    Rule("health_min_busbw_gbps", "level=full", lambda o: o["level"] == "full",
         "is the full level's all-reduce threshold, and the quick level runs no all-reduce: give level=full, or "
         "drop it"),
)  # fmt: skip


def rule_problems(given: Mapping[str, Any], options: Mapping[str, Any]) -> list[str]:
    """Every rule of :data:`RULES` that the options ``given`` with -e (name -> converted value) break; ``options``:
    every option the playbook reads, converted. An option the inventory sets is a site's default, which some runs
    need and others do not: its rules are not judged. Nor is a rule on an option the playbook does not read, or
    that did not convert."""
    problems = []
    for rule in RULES:
        if rule.option not in given or not rule.when(given[rule.option]):
            continue
        try:
            broken = not rule.holds(options)
        except (KeyError, TypeError):
            continue
        if broken:
            problems.append(f"-e {rule.option}={_shown(given[rule.option])} {rule.why}")
    return problems


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(map(str, value))
    return f"{value:g}" if isinstance(value, float) else str(value)


def as_written(option: Option | str, text: str, read: Any, reader: str = "YAML 1.1") -> str | None:
    """Why ``read``, what ``reader`` made of the unquoted ``text`` (``exp: no`` the boolean false, ``slots: 010``
    the octal 8, ``slurm_time: 1:30:00`` the base-60 5400, ``run_id: 2026-12-01`` a date, ``0.10`` the number
    0.1), is not what ``text`` says to ``option``, with the fix; None when both mean the same."""
    opt = OPTIONS[option] if isinstance(option, str) else option
    meant, got = _attempt(opt, text), _attempt(opt, read)
    if meant is None and got is None and str(read).lower() != text.lower():  # wrong as written too: said of it
        hint = _did_you_mean(text, opt.choices) if opt.kind == "choice" and opt.choices else ""
        return f"{opt.name}: {text} is not {_wanted(opt)}{hint}"
    if meant == got:
        return None
    if isinstance(read, bool):
        made = f"the boolean {str(read).lower()}"
    elif isinstance(read, datetime.date):
        made = f"a date ({read.isoformat()})"
    elif ":" in text:
        made = f"{read} (base 60)"
    elif isinstance(read, int) and re.fullmatch(r"[-+]?0[0-7_]+", text):
        made = f"the octal number {read}"
    else:
        made = f"the number {read!r}"
    if meant is None:
        fix = f"write it as {_wanted(opt)}"
    elif opt.kind in ("int", "float"):
        fix = f"write {meant[1]:g}" + (" without the leading zero" if text.lstrip("+-").startswith("0") else "")
    else:
        fix = f'quote it: {opt.name}: "{text}"'
    return f"{opt.name}: {text} is read by {reader} as {made}, not as written; {fix}"


def _attempt(opt: Option, value: Any) -> tuple[type, Any] | None:
    """``value`` converted (with its type: True is not 1), or None when ``opt`` refuses it."""
    try:
        converted = convert(opt, value)
    except OptionError:
        return None
    return type(converted), converted


class OptionError(ValueError):
    """A value its option does not accept; the message is the whole sentence."""


def label(option: Option, source: str = "-e") -> str:
    """How the user wrote it: ``-e tp``, or ``inventory node2: slots``."""
    return f"-e {option.name}" if source == "-e" else f"{source}: {option.name}"


#: What people call a backend, for "did you mean" (the vendor's name for the stack, the card's maker).
_CHOICE_ALIASES = {"nvidia": "cuda", "gpu": "cuda", "nv": "cuda", "mthreads": "musa", "moore-threads": "musa",
                   "moorethreads": "musa", "mtt": "musa", "mt": "musa", "s5000": "musa", "none": "cpu",
                   "off": "none", "no": "none", "false": "none"}  # fmt: skip


def _did_you_mean(text: str, choices: Sequence[str]) -> str:
    """``"; did you mean cuda?"`` for a value near one of ``choices`` (or a known other name for it), else ``""``."""
    near = nearest(text.strip(), choices, _CHOICE_ALIASES)
    return f"; did you mean {near}?" if near else ""


def convert(option: Option | str, value: Any, source: str = "-e", accelerators: Sequence[str] = ()) -> Any:
    """``value`` checked against ``option`` and converted to its type; :class:`OptionError` names the option as the
    user wrote it (``source``: ``-e`` or ``inventory <host>``), the value and the fix. ``none``/``null`` stands
    for "not set" where the option has no default; an empty value is always an error."""
    opt = OPTIONS[option] if isinstance(option, str) else option
    where = label(opt, source)
    shown = f"{where}={value.isoformat() if isinstance(value, datetime.date) else repr(value)}"
    if opt.secret:
        shown = f"{where} (its value is not shown: it may hold a token)"

    def bad(why: str) -> OptionError:
        return OptionError(f"{shown} {why}" + (f"; {opt.fix}" if opt.fix and "give" not in why else ""))

    if value is None or (
        isinstance(value, str) and value.strip().lower() in _NONE and opt.kind != "str" and value not in opt.choices
    ):
        if opt.optional:
            return None
        raise bad(f"must be set ({_wanted(opt)}); leave {opt.name} out for its default {opt.default!r}")
    if isinstance(value, str) and value.strip() == "":
        raise OptionError(
            f"{where}= is empty: give {_wanted(opt)}, or leave {opt.name} out"
            + (f" for its default {opt.default!r}" if opt.default not in (None, {}, "") else "")
        )
    if isinstance(value, str) and value.strip().lower() in opt.words:
        return value.strip().lower()
    if isinstance(value, str) and _CONTROL.search(value):
        raise bad("contains a control character (a newline, tab or NUL); give it on one line")
    kind = opt.kind
    if kind == "int":
        number = _integer(value)
        if number is None:
            raise bad(f"is not an integer; give {_wanted(opt)}")
        _bounds(opt, number, bad)
        return number
    if kind == "float":
        number = _float(value)
        if number is None:
            raise bad(f"is not a number; give {_wanted(opt)}")
        if not math.isfinite(number):
            raise bad(f"is not a finite number; give {_wanted(opt)}")
        _bounds(opt, number, bad)
        return number
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        text = str(value).strip().lower()
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
        raise bad("must be true or false")
    if kind == "choice":
        choices = opt.choices or tuple(accelerators)
        text = str(value).lower() if opt.name == "slurm_gpus_per_node" and isinstance(value, bool) else str(value)
        if text not in choices:
            quote = f" (not {_type_words(value)})" if isinstance(value, bool) else ""
            raise bad(f"must be one of {', '.join(choices)}{quote}{_did_you_mean(text, choices)}")
        return text
    if kind in ("map", "env"):
        if not isinstance(value, Mapping):
            raise bad(f"is not a mapping; {opt.fix or 'give it as one JSON argument: -e ' + _json_example(opt.name)}")
        if kind == "env":
            _env_problem(opt, value, bad)
        return dict(value)
    if kind == "names":
        items = value if isinstance(value, (list, tuple)) else str(value).split(",")
        names = [str(item).strip() for item in items if str(item).strip()]
        wrong = [n for n in names if not NODE_NAME.match(n)]
        if wrong or not names:
            raise bad("must be inventory node names separated by commas, as node2,node3")
        return names
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise bad(f"must be a text value, not {_type_words(value)}")
    text = str(value)
    if text != text.strip():
        raise bad("has spaces around it; remove them")
    if kind == "str":
        return text
    if kind == "name":
        if not SAFE_NAME.match(text) or text in (".", ".."):
            raise bad(
                "must be one directory name of at most 100 characters: letters, digits and . _ + = @ -, "
                "starting with a letter or digit (it names a directory on every node and appears in scripts)"
            )
        return text
    if kind == "model":
        if text.startswith("/"):
            if not text.endswith((".yml", ".yaml")):
                raise bad("an absolute preset path must name a .yml file")
            return text
        if not PRESET_NAME.match(text):
            raise bad("must be a preset name of models/ (letters, digits, . _ -) or an absolute path to a .yml file")
        return text
    if kind == "container_path":
        if not text.startswith("/"):
            raise bad("must be an absolute path inside the containers (it starts with '/')")
        if len(text.encode()) > PATH_MAX or any(len(part.encode()) > NAME_MAX for part in text.split("/")):
            raise bad(f"is longer than the file system allows ({PATH_MAX} bytes, {NAME_MAX} per component)")
        return text
    if kind == "controller_path":
        return text
    if kind == "host_path":
        if not text.startswith("/"):
            raise bad("must be an absolute path on that host (it starts with '/')")
        return text
    if kind == "notify_urls":
        from .notify import unknown_urls, urls

        found = urls(text)
        if not all("://" in url for url in found):
            raise bad("must be one or more Apprise URLs (service://...), separated by commas or spaces")
        try:
            unknown = unknown_urls(text)
        except ImportError:
            raise bad("cannot be checked: Apprise is not installed here; run make setup") from None
        if unknown:
            raise bad(
                f"names a service Apprise does not know, or a URL it cannot read (URL {', '.join(map(str, unknown))}"
                f" of {len(found)}): see https://github.com/caronc/apprise/wiki for each service's URL"
            )
        return " ".join(found)
    if kind == "url":
        scheme, _, rest = text.partition("://")
        if scheme not in ("http", "https") or not rest or rest.startswith("/"):
            raise bad("must be an http:// or https:// URL with its host")
        return text
    if kind == "address":
        if _is_address(text):
            return text
        raise bad("is neither an IP address nor a valid host name")
    if kind == "slurm_time":
        try:
            return time_limit(text)
        except ValueError as exc:
            raise bad(str(exc)) from None
    raise AssertionError(f"option {opt.name}: unknown kind {kind}")


def _json_example(name: str) -> str:
    """``'{"backend_env": {"NAME": "value"}}'``: a mapping option as one -e argument, quoted for a shell."""
    return "'" + json.dumps({name: {"NAME": "value"}}) + "'"


def _wanted(opt: Option) -> str:
    """What the option accepts, in words."""
    if opt.kind in ("int", "float"):
        word = "a whole number" if opt.kind == "int" else "a number"
        low = "" if opt.minimum is None else f" {'>' if opt.above else '>='} {_number_text(opt.minimum)}"
        high = "" if opt.maximum is None else f" <= {_number_text(opt.maximum)}"
        words = f" or {' or '.join(opt.words)}" if opt.words else ""
        return f"{word}{low}{' and' if low and high else ''}{high}{words}"
    if opt.kind == "bool":
        return "true or false"
    if opt.kind == "choice" and opt.choices:
        return "one of " + ", ".join(opt.choices)
    return {
        "container_path": "an absolute path inside the containers",
        "controller_path": "a directory on the controller",
        "host_path": "an absolute path on that host",
        "url": "an http:// or https:// URL",
        "notify_urls": "Apprise URLs separated by commas",
        "name": "a name (letters, digits, . _ + = @ -)",
        "model": "a preset name or an absolute .yml path",
        "slurm_time": "minutes (90) or [D-]HH:MM:SS",
        "address": "an IP address or a host name",
        "names": "node names separated by commas",
        "map": "a mapping (JSON)",
        "env": "a mapping of variable names to values (JSON)",
    }.get(opt.kind, "a value")


def _bounds(opt: Option, number: float, bad: Any) -> None:
    low_fail = opt.minimum is not None and (number <= opt.minimum if opt.above else number < opt.minimum)
    high_fail = opt.maximum is not None and number > opt.maximum
    if low_fail or high_fail:
        raise bad(f"must be {_wanted(opt)}")


def _type_words(value: Any) -> str:
    """What a value that is not text is, in words, with the fix when YAML made it so."""
    if isinstance(value, bool):
        return (
            f"the boolean {str(value).lower()}: YAML reads an unquoted yes, no, on, off, true or false as a boolean; "
            "quote the value"
        )
    if isinstance(value, datetime.date):
        return f"a date ({value.isoformat()}): YAML reads an unquoted YYYY-MM-DD as a date; quote the value"
    return {list: "a list", tuple: "a list", dict: "a mapping"}.get(
        next((t for t in (list, tuple, dict) if isinstance(value, t)), type(value)), "a value of another kind"
    )


def _integer(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str) and _INTEGER.match(value.strip()):
        return int(value.strip())
    return None


def _float(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if _NUMBER.match(text) or text.lstrip("+-") in ("inf", "infinity", "nan"):
            return float(text)
    return None


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        pass
    return bool(HOSTNAME.match(text)) and not re.fullmatch(r"[\d.]+", text)


def _env_problem(opt: Option, env: Mapping[str, Any], bad: Any) -> None:
    wrong = [
        f"{key!r}: {value!r}"
        for key, value in env.items()
        if not (isinstance(key, str) and ENV_NAME.match(key))
        or isinstance(value, bool)
        or not isinstance(value, (str, int, float))
        or (isinstance(value, float) and not math.isfinite(value))
        or (isinstance(value, str) and _CONTROL.search(value))
    ]
    if wrong:
        raise bad(
            "must map environment variable names (letters, digits, _) to one-line strings or numbers, as "
            f'backend_env: {{MCCL_ALGOS: "1"}}; got {", ".join(wrong)}'
        )


def read_by(playbook: str) -> list[Option]:
    """The options ``playbook`` reads."""
    return [o for o in OPTIONS.values() if playbook in o.playbooks]


#: Names other tools use for what the bundle calls otherwise (Megatron's and Hugging Face's spellings).
ALIASES = {
    "learning_rate": "lr", "min_learning_rate": "min_lr", "warmup_iters": "lr_warmup_iters",
    "warmup_steps": "lr_warmup_iters", "warmup": "lr_warmup_iters", "decay_style": "lr_decay_style",
    "beta1": "adam_beta1", "beta2": "adam_beta2", "grad_clip": "clip_grad", "max_grad_norm": "clip_grad",
    "tensor_parallel": "tp", "pipeline_parallel": "pp", "micro_batch_size": "mbs", "global_batch_size": "gbs",
    "seq_len": "seq_length", "iters": "train_iters",
}  # fmt: skip


def nearest(name: str, known: Sequence[str], aliases: Mapping[str, str] | None = None) -> str | None:
    """The known name ``name`` means (another case, another tool's spelling: ``aliases``, by default
    :data:`ALIASES`) or is closest to (a typo's fix), or None."""
    lowered = {k.lower(): k for k in known}
    spelled = ALIASES if aliases is None else aliases
    for meant in (lowered.get(name.lower()), spelled.get(name.lower()), spelled.get(name.lower().replace("-", "_"))):
        if meant in known:
            return meant
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return close[0] if close else None


def one_line(value: Any) -> str:
    """``value`` as one line: control characters written as escapes (for comments and labels in scripts)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(value))
