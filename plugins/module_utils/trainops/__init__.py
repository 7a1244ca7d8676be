"""The pure-Python core of mtt-train-ops.

Nothing in this package imports Ansible: modules and filters are thin wrappers
over it, and the unit tests import it directly (``plugins/module_utils`` on
``sys.path``). Every number of a Megatron launch is derived here, once.
"""

__all__ = [
    "cluster",
    "flops",
    "layout",
    "megatron_args",
    "memory",
    "model",
    "plan",
    "recommend",
    "tokenizer",
]
