"""The one schema of every input (trainops.options): each option is read where it says, documented, and its
default is the one every play and core module uses."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from trainops import backend, data_request, layout, megatron_args, model, options, slurm, straggler, watch
from trainops.options import OPTIONS, PLAYBOOKS, OptionError, convert
from trainops.plan_request import DEFAULT_HEADROOM, PlanRequest
from trainops.tokenizer import TYPES as TOKENIZER_TYPES

ROOT = Path(__file__).resolve().parents[2]
NODE_KEYS = ("ansible_host", "slots", "accelerator", "master", "node_addr", "accelerator_card")
#: Options only the first play's check reads (trainops.inputs).
READ_BY_THE_CHECK = {"allow_unknown"}


def _yaml(path: Path):
    return yaml.safe_load(path.read_text()) or []


def _tasks_files(tasks, base: Path, roles: set[str], files: set[Path]) -> None:
    for task in tasks or []:
        if not isinstance(task, dict):
            continue
        for key in ("block", "rescue", "always"):
            _tasks_files(task.get(key), base, roles, files)
        for key in ("ansible.builtin.import_role", "ansible.builtin.include_role"):
            if key in task:
                roles.add(task[key]["name"])
        for key in ("ansible.builtin.include_tasks", "ansible.builtin.import_tasks"):
            if key in task:
                target = task[key] if isinstance(task[key], str) else task[key]["file"]
                path = (base / target).resolve()
                if path.exists() and path not in files:
                    files.add(path)
                    _tasks_files(_yaml(path), path.parent, roles, files)


def reached_files(playbook: str) -> set[Path]:
    """Every file a playbook runs: its plays, imported playbooks, task files, roles (tasks, defaults, vars) and
    the templates its roles render."""
    files: set[Path] = set()
    roles: set[str] = set()
    queue = [ROOT / "playbooks" / f"{playbook}.yml"]
    while queue:
        path = queue.pop()
        if path in files:
            continue
        files.add(path)
        for play in _yaml(path):
            if "ansible.builtin.import_playbook" in play:
                queue.append(path.parent / play["ansible.builtin.import_playbook"])
                continue
            for role in play.get("roles") or []:
                roles.add(role["role"] if isinstance(role, dict) else role)
            for key in ("pre_tasks", "tasks", "post_tasks"):
                _tasks_files(play.get(key), path.parent, roles, files)
    done: set[str] = set()
    while roles - done:
        role = sorted(roles - done)[0]
        done.add(role)
        for part in ("tasks", "defaults", "vars"):
            for path in sorted((ROOT / "roles" / role / part).glob("*.yml")):
                files.add(path)
                if part == "tasks":
                    _tasks_files(_yaml(path), path.parent, roles, files)
    if "render" in roles:
        files |= {p for p in (ROOT / "templates").glob("*.j2") if p.name != "slurm-batch.sh.j2"}
    if any(p.name == "slurm_submit.yml" for p in files):
        files.add(ROOT / "templates" / "slurm-batch.sh.j2")
    return files


def _words(text: str) -> set[str]:
    code = "\n".join(line.split("#", 1)[0] if line.lstrip().startswith("#") else line for line in text.splitlines())
    return set(re.findall(r"\b[a-z_][a-z0-9_]*\b", code))


def words_read(playbook: str) -> set[str]:
    """The variable names a playbook's files use; a name of trainops_defaults counts only where it is used."""
    shared_path = ROOT / "roles" / "trainops_defaults" / "defaults" / "main.yml"
    shared = _yaml(shared_path)
    words: set[str] = set()
    for path in reached_files(playbook) - {shared_path}:
        words |= _words(path.read_text())
    grown = True
    while grown:
        if "trainops_inventory_nodes" in words:  # the filter reads these inventory keys of every node
            words |= set(NODE_KEYS)
        if "trainops_plan_nodes" in words:  # the nodes a run plans on (trainops.node_choice): these node keys
            words |= {"master", "spare", "slots"}
        if "trainops_watch_options" in words:  # the watcher's options, through the core (trainops.watch)
            words |= set(watch.NAMES)
        grown = False
        for key, value in shared.items():
            if key in words and not _words(yaml.safe_dump(value)) <= words:
                words |= _words(yaml.safe_dump(value))
                grown = True
    return words


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_each_option_is_read_by_the_playbooks_that_claim_it(playbook):
    words = words_read(playbook)
    unread = [o.name for o in options.read_by(playbook) if o.name not in words and o.name not in READ_BY_THE_CHECK]
    assert unread == [], f"{playbook}.yml claims to read {unread} but none of its files uses them"


def test_each_option_is_read_by_at_least_one_playbook_and_the_check_reads_its_own():
    assert all(o.playbooks and set(o.playbooks) <= set(PLAYBOOKS) for o in OPTIONS.values())
    inputs = (ROOT / "plugins" / "module_utils" / "trainops" / "inputs.py").read_text()
    assert all(name in inputs for name in READ_BY_THE_CHECK)


def test_docs_options_is_generated_from_the_schema():
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "options_table.py"), "--check"], capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
    text = (ROOT / "docs" / "options.md").read_text()
    assert all(f"| `{name}` |" in text for name in OPTIONS)
    assert all(f"| `{key}` |" in text for key in model.RULES)
    assert all(f"| `{key}` |" in text for key in backend.PROFILE_KEYS)


def _defaults_in_the_plays() -> list[tuple[str, str, str]]:
    """(option, the literal of ``option | default(...)``, file) wherever a play or role writes one."""
    found = []
    for path in [*ROOT.glob("playbooks/**/*.yml"), *ROOT.glob("roles/*/*/*.yml"), *ROOT.glob("*.yml")]:
        for name, literal in re.findall(r"\b([a-z_][a-z0-9_]*)\s*\|\s*default\(([^()]*)\)", path.read_text()):
            if name in OPTIONS:
                found.append((name, literal, str(path.relative_to(ROOT))))
    return found


def test_the_plays_use_the_schemas_defaults():
    wrong = []
    for name, literal, where in _defaults_in_the_plays():
        opt = OPTIONS[name]
        value = yaml.safe_load(literal.replace("none", "null")) if literal.strip() else None
        expected = [opt.default, opt.extra.get("slurm_default") if "slurm" in where else opt.default]
        if value in ("", None) and opt.optional:
            continue
        planners = {f.name: f.default for f in dataclasses.fields(layout.LayoutRequest)}
        if value is None and planners.get(name, object()) == opt.default:
            continue  # passed only when given (the vendor recipe tells them apart): the planner's default is the same
        if value in expected:
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool) and float(value) in expected:
            continue
        wrong.append(f"{where}: {name} | default({literal}) but the schema says {opt.default!r}")
    assert wrong == []


def test_the_filters_read_the_inventory_keys_this_test_assumes():
    text = (ROOT / "plugins" / "filter" / "trainops_cluster.py").read_text()
    assert f"NODE_KEYS = {NODE_KEYS!r}".replace("'", '"') in text


def test_the_core_agrees_with_the_schema():
    request = {f.name: f.default for f in PlanRequest.options() if not callable(f.default_factory)}
    assert request["master_port"] == OPTIONS["master_port"].default
    assert DEFAULT_HEADROOM == OPTIONS["memory_headroom_fraction"].default
    for f in layout.LayoutRequest.__dataclass_fields__.values():
        assert OPTIONS[f.name].default == f.default, f.name
    assert OPTIONS["precision"].choices == layout.PRECISIONS
    assert OPTIONS["recompute"].choices == layout.RECOMPUTE
    assert OPTIONS["transformer_impl"].choices == layout.TRANSFORMER_IMPLS
    assert OPTIONS["tokenizer_type"].choices == TOKENIZER_TYPES
    assert OPTIONS["launcher"].choices == slurm.LAUNCHERS
    assert OPTIONS["straggler_ratio"].default == straggler.DEFAULT_RATIO
    training = megatron_args.TrainingConfig()
    assert OPTIONS["distributed_timeout_minutes"].default == training.distributed_timeout_minutes
    assert set(watch.NAMES) | set(data_request.NAMES) <= set(OPTIONS)
    assert set(model.RULES) == set(model.ModelSpec.__dataclass_fields__)


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("tp", "²", "is not an integer"),
        ("tp", "", "-e tp= is empty"),
        ("tp", "  ", "-e tp= is empty"),
        ("tp", "none", "must be set"),
        ("vpp", "none", None),
        ("accelerator_memory_gib", "nan", "is not a finite number"),
        ("accelerator_memory_gib", float("inf"), "is not a finite number"),
        ("accelerator_memory_gib", "0", "must be a number > 0"),
        ("run_id", "../../x", "must be one directory name"),
        ("run_id", "a" * 101, "must be one directory name"),
        ("exp", "a\tb", "contains a control character"),
        ("work_home", "/data\nx", "contains a control character"),
        ("ansible_host", "127.0.0.1 ", "has spaces around it"),
        ("container_name", "train;rm", "must be one directory name"),
        ("model", "../secret", "must be a preset name"),
        ("model", "/etc/passwd", "must name a .yml file"),
        ("backend_env", {"A": "1\nB=2"}, "one-line strings"),
        ("backend_env", {"A": float("nan")}, "one-line strings"),
        ("training", "foo", "is not a mapping"),
        ("force", "maybe", "must be true or false"),
        ("slurm_time", "1:75:00", "minutes or seconds of 60"),
        ("hang_timeout", "AUTO", None),
    ],
)
def test_convert_names_the_option_the_value_and_the_fix(name, value, words):
    if words is None:
        convert(name, value)
        return
    with pytest.raises(OptionError) as caught:
        convert(name, value)
    assert f"-e {name}" in str(caught.value) and words in str(caught.value)


def test_convert_converts():
    assert convert("tp", " 2 ") == 2 and convert("pp", 2.0) == 2 and convert("force", "yes") is True
    assert convert("hang_timeout", "auto") == "auto" and convert("hang_timeout", "30") == 30.0
    assert convert("slots", 8, "inventory n1") == 8
    with pytest.raises(OptionError, match="^inventory n1: slots=17 must be"):
        convert("slots", 17, "inventory n1")


def test_one_line_keeps_a_value_on_its_line():
    assert options.one_line("r1\ntouch /tmp/x #\x00") == "r1\\x0atouch /tmp/x #\\x00"


def test_the_site_settings_and_the_rules_name_what_exists():
    """Each site setting is a role's parameter or default (or a shared name of trainops_defaults), not also an
    option; each rule's option exists and a broken rule names it."""
    names = {name for path in (ROOT / "roles").glob("*/defaults/main.yml") for name in _yaml(path) or {}}
    for path in (ROOT / "roles").glob("*/meta/argument_specs.yml"):
        for spec in (_yaml(path)["argument_specs"] or {}).values():
            names.update((spec or {}).get("options") or {})
    assert set(options.SITE_SETTINGS) <= names, set(options.SITE_SETTINGS) - names
    assert not set(options.SITE_SETTINGS) & set(OPTIONS)
    for rule in options.RULES:
        assert rule.option in OPTIONS, rule.option
    broken = options.rule_problems({"keep_every": 5}, {"keep_checkpoints": 0})
    assert broken[0].startswith("-e keep_every=5 keeps milestone saves from retention")
    assert options.rule_problems({"keep_every": 5}, {}) == []  # a rule on what did not convert: not judged


@pytest.mark.parametrize(
    ("name", "text", "words"),
    [
        ("health", "off", 'read by YAML 1.1 as the boolean false, not as written; quote it: health: "off"'),
        ("exp", "no", 'quote it: exp: "no"'),
        ("slurm_time", "1:30:00", 'as 5400 (base 60), not as written; quote it: slurm_time: "1:30:00"'),
        ("slots", "010", "as the octal number 8, not as written; write 10 without the leading zero"),
        ("run_id", "2026-12-01", 'as a date (2026-12-01), not as written; quote it: run_id: "2026-12-01"'),
        ("megatron_version", "0.10", 'as the number 0.1, not as written; quote it: megatron_version: "0.10"'),
        ("hang_timeout", "1:30", "as 90 (base 60), not as written; write it as a number > 0 or auto"),
    ],
)
def test_as_written_says_what_yaml_made_of_a_value_and_the_fix(name, text, words):
    assert words in options.as_written(name, text, yaml.safe_load(text))


@pytest.mark.parametrize(("name", "text"), [("megatron_version", "0.14"), ("tp", "2"), ("force", "yes"),
                                            ("train_wait", "60.0"), ("slurm_gpus_per_node", "true")])  # fmt: skip
def test_as_written_passes_what_means_the_same(name, text):
    assert options.as_written(name, text, yaml.safe_load(text)) is None
