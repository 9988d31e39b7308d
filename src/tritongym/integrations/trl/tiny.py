"""``--model tiny-random``: a randomly initialised small Qwen2-style model and a tokenizer trained
in-process, for smoke runs and demos without any download.

The tokenizer is a byte-level BPE (Hugging Face ``tokenizers``) trained on the texts given (the
task prompts, the packaged prompt templates, the built-in problems and their honest solutions),
with ChatML special tokens and a ChatML chat template; ``<|im_end|>`` is the end-of-turn (EOS)
token. The model is ``Qwen2ForCausalLM`` with tiny dimensions (hidden 64, 2 layers, 4 heads) and a
seeded random initialisation. It writes noise, not Triton: its replies earn reward 0, which is a
real verdict; the point is to exercise every moving part of training on a CPU in seconds.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["CHATML_TEMPLATE", "TINY_RANDOM", "tiny_random_model", "tiny_tokenizer"]

TINY_RANDOM = "tiny-random"

CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def tiny_tokenizer(texts: Iterable[str], *, vocab_size: int = 2048) -> Any:
    """A ``PreTrainedTokenizerFast``: byte-level BPE trained on `texts`, ChatML template, EOS ``<|im_end|>``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    backend.train_from_iterator(list(texts), trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                        additional_special_tokens=["<|im_start|>"])
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer


def tiny_random_model(texts: Iterable[str], *, seed: int = 0, hidden_size: int = 64, num_layers: int = 2,
                      num_heads: int = 4, vocab_size: int = 2048, max_positions: int = 16384) -> tuple[Any, Any]:
    """(model, tokenizer): a seeded random ``Qwen2ForCausalLM`` of tiny dimensions and `tiny_tokenizer`."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = tiny_tokenizer(texts, vocab_size=vocab_size)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                         num_hidden_layers=num_layers, num_attention_heads=num_heads,
                         num_key_value_heads=max(1, num_heads // 2), max_position_embeddings=max_positions,
                         tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=None)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = None
    return model, tokenizer


def corpus(prompts: Iterable[list[dict[str, str]]]) -> list[str]:
    """Texts to train the tiny tokenizer on: the chat prompts, the packaged templates, the built-in
    problems and their honest solutions (package data; nothing is downloaded)."""
    from tritongym.env.templates import TEMPLATE_NAMES, PromptTemplates
    from tritongym.tasks import builtin_suite

    texts = [m["content"] for prompt in prompts for m in prompt]
    templates = PromptTemplates.load()
    texts += [getattr(templates, name) for name in TEMPLATE_NAMES]
    texts += [p.source for p in builtin_suite()]
    return texts
