"""Model presets for tests, read from the project's models/ directory."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def load_preset(name: str) -> dict:
    return yaml.safe_load((ROOT / "models" / f"{name}.yml").read_text())
