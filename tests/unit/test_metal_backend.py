"""The Metal backend on a machine without Metal: it says why it is unavailable, and its MSL
sources define a kernel for every graph op and weight format. The kernels themselves have never
been compiled or run (no Mac here); docs/backends.md says so."""
from __future__ import annotations

import sys

import pytest

from llamay_core.graph.ops import OP_NAMES
from llamay_backends.metal.kernel_sources import OP_KERNELS, defined_kernels, kernel_names, library_source


@pytest.mark.skipif(sys.platform == "darwin", reason="checks the off-macOS answer")
def test_unavailable_off_macos_with_the_reason():
    from llamay_backends.metal.backend import MetalBackend

    a = MetalBackend().probe()
    assert not a.available and a.reason.startswith("Metal exists only on macOS (this is ")


def test_missing_pyobjc_on_macos_says_how_to_install(monkeypatch):
    from llamay_backends.metal import probe

    monkeypatch.setattr(probe.sys, "platform", "darwin")
    monkeypatch.setitem(sys.modules, "Metal", None)
    a = probe.probe_metal()
    assert not a.available and "pip install 'llamay[metal]'" in a.reason


def test_every_op_has_msl_kernels_in_the_one_kernels_folder():
    assert set(OP_KERNELS) == set(OP_NAMES)
    defined = defined_kernels()
    for op in OP_NAMES:
        missing = [k for k in kernel_names(op) if k not in defined]
        assert not missing, f"{op}: no MSL kernel {missing}"
    assert library_source().startswith("// llamay Metal kernels, part 1")  # the joined order starts with the helpers
