"""The cpu backend drops its whole Numba cache when any of its sources changes (`numba_cache`)."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("numba")

from numba.core import config  # noqa: E402

from llamay_backends.cpu import numba_cache  # noqa: E402


def _fake_cache(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    files = [folder / "team.run_team-93.py311.nbi", folder / "team.run_team-93.py311.1.nbc"]
    for f in files:
        f.write_bytes(b"old machine code")
    return files


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package with a subpackage (as backends/cpu and its kernels/), cached under tmp_path."""
    monkeypatch.setattr(config, "CACHE_DIR", str(tmp_path / "numba"))
    root = tmp_path / "cpu"
    (root / "kernels").mkdir(parents=True)
    (root / "team.py").write_text("from .kernels import k\n")
    (root / "kernels" / "k.py").write_text("K = 1\n")
    return root


def test_cache_dirs_are_numbas_own_choice(package, tmp_path):
    dirs = numba_cache.cache_dirs([package, package / "kernels"])
    assert len(dirs) == 2 and all(d.is_relative_to(tmp_path / "numba") for d in dirs)


def test_a_callee_edit_drops_the_callers_cache(package):
    numba_cache.drop_stale(package)  # first stamp
    top, sub = numba_cache.cache_dirs([package, package / "kernels"])
    callers, callees = _fake_cache(top), _fake_cache(sub)
    numba_cache.drop_stale(package)  # nothing changed: the cache stays
    assert all(f.exists() for f in callers + callees)
    (package / "kernels" / "k.py").write_text("K = 2\n")  # only the callee's file changes
    numba_cache.drop_stale(package)
    assert not any(f.exists() for f in callers + callees)
    assert (top / numba_cache.STAMP).read_text() == (sub / numba_cache.STAMP).read_text()


def test_drop_if_changed_keeps_other_files(tmp_path):
    cached = _fake_cache(tmp_path)
    bytecode = tmp_path / "team.cpython-311.pyc"
    bytecode.write_bytes(b"")
    assert numba_cache.drop_if_changed(tmp_path, "a")
    assert bytecode.exists() and not any(f.exists() for f in cached)
    assert not numba_cache.drop_if_changed(tmp_path, "a")


def test_the_backend_digest_covers_every_module():
    # team.py and sync.py hold cached callers of the kernels: they must be part of the unit
    names = {p.name for p in numba_cache.package_sources(Path(numba_cache.__file__).parent)}
    assert {"team.py", "sync.py", "program.py", "ops.py", "_interleaved.py", "_simd.py"} <= names
