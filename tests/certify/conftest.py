import pytest

import rsd.certify.exact


@pytest.fixture
def first_engine_case(monkeypatch):
    """The exact engine oracle on its first case only: a planted bug fails it there already, and the oracle's verdict
    is the worst case, so the full oracle fails it too (test_full_certificate_fails_and_names_the_oracle, slow)."""
    monkeypatch.setattr(rsd.certify.exact, "ENGINE_CASES", rsd.certify.exact.ENGINE_CASES[:1])
