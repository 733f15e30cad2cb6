#!/usr/bin/env python
"""Build a tiny random-weight Llama target and an EAGLE3 draft for it, locally (no hub).

Used by ``scripts/gpu_check.sh`` to launch real SGLang servers in seconds: a 2-layer
Llama (hidden 256, vocab 512) saved with ``save_pretrained``, a WordLevel tokenizer built
with ``tokenizers`` and saved as ``tokenizer.json``, and a one-layer EAGLE3 head
(``LlamaForCausalLMEagle3``) whose weights follow the names SGLang's EAGLE3 loader reads
(``midlayer.*``, ``fc``, ``norm``, ``lm_head``, ``d2t``/``t2d``). The weights are random: the
servers start and answer, the tokens they produce mean nothing.

Needs torch, transformers, tokenizers and safetensors (a GPU box with SGLang has them).

Usage: python scripts/tiny_models.py DIR   -> DIR/target, DIR/draft, DIR/qwen3
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HIDDEN = 256
VOCAB = 512
HEADS = 4
KV_HEADS = 2
INTERMEDIATE = 512
DRAFT_VOCAB = 512


def build_tokenizer(directory: Path) -> None:
    """A WordLevel tokenizer over ``VOCAB`` made-up words, with BOS/EOS/UNK/PAD and a chat template."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    specials = ["<unk>", "<s>", "</s>", "<pad>"]
    vocab = {token: i for i, token in enumerate(specials)}
    for i in range(VOCAB - len(specials)):
        vocab[f"w{i}"] = len(vocab)
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "pad_token": "<pad>", "model_max_length": 4096,
        "chat_template": "{% for m in messages %}{{ m['content'] }} {% endfor %}",
    }, indent=2))
    (directory / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}, indent=2))


def build_target(directory: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=2,
                         num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, vocab_size=VOCAB,
                         max_position_embeddings=4096, bos_token_id=1, eos_token_id=2, pad_token_id=3,
                         tie_word_embeddings=False, torch_dtype="bfloat16")
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(directory, safe_serialization=True)
    build_tokenizer(directory)


def build_qwen3_target(directory: Path) -> None:
    """A 2-layer Qwen3 of the same size: a target whose class (``Qwen3ForCausalLM``) has no ``set_embed``, which
    EAGLE3 with no draft model calls on it (sglang#36528)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(2)
    config = Qwen3Config(hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=2,
                         num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HIDDEN // HEADS,
                         vocab_size=VOCAB, max_position_embeddings=4096, bos_token_id=1, eos_token_id=2,
                         pad_token_id=3, tie_word_embeddings=False, torch_dtype="bfloat16")
    model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(directory, safe_serialization=True)
    build_tokenizer(directory)


def build_eagle3_draft(directory: Path) -> None:
    """One decoder layer taking [embedding; fused hidden] (2*hidden), fc from 3 target layers' hidden states."""
    import torch
    from safetensors.torch import save_file

    torch.manual_seed(1)
    head_dim = HIDDEN // HEADS
    directory.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
        "num_hidden_layers": 1, "vocab_size": VOCAB, "draft_vocab_size": DRAFT_VOCAB, "hidden_act": "silu",
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "torch_dtype": "bfloat16",
        "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3,
    }
    (directory / "config.json").write_text(json.dumps(config, indent=2))

    def rand(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape) * 0.02).to(torch.bfloat16)

    weights = {
        "midlayer.self_attn.q_proj.weight": rand(HEADS * head_dim, 2 * HIDDEN),
        "midlayer.self_attn.k_proj.weight": rand(KV_HEADS * head_dim, 2 * HIDDEN),
        "midlayer.self_attn.v_proj.weight": rand(KV_HEADS * head_dim, 2 * HIDDEN),
        "midlayer.self_attn.o_proj.weight": rand(HIDDEN, HEADS * head_dim),
        "midlayer.mlp.gate_proj.weight": rand(INTERMEDIATE, HIDDEN),
        "midlayer.mlp.up_proj.weight": rand(INTERMEDIATE, HIDDEN),
        "midlayer.mlp.down_proj.weight": rand(HIDDEN, INTERMEDIATE),
        "midlayer.input_layernorm.weight": torch.ones(HIDDEN, dtype=torch.bfloat16),
        "midlayer.hidden_norm.weight": torch.ones(HIDDEN, dtype=torch.bfloat16),
        "midlayer.post_attention_layernorm.weight": torch.ones(HIDDEN, dtype=torch.bfloat16),
        "norm.weight": torch.ones(HIDDEN, dtype=torch.bfloat16),
        "fc.weight": rand(HIDDEN, 3 * HIDDEN),
        "lm_head.weight": rand(DRAFT_VOCAB, HIDDEN),
        "d2t": torch.zeros(DRAFT_VOCAB, dtype=torch.int64),
        "t2d": torch.ones(VOCAB, dtype=torch.bool),
    }
    save_file(weights, str(directory / "model.safetensors"))
    build_tokenizer(directory)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    root = Path(argv[0])
    build_target(root / "target")
    build_eagle3_draft(root / "draft")
    build_qwen3_target(root / "qwen3")
    print(f"tiny Llama target at {root / 'target'}, EAGLE3 draft at {root / 'draft'}, Qwen3 at {root / 'qwen3'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
