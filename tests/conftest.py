"""Fixtures shared by every suite: real model files (when pulled), goldens, tiny models."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GOLDENS = REPO.parent / "shared" / "goldens"
ANCHORS = REPO.parent / "shared" / "anchors"


def model_file(name: str) -> Path | None:
    from llamay_core.files.model_names import local_path

    path = local_path(name)
    return path if path.exists() else None


def require_model(name: str) -> Path:
    path = model_file(name)
    if path is None:
        pytest.skip(f"{name} is not pulled (llamay pull {name})")
    return path


def read_goldens(filename: str) -> list[dict]:
    path = GOLDENS / filename
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="session")
def smollm_path() -> Path:
    return require_model("smollm2:135m")


@pytest.fixture(scope="session")
def qwen_path() -> Path:
    return require_model("qwen2.5-coder:0.5b")


@pytest.fixture(scope="session")
def smollm_ref(smollm_path):
    import llamay

    return llamay.load(smollm_path, backend="reference", n_ctx=1024)


@pytest.fixture()
def tiny_model_path(tmp_path):
    from tests.support.tiny_gguf import write_tiny_llama

    return write_tiny_llama(tmp_path / "tiny.gguf")


@pytest.fixture(autouse=True, scope="session")
def _scratch_records(tmp_path_factory):
    """Conformance records written by tests go to a scratch folder, never the user's."""
    folder = tmp_path_factory.mktemp("records")
    old = os.environ.get("LLAMAY_RECORDS_DIR")
    os.environ["LLAMAY_RECORDS_DIR"] = str(folder)
    yield folder
    if old is None:
        os.environ.pop("LLAMAY_RECORDS_DIR", None)
    else:
        os.environ["LLAMAY_RECORDS_DIR"] = old
