"""A Megatron ``torch_dist`` save as a Hugging Face Llama directory, checked against Megatron's own model (issue 37;
docs/export.md). Runs in the training container, on its CPU, with the image's torch, Megatron-LM and
``transformers``; the mapping is the core's (:mod:`trainops.hf_llama`).

    export_hf.py --save DIR/iter_0000020 --out OUT [--tokenizer PATH] [--data-path PREFIX] [--sequences 4]
                 [--length 128] [--no-parity] [--shard-bytes N]

What it writes (into ``OUT.partial``, renamed to ``OUT`` once whole):

* ``config.json``: from the arguments Megatron recorded in the save (``common.pt``), so it is the model that was
  trained, whatever the preset or the options said; the vocabulary is the tokenizer's, not Megatron's padded one;
* ``model-NNNNN-of-MMMMM.safetensors`` with ``model.safetensors.index.json``: one shard per layer (the embeddings
  with the first, the final norm and the output layer with the last), in the save's dtype. Each layer is read
  alone from the save's chunks (:class:`SaveReader`: one layer of the stacked ``decoder.layers.*`` tensors,
  whatever tp/pp/dp wrote it), split into Hugging Face's tensors, written and let go: memory is bounded by one
  layer, not the model;
* ``generation_config.json`` and the tokenizer's files (a Hugging Face tokenizer directory is copied whole);
* ``export.json``: where it came from (the save, its iteration, the run's arguments that matter) and the parity
  check's result, ``"verified": true`` only when it passed.

**Parity**: the same token sequences (from the run's own dataset, ``--data-path``; else fixed pseudo-random tokens)
go through Megatron's ``GPTModel`` (built from the save's arguments at tp=1 pp=1 with Megatron's local layer
spec, loaded from the save by ``dist_checkpointing``, which reshards it) and through ``transformers``'
``LlamaForCausalLM`` loaded from the export, both in float32 on the CPU. It passes when the largest logit
difference is at most ``LOGIT_TOLERANCE`` times the logits' own largest magnitude and the next-token losses agree
to ``LOSS_TOLERANCE`` relative. Otherwise it names the largest difference and the first layer whose output differs
beyond the tolerance. Megatron's model runs in
eval mode, where dropout does nothing: its CUDA RNG tracker, which a CPU has not, is replaced by one that forks
nothing; on a machine without CUDA, ``torch.cuda.current_device()`` (where the rotary embedding puts its
frequencies) answers the CPU and ``torch.cuda.synchronize()`` (which Megatron's checkpoint writer calls) returns.

It prints one JSON object on stdout (the result; ``error`` when it could not export, OUT then not written).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from trainops import hf_llama  # noqa: E402
from trainops.model import ModelSpec  # noqa: E402
from trainops.records import write_json  # noqa: E402

#: Logits agree when their largest difference is at most this share of their largest magnitude (float32 on both
#: sides, the same weights: what is left is the order of the sums).
LOGIT_TOLERANCE = 1e-4
#: The next-token losses agree to this, relative.
LOSS_TOLERANCE = 1e-4
#: The one-process group's rendezvous file, in the directory being written (removed before it is renamed).
RENDEZVOUS = ".rendezvous"
#: The tokenizer files a Hugging Face directory may hold.
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model", "vocab.json",
    "merges.txt", "added_tokens.json",
)  # fmt: skip


class ExportError(RuntimeError):
    """The save cannot be exported (the message says why and what to do)."""


def spec_from_args(args) -> ModelSpec:
    """The model Megatron recorded in the save, as the core's :class:`ModelSpec` (checked to be a Llama)."""
    if getattr(args, "num_experts", None):
        raise hf_llama.NotLlama(f"the save's model has {args.num_experts} experts (MoE): a Llama has none")
    spec = ModelSpec(
        name="the save's",
        num_layers=args.num_layers,
        hidden_size=args.hidden_size,
        ffn_hidden_size=args.ffn_hidden_size,
        num_attention_heads=args.num_attention_heads,
        vocab_size=args.padded_vocab_size,
        num_query_groups=args.num_query_groups if args.group_query_attention else args.num_attention_heads,
        kv_channels=args.kv_channels or args.hidden_size // args.num_attention_heads,
        max_position_embeddings=args.max_position_embeddings,
        swiglu=bool(args.swiglu),
        normalization=args.normalization,
        norm_epsilon=args.norm_epsilon,
        untie_embeddings_and_output_weights=bool(args.untie_embeddings_and_output_weights),
        position_embedding_type=args.position_embedding_type,
        rotary_base=args.rotary_base,
        add_bias_linear=bool(args.add_bias_linear),
        init_method_std=args.init_method_std,
    )
    hf_llama.check_llama(spec)
    if getattr(args, "qk_layernorm", False):
        raise hf_llama.NotLlama("the save's model normalises queries and keys (qk_layernorm): a Llama does not")
    if getattr(args, "rotary_percent", 1.0) != 1.0:
        raise hf_llama.NotLlama(f"the save's model rotates {args.rotary_percent:.0%} of each head: a Llama all")
    return spec


def config_json(args, spec: ModelSpec, vocab_size: int, dtype: str) -> dict:
    config = hf_llama.hf_config(spec, vocab_size, dtype)
    if getattr(args, "use_rope_scaling", False):  # Llama 3.1's, as Megatron applies it (apply_rope_scaling)
        config["rope_scaling"] = {
            "rope_type": "llama3",
            "factor": float(getattr(args, "rope_scaling_factor", 8.0)),
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        }
    return config


def tokenizer_vocab(args, tokenizer: str | None) -> tuple[int, dict]:
    """The tokenizer's vocabulary size and its special token ids (``bos_token_id``, ``eos_token_id``)."""
    if tokenizer and os.path.isdir(tokenizer):
        from transformers import AutoTokenizer

        loaded = AutoTokenizer.from_pretrained(tokenizer)
        special = {k: v for k, v in (("bos_token_id", loaded.bos_token_id), ("eos_token_id", loaded.eos_token_id))
                   if v is not None}  # fmt: skip
        return len(loaded), special
    if getattr(args, "tokenizer_type", None) == "NullTokenizer" and getattr(args, "vocab_size", None):
        return int(args.vocab_size) + 1, {}  # Megatron's NullTokenizer adds its end-of-document token
    if getattr(args, "vocab_size", None):  # the size Megatron was given
        return int(args.vocab_size), {}
    raise ExportError(
        "the save does not record its vocabulary size and no Hugging Face tokenizer directory was given "
        "(--tokenizer): the padding rows cannot be told from the vocabulary"
    )


class SaveReader:
    """The tensors of a ``torch_dist`` save, read chunk by chunk from its files.

    A ``torch_dist`` save is a PyTorch distributed checkpoint: ``.metadata`` lists each tensor's global shape and
    the chunks the ranks wrote (offsets and sizes), each chunk a ``torch.save``d tensor at a byte range of a
    ``__R_N.distcp`` file. A layer of a stacked ``decoder.layers.*`` tensor is read from the chunks that hold it
    alone (Megatron's own loader reads whole tensors, or needs every rank of a distributed job)."""

    def __init__(self, save: str) -> None:
        from torch.distributed.checkpoint import FileSystemReader

        self.save = save
        self.metadata = FileSystemReader(save).read_metadata()

    def key_of(self, name: str) -> tuple[str, int | None]:
        """The save's key of a model tensor and the layer index into it: ``decoder.layers.3.x`` is row 3 of
        ``decoder.layers.x`` (Megatron stacks the layers of a homogeneous block along a first axis)."""
        known = self.metadata.state_dict_metadata
        if name.startswith("decoder.layers."):
            index, rest = name[len("decoder.layers.") :].split(".", 1)
            if "decoder.layers." + rest in known:
                return "decoder.layers." + rest, int(index)
        if name in known:
            return name, None
        raise ExportError(f"the save holds no tensor {name!r}: not a Megatron GPT save of this model")

    def read(self, name: str):
        """One model tensor (one layer's, for the stacked ones)."""
        import io

        import torch
        from torch.distributed.checkpoint.metadata import MetadataIndex

        key, layer = self.key_of(name)
        meta = self.metadata.state_dict_metadata[key]
        shape = tuple(meta.size) if layer is None else tuple(meta.size)[1:]
        out = torch.empty(shape, dtype=meta.properties.dtype)
        filled = 0
        for chunk in meta.chunks:
            offsets, sizes = list(chunk.offsets), list(chunk.sizes)
            if layer is not None:
                if not offsets[0] <= layer < offsets[0] + sizes[0]:
                    continue
                row, offsets, sizes = layer - offsets[0], offsets[1:], sizes[1:]
            info = self.metadata.storage_data[MetadataIndex(key, chunk.offsets)]
            if getattr(info, "transform_descriptors", None):
                raise ExportError(f"{key}: the save's chunks are transformed ({info.transform_descriptors})")
            with open(os.path.join(self.save, info.relative_path), "rb") as handle:
                handle.seek(info.offset)
                piece = torch.load(io.BytesIO(handle.read(info.length)), map_location="cpu", weights_only=True)
            if layer is not None:
                piece = piece[row]
            out[tuple(slice(o, o + s) for o, s in zip(offsets, sizes, strict=True))] = piece
            filled += piece.numel()
        if filled != out.numel():
            raise ExportError(f"{key}: the save's chunks hold {filled} of its {out.numel()} values (a shard missing)")
        return out


def hf_tensors(entry: hf_llama.Tensor, tensor, spec: ModelSpec, vocab_size: int) -> dict:
    """The Hugging Face tensors of one Megatron tensor."""
    if tuple(tensor.shape) != entry.megatron_shape:
        raise ExportError(f"{entry.megatron} is {tuple(tensor.shape)} in the save, {entry.megatron_shape} expected")
    if entry.how == "qkv":
        parts = hf_llama.split_qkv(tensor, spec.num_attention_heads, spec.query_groups, spec.head_dim)
    elif entry.how == "gate_up":
        parts = hf_llama.split_gate_up(tensor)
    elif entry.how == "vocab":
        parts = (tensor[:vocab_size],)
    else:
        parts = (tensor,)
    return {name: part.contiguous().clone() for name, part in zip(entry.hf, parts, strict=True)}


def _shards(entries: list[hf_llama.Tensor]) -> list[list[hf_llama.Tensor]]:
    """One shard per layer: the embeddings with the first, the final norm and the output layer with the last."""
    groups: list[list[hf_llama.Tensor]] = []
    layer_of = None
    for entry in entries:
        layer = entry.megatron.split(".")[2] if entry.megatron.startswith("decoder.layers.") else None
        if not groups or (layer is not None and layer != layer_of and layer_of is not None):
            groups.append([])
        groups[-1].append(entry)
        layer_of = layer if layer is not None else layer_of
    return groups


def write_weights(save: str, out: str, spec: ModelSpec, padded: int, vocab_size: int) -> dict:
    """The safetensors shards and their index; returns the index."""
    from safetensors.torch import save_file

    reader = SaveReader(save)
    entries = hf_llama.tensors(spec, padded, vocab_size, fused_norms=True)
    shards = _shards(entries)
    weight_map, total = {}, 0
    for number, shard in enumerate(shards, start=1):
        file = f"model-{number:05d}-of-{len(shards):05d}.safetensors"
        tensors = {}
        for entry in shard:
            tensors.update(hf_tensors(entry, reader.read(entry.megatron), spec, vocab_size))
        save_file(tensors, os.path.join(out, file), metadata={"format": "pt"})
        for name, tensor in tensors.items():
            weight_map[name] = file
            total += tensor.numel() * tensor.element_size()
        del tensors
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    write_json(os.path.join(out, "model.safetensors.index.json"), index)
    return index


def copy_tokenizer(tokenizer: str | None, out: str) -> list[str]:
    copied = []
    if tokenizer and os.path.isdir(tokenizer):
        for name in TOKENIZER_FILES:
            if os.path.isfile(os.path.join(tokenizer, name)):
                shutil.copy2(os.path.join(tokenizer, name), os.path.join(out, name))
                copied.append(name)
    elif tokenizer and os.path.isfile(tokenizer):
        shutil.copy2(tokenizer, os.path.join(out, os.path.basename(tokenizer)))
        copied.append(os.path.basename(tokenizer))
    return copied


# --- parity -------------------------------------------------------------------------------------------------------
class _NoRngTracker:
    """Megatron's CUDA RNG tracker for a forward in eval mode on the CPU: dropout does nothing, so nothing forks."""

    def fork(self, name=None):
        return contextlib.nullcontext()

    def is_initialized(self):
        return True


def megatron_model(args):
    """Megatron's own ``GPTModel`` as ``args`` (the arguments a save recorded, or :func:`megatron_args` of a
    ``config.json``) describe it, at tp=1 pp=1 in float32 on the CPU, with Megatron's local layer spec; its weights
    are not initialised (they are loaded or set next)."""
    import torch
    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.tensor_parallel import random as megatron_random
    from megatron.training.arguments import core_transformer_config_from_args

    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(1, 1)
    megatron_random._CUDA_RNG_STATE_TRACKER = _NoRngTracker()
    megatron_random._CUDA_RNG_STATE_TRACKER_INITIALIZED = True
    if not torch.cuda.is_available():
        # RotaryEmbedding.forward moves its frequencies to torch.cuda.current_device(): here, the CPU; Megatron's
        # checkpoint writer waits for the card's queue (torch.cuda.synchronize) before it writes: none here
        torch.cuda.current_device = lambda: "cpu"
        torch.cuda.synchronize = lambda *args, **kwargs: None
    args = argparse.Namespace(**vars(args))
    for field, value in {
        "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1, "context_parallel_size": 1,
        "sequence_parallel": False, "virtual_pipeline_model_parallel_size": None, "params_dtype": torch.float32,
        "bf16": False, "fp16": False, "fp8": None, "use_cpu_initialization": True, "perform_initialization": False,
        "recompute_granularity": None, "recompute_method": None, "recompute_num_layers": None,
        "gradient_accumulation_fusion": False, "transformer_impl": "local", "bias_swiglu_fusion": False,
        "bias_dropout_fusion": False, "masked_softmax_fusion": False, "apply_rope_fusion": False,
        "no_persist_layer_norm": True, "bias_gelu_fusion": False, "fp8_param_gather": False,
        "persist_layer_norm": False, "cross_entropy_loss_fusion": False, "decoder_first_pipeline_num_layers": None,
        "decoder_last_pipeline_num_layers": None, "num_layers_per_virtual_pipeline_stage": None,
        "hidden_dropout": 0.0, "attention_dropout": 0.0,
    }.items():  # fmt: skip
        setattr(args, field, value)
    config = core_transformer_config_from_args(args)
    spec = get_gpt_layer_local_spec(normalization=args.normalization, qk_layernorm=args.qk_layernorm)
    return GPTModel(
        config, spec, vocab_size=args.padded_vocab_size, max_sequence_length=args.max_position_embeddings,
        share_embeddings_and_output_weights=not args.untie_embeddings_and_output_weights,
        position_embedding_type=args.position_embedding_type, rotary_percent=args.rotary_percent,
        rotary_base=args.rotary_base, rope_scaling=getattr(args, "use_rope_scaling", False),
        rope_scaling_factor=getattr(args, "rope_scaling_factor", 8.0),
    )  # fmt: skip


def load_megatron(model, checkpoint: str):
    """``model`` with the weights of a Megatron checkpoint directory (a save, or an import's ``release``), read by
    Megatron's ``dist_checkpointing``, which reshards whatever layout wrote it."""
    from megatron.core import dist_checkpointing

    state = dist_checkpointing.load(model.sharded_state_dict(), checkpoint)
    missing, _ = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("._extra_state")]
    if missing:
        raise ExportError(f"Megatron's model found no weights in {checkpoint} for {missing[:5]}")
    return model.eval()


def parity_tokens(data_path: str | None, sequences: int, length: int, vocab_size: int):
    """``[sequences, length + 1]`` tokens: the first documents of the run's dataset laid end to end, or a fixed
    pseudo-random draw when there is none."""
    import torch

    if data_path:
        from megatron.core.datasets.indexed_dataset import IndexedDataset

        dataset = IndexedDataset(data_path)
        tokens: list[int] = []
        for index in range(len(dataset)):
            tokens.extend(int(t) for t in dataset[index])
            if len(tokens) >= sequences * (length + 1):
                break
        if len(tokens) >= sequences * (length + 1):
            return torch.tensor(tokens[: sequences * (length + 1)]).view(sequences, length + 1), data_path
    generator = torch.Generator().manual_seed(1234)
    return torch.randint(0, vocab_size, (sequences, length + 1), generator=generator), "pseudo-random tokens"


def _next_token_loss(logits, labels) -> float:
    import torch

    return float(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(),
                                                   labels.reshape(-1)))  # fmt: skip


def parity(
    args, checkpoint: str, hf_dir: str, vocab_size: int, data_path: str | None, sequences: int, length: int
) -> dict:
    """Megatron's model (``args``) loaded from ``checkpoint`` against ``transformers``' loaded from ``hf_dir``, on
    the same tokens."""
    import torch
    from transformers import LlamaForCausalLM

    length = min(length, args.max_position_embeddings)
    tokens, source = parity_tokens(data_path, sequences, length, vocab_size)
    inputs, labels = tokens[:, :-1], tokens[:, 1:]
    positions = torch.arange(length).unsqueeze(0).expand(sequences, -1)
    causal = torch.triu(torch.ones(length, length, dtype=torch.bool), diagonal=1).view(1, 1, length, length)

    megatron = load_megatron(megatron_model(args), checkpoint)
    megatron_layers: list = []
    hooks = [layer.register_forward_hook(lambda m, i, o: megatron_layers.append(o[0].detach().transpose(0, 1)))
             for layer in megatron.decoder.layers]  # fmt: skip
    with torch.no_grad():
        megatron_logits = megatron(inputs, positions, causal)[..., :vocab_size].float()
    for hook in hooks:
        hook.remove()
    del megatron

    hf = LlamaForCausalLM.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager").eval()
    hf_layers: list = []
    hooks = [layer.register_forward_hook(lambda m, i, o: hf_layers.append(o[0] if isinstance(o, tuple) else o))
             for layer in hf.model.layers]  # fmt: skip
    with torch.no_grad():
        hf_logits = hf(input_ids=inputs).logits.float()
    for hook in hooks:
        hook.remove()

    scale = float(megatron_logits.abs().max())
    largest = float((megatron_logits - hf_logits).abs().max())
    losses = (_next_token_loss(megatron_logits, labels), _next_token_loss(hf_logits, labels))
    loss_diff = abs(losses[0] - losses[1]) / abs(losses[0])
    first_layer = None
    for index, (ours, theirs) in enumerate(zip(megatron_layers, hf_layers, strict=True)):
        layer_scale = max(float(ours.abs().max()), 1e-12)
        if float((ours - theirs).abs().max()) > LOGIT_TOLERANCE * layer_scale:
            first_layer = index
            break
    passed = largest <= LOGIT_TOLERANCE * scale and loss_diff <= LOSS_TOLERANCE
    return {
        "passed": passed,
        "tokens": source,
        "sequences": sequences,
        "length": length,
        "largest_logit_difference": largest,
        "largest_logit": scale,
        "logit_tolerance": LOGIT_TOLERANCE * scale,
        "megatron_loss": losses[0],
        "hf_loss": losses[1],
        "loss_relative_difference": loss_diff,
        "loss_tolerance": LOSS_TOLERANCE,
        "first_differing_layer": first_layer,
    }


def _peak_rss_mib() -> float:
    """This process's largest resident memory so far (MiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def init_distributed(workdir: str) -> None:
    """A one-process gloo group: Megatron's checkpoint loading and model code ask torch.distributed."""
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method=f"file://{workdir}/{RENDEZVOUS}", rank=0, world_size=1)


def remove_rendezvous(workdir: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(workdir, RENDEZVOUS))


def export(options: argparse.Namespace) -> dict:
    from megatron.core import dist_checkpointing

    started = time.monotonic()
    save, out = os.path.abspath(options.save), os.path.abspath(options.out)
    if not os.path.isfile(os.path.join(save, "metadata.json")):
        raise ExportError(f"{save} is not a torch_dist save (no metadata.json): export reads torch_dist saves only")
    if os.path.exists(out):
        raise ExportError(f"{out} exists: give another --out, or remove it first")
    partial = out + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    init_distributed(partial)
    common = dist_checkpointing.load_common_state_dict(save)
    args = common.get("args")
    if args is None:
        raise ExportError(f"{save}/common.pt records no arguments: the model cannot be told")
    spec = spec_from_args(args)
    vocab_size, special = tokenizer_vocab(args, options.tokenizer)
    dtype = "bfloat16" if args.bf16 else "float16" if args.fp16 else "float32"
    config = config_json(args, spec, vocab_size, dtype)
    config.update(special)
    write_json(os.path.join(partial, "config.json"), config)
    write_json(os.path.join(partial, "generation_config.json"), {"_from_model_config": True, **special})
    index = write_weights(save, partial, spec, args.padded_vocab_size, vocab_size)
    tokenizer_files = copy_tokenizer(options.tokenizer, partial)
    written_s = round(time.monotonic() - started, 1)
    written_rss = _peak_rss_mib()
    check = None
    if options.parity:
        check = parity(args, save, partial, vocab_size, options.data_path, options.sequences, options.length)
    record = {
        "save": save,
        "iteration": common.get("iteration"),
        "format": "huggingface llama",
        "dtype": dtype,
        "vocab_size": vocab_size,
        "padded_vocab_size": args.padded_vocab_size,
        "tensors": len(index["weight_map"]),
        "bytes": index["metadata"]["total_size"],
        "tokenizer_files": tokenizer_files,
        "parity": check,
        "verified": bool(check and check["passed"]),
        "write_seconds": written_s,
        "write_peak_rss_mib": written_rss,
        "seconds": round(time.monotonic() - started, 1),
        "peak_rss_mib": _peak_rss_mib(),
    }
    write_json(os.path.join(partial, "export.json"), record)
    remove_rendezvous(partial)
    os.rename(partial, out)
    return {"out": out, **record}


def add_parity_options(parser: argparse.ArgumentParser) -> None:
    """The parity check's options (the export's and the import's)."""
    parser.add_argument("--data-path", help="the run's dataset prefix: the parity check's tokens")
    parser.add_argument("--sequences", type=int, default=4)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--no-parity", dest="parity", action="store_false")


def run_and_print(work, options: argparse.Namespace) -> int:
    """``work(options)``'s result as one JSON line; exit 0 (verified, or no check asked), 3 (the check failed) or 2
    (refused: ``{"error": ...}``)."""
    try:
        result = work(options)
    except (ExportError, hf_llama.NotLlama) as exc:
        print(json.dumps({"error": str(exc)}))
        return 2
    print(json.dumps(result, sort_keys=True))
    return 0 if result["verified"] or not options.parity else 3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--save", required=True, help="the save's directory (iter_NNNNNNN)")
    parser.add_argument("--out", required=True, help="the Hugging Face directory to write (must not exist)")
    parser.add_argument("--tokenizer", help="the run's tokenizer (a Hugging Face directory, or a file)")
    add_parity_options(parser)
    return run_and_print(export, parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
