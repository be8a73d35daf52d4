"""Fixtures shared by every suite: real model files (when pulled), goldens, tiny models."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GOLDENS = REPO.parent / "shared" / "goldens"
ANCHORS = REPO.parent / "shared" / "anchors"


def pytest_collection_modifyitems(session, config, items):
    # the forced AVX2 kernel tests start now, in a child process beside the suite
    from tests.support.avx2_child import CHILD, TEST_ID, KernelTestsChild

    if any(item.nodeid == TEST_ID for item in items):
        config.stash[CHILD] = KernelTestsChild()


def pytest_sessionfinish(session, exitstatus):
    from tests.support.avx2_child import CHILD

    child = session.config.stash.get(CHILD, None)
    if child is not None:
        child.close()


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


@pytest.fixture(autouse=True)
def _one_loop_per_op_unless_a_team_test(request, monkeypatch):
    """The cpu backend's default decode runner, a team of threads in one parallel region
    (backends/cpu/team.py), is compiled once per set of weight formats a model uses (~30 s cold
    on CI's machine). Tests of anything else run the compiled program with one parallel loop per
    op (the same bits: test_cpu_team.py); tests marked `team` and `.ci/run`'s conformance step
    on the default model run the default."""
    if "team" not in request.keywords:
        monkeypatch.setenv("LLAMAY_CPU_TEAM", "0")


@pytest.fixture(autouse=True, scope="session")
def _scratch_records(tmp_path_factory):
    """Conformance records and GGUF indexes written by tests go to scratch folders, never the user's."""
    folder = tmp_path_factory.mktemp("records")
    saved = {k: os.environ.get(k) for k in ("LLAMAY_RECORDS_DIR", "LLAMAY_INDEX_DIR")}
    os.environ["LLAMAY_RECORDS_DIR"] = str(folder)
    os.environ["LLAMAY_INDEX_DIR"] = str(tmp_path_factory.mktemp("gguf-index"))
    yield folder
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
