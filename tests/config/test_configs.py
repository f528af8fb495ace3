"""Every config composes; every experiment preset's jobs pass budget/shape validation; shape enumeration is exact."""

import functools
from pathlib import Path

import pytest

from helpers.config import CONF, compose_cfg, representative_jobs, run_cfg
from rsd.core.budgets import Budget, InfeasibleBudgetError, select_shapes
from rsd.drafters import RSDC, RSDS, SD, SpecInfer, SpecTr
from rsd.harness.config import resolve_config
from rsd.harness.runs import plan_runs
from rsd.harness.sweep import expand_jobs

GROUPS = ["model_pair", "dataset", "drafter", "budget", "sampling", "logger"]
PRESETS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("group,option", [(g, p.stem) for g in GROUPS for p in sorted((CONF / g).glob("*.yaml"))])
def test_every_option_composes_and_plans(group, option):
    cfg = compose_cfg(f"{group}={option}")
    assert cfg[group] is not None
    if group != "dataset" or option != "local":
        plan_runs(resolve_config(cfg))  # validation only: nothing is loaded


@pytest.mark.parametrize("launcher", ["slurm", "submitit_local", "basic"])
def test_launchers_compose(launcher):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"hydra/launcher={launcher}"], return_hydra_config=True)
    assert cfg.hydra.launcher._target_.endswith("Launcher")


def one_job_per_drafter(jobs: list[list[str]]) -> list[list[str]]:
    """The first job of each drafter of a sweep (a preset's budgets are checked for every drafter in the slow tier)."""
    chosen: dict[tuple[str, ...], list[str]] = {}
    for job in jobs:
        chosen.setdefault(tuple(o for o in job if o.startswith("drafter=")), job)
    return list(chosen.values())


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_validates_for_every_drafter(preset):
    jobs = expand_jobs([f"experiment={preset}"])
    assert len(jobs) >= 6
    for job in one_job_per_drafter(jobs):
        assert plan_runs(run_cfg(*job))


@pytest.mark.slow
@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_job_validates(preset):
    """Every drafter x budget value of every preset, and every other value once (~3x the jobs above)."""
    jobs = expand_jobs([f"experiment={preset}"])
    sample = representative_jobs(jobs)
    assert {o for j in sample for o in j} == {o for j in jobs for o in j}
    for job in sample:
        assert plan_runs(run_cfg(*job))


def test_fixed_compute_rsd_c_second_sweep_validates():
    for job in expand_jobs(["experiment=fig_opt_fixed_compute", "drafter=rsd_c", "budget.max_depth=4"])[:10]:
        plans = plan_runs(run_cfg(*job))
        assert all(len(p.shape["branching"]) <= 4 for p in plans)


def count_chains(total: int) -> int:
    """Independent count of branching vectors: chains of level sizes n_1 | n_2 | ... summing to `total` (DP)."""

    @functools.cache
    def ways(remaining: int, width: int) -> int:
        return sum(1 if width * b == remaining else ways(remaining - width * b, width * b)
                   for b in range(1, remaining // width + 1))

    return ways(total, 1)


@pytest.mark.parametrize("total", [6, 10, 14, 21, 30])
def test_fixed_compute_shapes_are_exactly_the_budget(total):
    budget = Budget("fixed_compute", target_tokens=total)
    vectors = [s["branching"] for s in RSDC.shapes(budget, {})]
    assert len(vectors) == len({tuple(v) for v in vectors}) == count_chains(total)
    assert all(RSDC(v).max_tree_size == total for v in vectors)
    for cls in (SpecInfer, SpecTr, RSDS):
        shapes = cls.shapes(budget, {})
        assert len(shapes) == sum(total % a == 0 for a in range(1, total + 1))  # one shape per divisor
        assert all(cls(**s).max_tree_size == total for s in shapes)
    assert [SD(**s).max_tree_size for s in SD.shapes(budget, {})] == [total]


def test_fixed_length_shapes_follow_the_drafter_config():
    budget = Budget("fixed_length", draft_length=5)
    assert RSDC.shapes(budget, {"root_branching": 3}) == [{"branching": [3, 1, 1, 1, 1]}]
    assert SpecTr.shapes(budget, {"num_sequences": 4}) == [{"num_sequences": 4, "draft_length": 5}]
    assert RSDS.shapes(budget, {"beam_width": 2}) == [{"beam_width": 2, "draft_length": 5}]


def test_pin_and_depth_filters():
    budget = Budget("fixed_compute", target_tokens=6)
    shapes = RSDC.shapes(budget, {})
    assert select_shapes("rsd_c", shapes, budget, {"branching": [2, 2]}) == [{"branching": [2, 2]}]
    limited = Budget("fixed_compute", target_tokens=6, max_depth=2)
    assert {tuple(s["branching"]) for s in select_shapes("rsd_c", shapes, limited, None)} == {(6,), (1, 5), (2, 2),
                                                                                                (3, 1)}
    with pytest.raises(InfeasibleBudgetError, match="shapes that fit: b1-5, b2-2, b3-1, b6"):
        select_shapes("rsd_c", shapes, limited, {"branching": [4, 4]})


def test_no_preset_leaves_the_repository_out_dir_unset():
    for preset in PRESETS:
        assert str(compose_cfg(f"experiment={preset}").out_dir).startswith("results/")


def test_experiment_scripts_exist_for_every_paper_preset():
    """A hub preset has its own script; each embedded study's presets are all run by its script
    (experiments/study_embedded.sh: the first edition; experiments/study.sh: the second, RSD_STUDY=v3, and the third,
    RSD_STUDY=eagle, whose presets it names as study_${study}_KIND)."""
    experiments = Path(CONF).parent / "experiments"
    scripts = {p.stem for p in experiments.glob("fig_*.sh")}
    first = [p for p in PRESETS if p.startswith("fig_smollm2")]
    assert {p for p in PRESETS if p.startswith("fig_") and p not in first} == scripts
    assert first and all(f"experiment={p}" in (experiments / "study_embedded.sh").read_text() for p in first)
    study = (experiments / "study.sh").read_text()
    for edition in ("v3", "eagle"):
        kinds = [p.removeprefix(f"study_{edition}_") for p in PRESETS if p.startswith(f"study_{edition}_")]
        assert kinds and f"{edition})" in study
        assert all(f"experiment=study_v3_{k}" in study if k == "dial" else f'experiment="study_${{study}}_{k}"' in study
                   for k in kinds)


def test_the_config_resolves_once_into_a_frozen_typed_object(tmp_path):
    """RunConfig: typed fields (a Budget, SamplingParams, the drafter's shapes), immutable, and its copy below
    another out_dir plans the same identities."""
    import dataclasses

    cfg = compose_cfg("drafter=spectr", "budget=fixed_compute", "budget.target_tokens=6", f"out_dir={tmp_path}",
                      "budget.select={prompts:2}", "sampling.temperature=0.5")
    rc = resolve_config(cfg)
    assert rc.budget == Budget("fixed_compute", target_tokens=6, max_runs=64)
    assert rc.sampling.params.temperature == 0.5 and rc.select.prompts == 2 and rc.select.top == 1
    assert [dict(s) for s in rc.drafter.shapes] == [{"num_sequences": k, "draft_length": n}
                                                    for k, n in [(1, 6), (2, 3), (3, 2), (6, 1)]]
    with pytest.raises(dataclasses.FrozenInstanceError):
        rc.seed = 1
    tuning = rc.with_out_dir(tmp_path / "tuning")
    assert [p.identity for p in plan_runs(tuning)] == [p.identity for p in plan_runs(rc)]
    assert all(p.run_dir.is_relative_to(tmp_path / "tuning") for p in plan_runs(tuning))
