"""Decode every built-in method on the tiny pair and print the deterministic part of its records as JSON.

`python tests/golden/make_golden.py > tests/golden/tiny_records.json` wrote the fixture that test_golden.py compares
against (generated once before a refactor; regenerate only for a change meant to alter outputs, and say so).
"""

from __future__ import annotations

import json
import sys

import torch

from rsd.core.engine import Engine
from rsd.core.sampling import SamplingParams, prompt_generator
from rsd.drafters import AR, BV, RSDC, RSDS, SD, TV, SpecInfer, SpecTr
from rsd.models.adapter import CausalLM
from rsd.models.tiny import tiny_pair

METHODS = {
    "ar": AR, "sd": lambda: SD(3), "bv": lambda: BV(3), "specinfer": lambda: SpecInfer(2, 3),
    "spectr": lambda: SpecTr(2, 3), "rsd_c": lambda: RSDC([2, 2, 1]), "tv": lambda: TV([2, 1, 1]),
    "rsd_s": lambda: RSDS(2, 3),
}
PROMPTS = [[3, 4, 5], [10, 2, 7, 7, 1]]


def golden() -> dict:
    torch.set_num_threads(1)
    target, draft = tiny_pair("llama", 16, seed=2, init_std=0.3)
    out = {}
    for params in (SamplingParams(1.0), SamplingParams(0.8, top_k=6, top_p=0.9)):
        for name, make in METHODS.items():
            eos = [] if params.top_k == 0 else [1]
            engine = Engine(CausalLM(target), CausalLM(draft), make(), params, eos, 16)
            rows = []
            for i, prompt in enumerate(PROMPTS):
                g = engine.generate(prompt, 24, prompt_generator(0, f"p{i}"))
                rows.append({"new_token_ids": g.new_token_ids, "target_calls": g.target_calls,
                             "draft_calls": g.draft_calls, "tokens_verified": g.tokens_verified,
                             "accepted_lengths": g.accepted_lengths,
                             "expected_emitted": [round(x, 9) for x in g.expected_emitted]})
            out[f"{name} T={params.temperature} k={params.top_k} p={params.top_p}"] = rows
    return out


if __name__ == "__main__":
    json.dump(golden(), sys.stdout, indent=1)
    print()
