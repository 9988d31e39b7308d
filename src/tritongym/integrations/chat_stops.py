"""Stop tokens read off a tokenizer's chat template (shared by the verl and TRL integrations).

Dr.Kernel's rollout stops generation at the chat template's turn tokens, not at EOS only
(KernelGYM ``kernel_trainer.yaml`` @3a84417, ``rollout.stop_token_ids: [872, 77091, 151645,
151644]``: Qwen's ``user``, ``assistant``, ``<|im_end|>`` and ``<|im_start|>``). A reply that runs
past the end of its turn and starts writing the next message (``<|im_start|>user ...``) is cut
there instead of spending the budget on an imagined conversation.

`chat_template_stop_ids` finds those tokens for any tokenizer: the special tokens between the end
of an assistant message's content and the start of the next user message's content, plus EOS.
The released list's two plain-word tokens (``user``, ``assistant``) are left out on purpose: they
are ordinary words that occur inside code (a variable ``user``), and stopping there would cut a
kernel in the middle; the special token that opens a message comes before them anyway.
"""

from __future__ import annotations

from typing import Any

__all__ = ["chat_template_stop_ids"]


def chat_template_stop_ids(tokenizer: Any) -> list[int]:
    """Token ids that end an assistant turn or open the next message, EOS first, without repeats.

    Raises ``ValueError`` when the chat template does not render the two markers it is probed with.
    """
    reply, user = "\u2063A\u2063", "\u2063U\u2063"
    messages = [{"role": "user", "content": "x"}, {"role": "assistant", "content": reply},
                {"role": "user", "content": user}]
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    if reply not in text or user not in text:
        raise ValueError("the tokenizer's chat template does not render message contents as given; "
                         "set the stop token ids explicitly")
    between = text[text.index(reply) + len(reply): text.rindex(user)]
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    special |= {i for i, token in (getattr(tokenizer, "added_tokens_decoder", {}) or {}).items()
                if getattr(token, "special", False)}
    ids: list[int] = []
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    for token in tokenizer(between, add_special_tokens=False)["input_ids"]:
        if token in special and token not in ids:
            ids.append(int(token))
    return ids
