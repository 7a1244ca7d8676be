"""The run's launch files rendered from the project's templates with plain Jinja2, where Ansible is not: the run's
supervisor renders an elastic re-plan's files on the cluster with it (trainops.lifecycle), from the same template
texts and variables train.yml's render role used (the templates use only Jinja's own filters and these three).
Jinja2 comes with torch (one of its requirements), so every training image has it."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from .inputs import rendered_files
from .options import one_line
from .shell import shell_arg_lines


def environment(templates: Mapping[str, str]):
    """A Jinja2 environment over ``templates`` (name without ``.j2`` -> text) that renders as
    ``ansible.builtin.template`` does (``trim_blocks``, the trailing newline kept), with the templates' filters; a
    variable a template needs and is not given is an error."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.DictLoader(dict(templates)),
        trim_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # noqa: S701 - shell scripts, not HTML
    )
    env.filters.update(quote=lambda value: shlex.quote(str(value)), trainops_one_line=one_line)
    env.filters["trainops_shell_arg_lines"] = shell_arg_lines
    return env


def render_files(
    plan: Mapping[str, Any], templates: Mapping[str, str], variables: Mapping[str, Any]
) -> dict[str, tuple[str, int]]:
    """Every file roles/render writes for ``plan`` (:func:`trainops.inputs.rendered_files`), name -> (text, mode),
    with plan.json; ``templates``: template name (without ``.j2``) -> its text; ``variables``: the render role's
    (``render_backend``, ``render_container_ssh_port``, ...). Rendered as ``ansible.builtin.template`` renders
    (``trim_blocks``, the trailing newline kept); a variable a template needs and ``variables`` lacks is an error."""
    import json

    env = environment(templates)
    out: dict[str, tuple[str, int]] = {}
    for item in rendered_files(plan):
        template = env.get_template(item["template"])
        text = template.render(dict(variables, render_plan=plan, node=item["node"] or {}))
        out[item["name"]] = (text, int(item["mode"], 8))
    out["plan.json"] = (json.dumps(plan, indent=2, sort_keys=True) + "\n", 0o644)
    return out
