"""An EAGLE-style draft head: a small transformer that drafts from the target's own hidden states.

Entry j of the head's sequence reads token x_j and the target's feature g_{j-1} of the position before it (a zero
vector at j = 0): `fc([embed(x_j); reduce(g_{j-1})])`, then `num_layers` decoder layers of the target's shape. Its
output h_j stands in for the target's feature at j, and `lm_head(h_j)` is the draft law of x_{j+1}. At draft depth
> 1 the head feeds on its own outputs (h of the parent node) in place of the target's features; committed entries are
always rebuilt from the target's true features (docs/algorithms.md#feature-drafts).

`feature_layers` names what the target exposes: `["last"]` is the last hidden state after the final norm (EAGLE-1;
the output then regresses to it and feeds the LM head directly), a list of layer indices concatenates those raw hidden
states (EAGLE-3's low/middle/high; `reduce` maps them to the hidden width and a learned norm precedes the LM head).

The embedding and LM head are the target's, frozen and never copied (zero extra parameters); a trimmed head keeps
only the rows of `head_token_ids` and gives every other token probability 0, which keeps every verifier exact.
The head owns its KV cache (plain tensors, batch 1): no transformers cache API.

Modules: `config` (the head's shape, feature_head.json, whether it fits a target), `modules` (the nn modules),
`lm` (HeadLM, the engine-facing head with its KV cache), `unrolled` (the training-time unrolled draft steps) and
`weights` (saving, loading and initialising a head).
"""
