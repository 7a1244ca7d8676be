#!/usr/bin/python
"""Documentation of the megatron_layout action plugin (plugins/action/megatron_layout.py); the plugin does the work."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: megatron_layout
short_description: Validate a Megatron-LM parallel layout and derive its launch plan
description:
  - Derives world size, data parallel size, global batch and micro-batches, padded vocabulary, the layers of
    every pipeline stage, memory per card, FLOPs and tokens per iteration, and the exact argument vector of
    Megatron-LM's C(pretrain_gpt.py), from the inventory's nodes, a model preset and the requested layout.
  - Checks everything Megatron's C(validate_args) checks for these values and fails listing every problem at
    once, each with the valid alternatives. Nothing on any node is touched; run it on the controller.
  - A layout whose most loaded pipeline stage does not fit the card's memory minus the headroom is refused
    unless O(force=true).
version_added: "0.1.0"
author: mtt-train-ops
options:
  model:
    description: The model preset (the mapping of C(models/<name>.yml)).
    type: dict
    required: true
  hosts:
    description:
      - The C(nodes) group's hosts in inventory order, each a mapping with C(name), C(ansible_host), C(slots),
        C(accelerator), and optionally C(master), C(node_addr), C(accelerator_card).
    type: list
    elements: dict
    required: true
  backends:
    description:
      - Every backend profile by accelerator (C(backends/<accelerator>.yml)), for its cards' facts (memory, dense
        peaks, bus bandwidth) and its default card; the C(trainops_backend_profiles) filter reads them.
    type: dict
    required: true
  layout:
    description:
      - The requested layout. Keys C(tp), C(pp), C(cp), C(vpp), C(mbs), C(num_microbatches) or C(gbs),
        C(seq_length), C(precision) (bf16 or fp8), C(recompute) (auto, none, selective, full),
        C(distributed_optimizer), C(sequence_parallel), C(flash_attention), C(transformer_impl)
        (transformer_engine or local), C(megatron_version),
        C(first_stage_layers), C(last_stage_layers), C(train_iters), C(recipe) (default or vendor).
        Strings from C(-e) are converted.
    type: dict
    default: {}
  training:
    description: Optimiser overrides (C(lr), C(min_lr), C(lr_warmup_iters), C(weight_decay), C(save_interval), ...).
    type: dict
    default: {}
  work_home:
    description: Directory inside the containers that holds runs and checkpoints (the same path on every node).
    type: str
    default: /data/mtt-train-ops
  data_path:
    description: Megatron data prefix (without C(.bin)/C(.idx)).
    type: str
    default: /data/datasets/llama3_text_document
  tokenizer_path:
    description: Tokenizer file or directory inside the containers.
    type: str
    default: /data/llama3-tokenizer
  tokenizer_type:
    description:
      - Megatron tokenizer type. When omitted it is detected from the file if the controller can read it,
        else taken from the model preset.
    type: str
    choices: [TikTokenizer, SentencePieceTokenizer, HuggingFaceTokenizer]
  run_id:
    description: The run's identifier (a timestamp); names the run directory and the torchrun run id.
    type: str
    required: true
  master_port:
    description: The rendezvous port on the master.
    type: raw
    default: 14388
  accelerator_memory_gib:
    description: Memory of one card in GiB; defaults by card (S5000 80, S4000 48, H100 80, H200 141).
    type: raw
  accelerator_peak_tflops:
    description: Dense peak of one card at the run's precision, for the cost model and MFU; defaults by card and
      precision where a public source states it (H100/H200 989 BF16, 1979 FP8; S4000 100 BF16), else unknown.
    type: raw
  printed_flops_convention:
    description: How the backend's Megatron counts the TFLOP/s it prints (from the backend profile).
    type: str
    choices: [causal, full]
    default: causal
  distributed_backend:
    description: Megatron's C(--distributed-backend) (the backend profile's C(megatron_distributed_backend)).
    type: str
    choices: [nccl, gloo]
    default: nccl
  memory_headroom_fraction:
    description: Share of the card kept free for the allocator, workspaces and FP8 buffers.
    type: raw
    default: 0.1
  force:
    description: Accept a layout that does not fit in memory.
    type: raw
    default: false
  recommend:
    description: Also rank every valid layout of the cluster by estimated tokens/s per card.
    type: raw
    default: false
  exp_name:
    description:
      - Experiment name, one directory level of the run and checkpoint paths (spaces and shell
        metacharacters are allowed, as every use is quoted). Default derived from the model (its name and a
        digest of its architecture), the sequence length, the precision and the layout (docs/checkpoints.md).
    type: str
  smoke:
    description:
      - Launch the project's smoke job instead of C(pretrain_gpt.py).
      - The layout role's default is the backend profile's C(default_job) (cpu, an image without Megatron-LM).
    type: raw
    default: false
  manifest:
    description:
      - The dataset's C(<data_path>.manifest.json) (written by playbooks/data.yml). The launch uses its
        tokenizer; a tokenizer given that differs is refused; the summary shows the epochs the run reads.
    type: dict
  init_from:
    type: str
    description:
      - A Hugging Face Llama directory inside the containers whose weights a fresh start begins from (imported
        before the launch; docs/export.md); none, Megatron's own initialisation.
  tokenizer_path_given:
    description: Whether O(tokenizer_path) was set by the user (then it must match the manifest's).
    type: bool
    default: true
notes:
  - Runs no command and changes nothing; supports check mode.
"""

EXAMPLES = r"""
- name: Plan Llama3-8B on the inventory's nodes with TP=1, PP=2
  megatron_layout:
    model: "{{ lookup('ansible.builtin.file', 'models/llama3-8b.yml') | from_yaml }}"
    hosts: "{{ groups['nodes'] | trainops_inventory_nodes(hostvars) }}"
    backends: "{{ 'musa' | trainops_backend_profiles }}"
    layout: {tp: 1, pp: 2, mbs: 1, num_microbatches: 128}
    run_id: "20261130-101500"
  register: plan

- name: Show the summary
  ansible.builtin.debug:
    msg: "{{ plan.plan.summary }}"
"""

RETURN = r"""
request:
  description: The options as given (the run's supervisor plans an elastic re-plan on the cluster from them).
  returned: success
  type: dict
plan:
  description: Everything derived; written as plan.json by plan.yml.
  returned: success
  type: dict
  contains:
    world_size: {description: Cards in the job., type: int, sample: 16}
    dp: {description: Data-parallel size., type: int, sample: 8}
    global_batch_size: {description: Sequences per iteration., type: int, sample: 1024}
    stage_layers: {description: Layers of every pipeline stage., type: list, elements: int, sample: [17, 15]}
    memory_gib:
      description: Memory estimate of the most loaded stage, per stage, and Megatron's own figure.
      type: dict
    flops_per_iteration: {description: Model FLOPs of one iteration (causal attention convention)., type: float}
    tokens_per_iteration: {description: Tokens of one iteration., type: int, sample: 4194304}
    exp_name:
      {description: Experiment name., type: str, sample: tiny-3197bd_seq256_bf16_tp1_pp1_dp4_mbs1_numbs2_gbs8_gpus4}
    job: {description: What the launch runs, megatron or smoke., type: str, sample: megatron}
    smoke_args: {description: The argument vector of the smoke job., type: list, elements: str}
    megatron_args: {description: The exact argument vector of pretrain_gpt.py., type: list, elements: str}
    nodes: {description: Nodes in rank order (master first) with name, addr, slots, node_rank., type: list}
    summary: {description: Readable summary lines., type: list, elements: str}
    recommendations:
      description: Ranked layouts (with recommend=true, or when the layout does not fit).
      type: list
problems:
  description: Every problem found, when the layout is refused.
  returned: failure
  type: list
  elements: str
"""
