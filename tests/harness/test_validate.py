"""Bad input is refused before any model loads, in one line naming the key and what to do; environment hygiene.

CASES is also the source of README.md's Troubleshooting table: `PYTHONPATH=tests python tests/harness/test_validate.py`
prints the table, and test_readme_troubleshooting_lists_every_case fails when the README drifts from the messages the
code gives.
"""

import functools
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from helpers.config import CONF, ROOT, compose_cfg, run_cfg
from rsd.core.budgets import (
    MAX_ENUMERATED_SHAPES,
    TooManyRunsError,
    branching_vectors,
    count_branching_vectors,
    counts_by_depth,
)
from rsd.errors import ConfigError
from rsd.harness import runner
from rsd.harness.logger import wandb_mode
from rsd.harness.runs import plan_runs
from rsd.harness.schema import budget_from
from rsd.harness.sweep import expand_jobs
from rsd.models import embedded, hub

READ_ONLY = "/proc/rsd-results"  # not writable even by root
MISSING_MODEL = "./models/no-such-model"


@dataclass(frozen=True)
class Case:
    """One refused input: overrides of `python run.py` (placeholders FILE, FILE/sub), the key the message must name."""

    overrides: tuple[str, ...]
    key: str
    env: dict = field(default_factory=dict)

    @property
    def command(self) -> str:
        env = " ".join(f"{k}={v}" for k, v in self.env.items())
        return (env + " " if env else "") + "python run.py " + " ".join(shlex.quote(o) for o in self.overrides)


CASES = [
    Case(("sampling.temperature=nan",), "sampling.temperature"),
    Case(("sampling.temperature=inf",), "sampling.temperature"),
    Case(("sampling.temperature=hot",), "sampling.temperature"),
    Case(("sampling.top_k=1.5",), "sampling.top_k"),
    Case(("sampling.top_p=1.5",), "sampling.top_p"),
    Case(("sampling.max_new_tokens=0",), "sampling.max_new_tokens"),
    Case(("dataset.num_prompts=all",), "dataset.num_prompts"),
    Case(("dataset.task=sumarization",), "dataset.task"),
    Case(("num_threads=-1",), "num_threads"),
    Case(("seed=abc",), "seed"),
    Case(("seed=1.5",), "seed"),
    Case(("model_pair.dtype=float17",), "model_pair.dtype"),
    Case(("model_pair=smollm2_dial", "model_pair.mix=1.5"), "model_pair.mix"),
    Case(("model_pair=smollm2_dial", "model_pair.mix=half"), "model_pair.mix"),
    Case(("drafter=pld", "drafter.max_ngram=0"), "max_ngram"),
    Case(("model_pair.device=cuda",), "model_pair.device"),
    Case(("model_pair.device=gpu",), "model_pair.device"),
    Case(("model_pair=tiny_llama", "model_pair.draft=facebook/opt-125m"), "model_pair.draft"),
    Case(("model_pair=tiny_llama", "model_pair.tokenizer=gpt2"), "model_pair.tokenizer"),
    Case(("model_pair=tiny_llama", "model_pair.target=tiny:gpt2"), "model_pair.target"),
    Case(("model_pair.draft=tiny:llama",), "model_pair.draft"),
    Case((f"model_pair.target={MISSING_MODEL}",), "model_pair.target"),
    Case(("model_pair.target=embedded:smollm3",), "model_pair.target"),
    Case(("logger.name=bogus",), "logger.name"),
    Case(("logger=wandb", "logger.mode=upload"), "logger.mode"),
    Case(("logger=wandb",), "WANDB_MODE", env={"WANDB_MODE": "quiet"}),
    Case(("out_dir=FILE",), "out_dir"),
    Case(("out_dir=FILE/sub",), "out_dir"),
    Case(("out_dir=DANGLING",), "out_dir"),
    Case(("out_dir=LOOP/sub",), "out_dir"),
    Case((f"out_dir={READ_ONLY}",), "out_dir"),
    Case(("budget.max_depth=0",), "budget.max_depth"),
    Case(("budget.max_runs=0",), "budget.max_runs"),
    Case(("budget.shape=3",), "budget.shape"),
    Case(("budget.draft_length=0",), "budget.draft_length"),
    Case(("drafter=spectr", "budget.shape={num_sequences:2}"), "budget.shape"),
    Case(("drafter=rsd_c", "budget=fixed_compute", "budget.target_tokens=100"), "budget.max_runs"),
    Case(("drafter=rsd_c", "budget=fixed_compute", "budget.target_tokens=1000"), "budget.max_depth"),
    Case(("+sampling.temprature=0.5",), "sampling.temprature"),
    Case(("+dataset.temperature=0.5",), "dataset.temperature"),
    Case(("+drafter.num_sequences=3",), "drafter.num_sequences"),
    Case(("+model_pair.revision=main",), "model_pair.revision"),
    # type holes and late checks: each used to run mislabelled, or fail after the models loaded, hang or exhaust memory
    Case(("drafter=rsd_c", "drafter.root_branching=2.7"), "drafter.root_branching"),
    Case(("drafter=rsd_c", 'drafter.root_branching="2"'), "drafter.root_branching"),
    Case(("drafter=spectr", "drafter.num_sequences=true"), "drafter.num_sequences"),
    Case(("drafter=spectr", "drafter.num_sequences=2.5"), "drafter.num_sequences"),
    Case(("model_pair=tiny_llama", "model_pair.dtype=float16"), "model_pair.dtype"),
    Case(("model_pair=tiny_llama", "model_pair.tiny.vocab_size=2.5"), "model_pair.tiny.vocab_size"),
    Case(("model_pair=tiny_llama", "model_pair.tiny.init_std=1e30"), "model_pair.tiny.init_std"),
    Case(("model_pair.attn_implementation=bogus",), "model_pair.attn_implementation"),
    Case(("seed=${oc.env:NOPE_VAR}",), "seed"),
    Case(("dataset.shuffle_seed=abc",), "dataset.shuffle_seed"),
    Case(("dataset.max_prompt_tokens=0",), "dataset.max_prompt_tokens"),
    Case(("budget=fixed_compute", "budget.select=5"), "budget.select"),
    Case(("budget=fixed_compute", "budget.select={prompts:2.5}"), "budget.select.prompts"),
    Case(("budget=fixed_compute", "budget.select={prompts:4,offset:-1}"), "budget.select.offset"),
    Case(("budget=fixed_compute", "budget.select={prompts:4,new_tokens:0}"), "budget.select.new_tokens"),
    Case(("budget=fixed_compute", "budget.select={prompts:4,by:median}"), "budget.select.by"),
    Case(("sampling.temperature=1e-300",), "sampling.temperature"),
    Case(("num_threads=100000",), "num_threads"),
    Case(("drafter=rsd_c", "budget.draft_length=1000000000000"), "budget.draft_length"),
    Case(("drafter=spectr", "budget=fixed_compute", "budget.target_tokens=1000000000000"), "budget.max_runs"),
    Case(("drafter=sd", "budget=fixed_compute", "budget.target_tokens=1000000000000"), "budget"),
    Case(("drafter=rsd_c", "budget=fixed_compute", "budget.target_tokens=100000000"), "budget.max_depth"),
]


def block_models(monkeypatch) -> None:
    """Any model load fails: a refusal must come before it. No CUDA, whatever the machine has."""

    def boom(*args, **kwargs):
        raise AssertionError("a model was loaded before the config was refused")

    for target in ("rsd.harness.runner.load_pair", "rsd.models.pairs.load_pair", "rsd.models.tiny.tiny_pair",
                   "transformers.AutoModelForCausalLM.from_pretrained"):
        monkeypatch.setattr(target, boom, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


@pytest.fixture
def no_models(monkeypatch):
    block_models(monkeypatch)


def refusal(case: Case, tmp_path: Path, monkeypatch) -> str:
    """The message `run` refuses the case with; checks nothing was written."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    file = tmp_path / "a-file"
    file.write_text("not a directory\n")
    places = {"FILE": file, "DANGLING": tmp_path / "dangling", "LOOP": tmp_path / "loop"}
    for name, target in (("DANGLING", "missing-target"), ("LOOP", "loop")):
        if not places[name].is_symlink():  # a test may ask for several refusals in one directory
            places[name].symlink_to(target)
    for k, v in case.env.items():
        monkeypatch.setenv(k, v)
    overrides = list(case.overrides)
    for name, place in places.items():
        overrides = [o.replace(name, str(place)) for o in overrides]
    out = tmp_path / "out"
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(ConfigError) as info:
        runner.run(run_cfg(f"out_dir={out}", *overrides))
    assert sorted(tmp_path.rglob("*")) == before  # nothing written: no out_dir, no probe left behind
    message = str(info.value)
    for name, place in places.items():
        message = message.replace(str(place), name)
    return message.replace(str(Path.cwd()), "CWD")


@pytest.mark.parametrize("case", CASES, ids=[c.command.removeprefix("python run.py ") for c in CASES])
def test_bad_input_is_refused_before_models_load(case, tmp_path, monkeypatch, no_models):
    message = refusal(case, tmp_path, monkeypatch)
    assert "\n" not in message and len(message) < 400
    assert case.key in message


def test_the_messages_say_what_to_do(tmp_path, monkeypatch, no_models):
    """The specific advice of the issue: depth limit, closest key, how many shapes and how to narrow them."""
    by_key = {c.overrides: c for c in CASES}

    def msg(*overrides):
        return refusal(by_key[overrides], tmp_path, monkeypatch)

    assert "depth limit" in msg("budget.max_depth=0")
    assert "did you mean sampling.temperature?" in msg("+sampling.temprature=0.5")
    assert "did you mean sampling.temperature?" in msg("+dataset.temperature=0.5")
    cuda = msg("model_pair.device=cuda")
    assert "no CUDA device" in cuda and "model_pair.device=auto" in cuda
    hundred = msg("drafter=rsd_c", "budget=fixed_compute", "budget.target_tokens=100")
    assert "32,510 shapes" in hundred and "<= 4: 75" in hundred and "budget.shape='{branching:[100]}'" in hundred
    thousand = msg("drafter=rsd_c", "budget=fixed_compute", "budget.target_tokens=1000")
    assert "8,549,721,487" in thousand and "<= 3: 57" in thousand
    assert "is ignored by the tiny pair" in msg("model_pair=tiny_llama", "model_pair.draft=facebook/opt-125m")
    assert "does not exist" in msg(f"model_pair.target={MISSING_MODEL}")
    assert "drafter.num_sequences=2" in msg("drafter=spectr", "budget.shape={num_sequences:2}")


def test_valid_neighbours_of_the_bad_inputs_pass():
    """The checks are not over-eager: each key's valid values (and a + key the config defines) plan."""
    for overrides in (["sampling.temperature=0"], ["sampling.temperature=0.7", "sampling.top_k=5"], ["seed=-3"],
                      ["dataset.num_prompts=null"], ["num_threads=null"], ["model_pair.dtype=bfloat16"],
                      ["model_pair.device=cpu"], ["model_pair=tiny_opt", "model_pair.draft=tiny:opt"],
                      ["logger=wandb", "logger.mode=disabled"], ["budget.max_depth=4"], ["budget.max_runs=null"],
                      ["drafter=rsd_c", "budget=fixed_compute", "budget.target_tokens=1000", "budget.max_depth=3"],
                      ["drafter=spectr", "budget=fixed_compute", "+budget.shape={num_sequences:2}"],
                      ["+drafter.verifier=walk"], ["model_pair.target=facebook/opt-125m"], [f"out_dir={ROOT}"]):
        assert plan_runs(run_cfg(*overrides)), overrides


def test_cli_refusal_exits_2_with_one_line_and_leaves_nothing(tmp_path):
    """The user's view: exit status 2, one line on stderr, no traceback, no out_dir and no Hydra run directory."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(ROOT / "run.py"), "sampling.temperature=hot",
                           f"out_dir={tmp_path / 'out'}"], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "error: sampling.temperature='hot' must be a finite number >= 0 (0 is greedy, 1 samples the model's own "
        "distribution)"]
    assert not (tmp_path / "out").exists() and not list(cwd.iterdir())


def test_hydra_run_dir_is_outside_out_dir():
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["out_dir=/somewhere"], return_hydra_config=True)
    assert cfg.hydra.run.dir.startswith("outputs/") and "/somewhere" not in cfg.hydra.run.dir
    assert "outputs/" in (ROOT / ".gitignore").read_text()


# ---- RSD-C at a large fixed compute ---------------------------------------------------------------------------------


@functools.cache
def recursive_vectors(remaining: int, width: int = 1) -> tuple[tuple[int, ...], ...]:
    """The definition, brute force and recursive (fine for small totals): level sizes prod_{j<=l} b_j sum to total."""
    out = []
    for b in range(1, remaining // width + 1):
        level = width * b
        if level == remaining:
            out.append((b,))
        else:
            out += [(b, *rest) for rest in recursive_vectors(remaining - level, level)]
    return tuple(out)


@pytest.mark.parametrize("total", [1, 2, 6, 12, 24, 30])
def test_iterative_enumeration_is_the_definition_in_order(total):
    expected = [list(v) for v in recursive_vectors(total)]
    assert list(branching_vectors(total)) == expected  # lexicographic, as the recursive version listed them
    assert count_branching_vectors(total) == len(expected)
    for depth in (1, 2, 3, 4):
        limited = [v for v in expected if len(v) <= depth]
        assert list(branching_vectors(total, depth)) == limited
        assert count_branching_vectors(total, depth) == len(limited)
    assert counts_by_depth(total, 4) == [sum(len(v) <= d for v in expected) for d in (1, 2, 3, 4)]


def test_huge_budgets_are_counted_not_recursed():
    assert count_branching_vectors(100) == 32510
    assert count_branching_vectors(1000) == 8549721487
    assert counts_by_depth(1000, 4) == [1, 16, 57, 186]
    with pytest.raises(TooManyRunsError, match="8,549,721,487"):
        next(branching_vectors(1000))
    assert len(list(branching_vectors(1000, 3))) == 57
    assert count_branching_vectors(100) < MAX_ENUMERATED_SHAPES  # B = 100 is listed, then capped by max_runs


# The paper's hub presets (their RSD-C runs in a second sweep at max_depth=4); the embedded study sets max_depth=5.
FIXED_COMPUTE = sorted(p.stem for p in (CONF / "experiment").glob("*fixed_compute.yaml")
                       if not p.stem.startswith(("fig_smollm2", "study_")))


@pytest.mark.parametrize("preset", FIXED_COMPUTE)
def test_fixed_compute_presets_plan_under_the_cap(preset):
    """The preset's RSD-C second sweep (max_depth=4, as its script runs it) plans at every B; without it, B=30 is
    refused with the count."""
    jobs = expand_jobs([f"experiment={preset}", "drafter=rsd_c", "budget.max_depth=4", "model_pair=tiny_llama",
                        "dataset=dolly_builtin"])
    assert len(jobs) == 5
    sizes = [len(plan_runs(run_cfg(*job))) for job in jobs]
    assert sizes == [8, 13, 15, 21, 34]  # B = 6, 10, 14, 21, 30 at depth <= 4
    assert max(sizes) <= compose_cfg("budget=fixed_compute").budget.max_runs == budget_from({
        "kind": "fixed_compute", "target_tokens": 1}).max_runs
    with pytest.raises(TooManyRunsError, match="438 shapes"):
        plan_runs(run_cfg(f"experiment={preset}", "drafter=rsd_c", "budget.target_tokens=30"))


def test_embedded_study_plans_every_shape_of_depth_at_most_5_under_the_cap():
    jobs = expand_jobs(["experiment=fig_smollm2_fixed_compute", "drafter=rsd_c", "dataset=dolly_builtin"])
    assert [len(plan_runs(run_cfg(*job))) for job in jobs] == [9, 16, 21, 34, 53]  # B = 6, 10, 14, 21, 30


# ---- environment hygiene --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("env,configured,key,expected", [
    (None, "auto", False, "offline"), (None, "auto", True, "online"), ("offline", "auto", True, "offline"),
    ("disabled", "online", True, "disabled"), ("offline", "online", False, "offline"),
    (None, "offline", True, "offline"), ("online", "offline", False, "online"),
])
def test_wandb_mode_env_wins(monkeypatch, env, configured, key, expected):
    if env is None:
        monkeypatch.delenv("WANDB_MODE", raising=False)
    else:
        monkeypatch.setenv("WANDB_MODE", env)
    monkeypatch.setattr("rsd.harness.logger.has_wandb_key", lambda: key)
    assert wandb_mode(configured) == expected


@pytest.mark.parametrize("value,offline", [("1", True), ("true", True), ("YES", True), ("on", True), ("0", False),
                                           ("", False), ("false", False)])
def test_hub_messages(monkeypatch, tmp_path, value, offline):
    monkeypatch.setenv("HF_HUB_OFFLINE", value)
    msg = str(hub.unavailable("model", "facebook/opt-125m", OSError("not cached\nmore detail")))
    assert "`hf download facebook/opt-125m`" in msg and "huggingface-cli" not in msg and "\n" not in msg
    assert ("HF_HUB_OFFLINE is set" in msg) == offline


def test_hub_message_for_local_paths(monkeypatch, tmp_path):
    for missing in ("/data/models/llama", "./llama", "~/models/llama-nope", "models/llama/7b"):
        msg = str(hub.unavailable("model", missing, OSError("Repo id must be in the form 'repo_name'")))
        assert "local path that does not exist" in msg and "hf download" not in msg and "Repo id" not in msg
    msg = str(hub.unavailable("model", str(tmp_path), OSError("no config.json")))
    assert "local directory" in msg and "config.json" in msg and "hf download" not in msg


def test_installed_hub_cli_has_the_recommended_command():
    hf = Path(sys.executable).parent / "hf"
    proc = subprocess.run([str(hf), "download", "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "REPO_ID" in proc.stdout


@pytest.mark.parametrize("umask,mode", [(0o022, 0o755), (0o002, 0o775), (0o077, 0o700)])
def test_model_cache_staging_dir_follows_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        staged = embedded.staging_dir(tmp_path)
    finally:
        os.umask(old)
    assert staged.parent == tmp_path and staged.stat().st_mode & 0o7777 == mode


def test_array_sbatch_passes_task_lines_as_arguments_without_eval(tmp_path):
    """A task line's `$(...)`, quotes and spaces reach run.py as literal arguments; nothing is executed."""
    pwned = tmp_path / "pwned"
    args = [f"out_dir=$(touch {pwned})", "dataset.path=/data/my prompts.jsonl", "+x='y; z'", "seed=*"]
    tasks = tmp_path / "tasks.txt"
    tasks.write_text("model_pair=tiny_llama\n" + " ".join(shlex.quote(a) for a in args) + "\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    got = tmp_path / "args"
    fake = bin_dir / "python"
    fake.write_text(f'#!/usr/bin/env bash\nif [ "$1" = run.py ]; then shift; printf "%s\\0" "$@" > {got}; exit 0; fi\n'
                    f'exec {sys.executable} "$@"\n')
    fake.chmod(0o755)
    submit = tmp_path / "submit"  # a submit directory without .venv, whose activation would hide the fake python
    submit.mkdir()
    (submit / "slurm").symlink_to(ROOT / "slurm")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_ARRAY_TASK_ID": "1",
           "SLURM_SUBMIT_DIR": str(submit), "SLURM_JOB_ID": "7"}
    proc = subprocess.run(["bash", str(ROOT / "slurm" / "array.sbatch"), str(tasks)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert got.read_text().split("\0")[:-1] == args
    assert not pwned.exists()
    bad = subprocess.run(["bash", str(ROOT / "slurm" / "array.sbatch"), str(tasks)],
                         env={**env, "SLURM_ARRAY_TASK_ID": "5"}, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "no task line 6" in bad.stderr


# ---- README.md's Troubleshooting table -----------------------------------------------------------------------------


def table_row(case: Case, message: str) -> str:
    return f"| `{case.command}` | {message.replace('|', '/')} |"


def test_readme_troubleshooting_lists_every_case(tmp_path, monkeypatch, no_models):
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Troubleshooting"):]
    rows = [table_row(c, refusal(c, tmp_path / str(i), monkeypatch)) for i, c in enumerate(CASES)]
    missing = [row for row in rows if row not in section]
    assert not missing, "README.md's Troubleshooting table is stale; regenerate it with `PYTHONPATH=tests " \
                        "python tests/harness/test_validate.py`. Missing rows:\n" + "\n".join(missing)
    assert len(re.findall(r"^\| `(?:\w+=\S+ )?python run\.py", section, re.M)) == len(CASES)


if __name__ == "__main__":  # print the table for README.md's Troubleshooting section
    import tempfile

    with pytest.MonkeyPatch.context() as mp, tempfile.TemporaryDirectory() as tmp:
        block_models(mp)
        print("| command | message |\n|---|---|")
        for i, case in enumerate(CASES):
            print(table_row(case, refusal(case, Path(tmp) / str(i), mp)))
