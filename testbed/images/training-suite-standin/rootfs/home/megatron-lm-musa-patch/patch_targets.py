"""TESTBED ONLY: what each patch of cpu_patch.py answers in Megatron-LM core_v0.14.0, as data.

This module imports nothing but the standard library, so that tests/unit/test_cpu_patch_targets.py can read it
without torch. Every patch of cpu_patch.py has one entry in PATCHES, keyed by the name that MTT_CPU_PATCH_SKIP
takes; every entry lists the Megatron lines it answers. A Target is checked against the Megatron tree: its
``text`` must be on line ``line`` of ``path``, and its ``symbol`` (a function, ``Class.method``, or a module-level
name) must be defined in ``path`` (around that line when the target is the patched function itself).
"""

from __future__ import annotations

from dataclasses import dataclass

#: The Megatron-LM version these line numbers are of.
MEGATRON_TAG = "core_v0.14.0"


@dataclass(frozen=True)
class Target:
    path: str  # relative to the Megatron-LM tree
    line: int  # 1-based
    text: str  # a piece of that line, as written in the tree
    symbol: str = ""  # the function, Class.method or module name whose body holds the line (or which is replaced)


@dataclass(frozen=True)
class Patch:
    point: str  # the point of the reference (crash 1-8, rng, D1-D3)
    why: str
    targets: tuple[Target, ...]


PATCHES: dict[str, Patch] = {
    "environment": Patch(
        point="4, 5, 8",
        why="TORCHDYNAMO_DISABLE=1 (the torch.compile warm-up of fused bias-GELU runs eagerly), "
        "CUDA_DEVICE_MAX_CONNECTIONS=1 (validate_args requires it with TP>1 before Blackwell), and a loud "
        "failure when psutil is missing (without it the checkpoint writer's child raises and the job hangs)",
        targets=(
            Target("megatron/training/initialize.py", 474, "output = bias_gelu(bias, input)", "_warmup_jit_function"),
            Target("megatron/training/arguments.py", 873, 'CUDA_DEVICE_MAX_CONNECTIONS\') == "1"', "validate_args"),
            Target(
                "megatron/core/dist_checkpointing/strategies/filesystem_async.py",
                642,
                "psutil is not installed",
                "_process_memory",
            ),
        ),
    ),
    "cuda_api": Patch(
        point="1, 2, 4, 7",
        why="torch.cuda answers for the CPU: available, 1 device (index 0), no-op set_device/synchronize/"
        "empty_cache, inert streams and events, memory figures of the process, properties of a Hopper-like card, "
        "the CPU generator's state as the card's",
        targets=(
            Target("megatron/training/initialize.py", 59, "assert torch.cuda.is_available()", "initialize_megatron"),
            Target("megatron/training/initialize.py", 301, "device_count = torch.cuda.device_count()"),
            Target("megatron/training/initialize.py", 341, "if device_count > 0:", "_initialize_distributed"),
            Target("megatron/training/initialize.py", 402, "if torch.cuda.device_count() > 0:", "_set_random_seed"),
            Target("megatron/training/utils.py", 413, "torch.cuda.get_device_properties", "get_device_arch_version"),
            Target("megatron/training/arguments.py", 850, "get_device_arch_version() < 10", "validate_args"),
            Target("megatron/training/training.py", 956, "torch.cuda.stream(torch.cuda.Stream())", "get_model"),
            Target("megatron/core/timers.py", 139, "torch.cuda.synchronize()", "Timer.start"),
            Target("megatron/training/utils.py", 267, "torch.cuda.memory_allocated()", "report_memory"),
            Target(
                "megatron/core/tensor_parallel/random.py", 196, "torch.cuda.get_rng_state()", "CudaRNGStatesTracker.add"
            ),
        ),
    ),
    "device_redirect": Patch(
        point="7",
        why="tensors asked for on 'cuda', 'cuda:N' or a device index are made on the CPU; Tensor.cuda() and "
        "Module.cuda() keep the tensor where it is (a TorchFunctionMode, so no call site is edited)",
        targets=(
            Target("megatron/training/training.py", 893, "model_module.cuda(torch.cuda.current_device())", "get_model"),
            Target(
                "megatron/core/tensor_parallel/layers.py",
                865,
                "device=torch.cuda.current_device()",
                "ColumnParallelLinear.__init__",
            ),
            Target(
                "megatron/core/pipeline_parallel/schedules.py", 578, 'device="cuda"', "forward_backward_no_pipelining"
            ),
            Target("megatron/training/initialize.py", 455, 'device="cuda"', "_warmup_jit_function"),
        ),
    ),
    "cuda_type_names": Patch(
        point="6",
        why="Tensor.type() of a CPU tensor answers torch.cuda.<T>Tensor, the names Megatron's optimizers check",
        targets=(
            Target(
                "megatron/core/optimizer/clip_grads.py",
                167,
                "assert param.grad.type() == 'torch.cuda.FloatTensor'",
                "clip_grad_by_total_norm_fp32",
            ),
            Target(
                "megatron/core/optimizer/distrib_optimizer.py",
                400,
                "elif model_param.type() == 'torch.cuda.FloatTensor':",
                "DistributedOptimizer._build_model_and_main_param_groups",
            ),
        ),
    ),
    "cuda_rng": Patch(
        point="rng",
        why="the CUDA generator is the CPU's default generator, so that seeding (model_parallel_cuda_manual_seed) "
        "and set_rng_state on resume take effect instead of being queued forever by torch's _lazy_call",
        targets=(
            Target("megatron/core/tensor_parallel/random.py", 12, "from torch.cuda import _lazy_call", "_lazy_call"),
            Target("megatron/core/tensor_parallel/random.py", 111, "_lazy_call(cb)", "_set_cuda_rng_state"),
            Target(
                "megatron/core/tensor_parallel/random.py",
                198,
                "torch.cuda.manual_seed(seed)",
                "CudaRNGStatesTracker.add",
            ),
            Target("megatron/training/checkpointing.py", 1695, "torch.cuda.set_rng_state(", "load_checkpoint"),
            Target("megatron/training/checkpointing.py", 1705, "torch.cuda.set_rng_state(", "load_checkpoint"),
        ),
    ),
    "no_compile_dependencies": Patch(
        point="3",
        why="as the vendor's musa_patch does, Megatron's runtime compile step is a no-op: rank 0 would build the "
        "dataset helpers with make (provision.yml builds them once per container instead) and the legacy fused "
        "kernels with nvcc (the local transformer does not use them)",
        targets=(
            Target("megatron/training/initialize.py", 162, "_compile_dependencies()", "initialize_megatron"),
            Target("megatron/training/initialize.py", 185, "compile_helpers()", "_compile_dependencies"),
            Target("megatron/training/initialize.py", 220, "fused_kernels.load(args)", "_compile_dependencies"),
        ),
    ),
    "enum_pickle_by_value": Patch(
        point="resume",
        why="Debian 12's Python 3.11.2 pickles enum members as getattr(cls, name), which torch.load's default "
        "weights_only unpickler refuses: the resume of a torch_dist checkpoint (common.pt holds Megatron's args, "
        "with an AttnBackend) fails with UnpicklingError; Megatron's allow-listed enums are pickled by value",
        targets=(
            Target(
                "megatron/core/dist_checkpointing/strategies/common.py",
                89,
                "return torch.load(load_path, map_location='cpu')",
                "TorchCommonLoadStrategy.load_common",
            ),
            Target("megatron/core/safe_globals.py", 16, "SAFE_GLOBALS = [", "SAFE_GLOBALS"),
            Target("megatron/core/safe_globals.py", 24, "AttnBackend,", "SAFE_GLOBALS"),
        ),
    ),
    "distopt_d1_step_before_first_step": Patch(
        point="D1",
        why="DistributedOptimizer.state_dict() asserts one Adam step among the parameters' states; before the "
        "first step torch's Adam has no state (a resume builds its load template then): report step 0",
        targets=(
            Target(
                "megatron/core/optimizer/distrib_optimizer.py",
                619,
                "assert len(steps) == 1",
                "DistributedOptimizer.state_dict",
            ),
            Target(
                "megatron/core/optimizer/distrib_optimizer.py",
                1172,
                "self.load_state_dict(self.state_dict())",
                "DistributedOptimizer.sharded_state_dict",
            ),
        ),
    ),
    "distopt_d2_step_not_in_checkpoint": Patch(
        point="D2",
        why="a fully_sharded_model_space checkpoint has no per-parameter 'step' (it is skipped on save and "
        "restored from param_groups), but the load copies every key of the optimizer state: KeyError 'step'",
        targets=(
            Target(
                "megatron/core/optimizer/distrib_optimizer.py",
                907,
                "dst_tensors[key].copy_(tensors[key])",
                "DistributedOptimizer._set_main_param_and_optimizer_states",
            ),
            Target(
                "megatron/core/optimizer/distrib_optimizer.py",
                1456,
                "if state_key == 'step':",
                "DistributedOptimizer.sharded_param_state_fs_model_space",
            ),
        ),
    ),
    "distopt_d3_shared_step": Patch(
        point="D3",
        why="load_state_dict() gives every parameter's state the same 'step' tensor; torch's Adam increments it "
        "in place once per parameter, so after a resume the bias correction is wrong and the loss drifts",
        targets=(
            Target(
                "megatron/core/optimizer/distrib_optimizer.py",
                798,
                "step = torch.tensor(steps[0], dtype=torch.float)",
                "DistributedOptimizer.load_state_dict",
            ),
            Target(
                "megatron/core/optimizer/distrib_optimizer.py",
                802,
                's["step"] = step',
                "DistributedOptimizer.load_state_dict",
            ),
        ),
    ),
}
