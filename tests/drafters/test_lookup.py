"""Prompt lookup decoding: the n-gram lookup, no draft model, greedy identity and a real saving on repetitive text."""

import pytest

from rsd.core.engine import Engine
from rsd.core.generation import Generation
from rsd.core.sampling import SamplingParams, prompt_generator
from rsd.drafters import AR, PLD
from rsd.drafters.lookup import lookup_continuation
from rsd.models.adapter import CausalLM
from rsd.models.tiny import tiny_pair


@pytest.mark.parametrize("tokens, max_ngram, length, want", [
    ([1, 2, 3, 9, 1, 2, 3], 3, 4, [9, 1, 2, 3]),      # the trigram 1 2 3 occurred before: its continuation
    ([1, 2, 3, 7, 5, 2, 3, 8, 2, 3], 3, 2, [8, 2]),   # trigram 3 2 3 absent; bigram 2 3: the latest match wins
    ([5, 6, 7, 5], 3, 3, [6, 7, 5]),                  # only the last token matches: unigram fallback
    ([4, 5, 6], 3, 3, []),                            # nothing occurs earlier: no draft
    ([1, 1, 1, 1], 2, 2, [1]),                        # the latest match ends just before the suffix
    ([2, 3, 2, 3], 1, 5, [2, 3]),                     # max_ngram 1: the latest 3 is at index 1
])
def test_lookup_continuation(tokens, max_ngram, length, want):
    assert lookup_continuation(tokens, max_ngram, length) == want


def test_lookup_prefers_the_longest_suffix():
    # unigram 3 last occurred at index 4 (-> 4), but the trigram 1 2 3 occurred at 0..2 (-> 9)
    assert lookup_continuation([1, 2, 3, 9, 3, 4, 1, 2, 3], 3, 1) == [9]
    assert lookup_continuation([1, 2, 3, 9, 3, 4, 1, 2, 3], 1, 1) == [4]


@pytest.mark.parametrize("arch", ["llama", "opt"])
def test_pld_greedy_identity_without_a_draft_model(arch):
    target, _ = tiny_pair(arch, 64, seed=5)
    greedy = SamplingParams(0.0)
    ar = Engine(CausalLM(target), None, AR(), greedy, [], 64)
    pld = Engine(CausalLM(target), None, PLD(4), greedy, [], 64)
    saved = 0
    for i, prompt in enumerate([[1, 2, 3], [7, 8, 9, 10, 7, 8, 9, 10, 7, 8], [40, 41, 42, 43, 44, 45]]):
        want = ar.generate(prompt, 30, prompt_generator(0, str(i)))
        got = pld.generate(prompt, 30, prompt_generator(0, str(i)))
        assert got.new_token_ids == want.new_token_ids
        assert got.draft_calls == 0
        saved += want.target_calls - got.target_calls
    assert saved > 0  # greedy tiny models repeat themselves: lookups are accepted


def test_pld_tree_is_a_chain_of_point_masses():
    target, _ = tiny_pair("llama", 64, seed=5)
    engine = Engine(CausalLM(target), None, PLD(3), SamplingParams(1.0), [], 64)
    engine.reset()
    engine._prefill([5, 6, 7, 8, 5, 6], Generation())
    step = engine.step([5, 6, 7, 8, 5, 6], prompt_generator(0, "x"), Generation())
    assert step.tree.tokens[1:] == [7, 8, 5]
    assert all(float(step.tree.draft_probs[v][step.tree.tokens[v + 1]]) == 1.0 for v in range(3))
