"""`llamay conformance` on the real small model: the example backend passes, reference is the reference."""
from __future__ import annotations

import pytest

from tests.unit.test_conformance_suite import needs_example

pytestmark = [pytest.mark.model, pytest.mark.slow]


def test_reference_is_the_reference_on_smollm2(smollm_path, capsys):
    from llamay_core.cli.main import main

    assert main(["conformance", "-backend", "reference", "-m", str(smollm_path), "-level", "model"]) == 0
    assert "**reference: the reference**" in capsys.readouterr().out


@needs_example
def test_example_backend_passes_on_smollm2(smollm_path, capsys):
    from llamay_core.cli.main import main

    code = main(["conformance", "-backend", "example", "-m", str(smollm_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "**example: PASS**" in out and "| kld | PASS |" in out
