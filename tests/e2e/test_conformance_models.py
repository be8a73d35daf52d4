"""`llamay conformance` on the real small model: reference and the example backend pass."""
from __future__ import annotations

import pytest

from tests.unit.test_conformance_suite import needs_example

pytestmark = [pytest.mark.model, pytest.mark.slow]


def test_reference_passes_on_smollm2(smollm_path, capsys):
    from llamay_core.cli.main import main

    assert main(["conformance", "-backend", "reference", "-m", str(smollm_path), "-level", "model"]) == 0
    assert "teacher_forcing | PASS" in capsys.readouterr().out


@needs_example
def test_example_backend_passes_on_smollm2(smollm_path, capsys):
    from llamay_core.cli.main import main

    code = main(["conformance", "-backend", "example", "-m", str(smollm_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "**example: PASS**" in out
