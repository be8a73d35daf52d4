"""The cpu plan's compiled decode program gives every token the bits its Python steps give."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import llamay
from llamay_backends.cpu import kernels, ops
from llamay_backends.cpu import program as P
from llamay_core.engine.forward import SequenceChunk
from tests.support.family_gguf import write_family_gguf

CASES = {
    "llama-rope-freqs": ("llama", dict(rope_freqs=True), "Q4_0"),  # rope from a frequency table
    "qwen2": ("qwen2", dict(extra_tensors={f"blk.{layer}.attn_{name}.bias": np.linspace(-1.0, 1.0, width)
                                           for layer in range(2) for name, width in (("q", 64), ("k", 32), ("v", 32))}),
              "Q5_0"),  # q, k and v with biases, in one fused instruction
    "qwen3": ("qwen3", dict(head_dim=32), "Q8_0"),  # per-head q/k norms (the batch test's family too)
    "qwen3moe": ("qwen3moe", dict(head_dim=32), "Q8_0"),  # experts stay Python steps between stretches
    "phi3": ("phi3", dict(n_rot=12, rope_freqs=True), "Q5_0"),  # column slices of fused projections
    "granite": ("granite", {}, "Q8_0"),  # scales
    "olmo2": ("olmo2", {}, "F16"),  # untied output, float weights on the grouped float kernel
}
SLOW = {"qwen3", "granite"}  # each model's kernels cost CI seconds to compile; these add least


def _pair(path, kv: str = "f32"):
    """The same model twice: decode through the program, and through the Python steps."""
    compiled = llamay.load(path, backend="cpu", n_ctx=256, kv_dtype=kv)
    steps = llamay.load(path, backend="cpu", n_ctx=256, kv_dtype=kv)
    steps.executable.program = None
    return compiled, steps


def _decode_alike(compiled, steps, prompt: list[int], n: int) -> None:
    a, b = compiled.context(), steps.context()
    la, lb = a.extend(prompt), b.extend(prompt)
    np.testing.assert_array_equal(la, lb)
    for _ in range(n):
        token = int(np.argmax(la))
        earlier, kept = la, la.copy()
        la, lb = a.extend([token]), b.extend([token])
        np.testing.assert_array_equal(la, lb)
        # logits a pass returned are the caller's: the next pass writes elsewhere
        np.testing.assert_array_equal(earlier, kept)


def _instructions(model) -> np.ndarray:
    return np.concatenate([s[0] for s in model.executable.program.segments if not isinstance(s, int)])


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW else c for c in sorted(CASES)])
def test_decode_through_the_program_has_the_steps_bits(tmp_path, case):
    arch, kw, weight_type = CASES[case]
    path = write_family_gguf(tmp_path / "m.gguf", arch, weight_type=weight_type, **kw)
    compiled, steps = _pair(path)
    ints = _instructions(compiled)
    if case in ("llama-rope-freqs", "qwen2"):  # q, k, v and gate, up fused: two per layer
        assert ((ints[:, P.OP] == P.MATMUL) & (ints[:, P.W2] >= 0)).sum() == 2 * 2
    _decode_alike(compiled, steps, [5, 9, 200, 17, 33], 6)


@pytest.mark.skipif(not kernels.HAS_F16C, reason="float16 pages are compiled only with F16C")
@pytest.mark.parametrize("head_dim, compiled_attention", [(64, True), (32, False)])
def test_f16_pages_decode_through_the_program_with_the_steps_bits(tmp_path, head_dim, compiled_attention):
    # heads the vector kernel takes read float16 pages in place in the program; others keep
    # attention a Python step (the scalar kernel reads float32), and the writes compiled anyway
    path = write_family_gguf(tmp_path / "m.gguf", "llama", weight_type="Q8_0", head_dim=head_dim)
    compiled, steps = _pair(path, kv="f16")
    ints = _instructions(compiled)
    assert P.KV_WRITE in ints[:, P.OP] and (ints[ints[:, P.OP] == P.KV_WRITE, P.P2] == 1).all()
    attention = ints[ints[:, P.OP] == P.ATTENTION]
    assert (len(attention) > 0) == compiled_attention and (attention[:, P.P7] == P.VEC_F16).all()
    _decode_alike(compiled, steps, [5, 9, 200] * 12, 6)


@pytest.mark.skipif(not kernels.HAS_F16C, reason="float16 pages are compiled only with F16C")
@given(st.lists(st.floats(-70000.0, 70000.0, width=32) | st.sampled_from(
    [0.0, -0.0, 6.1e-05, 5.96e-08, 2.98e-08, 1e-9, 65504.0, 65520.0, -65536.0, 0.1, 1.0009765625, 1.00048828125]),
    min_size=1, max_size=40))
@settings(max_examples=60, deadline=None)
def test_f16_page_writes_round_as_numpy_stores(values):
    # the compiled K/V write (vector lanes, then a scalar tail) against NumPy's float16 store,
    # ties, subnormals and overflow to inf included
    row = np.array(values, np.float32)[None, :]
    pages = np.zeros((2, 4, row.shape[1]), np.float16)
    ops._kv_write_rows(row, row, np.array([1]), np.array([2]), pages.view(np.uint8), pages.view(np.uint8), 0, 1)
    with np.errstate(over="ignore"):  # past 65520 both give inf
        expected = row[0].astype(np.float16)
    np.testing.assert_array_equal(pages[1, 2].view(np.uint16), expected.view(np.uint16))


def test_a_batch_of_sequences_gets_the_same_bits_both_ways(tmp_path):
    """Three sequences of seven rows (draft verification): 21 rows, past the serial row kernels."""
    path = write_family_gguf(tmp_path / "m.gguf", "qwen3", weight_type="Q4_0", head_dim=32)
    results = []
    for model in _pair(path):
        contexts = [model.context() for _ in range(3)]
        for i, ctx in enumerate(contexts):
            ctx.extend([3 + i, 40, 41 + i])
        chunks = [SequenceChunk(ctx.seq, [7 * i + j for j in range(7)],
                                all_logits=True) for i, ctx in enumerate(contexts)]
        results.append(model.forward.run_many(chunks))
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


def test_logits_go_straight_into_the_returned_array_only_where_nothing_else_touches_them(tmp_path):
    path = write_family_gguf(tmp_path / "m.gguf", "llama", weight_type="Q8_0")
    model = llamay.load(path, backend="cpu", n_ctx=64)
    plan = model.executable
    program, buffer = plan.program, plan.buffers[plan.graph.output]
    assert program.logits_direct
    ctx = model.context()
    first = ctx.extend([5, 9, 200])
    second = ctx.extend([int(np.argmax(first))])
    assert not np.shares_memory(first, buffer) and not np.shares_memory(first, second)
    # after each pass the table names the plan's own buffer again, not an array the caller may drop
    assert program.tables[0][program._logits_buf, 0] == buffer.ctypes.data
    assert tuple(program.tables[0][program._logits_buf, 1:3]) == buffer.shape
    # a Python step that reads or writes the logits buffer keeps the copy after the pass
    program._python_bufs.add(id(buffer))
    program.logits_direct = False
    program._find_logits()
    assert not program.logits_direct
    np.testing.assert_array_equal(ctx.extend([7]), model.context().extend([5, 9, 200, int(np.argmax(first)), 7]))


@pytest.mark.parametrize("n, rows, pages", [(1, [0], 3), (5, [4], 1), (5, [0, 2, 4], 2), (20, [19], 2), (20, list(range(20)), 2),
                                            (2, [1], 0)])
def test_one_sequence_pass_info_is_the_general_one(n, rows, pages):
    """The one-sequence shortcut gives the fields the per-sequence counting gives (the same batch
    with a second, empty sequence takes that path)."""
    from llamay_backends.cpu.plan import PassInfo
    from llamay_core.backend_api import Batch

    def batch(tables):
        return Batch(tokens=np.arange(n, dtype=np.int32), positions=np.arange(7, 7 + n, dtype=np.int32),
                     seq_index=np.zeros(n, np.int32), page_tables=tables,
                     kv_lens=np.full(len(tables), 7 + n, np.int32), logit_rows=np.asarray(rows, np.int32))

    table = np.arange(3, 3 + pages, dtype=np.int32)
    one, general = PassInfo(batch([table]), 16), PassInfo(batch([table, np.zeros(0, np.int32)]), 16)
    for field in ("n", "all_small", "logits_small", "large_segments"):
        assert getattr(one, field) == getattr(general, field), field
    for field in ("tokens", "positions", "seq_index", "rows", "small_rows", "slots"):
        np.testing.assert_array_equal(getattr(one, field), getattr(general, field))
        assert getattr(one, field).dtype == np.int64
    np.testing.assert_array_equal(one.tables, general.tables[:1, :max(pages, 1)])
    assert one.tables.dtype == np.int64 and one.tables.flags.c_contiguous
    if pages:
        np.testing.assert_array_equal(one.pages, general.pages)
    if one.compiled_fields is not None:  # a decode token's: the arrays the entry point takes, as they are
        assert n == 1 and pages
        expected = (general.tokens, general.positions, general.seq_index, general.tables[:1, :pages], general.pages,
                    general.slots, general.rows)
        for got, want in zip(one.compiled_fields, expected, strict=True):
            np.testing.assert_array_equal(got, want)
            assert got.dtype == np.int64 and got.flags.c_contiguous
    else:
        assert n > 1 or not pages


@pytest.mark.team  # the default runner on the default model (a team, on two cores or more)
def test_the_default_model_decodes_the_same_both_ways(smollm_path):
    compiled, steps = _pair(smollm_path)
    _decode_alike(compiled, steps, compiled.tokenize("The capital of France is"), 5)

