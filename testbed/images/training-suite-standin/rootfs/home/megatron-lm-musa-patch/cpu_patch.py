"""TESTBED ONLY: run Megatron-LM core_v0.14.0's training code on the CPU, unmodified, by patching from outside.

The analogue of the vendor's /home/megatron-lm-musa-patch: ``apply()`` runs before Megatron's training code is
imported, answers torch.cuda for the CPU, and replaces a few Megatron functions. No Megatron file is edited.
Each patch below is a function registered with ``@patch(name)``; ``patch_targets.PATCHES[name]`` lists the
Megatron lines it answers and why (README.md has the same table). This is testbed code, like the
``mthreads-gmi`` stand-in: it is not part of the product and never runs on a cluster with cards.

``MTT_CPU_PATCH_SKIP=name[,name...]`` leaves patches out. It is for tests only (they show that each patch is
needed); a run with a patch left out fails or trains wrongly.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import resource
import sys
import types

from patch_targets import PATCHES

_REGISTRY: dict[str, types.FunctionType] = {}


def patch(name: str):
    """Register a patch under its name in patch_targets.PATCHES."""

    def register(function):
        assert name in PATCHES, f"patch {name} has no entry in patch_targets.PATCHES"
        _REGISTRY[name] = function
        return function

    return register


def skipped() -> set[str]:
    names = {n.strip() for n in os.environ.get("MTT_CPU_PATCH_SKIP", "").split(",") if n.strip()}
    unknown = names - set(PATCHES)
    if unknown:
        raise SystemExit(f"MTT_CPU_PATCH_SKIP names unknown patches {sorted(unknown)}; known: {sorted(PATCHES)}")
    return names


def apply() -> list[str]:
    """Apply every patch not skipped, in the order of PATCHES; returns the names applied."""
    leave_out = skipped()
    applied = []
    for name in PATCHES:
        if name in leave_out:
            print(f"[cpu_patch] TEST ONLY: patch {name} left out", file=sys.stderr, flush=True)
            continue
        _REGISTRY[name]()
        applied.append(name)
    return applied


# --- the environment (needed before torch is imported) ---------------------------------------------------------
@patch("environment")
def _environment() -> None:
    """TORCHDYNAMO_DISABLE=1: initialize.py:474 warms up torch.compile'd fusions; on the CPU they run eagerly.
    CUDA_DEVICE_MAX_CONNECTIONS=1: arguments.py:873 requires it with TP>1 on a card older than Blackwell (the
    cuda_api patch answers Hopper's properties). psutil: filesystem_async.py:642 raises without it in the
    checkpoint writer's forked child, and the job then hangs instead of failing: fail here instead."""
    os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    try:
        import psutil  # noqa: F401
    except ImportError as exc:
        raise SystemExit(
            "cpu_patch: psutil is missing; without it Megatron's checkpoint writer hangs"
        ) from exc


# --- torch.cuda answered for the CPU ---------------------------------------------------------------------------
class _Stream:
    """A CUDA stream on the CPU: work is done when it is issued, so every wait is already over."""

    def __init__(self, *args, **kwargs):
        pass

    def wait_stream(self, stream):
        pass

    def wait_event(self, event):
        pass

    def record_event(self, event=None):
        return event or _Event()

    def synchronize(self):
        pass

    def query(self):
        return True


class _Event:
    def __init__(self, *args, **kwargs):
        pass

    def record(self, stream=None):
        pass

    def wait(self, stream=None):
        pass

    def synchronize(self):
        pass

    def query(self):
        return True

    def elapsed_time(self, end):
        return 0.0


def _rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@patch("cuda_api")
def _cuda_api() -> None:
    """initialize.py:59 asserts CUDA; initialize.py:301/341/402 build the model-parallel groups and seed only
    with a device; utils.py:413 reads the card's properties when TP>1; training.py:956 and timers.py:139 use
    streams and synchronize; utils.py:267 reports device memory; random.py:196 reads the generator's state.
    One device, index 0, that is the CPU: streams and events are inert (CPU work is synchronous), memory
    figures are the process's resident set, the generator state is the CPU generator's."""
    import torch

    cuda = torch.cuda
    properties = types.SimpleNamespace(
        name="CPU (mtt-testbed megatron-lm-cpu-patch)",
        major=9,  # Hopper: Megatron's rules for cards before Blackwell apply (CUDA_DEVICE_MAX_CONNECTIONS=1)
        minor=0,
        total_memory=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
        multi_processor_count=os.cpu_count() or 1,
    )
    stream = _Stream()
    answers = {
        "is_available": lambda: True,
        "device_count": lambda: 1,
        "current_device": lambda: 0,
        "set_device": lambda device: None,
        "synchronize": lambda device=None: None,
        "empty_cache": lambda: None,
        "get_device_properties": lambda device=None: properties,
        "get_device_capability": lambda device=None: (properties.major, properties.minor),
        "get_device_name": lambda device=None: properties.name,
        "Stream": _Stream,
        "Event": _Event,
        "stream": lambda s=None: contextlib.nullcontext(),
        "current_stream": lambda device=None: stream,
        "default_stream": lambda device=None: stream,
        "set_stream": lambda s: None,
        # reading the generator's state (random.py:196): the CPU generator's (cuda_rng makes writes take effect)
        "get_rng_state": lambda device="cuda": torch.get_rng_state(),
        "get_rng_state_all": lambda: [torch.get_rng_state()],
        "memory_allocated": lambda device=None: _rss(),
        "memory_reserved": lambda device=None: _rss(),
        "max_memory_allocated": lambda device=None: _peak_rss(),
        "max_memory_reserved": lambda device=None: _peak_rss(),
        "reset_peak_memory_stats": lambda device=None: None,
        "memory_stats": lambda device=None: {
            "allocated_bytes.all.current": _rss(),
            "reserved_bytes.all.current": _rss(),
            "allocated_bytes.all.peak": _peak_rss(),
            "reserved_bytes.all.peak": _peak_rss(),
        },
    }
    for name, answer in answers.items():
        setattr(cuda, name, answer)
    cuda.random.get_rng_state, cuda.random.get_rng_state_all = cuda.get_rng_state, cuda.get_rng_state_all


# --- tensors asked for on the card are made on the CPU ---------------------------------------------------------
def _is_cuda(device) -> bool:
    if isinstance(device, bool):
        return False
    if isinstance(device, int):
        return True  # a bare index is a CUDA device index (torch.cuda.current_device() answers 0)
    if isinstance(device, str):
        return device == "cuda" or device.startswith("cuda:")
    return getattr(device, "type", None) == "cuda"


@patch("device_redirect")
def _device_redirect() -> None:
    """training.py:893 moves the model with Module.cuda(); about 20 sites of core/tensor_parallel (layers.py:865
    ...) pass device=torch.cuda.current_device(), schedules.py:578, initialize.py:455, the optimizer and the
    rerun state machine pass device="cuda". A TorchFunctionMode sees every torch call made from Python: a
    'cuda' device becomes the CPU, and Tensor.cuda() and pin_memory() return the tensor itself."""
    import torch
    from torch.overrides import TorchFunctionMode

    tensor_cuda, tensor_to, pin_memory = torch.Tensor.cuda, torch.Tensor.to, torch.Tensor.pin_memory

    class CudaIsTheCpu(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is tensor_cuda or func is pin_memory:
                return args[0]
            if "device" in kwargs and _is_cuda(kwargs["device"]):
                kwargs = dict(kwargs, device="cpu")
            if func is tensor_to and len(args) > 1 and _is_cuda(args[1]):
                args = (args[0], "cpu", *args[2:])
            return func(*args, **kwargs)

    CudaIsTheCpu().__enter__()  # for the whole process (the mode stack is the main thread's)


@patch("cuda_type_names")
def _cuda_type_names() -> None:
    """clip_grads.py:167 asserts grad.type() == 'torch.cuda.FloatTensor'; distrib_optimizer.py:400 and
    optimizer.py:647 accept only torch.cuda.* parameter types. A CPU tensor's type() answers the CUDA name."""
    import torch

    original = torch.Tensor.type

    @functools.wraps(original)
    def cuda_type(self, dtype=None, non_blocking=False, **kwargs):
        if dtype is None:
            name = original(self)  # under the device_redirect mode this call comes back here once more
            if self.device.type != "cpu" or name.startswith("torch.cuda."):
                return name
            return name.replace("torch.", "torch.cuda.", 1)
        if isinstance(dtype, str):
            dtype = dtype.replace("torch.cuda.", "torch.", 1)
        return original(self, dtype, non_blocking, **kwargs)

    torch.Tensor.type = cuda_type


# --- the CUDA generator is the CPU's ---------------------------------------------------------------------------
@patch("cuda_rng")
def _cuda_rng() -> None:
    """On a CPU build torch.cuda.manual_seed and set_rng_state queue their work with _lazy_call until CUDA
    initializes, that is forever: random.py:198 (the tensor-parallel RNG tracker, seeded by
    model_parallel_cuda_manual_seed) and checkpointing.py:1695/1705 (resume) would silently do nothing, and
    random.py:111 (_set_cuda_rng_state) likewise. On the CPU every tensor draws from torch's CPU generator, so
    the CUDA generator is that one: the tracker's forks swap its state as they would the card's."""
    import torch

    def manual_seed(seed):
        torch.default_generator.manual_seed(int(seed))

    for module in (torch.cuda, torch.cuda.random):
        module.set_rng_state = lambda new_state, device="cuda": torch.set_rng_state(new_state)
        module.set_rng_state_all = lambda new_states: torch.set_rng_state(new_states[0])
        module.manual_seed = manual_seed
        module.manual_seed_all = manual_seed
        module.seed = lambda: torch.default_generator.seed()
        module.seed_all = module.seed
        module.initial_seed = lambda: torch.default_generator.initial_seed()
    torch.cuda.default_generators = (torch.default_generator,)

    import megatron.core.tensor_parallel.random as mrandom

    mrandom._lazy_call = lambda callback, **kwargs: callback()  # random.py:111: run the state change now
    # The tracker warns when the CPU generator moves inside a fork (random.py:218); here it is the same one.
    logging.getLogger(mrandom.__name__).addFilter(lambda record: "CPU RNG state changed" not in record.getMessage())


# --- no fused kernels ------------------------------------------------------------------------------------------
@patch("no_compile_dependencies")
def _no_compile_dependencies() -> None:
    """initialize.py:162 calls _compile_dependencies, whose rank 0 builds the dataset helpers with make
    (initialize.py:185) and the legacy fused kernels with nvcc (initialize.py:220). The vendor's musa_patch
    replaces it with a no-op, and so does this patch: the stand-in behaves as the vendor's image, where the
    helpers must be built before a launch (provision.yml builds them once per container; train.yml checks them),
    and the local transformer does not use the fused kernels."""
    import megatron.training.initialize as initialize

    initialize._compile_dependencies = lambda: None


# --- checkpoints readable by torch.load(weights_only=True) ----------------------------------------------------
@patch("enum_pickle_by_value")
def _enum_pickle_by_value() -> None:
    """Debian 12's Python (3.11.2) pickles an enum member by name, as getattr(cls, name); later 3.11 releases
    pickle it by value. torch.load's default weights_only unpickler refuses getattr, so the resume of any
    checkpoint whose common.pt holds Megatron's args (AttnBackend) fails at dist_checkpointing/strategies/
    common.py:89 with UnpicklingError, although Megatron allow-lists its enums (safe_globals.py:16). Pickle the
    enums of that list by value, as newer Pythons do."""
    import enum

    from megatron.core import safe_globals

    def by_value(self, protocol):
        return self.__class__, (self._value_,)

    for cls in safe_globals.SAFE_GLOBALS:
        if isinstance(cls, type) and issubclass(cls, enum.Enum):
            cls.__reduce_ex__ = by_value


# --- DistributedOptimizer without Apex and Transformer Engine --------------------------------------------------
def _distributed_optimizer():
    from megatron.core.optimizer import distrib_optimizer

    return distrib_optimizer


@patch("distopt_d1_step_before_first_step")
def _d1() -> None:
    """distrib_optimizer.py:619 asserts that torch's Adam holds exactly one 'step' among its parameter states.
    A resume builds its load template (distrib_optimizer.py:1172) before the first step, when the state is
    empty: the assertion fails. Answer step 0, the step of an optimizer that has not stepped."""
    import torch

    module = _distributed_optimizer()
    original = module.DistributedOptimizer.state_dict

    @functools.wraps(original)
    def state_dict(self):
        inner = self.optimizer
        if module.HAVE_APEX_OR_TE or any("step" in s for s in inner.state.values()):
            return original(self)
        before = {p: dict(s) for p, s in inner.state.items()}
        try:
            for group in inner.param_groups:
                for param in group["params"]:
                    inner.state[param]["step"] = torch.zeros((), dtype=torch.float32)
            return original(self)
        finally:
            inner.state.clear()
            inner.state.update(before)

    module.DistributedOptimizer.state_dict = state_dict


@patch("distopt_d2_step_not_in_checkpoint")
def _d2() -> None:
    """distrib_optimizer.py:907 copies every key of a parameter's optimizer state from the loaded tensors; a
    fully_sharded_model_space checkpoint leaves 'step' out (distrib_optimizer.py:1456, it is restored from the
    param groups), so the load raises KeyError: 'step'. Keep the step that load_state_dict already set."""
    module = _distributed_optimizer()
    original = module.DistributedOptimizer._set_main_param_and_optimizer_states

    @functools.wraps(original)
    def set_states(self, model_param, tensors):
        if not module.HAVE_APEX_OR_TE and "step" not in tensors:
            group_index, group_order = self.model_param_group_index_map[model_param]
            main_param = self.optimizer.param_groups[group_index]["params"][group_order]
            state = self.optimizer.state.get(main_param, {})
            if "step" in state:
                tensors = dict(tensors, step=state["step"])
        return original(self, model_param, tensors)

    module.DistributedOptimizer._set_main_param_and_optimizer_states = set_states


@patch("distopt_d3_shared_step")
def _d3() -> None:
    """distrib_optimizer.py:798-802 put one 'step' tensor into every parameter's state; torch's Adam increments
    each parameter's step in place, so the shared tensor advances once per parameter and every bias correction
    after a resume is wrong (no error, the loss drifts). Give every parameter its own copy."""
    module = _distributed_optimizer()
    original = module.DistributedOptimizer.load_state_dict

    @functools.wraps(original)
    def load_state_dict(self, state_dict):
        result = original(self, state_dict)
        if not module.HAVE_APEX_OR_TE:
            for state in self.optimizer.state.values():
                if "step" in state:
                    state["step"] = state["step"].detach().clone()
        return result

    module.DistributedOptimizer.load_state_dict = load_state_dict
