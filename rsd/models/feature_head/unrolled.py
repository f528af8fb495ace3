"""The head's draft steps unrolled over packed sequences (EAGLE-3's training-time test): the masks and the outputs."""

from __future__ import annotations

import torch

from rsd.models.feature_head.modules import FeatureHead


def unrolled_masks(seq: torch.Tensor, positions: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """Attention of draft step s (1-based) over the keys of steps 1..s, concatenated [T, s*T].

    A step-s entry at position j is a node at depth s whose chain left the committed prefix after position j - s + 1:
    it sees step-1 keys (true features) at positions <= j - s + 1 and the step-t key at position j - s + t
    (t = 2..s), its drafted ancestors and itself (the training-time test of EAGLE-3).
    """
    same = seq[:, None] == seq[None, :]
    dj = positions[:, None] - positions[None, :]  # query position - key position, within a sequence
    masks = []
    for s in range(1, steps + 1):
        blocks = [same & (dj >= s - 1)]
        blocks += [same & (dj == s - u) for u in range(2, s + 1)]
        masks.append(torch.cat(blocks, -1))
    return masks


def unrolled_outputs(head: FeatureHead, embed: torch.Tensor, batch: dict, steps: int) -> list[torch.Tensor]:
    """The head's outputs [T, h] at draft steps 1..`steps` over packed sequences, teacher-forced: step 1 reads the
    target's features of the previous position, step s > 1 the head's own step-(s-1) output there.

    `batch`: ids [T], positions [T] (restarting per sequence), seq [T] (the sequence of each row) and prev [T, width]
    (the target's features of the previous position, zero at a sequence's first). Training and the engine-agreement
    test both use it: in the engine, a depth-s node whose ancestors are the true next tokens sees exactly this.
    """
    x_emb = embed[batch["ids"]]
    masks = unrolled_masks(batch["seq"], batch["positions"], steps)
    outs, keys, values = [], [[] for _ in head.layers], [[] for _ in head.layers]
    feats, predicted = batch["prev"], False
    for s in range(steps):
        x = head.inputs(x_emb, feats, predicted)
        for li, layer in enumerate(head.layers):
            k, v = layer.project_kv(x, batch["positions"])
            keys[li].append(k)
            values[li].append(v)
            x = layer(x, batch["positions"], torch.cat(keys[li], 1), torch.cat(values[li], 1), masks[s])
        outs.append(x)
        first = batch["seq"] != torch.cat([batch["seq"][:1] - 1, batch["seq"][:-1]])
        feats = torch.cat([x[:1], x[:-1]]).masked_fill(first[:, None], 0.0)  # the previous position's output
        predicted = True
    return outs
