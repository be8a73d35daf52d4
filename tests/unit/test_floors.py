"""benchmarks/floors.py: the bytes a decode token reads (the floor's numerator) and the
compiled read that measures bandwidth (its denominator)."""
from __future__ import annotations

import attrs
import pytest

from tests.support.benchmark_scripts import load_script


@pytest.fixture(scope="module")
def floors():
    return load_script("floors")


@attrs.define(eq=False)
class Tensor:
    shape: tuple[int, ...]
    n_bytes: int

    @property
    def n_elements(self) -> int:
        return self.shape[0] * self.shape[1]


def test_a_tied_embedding_table_is_read_whole_an_untied_one_a_row_a_token(floors):
    embd = Tensor((1000, 64), 1000 * 72)  # 1,000 rows of 72 bytes
    layer = Tensor((64, 64), 4096)
    tied = {"token_embd.weight": embd, "blk.0.attn_q.weight": layer}
    assert floors.token_bytes(tied) == embd.n_bytes + layer.n_bytes  # it is the output matrix too
    untied = dict(tied, **{"output.weight": Tensor((1000, 64), 1000 * 34)})
    assert floors.token_bytes(untied) == 72 + layer.n_bytes + 1000 * 34
    # and it multiplies nothing: prefill's flops count the output matrix, not the table
    assert floors.matrix_params(tied) == 1000 * 64 + 64 * 64
    assert floors.matrix_params(untied) == 64 * 64 + 1000 * 64


def test_the_compiled_read_reports_a_rate(floors):
    pytest.importorskip("llamay_backends.cpu.kernels")
    assert floors.simd_read_gbs(n_bytes=1 << 22, threads=2) > 0.1
