"""The pure-Python core of mtt-train-ops.

Nothing in this package imports Ansible: modules and filters are thin wrappers
over it, and the unit tests import it directly (``plugins/module_utils`` on
``sys.path``). Every number of a Megatron launch is derived here, once.
"""

__all__ = [
    "cluster",
    "collective",
    "errors",
    "flops",
    "gmi",
    "layout",
    "megatron_args",
    "megatron_log",
    "memory",
    "model",
    "plan",
    "recommend",
    "tokenizer",
]
