"""TESTBED ONLY: Megatron-LM's own pretrain_gpt.py, run unchanged on the CPU behind the project's CPU patch.

    torchrun ... /home/megatron-lm-cpu-patch/pretrain_gpt.py --distributed-backend gloo --transformer-impl local ...

The analogue of the vendor's /home/megatron-lm-musa-patch/pretrain_gpt.py: apply the patch (cpu_patch.py, next
to this file), then run ${MEGATRON_LM_DIR:-/home/Megatron-LM}/pretrain_gpt.py as __main__ with its arguments.
"""

import os
import runpy
import sys

# The checkpoint writer's Manager process is spawned and re-imports the main module: only the launching
# process may apply the patch and start training, or a save hangs.
if __name__ == "__main__":
    megatron = os.environ.get("MEGATRON_LM_DIR", "/home/Megatron-LM")
    script = os.path.join(megatron, "pretrain_gpt.py")
    if not os.path.isfile(script):
        raise SystemExit(f"megatron-lm-cpu-patch: no {script} (this image has no Megatron-LM tree)")
    sys.path[:0] = [os.path.dirname(os.path.abspath(__file__)), megatron]
    import cpu_patch

    cpu_patch.apply()
    sys.argv[0] = script
    runpy.run_path(script, run_name="__main__")
