"""Which variants of default-tier tests run only in the slow tier (tests/conftest.py marks them)."""

import pytest

# Every test id this session collected -> marked slow, before the -m selection (tests/conftest.py, tests/test_tiers.py).
COLLECTED_SLOW = pytest.StashKey[dict[str, bool]]()

# Variants of default-tier tests that run only in the slow tier (-m slow), to keep the default run within its time
# budget: every test listed here keeps other variants in the default tier (the cheapest, or the paper's method).
SLOW_VARIANTS = frozenset({
    "tests/core/test_engine.py::test_one_step_expected_block_efficiency[specinfer]",
    "tests/core/test_engine.py::test_one_step_expected_block_efficiency[spectr]",
    "tests/core/test_engine.py::test_one_step_expected_block_efficiency[rsd_c]",
    "tests/core/test_engine.py::test_one_step_expected_block_efficiency[eagle2]",
    "tests/core/test_optimum.py::test_no_verifier_beats_the_optimum[traversal-without_replacement-draft4-rsd]",
    "tests/core/test_optimum.py::test_root_acceptance_reused_from_expected_yield_only_for_the_same_tree"
    "[traversal-draft4-rsd]",
    "tests/models/test_embedded.py::test_greedy_identity_on_the_embedded_pair[specinfer]",
    "tests/models/test_embedded.py::test_greedy_identity_on_the_embedded_pair[spectr]",
    "tests/models/test_embedded.py::test_greedy_identity_on_the_embedded_pair[rsd_c]",
    "tests/models/test_half_precision.py::test_float16_laws_give_the_float32_law[kseq-iid-3]",
    "tests/verify/test_verifiers.py::test_verifier_is_exact_on_enumerated_trees[traversal-draft4-rsd]",
    "tests/verify/test_verifiers.py::test_verifier_is_exact_on_enumerated_trees[traversal-draft5-rsd]",
    "tests/verify/test_verifiers.py::test_verifier_is_exact_with_eos[traversal-draft2-rsd]",
    "tests/verify/test_verifiers.py::test_traversal_bugs_fail_the_oracle[siblings re-sorted by probability]",
    "tests/verify/test_verifiers.py::test_traversal_bugs_fail_the_oracle[extra token from the original row]",
    "tests/verify/test_verifiers.py::test_traversal_bugs_fail_the_oracle[residual not scaled by w_b]",
    "tests/verify/test_verifiers.py::test_traversal_bugs_fail_the_oracle[descendants' weights not recomputed]",
    "tests/verify/test_verifiers.py::test_traversal_bugs_fail_the_oracle[deepest leaf first]",
    "tests/verify/test_expected_yield.py::test_measured_and_expected_block_efficiency_agree[specinfer]",
    "tests/verify/test_expected_yield.py::test_measured_and_expected_block_efficiency_agree[spectr]",
    "tests/verify/test_expected_yield.py::test_measured_and_expected_block_efficiency_agree[tv]",
    "tests/verify/test_expected_yield.py::test_measured_and_expected_block_efficiency_agree[specinfer+traversal]",
    # specinfer's drafter stays in the default tier's whole-engine oracle through
    # test_exact_engine_passes_traversal_on_the_specinfer_trie, and its walk rule in test_verifiers.py
    "tests/certify/test_certify.py::test_exact_engine_oracle_passes_every_builtin[specinfer]",
    "tests/certify/test_certify.py::test_builtin_drafters_pass_monte_carlo[rsd_c]",
    "tests/certify/test_certify.py::test_builtin_drafters_pass_monte_carlo[rsd_s]",
    "tests/certify/test_certify.py::test_exact_engine_fails_a_lossy_drafter[UnscaledResidualTV]",
    "tests/certify/test_certify.py::test_exact_engine_fails_a_lossy_drafter[TokenOrderRSDC]",
    "tests/certify/test_certify.py::test_certified_at_other_temperatures_with_filters[spectr-params1]",
    "tests/certify/test_certify_planted.py::test_exact_engine_oracle_catches_drafter_law_bugs[rsd_c parent law]",
    "tests/certify/test_certify_planted.py::test_exact_engine_oracle_catches_drafter_law_bugs[rsd_s sorted beams]",
    "tests/certify/test_certify_planted.py::test_exact_engine_oracle_catches_drafter_law_bugs[spectr parent law]",
})
