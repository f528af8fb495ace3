import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")

import time  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from helpers.cli import RunPy  # noqa: E402
from helpers.tiers import COLLECTED_SLOW, SLOW_VARIANTS  # noqa: E402

torch.set_num_threads(1)


@pytest.hookimpl(tryfirst=True)  # before the -m selection, which then deselects them
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid in SLOW_VARIANTS:
            item.add_marker(pytest.mark.slow)
    config.stash[COLLECTED_SLOW] = {item.nodeid: item.get_closest_marker("slow") is not None for item in items}


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip, with the reason shown, a test that would start after RSD_TEST_DEADLINE (unix seconds): CI's time
    budget for the slow tier, so that tier ends in time instead of running CI past its limit."""
    deadline = os.environ.get("RSD_TEST_DEADLINE")
    if deadline and time.time() > float(deadline):
        pytest.skip("CI time budget for this tier spent (RSD_TEST_DEADLINE); run it without the deadline")


@pytest.fixture(autouse=True)
def _deterministic_torch():
    torch.manual_seed(0)
    yield


@pytest.fixture
def run_py(capsys: pytest.CaptureFixture[str]) -> RunPy:
    """`run_py(*ARGS, env=...)`: `python run.py ARGS` in the test process (helpers/cli.py)."""
    return RunPy(capsys)
