"""Write docs/options.md from the one schema of every input (trainops.options, trainops.model, trainops.backend).

    python3 tools/options_table.py            # rewrite docs/options.md
    python3 tools/options_table.py --check    # exit 1 when docs/options.md is not what the schema says

tests/unit/test_options.py runs the check, so the table cannot drift from the schema.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

from trainops import backend, model, options  # noqa: E402

DOC = ROOT / "docs" / "options.md"
WHERE = {
    "-e": "`-e`, or the inventory's `all.vars`",
    "cluster": "`-e`, or the inventory (the same on every node)",
    "host": "inventory host",
}
HEADER = """# Every input

Generated from the schema (`plugins/module_utils/trainops/options.py`, `model.py`, `backend.py`) by
`python3 tools/options_table.py`; a unit test fails when it is out of date. Every playbook's first play checks
each option it reads, and the inventory, on the controller before any node is contacted
(`trainops.inputs`; docs/inventory.md, "What is checked where"):

- a bad value is named with the value and the fix, every problem at once, and nothing is written;
- an empty value (`-e tp=`) is an error, never the default; `none` means "not set" only where an option has no
  default; numbers must be finite;
- text values must be one line (no newline, tab or NUL) and without spaces around them;
- an `-e` name that no playbook reads is refused with the nearest known name (`-e tpp=2: no such option; did you
  mean tp?`); `-e allow_unknown=true` turns that into a warning. Ansible's own variables (`ansible_*`) and the site
  settings among the roles' parameters (below) pass; a role's other parameters (`layout_nodes`, `render_dest`, ...)
  are its own, set by the playbooks from these options, and are refused as unknown. An option that this playbook
  ignores but another reads gets a warning;
- the inventory and the `-e` arguments are also read as written: a value YAML 1.1 rewrites (an unquoted `off`,
  `no` or `yes` is a boolean, `010` the octal 8, `1:30:00` the base-60 5400, `2026-12-01` a date, `0.10` the
  number 0.1) is refused where that changes its meaning, naming the file and line and saying to quote it; so is a
  host listed twice, a name no playbook reads in `all.vars`, the `nodes` group's or a node's vars, a run option
  (where `-e`, below) on a host or in a group's vars, where it is not read, and an `-e` that a space split
  (`-e 'exclude_nodes=node1, node2'`);
- an `-e` option that needs or excludes others is refused with the rest (the table after the options).

Kinds: `name` is one path component of at most 100 characters (letters, digits, `. _ + = @ -`, starting with a
letter or digit: it names a directory on every node and appears in scripts); `container_path` an absolute path
inside the training containers (never read on the controller, except that plan.yml and train.yml detect the
tokenizer's type from a regular file at the same path on the controller, and say so); `controller_path` a
directory on the controller, against the directory ansible-playbook was started in; `address` an IP address or a
host name; `model` a preset name of `models/` or an absolute path to a preset file.
"""


def _default(opt: options.Option) -> str:
    if opt.default is None:
        return "unset"
    if opt.default == {}:
        return "`{}`"
    return f"`{opt.default}`"


def _kind(opt: options.Option) -> str:
    if opt.kind == "choice" and opt.choices:
        return " \\| ".join(f"`{c}`" for c in opt.choices)
    if opt.kind == "choice":
        return "a profile of `backends/`"
    text = opt.kind
    if opt.kind in ("int", "float"):
        low = "" if opt.minimum is None else (f" > {opt.minimum:g}" if opt.above else f" >= {opt.minimum:g}")
        high = "" if opt.maximum is None else f" <= {opt.maximum:g}"
        text += low + ("," if low and high else "") + high
    if opt.words:
        text += " or " + ", ".join(f"`{w}`" for w in opt.words)
    return text


def render() -> str:
    lines = [HEADER, "## Options and inventory fields", ""]
    lines += ["| option | where | kind | default | read by | meaning |", "| --- | --- | --- | --- | --- | --- |"]
    for opt in options.OPTIONS.values():
        books = ", ".join(opt.playbooks) if opt.playbooks != options.PLAYBOOKS else "every playbook"
        lines.append(
            f"| `{opt.name}` | {WHERE[opt.where]} | {_kind(opt)} | {_default(opt)} | {books} | {opt.doc} ({opt.docs}) |"
        )
    lines += ["", "Required: " + "; ".join(f"{b}.yml: `{'`, `'.join(n)}`" for b, n in options.REQUIRED.items()), ""]
    lines += ["## Options that need or exclude others", "", "An option given with `-e` is judged against these "
              "on the controller with every other problem, before any node (`options.RULES`; a site's default in "
              "the inventory is not, since some runs need it and others do not). data.yml's input must not be one "
              "of the files its output_prefix writes.", ""]  # fmt: skip
    lines += ["| option | needs | otherwise |", "| --- | --- | --- |"]
    for rule in options.RULES:
        lines.append(f"| `{rule.option}` | {rule.needs} | {rule.option} {rule.why} |")
    lines += ["", "## Site settings among the roles' parameters", ""]
    lines += ["Set in the inventory or with `-e` (each role's `meta/argument_specs.yml` types it): "
              + ", ".join(f"`{name}`" for name in options.SITE_SETTINGS) + ".", ""]  # fmt: skip
    lines += ["## Model preset keys (`models/<name>.yml`, or `-e model=/abs/path.yml`)", ""]
    lines += ["| key | type | rule |", "| --- | --- | --- |"]
    for key, (kind, rule) in model.RULES.items():
        if isinstance(rule, tuple):
            text = "one of " + ", ".join(f"`{r}`" for r in rule)
        elif kind is int:
            text = f">= {rule}"
        elif kind is float:
            text = f"finite, > {rule:g}"
        else:
            text = "non-empty" if key == "name" else ""
        lines.append(f"| `{key}` | {kind.__name__} | {text} |")
    lines += ["", "## Backend profile keys (`backends/<accelerator>.yml`)", ""]
    lines += ["| key | type | required | meaning |", "| --- | --- | --- | --- |"]
    for key, (kind, required, doc) in backend.PROFILE_KEYS.items():
        name = kind.__name__ if isinstance(kind, type) else "number"
        lines.append(f"| `{key}` | {name} | {'yes' if required else 'no'} | {doc} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    text = render()
    if parser.parse_args().check:
        if DOC.read_text(encoding="utf-8") != text:
            print(f"{DOC} is out of date: run python3 tools/options_table.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
