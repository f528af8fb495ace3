"""The column groups of the tidy run, prompt and step tables: what makes runs comparable, what names a run, what
measures speed.

Runs are grouped by what makes them comparable (SETTING: model pair, the acceptance dial's mix, dtype, dataset, the
prompt set decoded, sampling and max_new_tokens); runs of two groups are never averaged or compared with each other.
"""

from __future__ import annotations

SAMPLING = ("temperature", "top_k", "top_p", "max_new_tokens")
# runs of different settings are never averaged or compared together
SETTING = ("model_pair", "draft", "mix", "dtype", "dataset", "prompt_set", *SAMPLING)
AR_KEYS = (*SETTING, "seed")  # a run is compared with the AR run that matches on these
RUN_KEYS = ("method", "shape_tag", "budget", "x", *AR_KEYS, "run_dir")  # repeated in the prompt and step tables
OPTIMUM = ("root_optimum", "root_acceptance", "fraction_of_optimum")  # docs/algorithms.md#optimum
SPEED = ("mbsu", "token_rate", "token_rate_ratio", "decode_token_rate", "decode_token_rate_ratio")  # not for the dial
DIAL_NOTE = ("– for the acceptance dial's runs (model_pair.mix set): their draft forward also runs the target, so "
             "token rate and MBSU do not measure speed; their block efficiency, expected block efficiency and root "
             "optimum are reported in the other tables.")
NAN = float("nan")
