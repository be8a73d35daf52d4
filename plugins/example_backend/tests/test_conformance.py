"""This backend through llamay's conformance suite (the `llamay_conformance` pytest plugin).

    pytest plugins/example_backend/tests --llamay-backend example [--llamay-model PATH]

Each op case is one test, named by its case id; the model-level test needs the model pulled.
"""


def test_op(llamay_case_result):
    assert llamay_case_result.passed, f"{llamay_case_result.id}: {llamay_case_result.message}"


def test_model(llamay_model_report):
    failed = [m for m in llamay_model_report.model_checks if not m.passed]
    assert not failed, "; ".join(f"{m.name}: {m.summary}" for m in failed)
