"""benchmarks/decode_ceiling.py: its plain read sums what it claims to read, it finds the arrays
a decode token streams, and its replay of a token's compiled calls is that token."""
from __future__ import annotations

import numpy as np
import pytest

import llamay
from llamay_backends.cpu import kernels, sync  # noqa: F401  (kernels first: sync imports them)
from llamay_backends.cpu import program as P
from tests.support.benchmark_scripts import load_script
from tests.support.family_gguf import write_family_gguf


@pytest.fixture(scope="module")
def ceiling():
    return load_script("decode_ceiling")


@pytest.mark.parametrize("meet", [False, True])
@pytest.mark.parametrize("n_threads", [1, 2])
def test_the_plain_read_sums_every_whole_block_of_every_array(ceiling, meet, n_threads):
    rng = np.random.default_rng(0)
    arrays = [rng.integers(0, 1 << 40, size=n, dtype=np.int64) for n in (32 * 7, 32 * 3 + 5, 64, 0)]
    table = np.array([(a.ctypes.data, a.nbytes) for a in arrays], np.int64)
    groups = np.array([0, 2, 4], np.int64)  # two matmuls of two arrays each
    expected = sum(int(a[:a.nbytes // 256 * 32].sum()) for a in arrays)  # 256 bytes: 32 int64s
    got = ceiling._reader()(table, groups, meet, sync.new_state(), n_threads)
    assert got == expected


def test_a_tokens_arrays_and_the_replay_of_its_compiled_calls(ceiling, tmp_path):
    path = write_family_gguf(tmp_path / "m.gguf", "llama", weight_type="Q8_0")
    model = llamay.load(path, backend="cpu", n_ctx=64)
    program = model.executable.program
    table, groups = ceiling.decode_arrays(model)
    matmuls = [row for seg in program.segments if not isinstance(seg, int) for row in seg[0] if row[P.OP] == P.MATMUL]
    weights = {int(k) for row in matmuls for k in row[[P.W, P.W2, P.W3]] if k >= 0 and program.weights.arrays[k].size}
    assert len(groups) - 1 == len(matmuls) and groups[-1] == len(table) == len(weights)
    assert table[:, 1].sum() == sum(program.weights.arrays[k].nbytes for k in weights)

    calls = ceiling.TokenCalls(model)
    assert calls.calls
    logits = calls.context.last_logits()
    buffer = model.executable.buffers[model.executable.graph.output]
    buffer[:1] = np.nan
    calls.run()  # the same token again: the same logits, into the plan's own buffer
    np.testing.assert_array_equal(buffer[0], logits[0] if logits.ndim == 2 else logits)
    calls.run(matmuls_only=True)
    calls.context.close()
