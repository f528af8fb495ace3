"""Our engine against transformers on the same models, prompts and hardware, printed side by side.

  AR: rsd's AR vs `model.generate` (greedy and sampling)           -> the engine's per-token overhead
  SD: rsd's SD (L draft tokens) vs transformers' assisted generation -> block efficiency and token rate

Fair use of assisted generation: constant `num_assistant_tokens` and `assistant_confidence_threshold=0`
set on the draft model's generation_config, `top_k=0, top_p=1.0` passed explicitly, target forward calls counted
with a hook to get its block efficiency.

    python benchmarks/engine_vs_transformers.py --prompts 8 --max-new-tokens 64 --draft-length 4
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import torch
from common import machine

from rsd.core.engine import Engine
from rsd.core.sampling import SamplingParams, prompt_generator
from rsd.data import load_builtin
from rsd.drafters import AR, SD
from rsd.harness.schema import ModelPairConfig
from rsd.models.embedded import default_pair_config
from rsd.models.hardware import resolve_dtype
from rsd.models.pairs import load_pair


def count_calls(model: torch.nn.Module) -> list[int]:
    """A counter of forward calls on `model` (incremented by a forward pre-hook)."""
    calls = [0]
    model.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


def time_forwards(model: torch.nn.Module) -> list[float]:
    """Seconds spent inside `model`'s forward calls (pre- and post-hooks reading the clock); remove with
    `model._forward_pre_hooks.clear(); model._forward_hooks.clear()`."""
    spent, started = [0.0], [0.0]
    model.register_forward_pre_hook(lambda *_: started.__setitem__(0, time.perf_counter()))
    model.register_forward_hook(lambda *_: spent.__setitem__(0, spent[0] + time.perf_counter() - started[0]))
    return spent


def run_hf(pair, prompts: list[list[int]], max_new: int, temperature: float, draft_length: int | None) -> dict:
    """transformers generate (assisted when draft_length is set): tokens, target calls, seconds."""
    target, draft = pair.target.model, pair.draft.model
    calls = count_calls(target)
    in_forward = time_forwards(target)
    kwargs = {"max_new_tokens": max_new, "eos_token_id": pair.eos_token_ids, "pad_token_id": pair.eos_token_ids[0]}
    if temperature > 0:
        kwargs.update(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
    else:
        kwargs.update(do_sample=False)
    if draft_length:
        draft.generation_config.num_assistant_tokens = draft_length
        draft.generation_config.num_assistant_tokens_schedule = "constant"
        draft.generation_config.assistant_confidence_threshold = 0.0
        kwargs["assistant_model"] = draft
    # A trimmed draft returns logits over the target's full vocabulary, but its config names the trimmed size, which
    # generate() would take for a different tokenizer: give it the full size for the duration.
    trimmed_size = draft.config.vocab_size
    draft.config.vocab_size = getattr(draft.config, "full_vocab_size", trimmed_size)
    tokens, seconds = 0, 0.0
    with torch.inference_mode(), warnings.catch_warnings():  # untimed warm-up, like ours
        warnings.simplefilter("ignore")
        target.generate(torch.tensor([prompts[0]]), **{**kwargs, "max_new_tokens": 8})
    calls[0], in_forward[0] = 0, 0.0
    for i, ids in enumerate(prompts):
        torch.manual_seed(i)
        start = time.perf_counter()
        with torch.inference_mode(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # transformers' deprecation notices would break the table
            out = target.generate(torch.tensor([ids]), **kwargs)
        seconds += time.perf_counter() - start
        tokens += out.shape[1] - len(ids)
    target._forward_pre_hooks.clear()
    target._forward_hooks.clear()
    draft.config.vocab_size = trimmed_size
    return {"tokens": tokens, "calls": calls[0], "seconds": seconds, "forward_s": in_forward[0]}


def run_rsd(pair, prompts: list[list[int]], max_new: int, temperature: float, draft_length: int | None) -> dict:
    """rsd's engine with AR or SD(L): tokens, target calls, seconds."""
    drafter = SD(draft_length) if draft_length else AR()
    engine = Engine(pair.target, pair.draft if draft_length else None, drafter, SamplingParams(temperature),
                    pair.eos_token_ids, pair.vocab_size)
    tokens = calls = 0
    seconds = 0.0
    engine.warm_up(prompts[0])
    in_forward = time_forwards(pair.target.model)
    for i, ids in enumerate(prompts):
        out = engine.generate(ids, max_new, prompt_generator(0, str(i)))
        tokens += len(out.new_token_ids)
        calls += out.target_calls
        seconds += out.wall_s
    pair.target.model._forward_pre_hooks.clear()
    pair.target.model._forward_hooks.clear()
    return {"tokens": tokens, "calls": calls, "seconds": seconds, "forward_s": in_forward[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--draft-length", type=int, default=4)
    ap.add_argument("--dataset", default="dolly_builtin")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtype", default="float32", help="float32, bfloat16, or auto (this machine's fast dtype)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import transformers

    transformers.logging.set_verbosity_error()  # generate()'s notices would break the table
    dtype = resolve_dtype(args.dtype, "auto")
    pair = load_pair(ModelPairConfig.from_dict({**default_pair_config(), "dtype": dtype}))
    prompts = [pair.encode_prompt(ex.prompt) for ex in load_builtin(args.dataset)[: args.prompts]]
    print(f"$ python {' '.join(sys.argv)}\n# {machine()}")
    print(f"# embedded pair in {dtype}; {args.prompts} prompts of {args.dataset}, {args.max_new_tokens} new tokens, "
          f"{args.threads} thread(s), "
          f"torch {torch.__version__}")
    print(f"{'setting':<22} {'rsd BE':>7} {'HF BE':>7} {'rsd tok/s':>10} {'HF tok/s':>9} {'rsd/HF':>7}   "
          f"ms per token in the target's forwards / outside them: {'rsd':>11} {'HF':>11}")
    for temperature in (0.0, 1.0):
        for length in (None, args.draft_length):
            ours = run_rsd(pair, prompts, args.max_new_tokens, temperature, length)
            theirs = run_hf(pair, prompts, args.max_new_tokens, temperature, length)
            name = f"{'AR' if length is None else f'SD L={length}'} T={temperature:g}"
            ours_rate, their_rate = ours["tokens"] / ours["seconds"], theirs["tokens"] / theirs["seconds"]
            print(f"{name:<22} {ours['tokens'] / ours['calls']:>7.2f} {theirs['tokens'] / theirs['calls']:>7.2f} "
                  f"{ours_rate:>10.1f} {their_rate:>9.1f} {ours_rate / their_rate:>7.2f}   {'':>51}"
                  f"{split(ours):>12} {split(theirs):>11}", flush=True)


def split(run: dict) -> str:
    """'forward / outside' milliseconds per generated token."""
    fwd = 1e3 * run["forward_s"] / run["tokens"]
    return f"{fwd:.1f} / {1e3 * run['seconds'] / run['tokens'] - fwd:.1f}"


if __name__ == "__main__":
    main()
