"""`llamay conformance -require NAMES` fails when a required backend is skipped (CI fails closed)."""
from __future__ import annotations


import pytest

from tests.support.plugins import registered_backends
from llamay_backends.reference.backend import ReferenceBackend
from llamay_core.backend_api import Availability
from llamay_core.cli.main import main


class Absent(ReferenceBackend):
    name = "absent"

    def probe(self):
        return Availability(False, reason="no such device in this test")


@pytest.fixture()
def absent_backend():
    with registered_backends("absent_plugin", {"absent": f"{__name__}:Absent"}, priority=-99):
        yield


def test_a_skipped_required_backend_fails(absent_backend, capsys):
    assert main(["conformance", "-backend", "absent", "-level", "op", "-require", "absent"]) == 1
    err = capsys.readouterr().err
    assert "required backends were not checked: absent (" in err and "no such device in this test" in err


def test_skipped_is_fine_unless_required_and_unknown_names_are_errors(absent_backend, capsys):
    args = ["conformance", "-backend", "absent", "-level", "op"]
    assert main(args) == 1  # nothing checked at all: never a pass
    assert "required" not in capsys.readouterr().err
    assert main(args[:3] + ["-case", "add/F32/t1x64/s0", "-require", "nope"]) == 2
    assert "unknown backend 'nope'" in capsys.readouterr().err


def test_a_required_backend_outside_the_selection_fails(absent_backend, capsys):
    assert main(["conformance", "-backend", "absent", "-level", "op", "-require", "reference"]) == 1
    assert "reference (not selected by -backend)" in capsys.readouterr().err
