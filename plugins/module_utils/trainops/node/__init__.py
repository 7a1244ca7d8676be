"""The programs the nodes run, in the training container (installed with the core; see trainops.node_package).

Each is a script of its own (``python3 /opt/mtt-train-ops/<version>/trainops/node/NAME.py ...``), with the
standard library only unless it says otherwise (the smoke job and the collective check need torch, the dataset
helpers' check Megatron).
"""
