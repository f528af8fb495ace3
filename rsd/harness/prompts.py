"""The token ids a run decodes: chat template, `dataset.max_prompt_tokens` truncation and the context check."""

from __future__ import annotations

from typing import Any

from rsd.data import Example
from rsd.errors import ConfigError
from rsd.models.pairs import encode_prompt, text_token_ids


class PromptTooLongError(ConfigError):
    """A prompt plus the generation budget does not fit the models' context."""


def prepare_prompts(examples: list[Example], tokenizer: Any, chat: bool, max_prompt_tokens: int | None
                    ) -> tuple[list[tuple[Example, list[int]]], dict[str, int]]:
    """Token ids of every prompt, and {prompt id: tokens before truncation} for the prompts that were cut.

    With `dataset.max_prompt_tokens` set, a longer prompt keeps the START of its text: the text (before any chat
    template) is cut to as many of its first tokens as let the templated prompt fit in max_prompt_tokens, so the
    instruction that opens a prompt and the chat template's generation prompt stay whole (what a model sees when
    a long article is cut short). A limit too small for the template itself is a ConfigError.
    """
    prompts, cut = [], {}
    for ex in examples:
        ids = encode_prompt(tokenizer, chat, ex.prompt)
        if max_prompt_tokens is not None and len(ids) > max_prompt_tokens:
            text_ids = text_token_ids(tokenizer, ex.prompt)
            keep = len(text_ids) - (len(ids) - max_prompt_tokens)
            while keep > 0:  # detokenising and re-encoding may shift a few tokens: cut until it fits
                short = encode_prompt(tokenizer, chat, tokenizer.decode(text_ids[:keep]))
                if len(short) <= max_prompt_tokens:
                    break
                keep -= len(short) - max_prompt_tokens
            if keep <= 0:
                raise ConfigError(f"dataset.max_prompt_tokens={max_prompt_tokens} leaves no room for the text of "
                                  f"prompt {ex.id!r} (its template alone takes {len(ids) - len(text_ids)} tokens); "
                                  "raise dataset.max_prompt_tokens")
            cut[ex.id] = len(ids)
            ids = short
        prompts.append((ex, ids))
    return prompts, cut


def check_context(prompts: list[tuple[Example, list[int]]], max_new: int, tree: int, limit: int | None) -> None:
    """Every prompt plus max_new_tokens plus one tree must fit the models' context `limit` (None: unknown)."""
    if not limit:
        return
    for ex, ids in prompts:
        need = len(ids) + max_new + tree + 1
        if need > limit:
            raise PromptTooLongError(
                f"prompt {ex.id!r} has {len(ids)} tokens; with sampling.max_new_tokens={max_new} and a tree of "
                f"{tree} drafted tokens it needs {need} positions, but the context is {limit}. Lower "
                "sampling.max_new_tokens, set dataset.max_prompt_tokens, shorten or drop the prompt, or choose a "
                "smaller budget.")
