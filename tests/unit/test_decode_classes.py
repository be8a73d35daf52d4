"""benchmarks/decode_classes.py: its classes hold every matmul of a token once, their arrays are
the token's, and a class replayed alone is that class's part of the token."""
from __future__ import annotations

import numpy as np
import pytest

import llamay
from llamay_backends.cpu import program as P
from tests.support.benchmark_scripts import load_script
from tests.support.family_gguf import write_family_gguf


@pytest.fixture(scope="module")
def classes():
    return load_script("decode_classes")


def test_format_names_are_ggml_type_names(classes):
    assert classes.format_name(8) == "Q8_0" and classes.format_name(14) == "Q6_K"
    assert classes.format_name(999) == "999"


def test_every_matmul_in_one_class_and_the_output_replayed_alone_gives_the_logits(classes, tmp_path):
    ceiling = load_script("decode_ceiling")
    model = llamay.load(write_family_gguf(tmp_path / "m.gguf", "llama", weight_type="Q8_0"), backend="cpu", n_ctx=64)
    calls = ceiling.TokenCalls(model)
    try:
        found = classes.matmul_classes(calls)
        members = [m for ms in found.values() for m in ms]
        matmuls = [(c, i) for c, (_, (_, ints, *_)) in enumerate(calls.calls)
                   for i in range(ints.shape[0]) if ints[i, P.OP] == P.MATMUL]
        assert sorted(members) == matmuls
        outputs = [key for key in found if key[1] == "output"]
        assert len(outputs) == 1 and found[outputs[0]] == matmuls[-1:]
        assert ("Q8_0", "layers") in found  # this file's layer weights

        program = model.executable.program
        table, _ = ceiling.decode_arrays(model)
        parts = [classes.class_arrays(calls, program, ms) for ms in found.values()]
        assert sum(int(t[:, 1].sum()) for t, _ in parts) == int(table[:, 1].sum())
        assert all(len(g) - 1 == len(ms) for (_, g), ms in zip(parts, found.values()))

        logits = calls.context.last_logits()
        buffer = model.executable.buffers[model.executable.graph.output]
        buffer[:1] = np.nan
        classes.class_replay(calls, found[outputs[0]])()  # from the token's last hidden state, again
        np.testing.assert_array_equal(buffer[0], logits[0] if logits.ndim == 2 else logits)
    finally:
        calls.context.close()
