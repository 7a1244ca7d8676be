"""Model presets for tests, read from the project's models/ directory."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def load_preset(name: str) -> dict:
    return yaml.safe_load((ROOT / "models" / f"{name}.yml").read_text())


def _backends() -> dict:
    import sys

    sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))
    from trainops.backend import load_profiles

    return load_profiles(str(ROOT / "backends"))


#: Every backend profile by accelerator, as the layout role passes them to the planner.
BACKENDS = _backends()


def make_plan(request=None, /, **options):
    """The planner with the project's backend profiles, as the layout role calls it."""
    from trainops.plan import make_plan as plan

    if request is not None:
        return plan(request, **options)
    return plan(**{"backends": BACKENDS, **options})
