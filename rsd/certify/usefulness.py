"""Usefulness, reported next to the verdict and never part of it: the drafter's mean accepted length and block
efficiency on a real pair, next to SD at the same L and AR, with a warning when it does not help."""

from __future__ import annotations

from omegaconf import OmegaConf

from rsd.certify.report import Usefulness, raised_text
from rsd.core.engine import Engine
from rsd.core.sampling import SamplingParams, prompt_generator
from rsd.data import load_builtin
from rsd.drafters import SD
from rsd.drafters.base import Drafter
from rsd.harness.schema import ModelPairConfig
from rsd.models.embedded import ModelUnavailableError
from rsd.models.pairs import load_pair
from rsd.paths import CONF_DIR

USEFUL_PROMPTS, USEFUL_TOKENS = 3, 24  # short on purpose: a smoke test of usefulness, not a benchmark
USELESS_ACCEPTANCE = 0.05  # mean accepted tokens per step below this is "~0"
AR_MARGIN = 1.05  # block efficiency below this does not beat AR (exactly 1 token per target call)


def _load_named_pair(name: str):
    """The model pair conf/model_pair/NAME.yaml describes."""
    path = CONF_DIR / "model_pair" / f"{name}.yaml"
    return load_pair(ModelPairConfig.from_dict(OmegaConf.to_container(OmegaConf.load(path))))


def usefulness_check(name: str, drafter: Drafter, model_pair: str = "smollm2", prompts: int = USEFUL_PROMPTS,
                     max_new_tokens: int = USEFUL_TOKENS) -> Usefulness | None:
    """Mean accepted length and block efficiency of `drafter`, SD at the same L and AR, at T = 1 on the first
    `prompts` dolly_builtin prompts; the tiny pair stands in when `model_pair` cannot be loaded. None for a drafter
    that drafts nothing. Metrics as defined in docs/algorithms.md#metrics."""
    depth = drafter.draft_length
    if depth == 0:
        return None
    try:
        pair, pair_note = _load_named_pair(model_pair), f"{model_pair} pair"
    except ModelUnavailableError as err:
        pair = _load_named_pair("tiny_llama")
        pair_note = (f"tiny_llama pair (random weights, says little about real models; {model_pair} is unavailable: "
                     f"{str(err).splitlines()[0]})")
    examples = load_builtin("dolly_builtin")[:prompts]
    sampling = SamplingParams(1.0)
    rows = {"ar": {"mean_accepted_length": 0.0, "block_efficiency": 1.0}}  # one token per call, by definition
    setting = (f"{pair_note}, {len(examples)} dolly_builtin prompts x {max_new_tokens} new tokens, T=1, L={depth} "
               "(a short smoke test, not a benchmark)")
    for method, d in ({f"sd (L={depth})": SD(depth), name: drafter}).items():
        try:
            engine = Engine(pair.target, pair.draft, d, sampling, pair.eos_token_ids, pair.vocab_size)
            outs = [engine.generate(pair.encode_prompt(ex.prompt), max_new_tokens,
                                    prompt_generator(0, ex.id, pair.target.device)) for ex in examples]
        except Exception as err:  # noqa: BLE001 - the drafter's code may raise anything; say so in one line
            return Usefulness(setting, rows, raised_text(method, err))
        accepted = [a for out in outs for a in out.accepted_lengths]
        rows[method] = {"mean_accepted_length": sum(accepted) / len(accepted),
                        "block_efficiency": sum(len(o.new_token_ids) for o in outs) / sum(o.target_calls for o in outs)}
    mine = rows[name]
    problems = []
    if mine["mean_accepted_length"] < USELESS_ACCEPTANCE:
        problems.append(f"its acceptance is ~0 (mean accepted length {mine['mean_accepted_length']:.2f} tokens per "
                        "step): check that it drafts the tokens it means to")
    if mine["block_efficiency"] < AR_MARGIN:
        problems.append(f"it does not beat AR (block efficiency {mine['block_efficiency']:.2f} < {AR_MARGIN})")
    warning = f"{name} is lossless but useless here: " + "; ".join(problems) if problems else None
    return Usefulness(setting, rows, warning)
