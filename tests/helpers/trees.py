"""Trees and laws for the engine, verifier and model tests: a branching tree, tree forwards on tiny models, exact
expected yields under several verifiers, and planted verifier bugs."""

import torch

from rsd.core.draft_context import tree_inputs
from rsd.core.tree import DraftTree
from rsd.models.adapter import CausalLM
from rsd.verify import get_verifier
from rsd.verify.traversal import Traversal, TraversalState

VOCAB = 64


def branching_tree(root: int) -> DraftTree:
    """Depth 3, branching (3, 2, 1) with some repeated tokens across branches."""
    tree = DraftTree.with_root(root)
    gen = torch.Generator().manual_seed(1)
    level = [0]
    for b in (3, 2, 1):
        nxt = []
        for v in level:
            for _ in range(b):
                nxt.append(tree.add_candidate(v, int(torch.randint(VOCAB, (1,), generator=gen))))
        level = nxt
    return tree


def sequential_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids])).logits[0, -1]


def tree_call_logits(lm: CausalLM, prompt: list[int], tree) -> torch.Tensor:
    """Logits at every tree node from one tree forward after a first call that caches part of the prompt (so the tree
    call also covers uncached committed tokens), as the engine's step does."""
    lm.reset()
    lm.forward(torch.tensor(prompt[:2]), torch.arange(2), torch.ones(2, 2, dtype=torch.bool).tril())
    tokens, positions, attend = tree_inputs(tree, prompt, lm.cached_len)
    return lm.forward(tokens, positions, attend)[len(prompt) - 2 - 1:]


def traversal_with(**methods):
    """A Traversal whose state has some methods replaced (a planted bug)."""
    state = type("BuggyState", (TraversalState,), methods)
    return type("BuggyTraversal", (Traversal,), {"state_cls": state})()


def expected_yields(tree: DraftTree, q: torch.Tensor, rule: str,
                    specs: tuple[str, ...] = ("walk", "block", "traversal"), eos: frozenset[int] = frozenset()
                    ) -> dict[str, float]:
    """The exact expected tokens of one step under several verifiers on the SAME tree (a paired comparison without
    sampling noise, e.g. block vs the SD walk on a chain, traversal vs the RSD walk on an RSD-C tree). The walk uses
    node rule `rule`; a verifier that cannot verify this tree (block on a branching tree) is left out."""
    out = {}
    for spec in specs:
        try:
            out[spec] = get_verifier(spec).expected_yield(tree, q, eos, rule)
        except ValueError:
            continue
    return out
