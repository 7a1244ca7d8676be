"""The one error type of the core: a list of problems, each a full sentence."""

from __future__ import annotations

from collections.abc import Iterable


class PlanError(ValueError):
    """Raised with every problem found, so a user fixes them all in one go."""

    def __init__(self, problems: Iterable[str]):
        self.problems = list(problems)
        super().__init__("\n".join(f"- {p}" for p in self.problems))
