"""Past the edge, config is read as typed fields, never out of a dict (as test_import_graph.py keeps cycles out).

The config layer (config.py, validate*.py and schema.py in rsd/harness/) turns Hydra's config into a RunConfig once.
In every other module of rsd/ (and analysis/calibration.py and the loading modules LOADING, which re-read a run's
stored config through rsd.harness.schema's blocks) the AST must hold:

1. no subscript read `x["KEY"]` and no `x.get("KEY")` whose literal KEY is a config key: a key of a conf/ group's
   YAML (nested keys included), a group's name, or a key of conf/config.yaml, less the keys a stored summary or record
   carries too (`budget`, `seed`, ... are read there as stored results, not as config); a dataclass field's
   `f.metadata[...]` is not a mapping of config;
2. no read of `RunConfig.resolved` (Hydra's config as plain data, kept for the run identity and run.json only);
3. no import of omegaconf, except in the edge modules that compose or load YAML themselves (EDGE).

In analysis/, the run table's own columns (analysis.columns.RUN_KEYS: `runs["mix"]`) are not config reads.
rsd/drafters/ is left out of rule 1: a drafter's `shapes(budget, params)` reads its own constructor keywords (the
plug-in contract), which resolve_config checks by building every shape.
"""

import ast
import json
from pathlib import Path

from omegaconf import OmegaConf

from analysis.columns import RUN_KEYS
from helpers.runs import record, write_run

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
CONFIG_LAYER = {"rsd/harness/config.py", "rsd/harness/validate.py", "rsd/harness/validate_keys.py",
                "rsd/harness/validate_pair.py", "rsd/harness/schema.py"}
EDGE = {"rsd/harness/plan/compose.py", "rsd/harness/plan/memory.py", "rsd/harness/preflight.py", "rsd/certify/cli.py",
        "rsd/certify/usefulness.py", "rsd/models/embedded.py"}  # they compose a config, or load a YAML
LOADING = ("columns.py", "derived.py", "load.py", "rows.py")  # analysis/: run directories -> tidy tables
GROUPS = ("sampling", "dataset", "model_pair", "budget", "logger")
FRAME_COLUMNS = set(RUN_KEYS)  # analysis reads these as the run table's typed columns, which stored_setting fills


def _keys(node) -> set[str]:
    if not isinstance(node, dict):
        return set()
    return set(map(str, node)) | {k for v in node.values() for k in _keys(v)}


def stored_keys(tmp_path: Path) -> set[str]:
    """The keys of a run's summary.json and of its records, as execute writes them (helpers.runs.write_run)."""
    rec = record("p0", [1], 0.1, 0.0, 1, 1)
    run_dir = write_run(tmp_path, "r", "sd", {"draft_length": 1}, "L1", "fixed_length", 1, [rec], 0.0)
    return set(json.loads((run_dir / "summary.json").read_text())) | set(rec)


def config_keys(tmp_path: Path) -> set[str]:
    top = OmegaConf.to_container(OmegaConf.load(CONF / "config.yaml"))
    keys = set(GROUPS) | {"drafter"} | _keys({k: v for k, v in top.items() if k not in ("defaults", "hydra")})
    for group in GROUPS:
        for path in (CONF / group).glob("*.yaml"):
            keys |= _keys(OmegaConf.to_container(OmegaConf.load(path)))
    return keys - {"defaults"} - stored_keys(tmp_path)


def checked_modules() -> list[str]:
    paths = sorted((ROOT / "rsd").rglob("*.py")) + [ROOT / "analysis" / n for n in ("calibration.py", *LOADING)]
    return [rel for rel in (str(p.relative_to(ROOT)) for p in paths) if rel not in CONFIG_LAYER]


def violations(rel: str, source: str, keys: set[str]) -> list[str]:
    """Each breach of the module docstring's rules in the module `rel` (its text `source`), as `rel:line: what`."""
    out = []
    for node in ast.walk(ast.parse(source)):
        key = None
        if (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and isinstance(node.slice, ast.Constant)
                and not (isinstance(node.value, ast.Attribute) and node.value.attr == "metadata")):
            key = node.slice.value
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and node.args and isinstance(node.args[0], ast.Constant)):
            key = node.args[0].value
        if rel.startswith("analysis/") and key in FRAME_COLUMNS:
            key = None
        if isinstance(key, str) and key in keys and not rel.startswith("rsd/drafters/"):
            out.append(f"{rel}:{node.lineno}: reads config key {key!r} from a mapping: {ast.unparse(node)[:60]}")
        if isinstance(node, ast.Attribute) and node.attr == "resolved" and isinstance(node.ctx, ast.Load):
            out.append(f"{rel}:{node.lineno}: reads RunConfig.resolved")
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        if any(n.split(".")[0] == "omegaconf" for n in names) and rel not in EDGE:
            out.append(f"{rel}:{node.lineno}: imports omegaconf past the edge")
    return out


def test_the_rules_catch_planted_reads(tmp_path):
    source = ("from omegaconf import DictConfig\n"
              "def f(cfg, rc, summary, field):\n"
              "    cfg['dtype'] = field.metadata['kind']\n"
              "    return cfg['temperature'], cfg.get('hub_id'), rc.resolved, summary['seed']\n")
    keys = config_keys(tmp_path)
    found = violations("rsd/planted.py", source, keys)
    assert sorted(found) == ["rsd/planted.py:1: imports omegaconf past the edge",
                             "rsd/planted.py:4: reads RunConfig.resolved",
                             "rsd/planted.py:4: reads config key 'hub_id' from a mapping: cfg.get('hub_id')",
                             "rsd/planted.py:4: reads config key 'temperature' from a mapping: cfg['temperature']"]
    assert violations("rsd/drafters/planted.py", "def f(params):\n    return params['top_k']\n", keys) == []


def test_no_module_past_the_edge_reads_a_config_mapping(tmp_path):
    keys = config_keys(tmp_path)
    assert {"temperature", "hub_id", "target", "dtype", "mode", "logger"} <= keys  # the rule checks something
    assert [v for rel in checked_modules() for v in violations(rel, (ROOT / rel).read_text(), keys)] == []
