"""Shared test set-up: the core on sys.path, model presets and clusters."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

from presets import BACKENDS, load_preset  # noqa: E402
from trainops.cluster import uniform_cluster  # noqa: E402
from trainops.model import model_from_dict  # noqa: E402


@pytest.fixture(scope="session")
def llama8b():
    return model_from_dict(load_preset("llama3-8b"))


@pytest.fixture(scope="session")
def llama70b():
    return model_from_dict(load_preset("llama3-70b"))


@pytest.fixture(scope="session")
def tiny():
    return model_from_dict(load_preset("tiny"))


@pytest.fixture
def two_nodes():
    return uniform_cluster(2, 8, BACKENDS)


@pytest.fixture
def one_node():
    return uniform_cluster(1, 8, BACKENDS)
