"""Bytes per item of one agent's training and rollout, as pure functions of model sizes and settings.

Why pure: a memory plan is arithmetic, and arithmetic is testable against hand-computed numbers. Every function
takes :class:`~model_adapters.model_facts.ModelFacts` (or plain numbers) and returns bytes on one device.

Where the per-token activation constants come from (bf16; ``wb`` = bytes per weight element scales them): what
autograd keeps of one decoder layer of the common HF decoder layout — two RMSNorms (fp32 input and bf16 output:
8·h bytes each), the q/k/v projections (2·(hq + 2·hkv)), rotary embedding (rotated copy and output of q and k:
4·(hq + hkv)), keys and values repeated to the query heads for SDPA (4·hq), attention output before and after
the head merge (4·hq), and a gated MLP (gate, up, activation, product: 8·i). With gradient checkpointing each
layer keeps its input (``wb``·h per token) and one layer's activations are rebuilt at a time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from model_adapters.model_facts import ModelFacts

GIB = 2**30
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
LOGPROB_CHUNK_BYTES = 12 * 2**24  # model_adapters.logprob_tail: ≈ 12 bytes per logit of one chunk at its peak
# Every process (one per agent, or per rank of a DeepSpeed block) holds one CUDA context: ~300-400 MiB for a
# CUDA 12 context with lazy module loading on an H100/H200, plus cuBLAS workspaces and NCCL's buffers.
CUDA_CONTEXT = GIB // 2
# An awake engine's memory beside weights and KV cache, inside its share: the profiled activation peak,
# CUDA graphs and sampler buffers (the process's CUDA context is counted apart, CUDA_CONTEXT)
VLLM_OVERHEAD = 3 * GIB // 2
# What a level-2 sleep leaves on the device: it releases the weights and KV cache (the tagged allocations);
# the CUDA graphs' pool, sampler buffers and the allocator's cached blocks stay
VLLM_ASLEEP = GIB
LORA_TARGETS_RANK = 16  # the plan's LoRA lever: rank 16 on every attention and MLP projection
LORA_BYTES = 4  # peft keeps the adapters in fp32 beside bf16 weights: they train without master copies
# corl_vl.train.optimizer steps 2**20 elements at a time; per element a slice holds at most 24 bytes of
# temporaries (the rebuilt fp32 master and the int32 bit patterns that split it again)
STEP_CHUNK = 2**20
STEP_BYTES_PER_ELEMENT = 24


@dataclass(frozen=True)
class Workload:
    """One micro-batch of the gradient pass."""

    micro_batch: int  # sequences per forward/backward
    seq_len: int  # prompt (text + image tokens) + completion tokens
    completion: int  # completion tokens per sequence (the logprob tail's rows)
    images: int  # images per sequence
    checkpointing: bool
    weight_bytes: int  # 2 for bf16/fp16, 4 for fp32
    # bf16: the Torch backend stores only the masters' low halves (fp16: whole fp32 copies)
    split_masters: bool = True
    group: int = 1  # consecutive rows per problem (grpo.k): they share one picture


@dataclass(frozen=True)
class Sharding:
    """How the agent's training state is split over its data-parallel ranks."""

    ranks: int = 1
    zero_stage: int = 0  # 0: the Torch backend (one process); 1, 2 or 3: DeepSpeed ZeRO
    offload_optimizer: bool = False  # masters + optimizer state + the step in CPU memory


def layer_bytes_per_token(
    hidden: int, q_width: int, kv_width: int, intermediate: int, weight_bytes: int
) -> int:
    """Activation bytes one decoder layer keeps per token for the backward pass (module docstring)."""
    bf16 = 16 * hidden + 14 * q_width + 8 * kv_width + 8 * intermediate
    return bf16 * weight_bytes // 2


def text_layer_bytes(f: ModelFacts, weight_bytes: int) -> int:
    return layer_bytes_per_token(
        f.hidden, f.heads * f.head_dim, f.kv_heads * f.head_dim, f.intermediate, weight_bytes
    )


def vision_layer_bytes(f: ModelFacts, weight_bytes: int) -> int:
    """A ViT block: full multi-head attention (keys and values as wide as queries), gated or plain MLP alike."""
    return layer_bytes_per_token(
        f.vision_hidden, f.vision_hidden, f.vision_hidden, f.vision_intermediate, weight_bytes
    )


def stack_activations(layers: int, tokens: int, per_token_layer: int, width: int, wb: int, ckpt: bool) -> int:
    """A stack of ``layers`` layers over ``tokens`` tokens: all layers' activations, or (checkpointing) every
    layer's input plus one layer rebuilt."""
    if layers == 0 or tokens == 0:
        return 0
    if ckpt:
        return layers * tokens * width * wb + tokens * per_token_layer
    return layers * tokens * per_token_layer


def activations(f: ModelFacts, w: Workload) -> int:
    """The language model's activations for one micro-batch (embedding output and final norm included)."""
    tokens = w.micro_batch * w.seq_len
    edges = tokens * f.hidden * w.weight_bytes * 5  # embedding output, final norm (fp32 in, out)
    return edges + stack_activations(
        f.layers, tokens, text_layer_bytes(f, w.weight_bytes), f.hidden, w.weight_bytes, w.checkpointing
    )


def problems_per_micro_batch(micro_batch: int, group: int) -> int:
    """The most problems one micro-batch of ``micro_batch`` consecutive rows holds when every problem brings
    ``group`` consecutive rows (whole GRPO groups; a group whose advantages are all 0 is skipped whole)."""
    period = math.lcm(micro_batch, group)
    return min(
        micro_batch,
        max((s + micro_batch - 1) // group - s // group + 1 for s in range(0, period, micro_batch)),
    )


def vision_activations(f: ModelFacts, w: Workload) -> int:
    """The vision tower's activations for one micro-batch's images: each problem's pictures once where the family
    shares one encoding among a problem's rows (``f.shared_vision_pass``), else every row's."""
    encoded = problems_per_micro_batch(w.micro_batch, w.group) if f.shared_vision_pass else w.micro_batch
    tokens = encoded * w.images * f.vision_tokens
    return stack_activations(
        f.vision_layers,
        tokens,
        vision_layer_bytes(f, w.weight_bytes),
        f.vision_hidden,
        w.weight_bytes,
        w.checkpointing,
    )


def logprob_tail(f: ModelFacts, w: Workload, *, head_trained: bool) -> int:
    """The chunked tail: one chunk's working set, plus one transient LM-head gradient when the head trains.
    Per row whether or not pictures are shared: each row scores its own completion tokens."""
    head_grad = f.vocab * f.hidden * w.weight_bytes if head_trained else 0
    return min(LOGPROB_CHUNK_BYTES, 12 * f.vocab * w.micro_batch * w.completion) + head_grad


def lora_parameters(f: ModelFacts, rank: int = LORA_TARGETS_RANK) -> int:
    """Trainable parameters of LoRA on q, k, v, o and the three MLP projections of every text layer."""
    q, kv, h, i = f.heads * f.head_dim, f.kv_heads * f.head_dim, f.hidden, f.intermediate
    per_layer = (h + q) + 2 * (h + kv) + (q + h) + 2 * (h + i) + (i + h)
    return f.layers * rank * per_layer


def training_state(
    parameters: int, trained: int, wb: int, s: Sharding, *, split: bool = True, largest: int = 0
) -> dict[str, int]:
    """Weights, fp32 masters, gradients and AdamW state on one rank, and the optimizer step's extra memory.

    The Torch backend (ZeRO stage 0, :mod:`corl_vl.train.optimizer`): bf16 masters cost their low halves only
    (``split``), gradients accumulate in fp32, and the chunked step adds one slice's temporaries (at most
    ``STEP_CHUNK`` elements of the ``largest`` trained tensor) beside them: 16 bytes per bf16 parameter. With
    ``offload_optimizer`` masters, moments and fp32 gradients are in CPU memory and the device keeps the
    weights (each gradient leaves as autograd produces it). DeepSpeed keeps fp32 masters partitioned and adds
    the rank's fp32 gradient partition at the step; ZeRO-1 keeps whole gradients until the step; ZeRO-2 reduces the model's low-precision gradients into a
    partition during the backward pass, ZeRO-3 keeps that partition (``gradient_partition``) allocated from
    ``deepspeed.initialize`` on, through rollouts too (deepspeed/runtime/zero/stage3.py). With DeepSpeed's
    optimizer offload masters, moments and both gradient partitions are in CPU memory.
    """
    on_device = not s.offload_optimizer
    items = {"gradient_partition": 0}
    if s.zero_stage == 0:
        master_bytes = 0 if wb == 4 else 2 if split else 4
        items["master_weights"] = trained * master_bytes if on_device else 0
        items["gradients"] = trained * 4 if on_device else 0
        slice_bytes = STEP_BYTES_PER_ELEMENT * min(STEP_CHUNK, largest)
        items["optimizer_step"] = items["gradients"] + slice_bytes if on_device else 0
        items["optimizer_state"] = trained * 8 if on_device else 0
        items["weights"] = parameters * wb
        return items
    n = s.ranks
    fp32_partition = trained * 4 // n if on_device else 0
    items["master_weights"] = fp32_partition if wb != 4 else 0
    items["optimizer_state"] = trained * 8 // n if on_device else 0
    if s.zero_stage >= 3:
        items["weights"] = parameters * wb // n
        items["gradient_partition"] = trained * wb // n if on_device else 0
        items["gradients"] = 0
        items["optimizer_step"] = fp32_partition
    else:  # ZeRO-1/2: whole weights; ZeRO-2's gradient partition is live from the backward pass to the step
        items["weights"] = parameters * wb
        items["gradients"] = trained * wb // (n if s.zero_stage == 2 else 1)
        items["optimizer_step"] = items["gradients"] + fp32_partition
    return items


def kv_cache(f: ModelFacts, tokens: int, wb: int) -> int:
    """Keys and values of ``tokens`` tokens across the language model's layers."""
    return 2 * f.layers * f.kv_heads * f.head_dim * wb * tokens


def agent_items(
    f: ModelFacts,
    w: Workload,
    s: Sharding,
    *,
    freeze_vision: bool = False,
    lora: bool = False,
    lora_rank: int = LORA_TARGETS_RANK,
) -> dict[str, int]:
    """Every training item of one agent on one of its devices (the plan's and the CPU benchmark's numbers).

    ``freeze_vision``: the vision tower and its projector train nothing (``train.freeze``); ``lora``: only
    rank-``lora_rank`` adapters train (``agents[i].lora``, corl_vl.train.lora), the base is frozen."""
    if lora:
        adapters = lora_parameters(f, lora_rank)
        widest = max(f.hidden, f.intermediate, f.heads * f.head_dim)
        items = training_state(adapters, adapters, LORA_BYTES, s, largest=lora_rank * widest)
        items["weights"] += f.parameters * w.weight_bytes // (s.ranks if s.zero_stage >= 3 else 1)
    else:
        trained = f.parameters - (f.vision_parameters if freeze_vision else 0)
        largest = f.vocab * f.hidden  # the embedding (or LM head): the largest the chunked step slices
        items = training_state(
            f.parameters, trained, w.weight_bytes, s, split=w.split_masters, largest=largest
        )
    items["activations"] = activations(f, w)
    # a frozen (or LoRA-wrapped) tower still runs forward, but keeps nothing for backward
    items["vision_activations"] = 0 if (freeze_vision or lora) else vision_activations(f, w)
    items["logprob_tail"] = logprob_tail(f, w, head_trained=not lora)
    return items


def largest_tensor(f: ModelFacts) -> int:
    """Elements of the model's largest single weight: the embedding or LM head (vocab × hidden), else an MLP
    matrix (intermediate × hidden), the query projection or a vision-tower MLP matrix."""
    return max(
        f.vocab * f.hidden,
        f.intermediate * f.hidden,
        f.heads * f.head_dim * f.hidden,
        f.vision_intermediate * f.vision_hidden,
    )


def sync_gather(f: ModelFacts, wb: int, s: Sharding, *, streamed: bool) -> int:
    """What the weight sync into vLLM gathers beside the rank's ZeRO-3 partitions: one parameter at a time when
    the sync streams (:mod:`corl_vl.rollout.vllm_sync`), so the largest one; the whole model where it cannot
    (an HF engine, LoRA merging, a family converter: ``f.zero3_sync_whole``); nothing below ZeRO-3."""
    if s.zero_stage < 3:
        return 0
    whole = not streamed or f.zero3_sync_whole
    return (f.parameters if whole else largest_tensor(f)) * wb


def reference_model(parameters: int, wb: int, *, beta: float, lora: bool) -> int:
    """The KL reference (``grpo.beta > 0``): corl_vl.train.lora loads a second, frozen, unsharded copy of the
    model on every rank; a LoRA agent's reference is its own model with the adapters off (no copy)."""
    return parameters * wb if beta > 0 and not lora else 0


def init_transient(items: dict[str, int], full_weights: int, trained: int, wb: int, s: Sharding) -> int:
    """What ``deepspeed.initialize`` adds on one rank beyond the state it leaves (``items``), at its peak.

    The agent's Torch optimizer (:class:`~corl_vl.train.optimizer.MasterAdamW`) is built before DeepSpeed wraps
    the model and lives through the wrap: its masters (bf16: int16 low halves, 2 B; fp16: fp32 copies, 4 B) stay
    on the device. DeepSpeed initialises AdamW's moments with a zero step over an fp32 gradient partition
    (4 B / ranks). Under ZeRO-3 the whole model is on every rank until DeepSpeed partitions it (before the
    masters and moments exist): the larger of the two moments counts. ``full_weights``: the whole model's bytes;
    ``trained``, ``wb``: the trained parameters and their bytes each (LoRA adapters: fp32, no throw-away)."""
    if s.zero_stage == 0:
        return 0
    throwaway = trained * (2 if wb == 2 else 0)  # the int16 low halves (fp16 would be 4: planned as bf16)
    zero_step = 0 if s.offload_optimizer else trained * 4 // s.ranks
    at_optimizer = throwaway + zero_step
    if s.zero_stage < 3:
        return at_optimizer
    # before partitioning: every weight whole, none of the partitioned state yet
    state = (
        items["weights"] + items["master_weights"] + items["optimizer_state"] + items["gradient_partition"]
    )
    before = full_weights + throwaway - state
    return max(at_optimizer, before)


def vllm_concurrency(weights: int, kv_per_sequence: int, share: int, sequences: int) -> int:
    """How many of ``sequences`` an engine with ``share`` bytes runs at once: its KV cache is the share less the
    weights and :data:`VLLM_OVERHEAD`, and vLLM queues the rest (0: not even one full sequence fits)."""
    room = share - weights - VLLM_OVERHEAD
    if room < kv_per_sequence or kv_per_sequence <= 0:
        return 0 if kv_per_sequence > 0 else sequences
    return min(sequences, room // kv_per_sequence)


STATIC = (
    "cuda_context",
    "weights",
    "reference_model",
    "master_weights",
    "optimizer_state",
    "gradient_partition",
)


def static_bytes(items: dict[str, int]) -> int:
    """What the agent's process holds on the device through its whole turn (trainer state, context)."""
    return sum(items.get(k, 0) for k in STATIC)


def idle_bytes(items: dict[str, int]) -> int:
    """What an idle agent leaves on a GPU it shares (its turn is over): its context, bf16 weights, KL reference
    and sleeping engine; masters and AdamW moments wait in host memory, its gradients are freed."""
    keep = ("cuda_context", "weights", "reference_model", "vllm_asleep")
    return sum(items.get(k, 0) for k in keep)


def update_peak(items: dict[str, int]) -> int:
    """Scoring and update (the engine asleep): the gradient pass's or the optimizer step's peak, whichever is
    higher, beside the static state (``items`` of :func:`agent_items`, plus the planner's process items)."""
    live = items["gradients"] + items["activations"] + items["vision_activations"] + items["logprob_tail"]
    return static_bytes(items) + items.get("vllm_asleep", 0) + max(live, items["optimizer_step"])


def phase_peaks(items: dict[str, int], *, takes_turns: bool = False) -> dict[str, int]:
    """The active agent's peak in each phase of its turn, on one of its GPUs.

    ``rollout``: the engine awake (its whole share: vLLM fills it with KV cache) or HF generate's KV cache;
    ``sync``: at the start of a rollout the engine wakes its weights only (not the KV cache) and receives the
    trainer's, which ZeRO-3 gathers (``sync_gather``: one parameter at a time when the sync streams); ``update``: :func:`update_peak`; ``init``:
    ``deepspeed.initialize`` (:func:`init_transient`), once, before any engine starts. ``takes_turns``: the GPU
    is shared, so the masters and AdamW moments come back from host memory for the update only."""
    static = static_bytes(items)
    rolling = static - (items["master_weights"] + items["optimizer_state"] if takes_turns else 0)
    return {
        "rollout": rolling + items.get("vllm_share", 0) + items.get("hf_kv_cache", 0),
        "sync": rolling
        + items.get("vllm_asleep", 0)
        + items.get("vllm_weights", 0)
        + items.get("sync_gather", 0),
        "update": update_peak(items),
        "init": static + items.get("init_transient", 0),
    }
