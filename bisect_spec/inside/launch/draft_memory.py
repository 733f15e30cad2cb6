"""Whether the draft's weights and KV pool fit beside the target's (``draft_model`` stage, once the draft is built on
``meta``; mirrors the draft ``ModelRunner``'s ``load_model`` and ``init_memory_pool``, ``model_executor/``).

Up to 0.5.13 the target sizes its pool before the draft exists: ``profile_max_num_token`` charges the target's
weights against ``--mem-fraction-static`` and gives the rest to the target's pool. The draft worker then loads
its weights and allocates its own pool for ``server_args.draft_runner_cache_size`` tokens (the target's count),
on top (sglang#6875: Llama-70B as its own draft on 8× H100 runs out of memory at ``--mem-fraction-static``
≥ 0.5). 0.5.14+ sizes every pool after the draft's load; there the draft's weights are charged by SGLang's own
sizing (:mod:`memory_pool` reads :data:`DRAFT_WEIGHTS`).

The sum is a lower bound of what a real GPU holds: the target's pool is the bytes of the buffers SGLang built on
``meta`` (where it built them); the draft's pool, never built here, takes its bytes per token by SGLang's formula
(``get_cell_size_per_token``: K and V per KV head, or MLA's compressed latent) with nothing it adds on top
(indexers, scales), 0 for a pool whose layout this does not follow (sliding-window and hybrid models, other KV
dtypes); the draft's embedding and head are left out (the EAGLE workers replace them with the target's), and
the CUDA context is not counted. A sum over the GPU's memory therefore runs out on a real box.
"""

from __future__ import annotations

from typing import Any

from .model_build import _GIB, _device_bytes
from .sglang_lookup import _view
from .stage import Progress, WillNotStart

#: ``progress.held``'s key for the draft's weights' bytes per GPU, once built on ``meta``.
DRAFT_WEIGHTS = "draft_weights_bytes"

#: Modules a draft worker replaces with the target's (``set_embed_and_head``/``set_embed``): not counted.
_SHARED = ("embed_tokens", "lm_head")


def draft_weights_bytes(model: Any) -> int:
    """The bytes of the draft's own tensors on ``meta`` (each once), less its embedding and head."""
    return _device_bytes(model, leave_out=_SHARED)


def _kv_element_bytes(args: Any, model_config: Any) -> int:
    """Bytes of one KV element (``--kv-cache-dtype``; ``auto``: the model's dtype); 0 where not known here."""
    dtype = str(getattr(args, "kv_cache_dtype", None) or "auto").lower()
    if dtype == "auto":
        size = getattr(getattr(model_config, "dtype", None), "itemsize", None)
        return size if isinstance(size, int) else 0
    if dtype.startswith("fp8"):
        return 1
    return {"bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2}.get(dtype, 0)


def _hybrid(model_config: Any) -> bool:
    """Whether the model's pool is not one full-attention cell per layer (sliding window, Mamba, linear attention)."""
    hf = getattr(model_config, "hf_text_config", None) or getattr(model_config, "hf_config", None)
    kinds = set(getattr(hf, "layer_types", None) or ())
    return bool(kinds - {"full_attention"} or getattr(model_config, "is_hybrid", False)
                or getattr(model_config, "is_hybrid_swa", False)
                or (getattr(hf, "sliding_window", None) and getattr(hf, "use_sliding_window", True)))


def kv_bytes_per_token(args: Any, model_config: Any, layers: int) -> int:
    """A lower bound of the bytes a token takes in a pool of ``layers`` layers of ``model_config``, by SGLang's
    ``get_cell_size_per_token``; 0 where its layout is not one this follows."""
    size = _kv_element_bytes(args, model_config)
    if size == 0 or layers <= 0 or _hybrid(model_config):
        return 0
    rank, rope = getattr(model_config, "kv_lora_rank", None), getattr(model_config, "qk_rope_head_dim", None)
    arch = getattr(model_config, "attention_arch", None)
    if getattr(arch, "name", str(arch)) == "MLA" and isinstance(rank, int) and isinstance(rope, int):
        return (rank + rope) * layers * size  # the latent, never more than the MHA layout --disable-mla gives
    tp = int(getattr(args, "tp_size", 1) or 1)
    if getattr(args, "enable_dp_attention", False):
        tp = max(1, tp // int(getattr(args, "dp_size", 1) or 1))
    try:
        heads = int(model_config.get_num_kv_heads(tp))
        head_dim = int(model_config.head_dim)
    except Exception:  # a config this does not follow: nothing counted
        return 0
    return heads * head_dim * layers * 2 * size


def _layers(model_config: Any, *, draft: bool, pp: int) -> int:
    hf = getattr(model_config, "hf_text_config", None) or getattr(model_config, "hf_config", None)
    layers = getattr(model_config, "num_hidden_layers", None) or getattr(hf, "num_hidden_layers", 0) or 0
    nextn = getattr(hf, "num_nextn_predict_layers", None)
    if draft and isinstance(nextn, int) and nextn > 0:
        layers = min(layers, nextn)
    return int(layers) // max(pp, 1)


def check_draft_fits(args: Any, target: Any, draft_config: Any, draft_bytes: int, progress: Progress) -> None:
    """Raise :class:`WillNotStart` (cause ``draft``) where the target's weights and pool, as SGLang sized them
    (``progress.memory_pool``), and the draft's weights and pool outgrow the GPU's memory."""
    pool = progress.memory_pool or {}
    if "memory_pool" in progress.needs_gpu:  # the pool stage stopped: its figures are not SGLang's whole sizing
        return
    total, weights, tokens = pool.get("total_bytes"), pool.get("weights_bytes"), pool.get("max_total_num_tokens")
    if not (isinstance(total, int) and isinstance(weights, int) and isinstance(tokens, int)) or tokens <= 0:
        return
    view = _view(args)
    pp = int(getattr(view, "pp_size", 1) or 1)
    built = pool.get("kv_pool_bytes")  # the target's pool as SGLang built it on meta, else by its formula
    target_pool = built if isinstance(built, int) and built > 0 else \
        tokens * kv_bytes_per_token(view, target, _layers(target, draft=False, pp=pp))
    draft_tokens = getattr(view, "draft_runner_cache_size", None)
    draft_tokens = draft_tokens if isinstance(draft_tokens, int) and draft_tokens > 0 else tokens
    draft_pool = draft_tokens * kv_bytes_per_token(view, draft_config, _layers(draft_config, draft=True, pp=1))
    needed = weights + target_pool + draft_bytes + draft_pool
    if needed <= total:  # what the pass leaves (a fix of a draft's out of memory keeps room for the unsimulated)
        pool.update(draft_weights_bytes=draft_bytes, draft_pool_bytes=draft_pool, target_pool_bytes=target_pool,
                    free_after_draft_bytes=total - needed)
        return
    fraction = pool.get("mem_fraction_static")
    raise WillNotStart(
        "draft", f"the target's weights and pool take {(weights + target_pool) / _GIB:.2f} GiB per GPU"
        f"{f' (--mem-fraction-static {fraction})' if fraction is not None else ''}; the draft's weights "
        f"{draft_bytes / _GIB:.2f} GiB and its pool of {draft_tokens} tokens {draft_pool / _GIB:.2f} GiB come on "
        f"top: {needed / _GIB:.2f} GiB, more than its {total / _GIB:.2f} GiB. A real launch runs out of device memory "
        "(CUDA out of memory) when the draft worker loads, after the target's weights and pool",
        needed=needed, available=total, total=total, at_least=True, target_weights=weights,
        target_pool=target_pool, draft_weights=draft_bytes, draft_pool=draft_pool,
        mem_fraction_static=fraction)
