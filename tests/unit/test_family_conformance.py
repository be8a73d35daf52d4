"""The family ops' conformance cases pass on cpu and on a backend that runs them through the split."""
from __future__ import annotations

import numpy as np
import pytest

from llamay_conformance.cases_family import build_family_case, family_cases
from llamay_conformance.limits import LIMITS
from llamay_conformance.harness import nmse, run_built
from llamay_core.engine.loader import create_backend

CASES = family_cases(["F32", "Q8_0", "Q4_K", "IQ4_NL", "IQ4_XS", "MXFP4"])


@pytest.fixture(scope="module")
def backends():
    return {name: create_backend(name) for name in ("reference", "cpu")}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_family_case_on_cpu(case, backends):
    built = build_family_case(case)
    want = run_built("reference", backends["reference"], built, create_backend)[0]
    got = run_built("cpu", backends["cpu"], built, create_backend)[0]
    for g, w in zip(got, want):
        assert np.isfinite(g).all()
        assert nmse(g, w) <= LIMITS[case.op][0]


def test_every_family_op_has_cases_and_a_limit():
    from llamay_core.graph.ops import EXTENDED_OP_NAMES

    assert {c.op for c in CASES} == set(EXTENDED_OP_NAMES) <= set(LIMITS)


def test_a_wrong_moe_is_caught(backends):
    """Routing to one expert where three were chosen must exceed the limit."""
    case = next(c for c in CASES if c.op == "moe" and c.type_name == "F32" and c.param("used") == 3)
    built = build_family_case(case)
    want = run_built("reference", backends["reference"], built, create_backend)[0][0]
    node = next(n for n in built.graph.nodes if n.name == "moe")
    import attrs

    wrong = attrs.evolve(built, graph=attrs.evolve(built.graph, nodes=tuple(
        attrs.evolve(n, n_used=1) if n is node else n for n in built.graph.nodes)))
    got = run_built("cpu", backends["cpu"], wrong, create_backend)[0][0]
    assert nmse(got, want) > LIMITS["moe"][0]


@pytest.mark.slow  # ~20-40 s each on a busy 2-core machine
@pytest.mark.parametrize("arch, kw", [("qwen3moe", {"head_dim": 32}), ("phi3", {"n_rot": 12, "rope_freqs": True})])
def test_model_level_conformance_passes_on_cpu(tmp_path, capsys, arch, kw):
    import json

    from llamay_core.cli.main import main
    from tests.support.family_gguf import write_family_gguf

    path = write_family_gguf(tmp_path / f"{arch}.gguf", arch, **kw)
    code = main(["conformance", "-backend", "cpu", "-m", str(path), "-level", "model", "-o", "json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out[0]["passed"], out


def test_family_cases_only_for_backends_that_can_run_them():
    from llamay_conformance.cases import grid
    from llamay_core.graph.ops import EXTENDED_OP_NAMES, OP_NAMES, SPLIT_OP_NAMES

    def family_ops(ops):
        return {c.op for c in grid({"F32"}, 0, ("f32",), ops)} & set(EXTENDED_OP_NAMES)

    assert family_ops(OP_NAMES) == set()  # neither the ops nor a split to hand them off
    assert family_ops(OP_NAMES | {"moe"}) == {"moe"}
    assert family_ops(OP_NAMES | SPLIT_OP_NAMES) == set(EXTENDED_OP_NAMES)
