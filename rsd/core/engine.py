"""The decode engine: one loop for every method (docs/algorithms.md#walk, #tree-attention).

Per step: the drafter grows a DraftTree through a DraftContext (one draft forward per tree level), one target
forward scores the uncached committed tokens plus the whole tree, the drafter's verifier (rsd.verify) picks the
accepted path, and both KV caches are compacted to the accepted path by gather. AR is the drafter that drafts nothing.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from rsd.core.coins import Coins, Draws, RandomCoins, RandomDraws
from rsd.core.draft_context import ModelDraftContext, tree_inputs
from rsd.core.generation import Generation, Step, Stopwatch
from rsd.core.optimum import root_optimum
from rsd.core.plugin import plugin_call
from rsd.core.sampling import SamplingParams, probs_from_logits
from rsd.core.tree import DraftTree
from rsd.drafters.base import Drafter
from rsd.drafters.contract import check_drafted_tree, drafted_mass_flag, zero_mass_error
from rsd.models.adapter import CausalLM
from rsd.verify import Verifier, root_acceptance, verifier_for
from rsd.verify.contract import check_expected_yield, check_laws, check_verified, verify_call


class Engine:
    """Generates from the target with a drafter; the output law is the target's, whatever the drafter (lossless).

    `verifier` replaces the drafter's own (rsd.verify.verifier_for) under its name: the certify oracle passes one that
    records every step."""

    def __init__(self, target: CausalLM, draft: CausalLM | None, drafter: Drafter, params: SamplingParams,
                 eos_token_ids: list[int], vocab_size: int, verifier: Verifier | None = None) -> None:
        if drafter.uses_draft_model and draft is None:
            raise ValueError(f"drafter {drafter.name!r} needs a draft model, but the model pair has none")
        self.target, self.draft, self.drafter = target, draft, drafter
        self.params = params
        # The draft's laws: the target's sampling unless the drafter drafts at its own temperature (EAGLE-2 ranks
        # its tree by the draft's softmax even when the target decodes greedily); any draft law is lossless.
        self.draft_params = (params if drafter.draft_temperature is None
                             else replace(params, temperature=drafter.draft_temperature))
        self.eos = frozenset(eos_token_ids)
        self.vocab_size = vocab_size
        self.clock = Stopwatch(target.device)
        self.verifier = verifier if verifier is not None else verifier_for(drafter)
        # A feature-head draft reads these target features; `pending` holds them for the committed positions the
        # draft has not cached yet (the shift: the row for committed[j] is the feature of position j - 1).
        self.feature_layers: tuple = tuple(draft.feature_layers) if drafter.uses_draft_model else ()
        self.pending: torch.Tensor | None = None
        self.verifier_name = str(drafter.verifier)

    def generate(self, prompt_ids: list[int], max_new_tokens: int, gen: torch.Generator | None,
                 coins: Coins | None = None, draws: Draws | None = None) -> Generation:
        """Decode up to max_new_tokens after the prompt (stopping at EOS), with all randomness from `gen` (or from
        the given `coins` and `draws`, as the exact oracle does).

        The prompt (all but its last token, which is the first step's root) is prefilled into both caches first,
        so every step is a decode step. Timing: the clock synchronises only at step boundaries; `ttft_s` is the
        prefill plus the first step, `decode_s` the rest.
        """
        out = Generation()
        t0 = self.clock.now()
        committed = list(prompt_ids)
        self.reset()
        self._prefill(committed, out)
        while len(out.new_token_ids) < max_new_tokens:
            step = self.step(committed, gen, out, max_new_tokens - len(out.new_token_ids) - 1, coins, draws)
            t0 += self._note(step, out)
            stop = False
            for token in step.emitted[: max_new_tokens - len(out.new_token_ids)]:
                out.new_token_ids.append(token)
                committed.append(token)
                if token in self.eos:
                    stop = True
                    break
            if out.target_calls == 1:
                out.ttft_s = self.clock.now() - t0
                out.first_step_tokens = len(out.new_token_ids)
            if stop:
                break
        out.wall_s = self.clock.now() - t0
        self.clock.settle(out)
        return out

    def replay(self, prompt_ids: list[int], reference: list[int], draws_gen: torch.Generator,
               coins_gen: torch.Generator) -> Generation:
        """One step at every context prompt + reference[:i], each drafted and verified as in `generate` but followed
        by reference[i] instead of the tokens it emitted: every drafter measured at the same contexts (the
        shared-context design, docs/algorithms.md#shared-contexts). Drafts draw from `draws_gen` and the verifier
        from `coins_gen`, so two drafters that draft alike draft the same trees from the same `draws_gen` seed. Per
        context, `accepted_lengths`, `expected_emitted`, `root_optimum` and `root_acceptance` are the step's as
        `generate` records them; `new_token_ids` is `reference`, and no step is cut short by a token budget."""
        out = Generation()
        t0 = self.clock.now()
        committed = list(prompt_ids)
        self.reset()
        self._prefill(committed, out)
        draws, coins = RandomDraws(draws_gen), RandomCoins(coins_gen)
        for token in reference:
            step = self.step(committed, None, out, None, coins, draws, commit=token)
            t0 += self._note(step, out)
            out.new_token_ids.append(token)
            committed.append(token)
        out.wall_s = self.clock.now() - t0
        self.clock.settle(out)
        return out

    def _note(self, step: Step, out: Generation) -> float:
        """Record the step's accepted length, exact expected yield and root optimum and acceptance; returns the
        seconds that took (bookkeeping, not decoding: the caller keeps them out of wall_s)."""
        out.accepted_lengths.append(len(step.path))
        paused = self.clock.now()
        check_laws(step.q, step.tree)
        expected = plugin_call(self.verifier.expected_yield, f"verifier {self.verifier_name!r} expected_yield",
                               step.tree, step.q, self.eos, self.drafter.rule)
        check_expected_yield(expected, step.tree, self.verifier_name)
        out.expected_emitted.append(expected)
        self._record_root(step, out)
        return self.clock.now() - paused

    def _record_root(self, step: Step, out: Generation) -> None:
        """Append the step's root optimum and root acceptance (None for both without root candidates)."""
        k = len(step.tree.candidates.get(0, []))
        if k == 0:
            out.root_optimum.append(None)
            out.root_acceptance.append(None)
            return
        optimum = root_optimum(step.tree.draft_probs[0], step.q[0], k, self.drafter.candidate_scheme)
        acceptance = root_acceptance(self.verifier, step.tree, step.q, self.drafter.rule)
        out.root_optimum.append(optimum if math.isfinite(optimum) else None)
        out.root_acceptance.append(acceptance if math.isfinite(acceptance) else None)

    def warm_up(self, prompt_ids: list[int], new_tokens: int = 8) -> None:
        """One short untimed generation (allocator, kernels, lazy init) with a private generator: it consumes none
        of any prompt's randomness and leaves no state behind but warm caches of the runtime."""
        gen = torch.Generator(device=self.target.device)
        gen.manual_seed(0x5EED)
        self.generate(list(prompt_ids), new_tokens, gen)
        self.reset()

    def _prefill(self, committed: list[int], out: Generation) -> None:
        """Cache committed[:-1] in the target and (if drafting) the draft, with plain causal forwards."""
        n = len(committed) - 1
        if n <= 0:
            if self.feature_layers:  # the root is position 0: the feature before it is the zero vector
                self.pending = torch.zeros(1, self.draft.feature_width, dtype=self.draft.dtype,
                                           device=self.draft.device)
            return
        tokens, positions = torch.tensor(committed[:-1]), torch.arange(n)
        start = self.clock.start()
        self.target.forward(tokens, positions, None, last=1, features=self.feature_layers)
        self.clock.stop(start, out, "time_target_s")
        if self.draft is not None and self.drafter.uses_draft_model:
            start = self.clock.start()
            extra = {}
            if self.feature_layers:
                feats = self.target.features
                extra = {"features": torch.cat([torch.zeros_like(feats[:1]), feats[:-1]])}
                self.pending = feats[-1:]
            self.draft.forward(tokens, positions, None, last=1, **extra)
            self.clock.stop(start, out, "time_draft_s")

    def reset(self) -> None:
        """Empty both KV caches (a new sequence)."""
        self.pending = None
        self.target.reset()
        if self.draft is not None:
            self.draft.reset()

    def step(self, committed: list[int], gen: torch.Generator | None, out: Generation, max_depth: int | None = None,
             coins: Coins | None = None, draws: Draws | None = None, commit: int | None = None) -> Step:
        """Draft a tree after `committed` (at most `max_depth` levels), verify it with one target call, compact both
        caches to the accepted path. Randomness: `coins` and `draws`, by default both from `gen`. With `commit`, the
        caches keep no drafted token, as after a rejection at the root, so that `commit` (any token) comes next."""
        tree = DraftTree.with_root(committed[-1])
        ctx, mass_ok = None, None
        if self.drafter.draft_length > 0 and (max_depth is None or max_depth > 0):
            draws = draws if draws is not None else RandomDraws(gen)
            ctx = ModelDraftContext(self.draft, committed, self.draft_params, self.vocab_size, draws, out, self.clock,
                                    max_depth, self._pending_features(committed))
            plugin_call(self.drafter.build, f"drafter {self.drafter.name!r} build", tree, ctx)
            if coins is None:  # the check's flag rides on the verifier's first coin read (no host read of its own)
                mass_ok = drafted_mass_flag(tree, max_depth, self.drafter.name)
            else:
                check_drafted_tree(tree, max_depth, self.drafter.name)
        q = self._score(tree, committed, out)
        if coins is None:
            coins = RandomCoins(gen, (mass_ok, zero_mass_error(self.drafter.name)) if mass_ok is not None else None)
        path, emitted = verify_call(self.verifier, self.verifier_name, tree, q, coins, self.eos, self.drafter.rule)
        if isinstance(coins, RandomCoins):
            coins.settle()
        check_verified(tree, path, emitted, self.eos, self.vocab_size, self.verifier_name)
        kept = path if commit is None else []
        self._hand_over_features(tree, kept, ctx)
        self._compact(tree, committed, kept, ctx)
        return Step(tree, q, path, emitted)

    def _score(self, tree: DraftTree, committed: list[int], out: Generation) -> torch.Tensor:
        """One target forward over [uncached committed tokens, tree nodes]: q at every tree node [len(tree), V]."""
        start = self.clock.start()
        cached = self.target.cached_len
        tokens, positions, attend = tree_inputs(tree, committed, cached)
        if len(tree) - 1 == tree.depth:
            attend = None  # a chain (SD, AR) is plain causal attention
        logits = self.target.forward(tokens, positions, attend, last=len(tree), features=self.feature_layers)
        q = probs_from_logits(logits[:, : self.vocab_size], self.params)
        out.target_calls += 1
        out.tokens_verified.append(len(tree) - 1)
        self.clock.stop(start, out, "time_target_s")
        return q

    def _pending_features(self, committed: list[int]) -> torch.Tensor | None:
        """The target features the draft reads for its uncached committed tokens (None for a plain draft)."""
        if not self.feature_layers:
            return None
        if self.pending is None or len(self.pending) != len(committed) - self.draft.cached_len:
            raise RuntimeError(f"feature draft: {0 if self.pending is None else len(self.pending)} pending feature "
                               f"rows for {len(committed) - self.draft.cached_len} uncached tokens")
        return self.pending

    def _hand_over_features(self, tree: DraftTree, path: list[int], ctx: ModelDraftContext | None) -> None:
        """After a step: the target's features at the root and the accepted path are what the draft reads with the
        path's tokens and the next token (f_i goes with token i + 1); rows the draft did not consume this step
        (it drafted nothing) stay pending before them."""
        if not self.feature_layers:
            return
        feats = self.target.features[-len(tree):]  # the root's row, then the tree nodes'
        new = feats[torch.tensor([0, *path], dtype=torch.long, device=feats.device)]
        consumed = ctx is not None and 0 in ctx.slots
        self.pending = new if consumed or self.pending is None else torch.cat([self.pending, new])

    def _compact(self, tree: DraftTree, committed: list[int], path: list[int], ctx: ModelDraftContext | None) -> None:
        """Keep the committed prefix and the accepted path in both caches: the path's entries move into place
        behind the prefix and the rest is cropped (O(path); never a roll-back by length: docs/algorithms.md#pitfalls).
        """
        root_col = len(committed) - 1
        self.target.compact(root_col + 1, root_col + torch.tensor(path, dtype=torch.long))
        if ctx is not None and 0 in ctx.slots and self.feature_layers:
            # the head's tree entries read predicted features: drop them all; the accepted tokens are re-fed with
            # the target's true features next step
            self.draft.compact(root_col + 1, torch.zeros(0, dtype=torch.long))
        elif ctx is not None and 0 in ctx.slots:
            drafted = [ctx.slots[v] for v in path if v in ctx.slots]
            self.draft.compact(root_col + 1, torch.tensor(drafted, dtype=torch.long))
