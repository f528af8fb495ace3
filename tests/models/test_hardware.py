"""`model_pair.dtype: auto` picks bfloat16 only where the CPU runs it natively, and the choice is part of the run."""

import pytest

from helpers.config import compose_cfg
from rsd.harness.config import resolve_config
from rsd.models import hardware


@pytest.mark.parametrize("flags, want", [(("avx2", "avx512f", "avx512_bf16"), "bfloat16"),
                                         (("avx2", "amx_tile", "amx_bf16"), "bfloat16"),
                                         (("avx2", "avx512f", "avx512_vnni"), "float32"), ((), "float32")])
def test_auto_dtype_follows_the_cpu(monkeypatch, flags, want):
    monkeypatch.setattr(hardware, "cpu_flags", lambda: flags)
    assert hardware.resolve_dtype("auto", "cpu") == want
    assert hardware.resolve_dtype("float32", "cpu") == "float32"  # an explicit dtype always wins
    assert hardware.resolve_dtype(None, "cpu") == "float32"


@pytest.mark.parametrize("flags, want", [(("avx512_bf16",), "bfloat16"), ((), "float32")])
def test_the_resolved_dtype_enters_the_run_identity(monkeypatch, flags, want):
    monkeypatch.setattr(hardware, "cpu_flags", lambda: flags)
    rc = resolve_config(compose_cfg("model_pair=smollm2", "model_pair.dtype=auto", "model_pair.device=cpu"))
    assert rc.model_pair.dtype == want and rc.identity({}, True)["model_pair"]["dtype"] == want


def test_cpu_flags_reads_this_machine():
    assert set(hardware.cpu_flags()) <= set(hardware.CPU_FLAGS)


def test_run_environment_records_the_cpu_and_the_load_that_timings_depend_on():
    from rsd.harness.execute import environment

    env = environment()
    assert env["cpu_flags"] == list(hardware.cpu_flags())
    assert len(env["load_average"]) == 3 and all(x >= 0 for x in env["load_average"])
