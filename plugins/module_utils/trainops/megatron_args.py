"""The exact argument vector of Megatron-LM's ``pretrain_gpt.py`` for a layout.

Every value comes from the model preset, the validated layout, the training
hyper-parameters and the run's paths; nothing is typed twice. Flags that only
make sense for some layouts (uneven pipeline stages, sequence parallel, FP8)
appear only then, so no hand edit is ever needed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .layout import Layout, attention_kind
from .model import ModelSpec


@dataclass(frozen=True)
class TrainingConfig:
    """Optimiser and schedule; defaults are the vendor's Llama3-8B script's."""

    lr: float = 1.5e-5
    min_lr: float = 1.5e-6
    lr_decay_style: str = "cosine"
    #: None: 2000 (the vendor's), capped at a tenth of train_iters for short runs.
    lr_warmup_iters: int | None = None
    weight_decay: float = 0.1
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    clip_grad: float = 1.0
    seed: int = 42
    log_interval: int = 1
    #: 0: no checkpoints (no --save, --load or --save-interval; a run that does not resume, such as a card check).
    save_interval: int = 1000
    #: Megatron divides train_iters by it to size the validation set, even without evaluation: >= 1.
    eval_interval: int = 1000
    #: Rendered as 0 when the data has no validation part (:func:`evaluation`): Megatron would evaluate nothing.
    eval_iters: int = 10
    #: Megatron's --split (train, validation, test proportions). The default keeps 2 % of the documents for
    #: validation, so that the run's validation loss is measured every eval_interval (the vendor's "1" trains on
    #: everything and, with it, evaluation is off: see evaluation()); no test part (the bundle runs no test).
    split: str = "98,2,0"
    #: Megatron's --distributed-timeout-minutes (its default, 10): how long a collective may wait before the
    #: process group gives up. The bundle's hang detection (hang_timeout) usually acts well before it.
    distributed_timeout_minutes: int = 10
    #: Megatron's --log-straggler (rank 0 prints every rank's compute time and throughput at each log interval);
    #: the layout role sets it from the backend profile (``megatron_log_straggler``) unless -e log_straggler.
    log_straggler: bool = False
    #: The container has Transformer Engine or Apex for Megatron's fused kernels. False (a bare PyTorch, as on a
    #: card-check machine or the CPU testbed; the layout role takes the backend profile's megatron_fused_kernels)
    #: renders --no-gradient-accumulation-fusion, --no-rope-fusion and the other --no-*-fusion flags.
    fused_kernels: bool = True
    #: A sample-based schedule (the vendor's recipe): --train-samples N and --lr-warmup-samples instead of
    #: --train-iters and --lr-warmup-iters; Megatron trains N // gbs iterations. None: by iterations.
    train_samples: int | None = None
    #: With train_samples: the warm-up in samples; None: 2000 iterations' worth (2000 x gbs, the vendor's).
    lr_warmup_samples: int | None = None
    #: False: --no-bias-swiglu-fusion --no-bias-dropout-fusion (the vendor's script sets them on MUSA).
    bias_fusions: bool = True
    #: False: --no-masked-softmax-fusion (the vendor's script; Transformer Engine's attention does not use it).
    masked_softmax_fusion: bool = True
    #: What a resume does when the learning-rate schedule differs from the one the save was trained with (another
    #: train_iters, global batch, warm-up, lr, min_lr or decay style; Megatron's scheduler asserts on load):
    #: "refuse" before the launch (the default), "checkpoint" keeps the saved schedule
    #: (--use-checkpoint-opt_param-scheduler), "override" takes this run's from the resumed iteration on
    #: (--override-opt_param-scheduler). Rendered on every launch (a fresh start loads no schedule).
    lr_schedule_on_resume: str = "refuse"


#: The Megatron flag each lr_schedule_on_resume renders ("refuse" renders none: Megatron then asserts, and the
#: bundle refuses such a resume before the launch: trainops.identity).
SCHEDULE_ON_RESUME_FLAGS = {
    "refuse": [],
    "checkpoint": ["--use-checkpoint-opt_param-scheduler"],
    "override": ["--override-opt_param-scheduler"],
}

#: ``data_path`` value that trains on Megatron's mock dataset (--mock-data) with its NullTokenizer: no dataset
#: and no tokenizer file needed (a card check, a launch rehearsal).
MOCK_DATA = "mock"


@dataclass(frozen=True)
class RunPaths:
    """Where the data, tokenizer, checkpoints and TensorBoard files are, inside the container."""

    data_path: str
    tokenizer_model: str
    tokenizer_type: str
    checkpoint_dir: str
    tensorboard_dir: str
    #: A Megatron checkpoint a fresh start loads its weights from (Megatron's --pretrained-checkpoint: used only
    #: while checkpoint_dir holds no save, as --finetune: the weights, from iteration 0); empty: none.
    pretrained_checkpoint: str = ""


def data_cache_dir(paths: RunPaths) -> str:
    """Where Megatron keeps the dataset's sample indexes: in the experiment's checkpoint dir."""
    return f"{paths.checkpoint_dir}/data-cache"


#: The most ranks the straggler report lists at each end (a 1,024-rank run lists its 64 slowest and fastest).
STRAGGLER_LISTED_MAX = 64


def _num(value: float) -> str:
    """Render a number as Megatron's argparse reads it back unchanged."""
    return repr(value) if isinstance(value, float) else str(value)


def build_megatron_args(
    model: ModelSpec,
    layout: Layout,
    paths: RunPaths,
    training: TrainingConfig | None = None,
    distributed_backend: str = "nccl",
) -> list[str]:
    """The argument list of ``pretrain_gpt.py`` (without the program name); ``distributed_backend``: Megatron's
    ``--distributed-backend`` (the backend profile's; gloo on the CPU testbed)."""
    t = training or TrainingConfig()
    req = layout.request
    args: list[str] = [
        "--num-layers",
        str(model.num_layers),
        "--hidden-size",
        str(model.hidden_size),
        "--ffn-hidden-size",
        str(model.ffn_hidden_size),
        "--num-attention-heads",
        str(model.num_attention_heads),
    ]
    if model.group_query_attention:
        args += ["--group-query-attention", "--num-query-groups", str(model.query_groups)]
    if model.kv_channels:
        args += ["--kv-channels", str(model.kv_channels)]
    args += [
        "--seq-length",
        str(layout.seq_length),
        "--max-position-embeddings",
        str(model.max_position_embeddings),
        "--position-embedding-type",
        model.position_embedding_type,
    ]
    if model.position_embedding_type == "rope":
        # rotary_base None (recipe=vendor): not passed, Megatron's default 10000
        args += (["--rotary-base", str(model.rotary_base)] if model.rotary_base is not None else []) + [
            "--no-position-embedding"
        ]
    if model.swiglu:
        args.append("--swiglu")
    args += ["--normalization", model.normalization, "--norm-epsilon", _num(model.norm_epsilon)]
    if model.untie_embeddings_and_output_weights:
        args.append("--untie-embeddings-and-output-weights")
    if not model.add_bias_linear:
        args.append("--disable-bias-linear")
    args += [
        "--attention-dropout",
        "0.0",
        "--hidden-dropout",
        "0.0",
        "--init-method-std",
        _num(model.init_method_std),
        "--seed",
        str(t.seed),
    ]

    # Parallelism: only what the layout needs.
    args += [
        "--tensor-model-parallel-size",
        str(layout.tp),
        "--pipeline-model-parallel-size",
        str(layout.pp),
    ]
    if layout.cp > 1:
        args += ["--context-parallel-size", str(layout.cp)]
    if layout.vpp:
        args += ["--num-virtual-stages-per-pipeline-rank", str(layout.vpp)]
    if layout.decoder_first_pipeline_num_layers is not None:
        args += ["--decoder-first-pipeline-num-layers", str(layout.decoder_first_pipeline_num_layers)]
    if layout.decoder_last_pipeline_num_layers is not None:
        args += ["--decoder-last-pipeline-num-layers", str(layout.decoder_last_pipeline_num_layers)]
    if layout.sequence_parallel:
        args.append("--sequence-parallel")
    if req.distributed_optimizer:
        args.append("--use-distributed-optimizer")
    args += ["--distributed-backend", distributed_backend]

    args += [
        "--micro-batch-size",
        str(layout.micro_batch_size),
        "--global-batch-size",
        str(layout.global_batch_size),
    ]
    args += ["--train-samples", str(t.train_samples)] if t.train_samples else ["--train-iters", str(req.train_iters)]

    # Precision, layers and attention: the attention rendered is the one the memory estimate assumes
    # (layout.attention_kind). --use-flash-attn is not rendered: Megatron core 0.14 reads it only in the legacy
    # model; the core GPT model's attention follows --transformer-impl and --attention-backend.
    # fp32 is Megatron's default (no flag): weights, grads and their all-reduce are FP32 already.
    if req.precision != "fp32":
        args += ["--bf16", "--accumulate-allreduce-grads-in-fp32"]
    args.append("--attention-softmax-in-fp32")
    args += ["--transformer-impl", req.transformer_impl]
    if req.precision == "fp8":
        args += ["--fp8-format", "hybrid"]
        if req.distributed_optimizer:
            args.append("--fp8-param-gather")
    kind = attention_kind(req)
    if kind != "local":  # Megatron's own layers always run the plain DotProductAttention
        args += ["--attention-backend", "auto" if kind == "fused" else "unfused"]
    if req.recompute == "full":
        args += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    elif req.recompute == "selective":
        args += ["--recompute-granularity", "selective"]

    args += [
        "--lr",
        _num(t.lr),
        "--min-lr",
        _num(t.min_lr),
        "--lr-decay-style",
        t.lr_decay_style,
        *(
            ["--lr-warmup-samples", str(warmup_samples(t, layout.global_batch_size))]
            if t.train_samples
            else ["--lr-warmup-iters", str(warmup_iters(t, req.train_iters))]
        ),
        "--weight-decay",
        _num(t.weight_decay),
        "--adam-beta1",
        _num(t.adam_beta1),
        "--adam-beta2",
        _num(t.adam_beta2),
        "--clip-grad",
        _num(t.clip_grad),
    ]
    args += SCHEDULE_ON_RESUME_FLAGS.get(t.lr_schedule_on_resume, [])

    if not t.fused_kernels:
        # each of these fusions needs Apex, Transformer Engine or Megatron's compiled kernels
        args += [
            "--no-gradient-accumulation-fusion",
            "--no-rope-fusion",
            "--no-masked-softmax-fusion",
            "--no-bias-gelu-fusion",
            "--no-bias-dropout-fusion",
            "--no-persist-layer-norm",
        ]
    fusions_off = ["--no-bias-swiglu-fusion", "--no-bias-dropout-fusion"] * (not t.bias_fusions) + [
        "--no-masked-softmax-fusion"
    ] * (not t.masked_softmax_fusion)
    args += [flag for flag in fusions_off if flag not in args]

    if paths.data_path == MOCK_DATA:
        # NullTokenizer's vocabulary is --vocab-size + 1 (its end-of-document id); Megatron pads it as usual
        args += ["--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", str(model.vocab_size - 1)]
    else:
        args += [
            "--data-path",
            paths.data_path,
            "--split",
            t.split,
            "--tokenizer-type",
            paths.tokenizer_type,
            "--tokenizer-model",
            paths.tokenizer_model,
            # Rank 0 builds the sample indexes and the other ranks that read data load them after a barrier: by
            # default beside the dataset, which a rank on another node cannot see when each node holds its own copy.
            # The checkpoint dir is on storage every node shares (docs/train.md).
            "--data-cache-path",
            data_cache_dir(paths),
        ]
    if paths.data_path != MOCK_DATA and paths.tokenizer_type == "TikTokenizer":
        pattern = str(model.tokenizer_options.get("tiktoken_pattern", "v2"))
        args += ["--tiktoken-pattern", pattern]
        special = model.tokenizer_options.get("tiktoken_num_special_tokens")
        if special is not None:
            args += ["--tiktoken-num-special-tokens", str(special)]
        # Without it CustomTikTokenizer assumes 2**17 entries, not the model's vocabulary.
        args += ["--vocab-size", str(model.vocab_size)]

    args += [
        "--log-interval",
        str(t.log_interval),
        "--log-throughput",
        "--tensorboard-dir",
        paths.tensorboard_dir,
        "--eval-interval",
        str(t.eval_interval),
        "--eval-iters",
        str(evaluation(t, paths.data_path)[0]),
    ]
    if t.save_interval:
        args += [
            "--save",
            paths.checkpoint_dir,
            "--load",
            paths.checkpoint_dir,
            "--save-interval",
            str(t.save_interval),
            # Megatron 0.14's default, said: a torch_dist checkpoint (fully sharded optimizer state, the default
            # fully parallel save kept) loads on another data-parallel size, tp or pp (docs/train.md).
            "--ckpt-format",
            "torch_dist",
        ]
        if paths.pretrained_checkpoint:
            args += ["--pretrained-checkpoint", paths.pretrained_checkpoint]
    args += ["--distributed-timeout-minutes", str(t.distributed_timeout_minutes)]
    if t.log_straggler:
        args.append("--log-straggler")
        # Between 1 and the world size, the report lists the N slowest and N fastest ranks: world - 1 lists all.
        if layout.world_size >= 3:
            args += ["--straggler-minmax-count", str(min(layout.world_size - 1, STRAGGLER_LISTED_MAX))]
    return args


def warmup_iters(training: TrainingConfig, train_iters: int) -> int:
    """The warm-up actually used."""
    if training.lr_warmup_iters is not None:
        return training.lr_warmup_iters
    return min(2000, train_iters // 10)


def split_parts(split: str) -> list[float] | None:
    """Megatron's reading of --split (``parse_and_normalize_split``, core 0.14): up to three non-negative
    proportions (train, validation, test), missing ones 0; None when Megatron would refuse it."""
    text = str(split)
    parts = re.findall(r"[^,\s]+", text)
    if not parts or len(parts) > 3 or not all(_PROPORTION.fullmatch(p) for p in parts):
        return None
    values = [float(p) for p in parts] + [0.0] * (3 - len(parts))
    return values if sum(values) > 0 else None


_PROPORTION = re.compile(r"[0-9]+(\.[0-9]*)?|\.[0-9]+")


def evaluation(training: TrainingConfig, data_path: str) -> tuple[int, str]:
    """``(--eval-iters rendered, why)``. Core 0.14 evaluates whenever --eval-iters > 0, even when the split has no
    validation part: its list of validation loaders is then ``[None]`` and the first evaluation raises a TypeError
    in ``get_batch_on_this_tp_rank``, before the save of that iteration (training.py evaluates, then saves). So a
    split without a validation part renders --eval-iters 0. Mock data always has one (Megatron's mock split is
    1,1,1)."""
    if training.eval_iters == 0:
        return 0, "none (eval_iters 0)"
    if data_path == MOCK_DATA:
        return training.eval_iters, (
            f"{training.eval_iters} iterations every {training.eval_interval} on the mock data's validation split"
        )
    parts = split_parts(training.split)
    if parts is not None and parts[1] == 0:
        return 0, (
            f"none: --eval-iters 0, because split {training.split!r} has no validation part (Megatron would "
            f"evaluate an empty set and fail before its first save); to evaluate, give a split with one, as "
            f'-e \'{{"training": {{"split": "98,2,0"}}}}\''
        )
    return training.eval_iters, (
        f"{training.eval_iters} iterations every {training.eval_interval} on the validation part of split "
        f"{training.split!r}"
    )


#: The vendor's warm-up: 2000 iterations, given to Megatron in samples.
WARMUP_ITERS_IN_SAMPLES = 2000


def warmup_samples(training: TrainingConfig, global_batch_size: int) -> int:
    """The warm-up in samples of a sample-based schedule: given, or 2000 x gbs."""
    if training.lr_warmup_samples is not None:
        return training.lr_warmup_samples
    return WARMUP_ITERS_IN_SAMPLES * global_batch_size


def check_samples(training: TrainingConfig, global_batch_size: int) -> list[str]:
    """A sample-based schedule Megatron cannot run: shorter than one global batch (no iteration), or a warm-up
    not shorter than the run (its scheduler asserts warm-up < decay steps)."""
    samples = training.train_samples
    if not samples:
        return []
    if not isinstance(samples, int) or samples < global_batch_size:
        return [
            f"training.train_samples={samples!r} is less than one global batch ({global_batch_size}): Megatron "
            f"would train 0 iterations; give at least {global_batch_size}"
        ]
    warm = warmup_samples(training, global_batch_size)
    if warm >= samples:
        return [
            f"the warm-up of {warm} samples is not shorter than train_samples={samples} (Megatron's scheduler "
            f'asserts it): give -e \'{{"training": {{"lr_warmup_samples": N}}}}\' with N < {samples}'
        ]
    return []


def check_training(training: TrainingConfig, train_iters: int) -> list[str]:
    """Problems Megatron would raise at start-up (its argument checks, its LR scheduler), or a vector it would
    accept but cannot run (core 0.14's ``training.py``), each with the option, the value and the fix."""
    problems = []
    if training.lr_schedule_on_resume not in SCHEDULE_ON_RESUME_FLAGS:
        problems.append(
            f"training.lr_schedule_on_resume={training.lr_schedule_on_resume!r} must be one of "
            + ", ".join(SCHEDULE_ON_RESUME_FLAGS)
        )
    if split_parts(training.split) is None:
        problems.append(
            f"training.split={training.split!r} is not Megatron's --split: give one to three non-negative "
            'proportions (train, validation, test) separated by commas, not all 0, as "1" or "98,2,0"'
        )
    for key, low, why in (
        ("eval_interval", 1, "Megatron divides train_iters by it to size the validation set"),
        ("log_interval", 1, "Megatron logs when the iteration is a multiple of it"),
        ("eval_iters", 0, "0: no evaluation"),
    ):
        value = getattr(training, key)
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            problems.append(f"training.{key}={value!r} must be a whole number >= {low} ({why})")
    if training.min_lr < 0:
        problems.append(f"training.min_lr={training.min_lr} must be >= 0 (Megatron's scheduler asserts it)")
    if not 0 < training.lr <= 1:
        problems.append(
            f"training.lr={training.lr} must be above 0 and at most 1 (Adam's learning rates are about 1e-5 to 1e-3; "
            f"the default is {TrainingConfig.lr})"
        )
    for key, low, high, why in (
        ("lr_warmup_iters", 0, None, "iterations of warm-up; 0: none"),
        ("lr_warmup_samples", 0, None, "samples of warm-up; 0: none"),
        ("train_samples", 1, None, "samples to train on"),
        ("weight_decay", 0, None, "0: none"),
        ("clip_grad", 0, None, "0: no clipping"),
        ("adam_beta1", 0, 0.999999, "Adam's first-moment decay, below 1"),
        ("adam_beta2", 0, 0.999999, "Adam's second-moment decay, below 1"),
    ):
        value = getattr(training, key)
        if value is not None and (value < low or (high is not None and value > high)):
            problems.append(f"training.{key}={value} must be >= {low}{' and below 1' if high else ''} ({why})")
    if training.lr_warmup_iters is not None and training.lr_warmup_iters >= train_iters:
        problems.append(
            f"lr_warmup_iters={training.lr_warmup_iters} must be below train_iters={train_iters} "
            f"(Megatron's scheduler asserts it); use lr_warmup_iters <= {max(0, train_iters - 1)}"
        )
    if training.min_lr > training.lr > 0:
        problems.append(f"min_lr={training.min_lr} is above lr={training.lr}")
    if not isinstance(training.save_interval, int) or training.save_interval < 0:
        problems.append(
            f"save_interval must be a whole number of iterations >= 0 (0: no checkpoints), got "
            f"{training.save_interval!r}"
        )
    if not isinstance(training.distributed_timeout_minutes, int) or training.distributed_timeout_minutes < 1:
        problems.append(
            f"distributed_timeout_minutes must be a whole number of minutes >= 1, got "
            f"{training.distributed_timeout_minutes!r}"
        )
    return problems
