"""Drop the cpu backend's Numba cache when any of its sources changed.

Why: Numba checks a cached function against its own file's timestamp only, yet a cached
function carries the machine code of everything it calls: `team.py`'s thread team holds the
kernels of `kernels/`, `program.py` the ops of `ops.py`, the kernels the intrinsics of
`_simd.py`. Edit a kernel (or upgrade llamay in place) and the unchanged callers would go on
running the old code, with the old layouts. So the whole package is one unit: a digest of every
source file, stored beside the cache, and every cache file of the package deleted when it
differs.

The cache directories are the ones Numba itself picks for these files (`NUMBA_CACHE_DIR`, the
in-tree `__pycache__`, or the user-wide cache of a read-only install), found with Numba's own
locators, so each place that can hold stale code is checked.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

STAMP = "llamay_cpu.srchash"


def source_digest(sources: Iterable[Path]) -> str:
    """One hex digest over the names and bytes of `sources`, in sorted order."""
    digest = hashlib.sha256()
    for src in sorted(sources):
        digest.update(src.name.encode())
        digest.update(src.read_bytes())
    return digest.hexdigest()


def _probe() -> None:  # a function to hand Numba's locators (they read its line number)
    pass


def cache_dirs(source_dirs: Iterable[Path]) -> list[Path]:
    """The directory Numba caches each of `source_dirs`' functions in, as it chooses it now."""
    from numba.core import caching

    # the locators Numba tries in order (named _CacheImpl before numba 0.61)
    locators = (getattr(caching, "CacheImpl", None) or caching._CacheImpl)._locator_classes
    found = []
    for folder in sorted(set(source_dirs)):
        probe = next(iter(sorted(folder.glob("*.py"))), None)
        if probe is None:
            continue
        for locator_class in locators:
            locator = locator_class.from_function(_probe, str(probe))
            if locator is not None:
                found.append(Path(locator.get_cache_path()))
                break
    return found


def drop_if_changed(cache: Path, digest: str) -> bool:
    """Delete the Numba cache files in `cache` unless its stamp says `digest`; then stamp it.
    Whether anything was deleted."""
    stamp = cache / STAMP
    try:
        if stamp.read_text() == digest:
            return False
    except OSError:
        pass
    stale = list(cache.glob("*.nbi")) + list(cache.glob("*.nbc"))
    try:
        for f in stale:
            f.unlink(missing_ok=True)
        cache.mkdir(parents=True, exist_ok=True)
        stamp.write_text(digest)
    except OSError:  # a read-only cache: Numba cannot write there either
        pass
    return bool(stale)


def package_sources(package: Path) -> list[Path]:
    """The package's own modules and its subpackages' one level down: one unit for the cache."""
    return sorted(package.glob("*.py")) + sorted(package.glob("*/*.py"))


def drop_stale(package: Path) -> None:
    """`drop_if_changed` for every directory Numba caches `package`'s functions in."""
    sources = package_sources(package)
    digest = source_digest(sources)
    for cache in cache_dirs({src.parent for src in sources}):
        drop_if_changed(cache, digest)
