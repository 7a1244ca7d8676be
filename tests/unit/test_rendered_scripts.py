"""Every template rendered with hostile values in every field stays the script it was: valid bash, and no value
outside a single-quoted word or a comment (so that no value can run, or end a line, a comment or a here-document).

The checks on the controller (trainops.options) refuse such values long before; this test holds the templates to
their own quoting, should a value ever slip through. The templates are rendered by Ansible itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from presets import load_preset, make_plan
from trainops.backend import load_profile
from trainops.inputs import rendered_files
from trainops.render import environment, render_files

pytestmark = pytest.mark.playbook

ROOT = Path(__file__).resolve().parents[2]
MARK = "PWNED"
#: A value that would run a command, end a comment, end the Slurm task's here-document, or break a quote.
HOSTILE = f"x'\"$(touch {MARK})`touch {MARK}`;touch {MARK}&|><*\\ \nTASK\ntouch {MARK} # ${{{MARK}}}"
#: Fields whose value the templates branch on, not render; and environment variable names (checked as names).
KEEP = {"job", "visible_devices_env"}
HOSTS = [
    {"name": "node1", "ansible_host": "10.0.0.1", "slots": 2},
    {"name": "node2", "ansible_host": "10.0.0.2", "slots": 2},
]


def hostile(value: Any, key: str = "") -> Any:
    """``value`` with every string in it replaced by :data:`HOSTILE` (numbers and branch fields kept)."""
    if key in KEEP:
        return value
    if isinstance(value, dict):
        return {k: hostile(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [hostile(v) for v in value]
    if isinstance(value, str):
        return HOSTILE
    return value


def render_all(tmp_path: Path, accelerator: str, smoke: bool) -> dict[str, str]:
    """Every template, rendered by ansible-playbook with a hostile plan and backend profile."""
    plan = make_plan(
        model=load_preset("tiny"),
        hosts=[dict(h, accelerator=accelerator) for h in HOSTS],
        layout={"seq_length": 128, "gbs": 8, "precision": "bf16", "train_iters": 10},
        run_id="r1",
        smoke=smoke,
    )
    profile = load_profile(str(ROOT / "backends"), accelerator)
    bad_plan, bad_profile = hostile(plan), hostile(profile)
    bad_plan["nodes"] = [dict(node, name=HOSTILE, addr=HOSTILE) for node in bad_plan["nodes"]]
    bad_profile["launch_env"] = {name: HOSTILE for name in profile["launch_env"]}
    variables = {
        "render_plan": bad_plan,
        "render_backend": bad_profile,
        "render_container_ssh_port": 2222,
        "render_ssh_key": HOSTILE,
        "render_known_hosts": HOSTILE,
        "render_py_spy": HOSTILE,
        "render_stop_grace_s": 5,
        "render_node_programs": HOSTILE,
        "render_reach": bad_plan["nodes"],
        "render_here": bad_plan["master"],
        "slurm_plan": bad_plan,
        "slurm_options": [HOSTILE, "--nodes=2"],
        "slurm_batch_container": HOSTILE,
        "slurm_batch_go_timeout": 4,
        "slurm_batch_stop_grace_s": 5,
        "slurm_batch_max_restarts": 2,
        "slurm_batch_programs": HOSTILE,
    }
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    templates = sorted(p.name for p in (ROOT / "templates").glob("*.j2"))
    tasks = [
        {
            "ansible.builtin.copy": {
                "content": f"{{{{ lookup('ansible.builtin.template', '{ROOT / 'templates' / name}') }}}}",
                "dest": str(tmp_path / name[: -len(".j2")]),
                "mode": "0644",
            },
            "vars": {"node": "{{ render_plan.nodes[0] }}"},
        }
        for name in templates
    ]
    playbook = tmp_path / "render.yml"
    playbook.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), str(playbook), "-e", f"@{tmp_path / 'vars.json'}"],
        cwd=ROOT,
        env=dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {name: (tmp_path / name[: -len(".j2")]).read_text() for name in templates}


def unsafe_lines(script: str) -> list[int]:
    """Line numbers where :data:`MARK` stands outside a single-quoted word (``'...'``, ``$'...'``) or a comment.

    Followed as bash reads it: a ``$(...)`` starts a script of its own, also inside double quotes; a here-document
    runs to the first line equal to its word, and a quoted word's body is itself scanned as a script (the Slurm
    task runs it), an unquoted one's is expanded (no mark may stand there).
    """
    bad: list[int] = []
    stack = [["code", 0]]  # (state, open parentheses) per level of $( ... )
    i, pending = 0, []
    while i < len(script):
        c, frame = script[i], stack[-1]
        state = frame[0]
        if script.startswith(MARK, i) and state in ("code", "double"):
            bad.append(script.count("\n", 0, i) + 1)
        if state in ("code", "double") and script.startswith("$(", i):
            stack.append(["code", 0])
            i += 2
            continue
        if state == "code":
            if c == "\\":
                i += 2
                continue
            if script.startswith("$'", i):
                stack.append(["ansi", 0])
                i += 2
                continue
            if c == "'":
                stack.append(["single", 0])
            elif c == '"':
                stack.append(["double", 0])
            elif c == "#" and (i == 0 or script[i - 1] in " \t\n;(|&"):
                stack.append(["comment", 0])
            elif c == "(":
                frame[1] += 1
            elif c == ")" and len(stack) > 1:
                if frame[1]:
                    frame[1] -= 1
                else:
                    stack.pop()
            elif script.startswith("<<<", i):
                i += 3
                continue
            elif script.startswith("<<", i):
                word = script[i + 2 :].lstrip("-").lstrip().split()[0]
                pending.append((word.strip("'\""), word[0] in "'\""))
            elif c == "\n" and pending:
                for word, quoted in pending:
                    end = script.find(f"\n{word}\n", i)
                    body = script[i + 1 : end + 1] if end >= 0 else script[i + 1 :]
                    offset = script.count("\n", 0, i) + 1
                    lines = body.splitlines()
                    inner = unsafe_lines(body) if quoted else [n for n, line in enumerate(lines, 1) if MARK in line]
                    bad += [offset + n for n in inner]
                    i = end + len(word) + 1 if end >= 0 else len(script)
                pending = []
                continue
        elif state == "single" and c == "'":
            stack.pop()
        elif state in ("ansi", "double") and c == "\\":
            i += 2
            continue
        elif (state == "ansi" and c == "'") or (state == "double" and c == '"') or (state == "comment" and c == "\n"):
            stack.pop()
        i += 1
    return bad


def test_the_scanner_sees_what_bash_would_run():
    assert unsafe_lines(f"echo {MARK}\n") == [1]
    assert unsafe_lines(f"echo '{MARK}' \"{MARK}\"\n") == [1]
    assert unsafe_lines(f"# a comment {MARK}\necho 'a\n{MARK}'\n") == []
    assert unsafe_lines(f"# a comment\n{MARK}\n") == [2]
    assert unsafe_lines(f"read -r -d '' t <<'T'\necho '{MARK}'\nT\necho ok\n") == []
    assert unsafe_lines(f"read -r -d '' t <<'T'\necho 'a\nT\n{MARK}'\n") == [4]
    assert unsafe_lines(f"cat <<T\n'{MARK}'\nT\n") == [2]
    assert unsafe_lines(f"echo \"$(printf %q '{MARK}') $(echo {MARK})\"\n") == [1]
    assert unsafe_lines(f"x=$( (echo a) ; echo '{MARK}')\n") == []


@pytest.mark.parametrize(("accelerator", "smoke"), [("musa", False), ("cpu", True)])
def test_every_template_keeps_hostile_values_quoted(tmp_path, accelerator, smoke):
    for name, text in render_all(tmp_path, accelerator, smoke).items():
        assert MARK in text or name == "hostfile.j2", f"{name}: the hostile value was not rendered at all"
        if name == "hostfile.j2":
            assert len(text.splitlines()) == 2, text  # one line per node: no value adds a host
            continue
        checked = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
        assert checked.returncode == 0, f"{name}: {checked.stderr}"
        assert unsafe_lines(text) == [], f"{name}: a value stands outside its quotes on line(s) {unsafe_lines(text)}"


def test_the_supervisors_renderer_writes_what_the_render_role_writes(tmp_path):
    """An elastic re-plan's files are rendered on the cluster by trainops.render (plain Jinja2): for the same plan
    and variables every template gives the render role's text, byte for byte (here with every value hostile)."""
    by_ansible = render_all(tmp_path, "musa", False)
    variables = json.loads((tmp_path / "vars.json").read_text())
    templates = {p.name[: -len(".j2")]: p.read_text() for p in (ROOT / "templates").glob("*.j2")}
    env = environment(templates)
    for name in templates:
        text = env.get_template(name).render(dict(variables, node=variables["render_plan"]["nodes"][0]))
        assert text == by_ansible[f"{name}.j2"], name
    written = render_files(variables["render_plan"], templates, variables)
    assert sorted(written) == sorted({f["name"] for f in rendered_files(variables["render_plan"])} | {"plan.json"})


def test_on_node_runs_here_for_the_supervisors_node_and_for_the_one_a_move_names(tmp_path):
    """on-node.sh runs a command itself for the node it was rendered for (-e supervisor_host's), and, once a move
    wrote ``supervisor-here`` beside it, for that node instead: the old one is then reached over ssh (here an
    address where nothing listens: ssh's 255, the node unreachable)."""
    templates = {"on-node.sh": (ROOT / "templates" / "on-node.sh.j2").read_text()}
    script = tmp_path / "on-node.sh"
    script.write_text(environment(templates).get_template("on-node.sh").render({
        "render_plan": {"run_id": "r1"}, "render_container_ssh_port": 1, "render_ssh_key": str(tmp_path / "key"),
        "render_known_hosts": str(tmp_path / "known_hosts"), "render_here": "node3",
        "render_reach": [{"name": f"node{i}", "addr": "127.0.0.1"} for i in (1, 2, 3)],
    }))  # fmt: skip

    def run(name: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(script), name, "echo", "here"], capture_output=True, text=True, timeout=30)

    assert run("node3").stdout == "here\n" and run("node1").returncode == 255
    (tmp_path / "supervisor-here").write_text("node1")
    assert run("node1").stdout == "here\n" and run("node3").returncode == 255
    assert run("node9").returncode == 2


def test_the_probe_takes_a_pid_file_caught_mid_write_for_a_launch_not_started_yet(tmp_path):
    """A pid file read while its launch writes it is empty (seen: a loaded testbed's watcher called the master's
    launch killed 0.4 s after the fan-out started it). launch.sh writes it whole (a new file renamed into place); the
    probe takes an empty one for "waiting", and a group that is really gone for "stopped"."""
    plan = make_plan(model=load_preset("tiny"), hosts=[dict(HOSTS[0], accelerator="cpu")],
                     layout={"seq_length": 128, "gbs": 8, "precision": "bf16", "train_iters": 10}, run_id="r1",
                     smoke=True)  # fmt: skip
    plan["run_dir"] = str(tmp_path)
    names = ("probe.sh", "launch.sh")
    templates = {name: (ROOT / "templates" / f"{name}.j2").read_text() for name in names}
    env = environment(templates)
    variables = {"render_plan": plan, "render_container_ssh_port": 2222, "render_ssh_key": "k",
                 "render_known_hosts": "h", "render_backend": load_profile(str(ROOT / "backends"), "cpu"),
                 "render_node_programs": "/p", "node": plan["nodes"][0]}  # fmt: skip
    (tmp_path / "probe.sh").write_text(env.get_template("probe.sh").render(variables))
    launch = env.get_template("launch.sh").render(variables)
    assert 'printf \'%s\\n\' "$$" > "${pid_file}.new" && mv -f -- "${pid_file}.new" "${pid_file}"' in launch
    (tmp_path / "pids").mkdir()
    pid_file = tmp_path / "pids" / f"{plan['master']}.pid"

    def state() -> list[str]:
        out = subprocess.run(["bash", str(tmp_path / "probe.sh")], capture_output=True, text=True, timeout=30).stdout
        return next(line.split("\t")[2:] for line in out.splitlines() if line.startswith("node\t"))

    pid_file.write_text("")
    assert state() == ["waiting", "-"]
    gone = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True).stdout.strip()
    pid_file.write_text(gone + "\n")
    assert state() == ["stopped", gone]
