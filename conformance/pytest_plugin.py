"""The conformance cases as pytest tests, for backend authors.

Installed with llamay as a pytest plugin (entry point group ``pytest11``). It adds:

- ``--llamay-backend NAME`` (repeatable): the backends to check (default: none, so llamay's own
  test runs are unaffected);
- ``--llamay-model MODEL``: the model for the model-level test (default smollm2:135m);
- the fixtures ``llamay_case_result`` (one parametrized test per op case, with the case id as the
  pytest id) and ``llamay_model_report`` (the model-level checks).

A backend package then needs one test file::

    def test_op(llamay_case_result):
        assert llamay_case_result.passed, llamay_case_result.message

    def test_model(llamay_model_report):
        bad = [m for m in llamay_model_report.model_checks if not m.passed]
        assert not bad, bad

and runs ``pytest --llamay-backend mybackend``; ``-k 'matmul and Q4_K'`` picks cases.
"""
from __future__ import annotations

from typing import Any

import pytest


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("llamay", "llamay backend conformance")
    group.addoption("--llamay-backend", action="append", default=[], metavar="NAME",
                    help="run the llamay conformance cases on this backend (repeatable)")
    group.addoption("--llamay-model", default="smollm2:135m", metavar="MODEL",
                    help="model for the llamay model-level conformance test")


def pytest_generate_tests(metafunc: Any) -> None:
    if "llamay_case_result" in metafunc.fixturenames or "llamay_model_report" in metafunc.fixturenames:
        backends = metafunc.config.getoption("llamay_backend")
        if not backends:
            metafunc.parametrize("llamay_backend_name", [pytest.param(None, marks=pytest.mark.skip(
                reason="no --llamay-backend given"))])
            if "llamay_case_result" in metafunc.fixturenames:
                metafunc.parametrize("llamay_case", [None], ids=["-"])
            return
        metafunc.parametrize("llamay_backend_name", backends, scope="session")
    if "llamay_case_result" in metafunc.fixturenames:
        from llamay_conformance.cases import grid
        from llamay_core.engine.loader import create_backend

        types: set[str] = set()
        kv_dtypes: set[str] = set()
        ops: set[str] = set()
        for name in backends:
            caps = create_backend(name).capabilities
            types |= set(caps.weight_types)
            kv_dtypes |= set(caps.kv_dtypes)
            ops |= set(caps.ops)
        cases = grid(types, kv_dtypes=kv_dtypes, ops=ops)
        metafunc.parametrize("llamay_case", cases, ids=[c.id for c in cases])


@pytest.fixture(scope="session")
def llamay_conformance_suite(request: Any) -> Any:
    from llamay_conformance.runner import Conformance

    return Conformance(model=request.config.getoption("llamay_model"))


@pytest.fixture()
def llamay_case_result(llamay_conformance_suite: Any, llamay_backend_name: str, llamay_case: Any) -> Any:
    """The result of one op case on the backend (skipped when it lacks the weight type or KV dtype)."""
    from llamay_conformance.harness import check_case

    suite = llamay_conformance_suite
    backend = suite.create(llamay_backend_name)
    caps = backend.capabilities
    if llamay_case.type_name.startswith("kv-"):
        if llamay_case.kv_dtype not in caps.kv_dtypes:
            pytest.skip(f"{llamay_backend_name} does not store KV as {llamay_case.kv_dtype}")
    elif llamay_case.type_name != "-" and llamay_case.type_name not in caps.weight_types:
        pytest.skip(f"{llamay_backend_name} does not read {llamay_case.type_name}")
    return check_case(llamay_case, llamay_backend_name, backend, suite.reference, suite.create)


@pytest.fixture()
def llamay_model_report(llamay_conformance_suite: Any, llamay_backend_name: str) -> Any:
    """The model-level checks of the backend (KL divergence over a long batched text, greedy, fork/restore)."""
    return llamay_conformance_suite.check(llamay_backend_name, ops=False, model=True, record=False)
