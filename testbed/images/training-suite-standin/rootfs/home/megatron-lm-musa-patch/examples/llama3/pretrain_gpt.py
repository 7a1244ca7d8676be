"""TESTBED ONLY: Megatron-LM's own pretrain_gpt.py, run unchanged on the CPU behind the project's CPU patch.

    cd /home/megatron-lm-musa-patch/examples/llama3
    PYTHONPATH=/home/Megatron-LM:/home/megatron-lm-musa-patch \
    torchrun ... /home/megatron-lm-musa-patch/examples/llama3/pretrain_gpt.py --distributed-backend gloo ...

The stand-in's image has the vendor's layout (docs/megatron-on-cpu.md): the vendor's
/home/megatron-lm-musa-patch/examples/llama3/pretrain_gpt.py imports musa_patch first and trains; this file, at the
same path, imports the CPU patch (cpu_patch.py, two directories up) first, then runs
${MEGATRON_LM_DIR:-/home/Megatron-LM}/pretrain_gpt.py as __main__ with its arguments.
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
        raise SystemExit(f"megatron-lm-musa-patch (testbed): no {script} (this image has no Megatron-LM tree)")
    patch_home = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.path[:0] = [patch_home, megatron]
    import cpu_patch

    cpu_patch.apply()
    sys.argv[0] = script
    runpy.run_path(script, run_name="__main__")
