"""`model_pair.dtype: auto` picks bfloat16 only where the CPU runs it natively, and the choice is part of the run."""

import pytest

from rsd.models import hardware
from rsd.runner import to_dict


@pytest.mark.parametrize("flags, want", [(("avx2", "avx512f", "avx512_bf16"), "bfloat16"),
                                         (("avx2", "amx_tile", "amx_bf16"), "bfloat16"),
                                         (("avx2", "avx512f", "avx512_vnni"), "float32"), ((), "float32")])
def test_auto_dtype_follows_the_cpu(monkeypatch, flags, want):
    monkeypatch.setattr(hardware, "cpu_flags", lambda: flags)
    assert hardware.resolve_dtype("auto", "cpu") == want
    assert hardware.resolve_dtype("float32", "cpu") == "float32"  # an explicit dtype always wins
    assert hardware.resolve_dtype(None, "cpu") == "float32"


def test_the_resolved_dtype_enters_the_config(monkeypatch):
    monkeypatch.setattr(hardware, "cpu_flags", lambda: ("avx512_bf16",))
    conf = to_dict({"model_pair": {"name": "smollm2", "dtype": "auto", "device": "cpu"}, "seed": 0})
    assert conf["model_pair"]["dtype"] == "bfloat16"


def test_cpu_flags_reads_this_machine():
    assert set(hardware.cpu_flags()) <= set(hardware.CPU_FLAGS)
