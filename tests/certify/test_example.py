"""The worked example of docs/adding_a_drafter.md, run as the page says, is lossless AND useful; a drafter that never
helps is flagged by the certificate's usefulness report (issue 9: a junk drafter used to certify silently)."""

import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from helpers.config import ROOT
from rsd.certify import compose_drafters, usefulness, usefulness_check
from rsd.models.embedded import ModelUnavailableError

DOC = ROOT / "docs" / "adding_a_drafter.md"
EXAMPLE = ROOT / "examples" / "topk_tree"


def documented_commands() -> tuple[dict[str, str], list[str]]:
    """The `export` variables and the certify command of the page's "Certify, then compare" block, verbatim."""
    section = DOC.read_text().split("## 3.", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    env, certify = {}, None
    for line in block.splitlines():
        if line.startswith("export "):
            key, _, value = line.removeprefix("export ").partition("=")
            env[key] = value
        elif line.startswith("python -m rsd.certify"):
            certify = shlex.split(line)
    assert certify is not None, f"no `python -m rsd.certify` command in section 3 of {DOC}"
    return env, certify


@pytest.fixture
def example_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    yield
    sys.modules.pop("topk_tree", None)


def test_documented_command_composes_to_the_example(monkeypatch):
    """The page's certify command, as written (its export, from the repository root), builds the example drafter.
    Certifying it is tests/drafters/test_plugin.py; the whole command in a fresh process, with its usefulness on the
    embedded pair (about a minute), is the slow test below."""
    env, cmd = documented_commands()
    monkeypatch.chdir(ROOT)
    monkeypatch.syspath_prepend(str(ROOT / env["PYTHONPATH"]))
    try:
        [(name, drafter)] = compose_drafters(cmd[3:])
        from topk_tree import TopKTree
    finally:
        sys.modules.pop("topk_tree", None)
    assert name == "topk_tree" and type(drafter) is TopKTree


@pytest.mark.slow
def test_documented_example_certifies_and_is_useful(tmp_path):
    """The page's certify command, as written (plus --samples 200 for speed and --json to read the numbers): PASS,
    no usefulness WARNING, block efficiency > 1.2 on the embedded pair (1.38 measured; SD at L=2: 1.20), and the
    page's sample usefulness report is what it prints (about 100 s)."""
    env, cmd = documented_commands()
    out = tmp_path / "cert.json"
    proc = subprocess.run([sys.executable, *cmd[1:], "--samples", "200", "--json", str(out)], cwd=ROOT,
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=600)
    print(proc.stdout, proc.stderr[-2000:])
    assert proc.returncode == 0 and "RESULT: PASS" in proc.stdout
    assert "WARNING" not in proc.stdout
    printed = proc.stdout.split("RESULT: PASS\n", 1)[1].split("false-alarm")[0]
    sample = DOC.read_text().split("```text\nRESULT: PASS\n", 1)[1].split("```", 1)[0]
    assert sample == printed, "docs/adding_a_drafter.md's sample usefulness report differs from what certify prints"
    [cert] = json.loads(out.read_text())
    useful = cert["usefulness"]
    assert "smollm2 pair" in useful["setting"], "the usefulness report must run on the embedded pair"
    row = useful["rows"]["topk_tree"]
    assert row["block_efficiency"] > 1.2 and row["mean_accepted_length"] > 0.2, useful


def test_junk_drafter_gets_a_warning(example_on_path):
    """A lossless drafter that always drafts token 0 passes losslessness but is flagged as useless."""
    from topk_tree import TopKTree

    class Junk(TopKTree):
        name = "junk"

        def build(self, tree, ctx):
            frontier = [0]
            for _ in self.branching[: ctx.max_depth]:
                ctx.probs(tree, frontier)
                frontier = [tree.add_candidate(v, 0) for v in frontier]

    report = usefulness_check("junk", Junk([1, 1]), prompts=2, max_new_tokens=12)
    print(report.render())
    assert report.rows["junk"]["mean_accepted_length"] < 0.05
    assert report.warning and "useless" in report.warning and "does not beat AR" in report.warning
    assert "\nWARNING: junk is lossless but useless" in report.render()
    assert report.rows["sd (L=2)"]["block_efficiency"] > 1.0  # the baseline it is compared with does help


def test_usefulness_falls_back_to_the_tiny_pair(example_on_path, monkeypatch):
    """Without the embedded pair the report still runs, on the tiny pair, and says so."""
    from topk_tree import TopKTree

    real = usefulness._load_named_pair

    def no_embedded(name):
        if name == "smollm2":
            raise ModelUnavailableError("could not load the model 'embedded:smollm2-135m-instruct'\nmore")
        return real(name)

    monkeypatch.setattr(usefulness, "_load_named_pair", no_embedded)
    report = usefulness_check("topk_tree", TopKTree([2, 1]), prompts=1, max_new_tokens=6)
    assert report.setting.startswith("tiny_llama pair") and "smollm2 is unavailable" in report.setting
    assert set(report.rows) == {"ar", "sd (L=2)", "topk_tree"}


def test_references_to_the_algorithms_page_resolve():
    """Every anchor of docs/algorithms.md cited in code, tests, examples and docs is defined there, and no file cites
    the unshipped spec any more."""
    page = (ROOT / "docs" / "algorithms.md").read_text()
    anchors = set(re.findall(r'<a id="([a-z0-9-]+)"></a>', page))
    files = [p for d in ("rsd", "tests", "examples", "docs", "analysis") for p in (ROOT / d).rglob("*")
             if p.suffix in (".py", ".md", ".yaml")]
    cited, stale = set(), []
    for path in files:
        text = path.read_text()
        cited |= set(re.findall(r"algorithms\.md#([a-z0-9-]+)", text))
        if re.search(r"ALGORITHMS(\.md| §)", text):
            stale.append(str(path.relative_to(ROOT)))
    assert cited and cited <= anchors, f"unknown anchors: {sorted(cited - anchors)}"
    assert not stale, f"files still citing the unshipped spec: {stale}"
