"""A Hugging Face Llama directory as a Megatron checkpoint a run starts from (issue 37; docs/export.md, "Importing").
Runs in the training container, on its CPU, with the image's torch, Megatron-LM and ``transformers``; the mapping
is the core's (:mod:`trainops.hf_llama`), the inverse of the export's.

    import_hf.py --hf DIR --out DIR [--expect JSON] [--data-path PREFIX] [--no-parity]

What it writes (into ``OUT.partial``, renamed to ``OUT`` once whole), as Megatron's ``save_checkpoint`` lays out a
release checkpoint: ``latest_checkpointed_iteration.txt`` saying ``release``, and ``release/`` holding the model's
weights as a ``torch_dist`` save (Megatron's ``dist_checkpointing.save`` of its ``GPTModel``'s sharded state dict,
so any tp/pp/dp loads it), with no optimizer state. ``import.json`` beside them records the source and the parity
check's result. A run given it as ``--pretrained-checkpoint`` loads it when its own checkpoint directory holds no
save (Megatron's ``--finetune`` then: the weights only, from iteration 0), and resumes from its own saves after.
An earlier verified import of the same files (the config, the index, each weights file's size and time) at OUT is
reused, not repeated; another one there is replaced.

The vocabulary is written as the tokenizer's, unpadded: Megatron loads the embeddings and the output layer of
another size (``allow_shape_mismatch``), so the rows a run pads its vocabulary with (a multiple of 128 x tp, which
changes with tp) keep the run's own initialisation, whatever layout loads it.

``--expect`` is the run's model as a JSON object of ``config.json``'s fields (``hidden_size``, ...): a difference
is refused, naming each field, before anything is written. The parity check is the export's
(:func:`trainops.node.export_hf.parity`): Megatron's model loaded from the written checkpoint against
``transformers``' from ``--hf``. Prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from trainops import hf_llama  # noqa: E402
from trainops.node import export_hf  # noqa: E402
from trainops.node.export_hf import ExportError  # noqa: E402
from trainops.records import write_json  # noqa: E402

TRACKER = "latest_checkpointed_iteration.txt"


def read_config(hf_dir: str) -> dict:
    path = os.path.join(hf_dir, "config.json")
    try:
        with open(path) as handle:
            config = json.load(handle)
    except (OSError, ValueError) as exc:
        raise ExportError(f"{path} cannot be read ({exc}): --hf must name a Hugging Face model directory") from exc
    if config.get("model_type") != "llama" and "LlamaForCausalLM" not in (config.get("architectures") or []):
        raise hf_llama.NotLlama(f"{path} is a {config.get('model_type')!r} model, not a Llama")
    for field in ("attention_bias", "mlp_bias"):
        if config.get(field):
            raise hf_llama.NotLlama(f"{path} sets {field}: Megatron's Llama has no biases")
    config.setdefault("head_dim", config["hidden_size"] // config["num_attention_heads"])
    config.setdefault("num_key_value_heads", config["num_attention_heads"])
    config.setdefault("tie_word_embeddings", False)
    return config


def differences(config: dict, expected: dict) -> list[str]:
    """Each field of ``expected`` that ``config`` has otherwise."""
    out = []
    for field in hf_llama.COMPARED:
        if field in expected and expected[field] != config.get(field):
            out.append(f"{field} is {config.get(field)!r} in config.json, {expected[field]!r} in the run's model")
    return out


def megatron_args(config: dict):
    """The arguments Megatron's ``pretrain_gpt.py`` would have for the model of ``config``, parsed by Megatron's
    own parser (its defaults for everything else); the vocabulary unpadded."""
    from megatron.training.arguments import parse_args

    argv = [
        "--num-layers", str(config["num_hidden_layers"]), "--hidden-size", str(config["hidden_size"]),
        "--ffn-hidden-size", str(config["intermediate_size"]),
        "--num-attention-heads", str(config["num_attention_heads"]), "--kv-channels", str(config["head_dim"]),
        "--max-position-embeddings", str(config["max_position_embeddings"]), "--position-embedding-type", "rope",
        "--rotary-base", str(int(config.get("rope_theta", 10000))), "--swiglu", "--normalization", "RMSNorm",
        "--norm-epsilon", str(config.get("rms_norm_eps", 1e-5)), "--disable-bias-linear",
        "--seq-length", str(config["max_position_embeddings"]),
    ]  # fmt: skip
    if config["num_key_value_heads"] != config["num_attention_heads"]:
        argv += ["--group-query-attention", "--num-query-groups", str(config["num_key_value_heads"])]
    if not config["tie_word_embeddings"]:
        argv.append("--untie-embeddings-and-output-weights")
    scaling = config.get("rope_scaling") or {}
    if scaling.get("rope_type") == "llama3":
        argv += ["--use-rope-scaling", "--rope-scaling-factor", str(scaling.get("factor", 8.0))]
    elif scaling:
        raise hf_llama.NotLlama(f"rope_scaling {scaling} is not Llama 3's: Megatron applies Llama 3's only")
    saved, sys.argv = sys.argv, ["import_hf.py", *argv]
    try:
        args = parse_args(ignore_unknown_args=True)
    finally:
        sys.argv = saved
    args.num_query_groups = config["num_key_value_heads"]
    args.group_query_attention = config["num_key_value_heads"] != config["num_attention_heads"]
    args.vocab_size = args.padded_vocab_size = config["vocab_size"]
    return args


def fill(model, hf_dir: str, config: dict, spec) -> None:
    """Every Megatron tensor of ``model`` from the Hugging Face weights (each safetensors file opened once)."""
    from safetensors import safe_open

    index_path = os.path.join(hf_dir, "model.safetensors.index.json")
    if os.path.isfile(index_path):
        with open(index_path) as handle:
            weight_map = json.load(handle)["weight_map"]
    else:
        with safe_open(os.path.join(hf_dir, "model.safetensors"), "pt") as single:
            weight_map = dict.fromkeys(single.keys(), "model.safetensors")
    vocab = config["vocab_size"]
    state = model.state_dict()
    with contextlib.ExitStack() as files:
        opened: dict = {}
        for entry in hf_llama.tensors(spec, vocab, vocab, fused_norms=False):
            parts = []
            for name in entry.hf:
                if name not in weight_map:
                    raise ExportError(f"{hf_dir} holds no {name} (a Llama of this config needs it)")
                shard = weight_map[name]
                if shard not in opened:
                    opened[shard] = files.enter_context(safe_open(os.path.join(hf_dir, shard), "pt"))
                parts.append(opened[shard].get_tensor(name).float())
            state[entry.megatron].copy_(_megatron_tensor(entry, parts, spec, state[entry.megatron].shape))


def _megatron_tensor(entry: hf_llama.Tensor, parts: list, spec, shape) -> object:
    """One Megatron tensor from its Hugging Face parts (the inverse of the export's split)."""
    import torch

    if entry.how == "qkv":
        tensor = hf_llama.merge_qkv(*parts, spec.num_attention_heads, spec.query_groups, spec.head_dim,
                                    lambda items, axis: torch.cat(items, dim=axis))  # fmt: skip
    elif entry.how == "gate_up":
        tensor = torch.cat(parts, dim=0)
    else:
        tensor = parts[0]
    if tuple(tensor.shape) != tuple(shape):
        raise ExportError(f"{entry.hf[0]}: {tuple(tensor.shape)} does not fit Megatron's {entry.megatron} "
                          f"{tuple(shape)}")  # fmt: skip
    return tensor


def fingerprint(hf_dir: str) -> str:
    """What an import was made from: the config, the index, and each weights file's name, size and time."""
    digest = hashlib.sha256()
    for name in sorted(os.listdir(hf_dir)):
        path = os.path.join(hf_dir, name)
        if name.endswith(".json") and name.startswith(("config", "model.safetensors")):
            with open(path, "rb") as handle:
                digest.update(name.encode() + handle.read())
        elif name.endswith(".safetensors"):
            stat = os.stat(path)
            digest.update(f"{name} {stat.st_size} {stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def earlier_import(out: str, source: str, made_from: str) -> dict | None:
    """The record of a verified import of the same files at ``out``, which a new one would only repeat."""
    try:
        with open(os.path.join(out, "import.json")) as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return None
    same = record.get("source") == source and record.get("fingerprint") == made_from
    return record if same and record.get("verified") and os.path.isfile(os.path.join(out, TRACKER)) else None


def import_checkpoint(options: argparse.Namespace) -> dict:
    import torch
    from megatron.core import dist_checkpointing

    started = time.monotonic()
    out, source = os.path.abspath(options.out), os.path.abspath(options.hf)
    config = read_config(source)
    problems = differences(config, json.loads(options.expect)) if options.expect else []
    if problems:
        raise ExportError(f"{source} is not the run's model: " + "; ".join(problems))
    made_from = fingerprint(source)
    earlier = earlier_import(out, source, made_from)
    if earlier is not None:
        return {"out": out, **earlier, "reused": True}
    partial = out + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(os.path.join(partial, "release"))
    export_hf.init_distributed(partial)
    args = megatron_args(config)
    spec = export_hf.spec_from_args(args)
    model = export_hf.megatron_model(args)
    with torch.no_grad():
        fill(model, source, config, spec)
    # the weights' dtype as the directory names it (transformers 5 writes "dtype", earlier ones "torch_dtype")
    named = config.get("torch_dtype") or config.get("dtype")
    dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(named, torch.float32)
    model.to(dtype)
    # what Megatron's load_checkpoint reads of a torch_dist checkpoint besides the weights: its version, its
    # iteration, and of the arguments it was written with the layout and that it holds no RNG or optimizer state
    written_with = argparse.Namespace(tensor_model_parallel_size=1, pipeline_model_parallel_size=1, world_size=1,
                                      data_parallel_size=1, no_save_rng=True, no_save_optim=True)  # fmt: skip
    sharded = {"model": model.sharded_state_dict(), "checkpoint_version": 3.0, "iteration": 0, "args": written_with}
    dist_checkpointing.save(sharded, os.path.join(partial, "release"))
    with open(os.path.join(partial, TRACKER), "w") as handle:
        handle.write("release")
    del model, sharded
    written_s = round(time.monotonic() - started, 1)
    check = None
    if options.parity:
        check = export_hf.parity(args, os.path.join(partial, "release"), source, config["vocab_size"],
                                 options.data_path, options.sequences, options.length)  # fmt: skip
    record = {
        "source": source,
        "fingerprint": made_from,
        "format": "megatron torch_dist (release)",
        "dtype": str(dtype).removeprefix("torch."),
        "vocab_size": config["vocab_size"],
        "parity": check,
        "verified": bool(check and check["passed"]),
        "write_seconds": written_s,
        "seconds": round(time.monotonic() - started, 1),
        "reused": False,
    }
    write_json(os.path.join(partial, "import.json"), record)
    export_hf.remove_rendezvous(partial)
    shutil.rmtree(out, ignore_errors=True)
    os.rename(partial, out)
    return {"out": out, **record}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hf", required=True, help="the Hugging Face Llama directory")
    parser.add_argument("--out", required=True, help="the Megatron checkpoint directory to write")
    parser.add_argument("--expect", help="the run's model as config.json fields (JSON)")
    export_hf.add_parity_options(parser)
    return export_hf.run_and_print(import_checkpoint, parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
