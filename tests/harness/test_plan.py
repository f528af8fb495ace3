"""Pre-flight: `python -m rsd.harness.plan` / `run.py --plan` print what a sweep needs, the sweep callback refuses a
sweep whose models or data are missing before any job launches, and a single job fails at once for a missing hub
model."""

import os
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from helpers.config import CONF, ROOT, compose_cfg, run_cfg
from rsd.harness.plan.build import build_plan
from rsd.harness.plan.compose import compose_jobs
from rsd.harness.plan.memory import model_config
from rsd.harness.plan.report import format_plan, main
from rsd.models import pairs
from rsd.models.embedded import ModelUnavailableError
from rsd.models.source import model_source

PRESETS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml") if p.stem != "quickstart")
EMBEDDED = [p for p in PRESETS if p.startswith(("fig_smollm2", "study_"))]  # the embedded studies: all available
PAPER = [p for p in PRESETS if p not in EMBEDDED]                 # the paper's hub pairs: missing offline
ENV = {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin",
       "RSD_GPU_MEMORY_GB": "80"}


@pytest.fixture(autouse=True)
def _eighty_gb_gpus(monkeypatch):
    monkeypatch.setenv("RSD_GPU_MEMORY_GB", "80")


# Two presets (one per family and budget kind) in the default tier, every paper preset in the slow one.
PLANNED_BY_DEFAULT = ("fig_opt_fixed_length", "fig_llama2_chat_fixed_compute")


@pytest.mark.parametrize("preset", [p if p in PLANNED_BY_DEFAULT else pytest.param(p, marks=pytest.mark.slow)
                                    for p in PAPER])
def test_plan_of_every_paper_preset_marks_hub_models_missing(preset):
    plan = build_plan([f"experiment={preset}", "drafter=ar,sd"])  # every pair and dataset, two drafters
    text = format_plan(plan)
    pair_names = OmegaConf.load(CONF / "experiment" / f"{preset}.yaml").hydra.sweeper.params.model_pair.split(",")
    assert {e.name for e in plan.pairs} == set(pair_names)
    assert plan.models and all(not m.available for m in plan.models.values())  # offline, nothing cached here
    assert all(m.params and m.params > 6e7 for m in plan.models.values())      # counts from the paper table
    for spec in plan.models:
        assert f"model {spec}: not in the hub cache and HF_HUB_OFFLINE is set; get it with `hf download {spec}`" in text
    assert all(not ok for ok, _ in plan.datasets.values()) and "--repo-type dataset" in text
    assert "REFUSED" in text and "runs per method and budget" in text


@pytest.mark.slow
@pytest.mark.parametrize("preset", PAPER)
def test_full_paper_preset_plans(preset):
    plan = build_plan([f"experiment={preset}"])
    assert plan.jobs >= 72 and sum(plan.runs.values()) > plan.jobs // 2


@pytest.mark.parametrize("preset", EMBEDDED)
def test_embedded_study_presets_plan_with_everything_available(preset, capsys):
    assert EMBEDDED and main([f"experiment={preset}", "dataset=dolly_builtin"]) == 0
    assert "OK: everything needed is available and every pair fits" in capsys.readouterr().out


def test_quickstart_plan_says_everything_is_available(capsys):
    assert main(["experiment=quickstart"]) == 0
    out = capsys.readouterr().out
    assert "18 jobs -> 31 runs" in out
    assert "available embedded:smollm2-135m-instruct" in out and "available embedded:smollm2-draft-v3" in out
    assert "available dolly_builtin" in out
    assert "OK: everything needed is available and every pair fits" in out
    assert "token budget: at most 2,976 new tokens" in out  # 21 runs x 3 prompts x 32 tokens


def test_a_feature_heads_parameters_come_from_its_own_files_and_count_in_the_pair(capsys):
    """The shipped head has no transformers config: its count is its stored weights', and the pair's weights hold it."""
    from rsd.models.feature_head.weights import load_head

    assert main(["model_pair=smollm2_eagle", "drafter=eagle2"]) == 0
    out = capsys.readouterr().out
    stored = sum(v.numel() for v in load_head(ROOT / "rsd" / "assets" / "smollm2-eagle").state_dict().values())
    assert f"{stored / 1e6:.1f}M params (its own files)" in out and "(unknown)" not in out
    plan = build_plan(["model_pair=smollm2_eagle", "drafter=eagle2"])
    target = plan.models["embedded:smollm2-135m-instruct"].params
    [pair] = plan.pairs
    assert pair.weights * 1e9 == pytest.approx((target + stored) * 4, rel=1e-12)  # float32


def test_with_selection_the_token_budget_counts_tuning_and_evaluation_prompts():
    base = ["model_pair=tiny_llama", "drafter=spectr", "budget=fixed_compute", "budget.target_tokens=4",
            "dataset.num_prompts=5", "sampling.max_new_tokens=32"]
    assert build_plan(base).new_tokens == 3 * 5 * 32  # three K x L shapes, each on the evaluation prompts
    tuned = build_plan(base + ["budget.select={prompts:2,top:1,new_tokens:8}"])
    assert sum(tuned.runs.values()) == 3 and tuned.new_tokens == 3 * 2 * 8 + 1 * 5 * 32


def test_opt_66b_in_float16_on_one_80gb_gpu_is_refused_with_the_fix():
    base = ["experiment=fig_opt_fixed_length", "model_pair=opt_125m_66b", "dataset=xsum", "drafter=sd",
            "budget.draft_length=2", "hydra/launcher=slurm"]
    one = build_plan(base + ["hydra.launcher.gpus_per_node=1"])
    [est] = one.pairs
    assert est.dtype == "float16" and 131 < est.weights < 132.5 and not est.fits
    [problem] = [p for p in one.problems if p.startswith("model pair")]
    assert "needs 13" in problem and "request 2 GPUs (hydra.launcher.gpus_per_node=2) with model_pair.device_map=auto" \
        in problem
    two = build_plan(base + ["hydra.launcher.gpus_per_node=2"])
    assert two.pairs[0].fits and not [p for p in two.problems if p.startswith("model pair")]
    single = build_plan(base + ["hydra.launcher.gpus_per_node=2", "model_pair.device_map=null"])
    assert not single.pairs[0].fits  # without a device map the model sits on one GPU


def test_param_counts_and_kv_from_the_table_match_the_architectures():
    plan = build_plan(["model_pair=llama2_70b", "dataset=xsum", "drafter=sd", "hydra/launcher=slurm",
                       "hydra.launcher.gpus_per_node=2"])
    assert plan.models["meta-llama/Llama-2-70b-hf"].params == 68_976_648_192
    assert plan.models["JackFram/llama-68m"].params == 68_030_208
    [est] = plan.pairs
    assert est.tokens == 2048  # the draft's context bounds a hub prompt of unknown length
    # keys and values: 80 layers x 8 kv heads x 128 dims x 2 bytes x 2, plus the draft's 2 x 12 x 64 x 2 x 2
    assert abs(est.kv - 2048 * (2 * 80 * 8 * 128 * 2 + 2 * 2 * 12 * 64 * 2) / 1e9) < 1e-9
    assert model_config(model_source("facebook/opt-350m"))[1] == "paper table"


def test_fast_composition_equals_hydra_compose():
    jobs, confs, _ = compose_jobs(["experiment=quickstart", "sampling.max_new_tokens=7", "+budget.shape=null"])
    for job, conf in list(zip(jobs, confs))[::3]:
        assert conf == OmegaConf.to_container(compose_cfg(*job), resolve=True)


@pytest.mark.parametrize("overrides", [
    ("drafter=rsd_c", "budget=fixed_compute", "budget.target_tokens=10", "+budget.shape=null"),
    ("experiment=study_eagle_fixed_compute", "dataset=xsum_builtin", "sampling.temperature=0.6", "seed=3"),
    ("model_pair=tiny_llama", "model_pair.tiny.seed=1", "+model_pair.tiny.num_layers=1", "dataset.num_prompts=2"),
    ("drafter=sd", "logger=wandb", "logger.mode=disabled", "sampling.max_new_tokens=${dataset.num_prompts}"),
])
def test_the_tests_composition_equals_hydra_compose(overrides):
    """tests/helpers' compose_cfg (groups composed, values applied after, as the pre-flight does) is Hydra's compose."""
    from helpers.config import _composed

    assert OmegaConf.to_container(compose_cfg(*overrides)) == OmegaConf.to_container(_composed(overrides))


@pytest.mark.parametrize("bad", ["sampling.no_such_key=1", "+sampling.temperature=0.5"])
def test_the_tests_composition_refuses_what_hydra_refuses(bad):
    from hydra.errors import ConfigCompositionException

    from helpers.config import _composed

    for compose in (compose_cfg, lambda *o: _composed(o)):
        with pytest.raises(ConfigCompositionException):
            compose(bad)


def test_model_status_sources(tmp_path, monkeypatch):
    assert model_source("tiny:llama").status()[0]
    assert model_source("embedded:smollm2-draft").status()[0]
    ok, where = model_source("rsd-test/absent-model").status()
    assert not ok and "HF_HUB_OFFLINE is set" in where and "hf download rsd-test/absent-model" in where
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    assert model_source(str(tmp_path / "m")).status()[0]
    assert not model_source(str(tmp_path / "nowhere")).status()[0]
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    monkeypatch.setattr("rsd.models.hub.hub_reachable", lambda: False)
    assert "the hub is unreachable" in model_source("rsd-test/absent-model").status()[1]


def test_a_single_job_fails_at_once_for_a_missing_hub_model():
    cfg = run_cfg("model_pair=opt_125m_13b").model_pair
    start = time.monotonic()
    with pytest.raises(ModelUnavailableError, match="hf download facebook/opt-13b"):
        pairs.load_pair(cfg)
    assert time.monotonic() - start < 5


def test_sweep_preflight_refuses_before_any_job(tmp_path, run_py):
    start = time.monotonic()
    # every model and dataset of the preset, at one drafter and length: each model is in 3 jobs, each dataset in 3
    proc = run_py("-m", "experiment=fig_llama2_chat_fixed_length", "drafter=sd", "budget.draft_length=2",
                  f"out_dir={tmp_path / 'out'}", env=ENV)
    elapsed = time.monotonic() - start
    assert proc.returncode == 2, proc.stderr[-2000:]
    err = proc.stderr
    assert "sweep refused before launching any job" in err and "Launching" not in proc.stdout + err
    for spec in ("meta-llama/Llama-2-7b-chat-hf", "meta-llama/Llama-2-13b-chat-hf", "meta-llama/Llama-2-70b-chat-hf",
                 "JackFram/llama-68m"):
        assert err.count(f"  - model {spec}:") == 1 and f"hf download {spec}" in err  # once per model, not per job
    for ds in ("xsum", "wmt", "dolly"):
        assert err.count(f"  - dataset {ds} (") == 1
    assert not (tmp_path / "out").exists()
    print(f"pre-flight refusal took {elapsed:.1f} s")


def test_run_py_plan_flag_launches_nothing(tmp_path, run_py):
    proc = run_py("-m", "model_pair=tiny_llama", "drafter=ar,sd", f"out_dir={tmp_path / 'out'}", "--plan", env=ENV)
    assert proc.returncode == 0, proc.stderr
    assert "2 jobs -> 2 runs" in proc.stdout and "available tiny:llama" in proc.stdout
    assert not (tmp_path / "out").exists()


def launch_preflight(tmp_path, *overrides):
    """The sweep callback on the config `run.py -m OVERRIDES` would compose (hydra overrides included)."""
    from hydra import compose, initialize_config_dir

    from rsd.harness.preflight import PreflightOnSweepStart

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[*overrides, f"out_dir={tmp_path}"], return_hydra_config=True)
    PreflightOnSweepStart().on_multirun_start(cfg)


OPT_66B = ["model_pair=opt_125m_66b", "dataset=xsum", "drafter=sd", "budget.draft_length=2", "hydra/launcher=slurm"]


def test_sweep_preflight_judges_memory_by_the_slurm_jobs_not_the_login_node(tmp_path, monkeypatch, capsys):
    """On a login node (no GPU, 16 GB) the 131 GB pair fits the 2 x 80 GB GPUs each SLURM job requests; a CPU-only
    job is judged by its hydra.launcher.mem_gb. The models are missing here: RSD_SKIP_PREFLIGHT=models skips only that
    check, and `memory` skips only the fit, never the model check."""
    monkeypatch.setattr("rsd.harness.plan.memory.host_memory", lambda: 16e9)
    for module in ("memory", "build"):
        monkeypatch.setattr(f"rsd.harness.plan.{module}.gpu_memory", lambda: (0, 80e9, "RSD_GPU_MEMORY_GB"))
    monkeypatch.setenv("RSD_SKIP_PREFLIGHT", "models,datasets")
    monkeypatch.setenv("PATH", f"{ROOT / 'tests' / 'fake_slurm'}{os.pathsep}{os.environ['PATH']}")  # a login node's
    launch_preflight(tmp_path, *OPT_66B, "hydra.launcher.gpus_per_node=2", "model_pair.device_map=auto")
    assert "runs planned" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        launch_preflight(tmp_path, *OPT_66B, "hydra.launcher.gpus_per_node=0", "hydra.launcher.mem_gb=100")
    assert "gets 90.0 GB (CPU RAM 100 GB (hydra.launcher.mem_gb)" in capsys.readouterr().err
    monkeypatch.setenv("RSD_SKIP_PREFLIGHT", "memory")
    with pytest.raises(SystemExit):
        launch_preflight(tmp_path, *OPT_66B, "hydra.launcher.gpus_per_node=0")
    err = capsys.readouterr().err
    assert "  - model facebook/opt-66b:" in err and "  - model pair" not in err
    monkeypatch.setenv("RSD_SKIP_PREFLIGHT", "gpus")
    with pytest.raises(SystemExit):
        launch_preflight(tmp_path, *OPT_66B)
    assert "RSD_SKIP_PREFLIGHT=gpus: unknown check(s) ['gpus']" in capsys.readouterr().err


@pytest.mark.parametrize("content", [None, "{broken", "file"])
def test_plan_refuses_a_local_model_that_is_not_a_model_directory(tmp_path, capsys, content):
    """An empty directory, a config.json that is not JSON, or a plain file: MISSING with the reason, no traceback."""
    model = tmp_path / "model"
    if content == "file":
        model.write_text("weights?")
    else:
        model.mkdir()
        if content:
            (model / "config.json").write_text(content)
    assert main(["model_pair=llama2_7b", f"model_pair.target={model}", "drafter=ar",
                 "dataset=dolly_builtin"]) == 1
    out = capsys.readouterr().out
    reason = {None: "holds no config.json", "{broken": "cannot be read as JSON", "file": "is a file, not a model"}
    assert f"MISSING   {model}" in out and reason[content] in out


@pytest.mark.parametrize("kind", ["directory", "device"])
def test_a_dataset_path_that_is_not_a_file_says_what_it_is(tmp_path, kind):
    from rsd.data import DatasetError, load_local

    path = tmp_path if kind == "directory" else Path("/dev/null")
    with pytest.raises(DatasetError, match="is a directory" if kind == "directory" else "is not a regular file"):
        load_local(str(path))
