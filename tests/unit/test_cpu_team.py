"""Decode stretches run by a team of threads in one parallel region (`backends/cpu/team.py`): the
bits of one parallel loop per op, and a barrier that holds every thread until all arrive."""
from __future__ import annotations

import os

import numba
import numpy as np
import pytest
from llamay_backends.cpu import kernels as K
from llamay_backends.cpu import program as P
from llamay_backends.cpu import sync, team
from llamay_backends.cpu.kernels._interleaved import team_tasks
from numba import njit, prange

import llamay
from llamay_core.engine.forward import SequenceChunk
from tests.support.family_gguf import write_family_gguf
from tests.unit.test_cpu_program import _decode_alike

pytestmark = pytest.mark.team


@njit(parallel=True)
def _rounds(state, n_threads, rounds, seen, flat):
    # each thread stamps its round, meets, then looks for a thread whose stamp is behind: one
    # that has not reached the barrier yet, which no thread may pass
    for tid in prange(n_threads):
        for r in range(1, rounds + 1):
            seen[tid, 0] = r
            sync.barrier(state, n_threads, flat, 0, flat.shape[0] if r % 2 else 0)
            for other in range(n_threads):
                if seen[other, 0] < r:
                    seen[tid, 1] += 1


def _threads_or_skip() -> int:
    _rounds(sync.new_state(), 1, 1, np.zeros((1, 16), np.int64), np.zeros(64, np.uint8))  # starts the pool
    threads = team.team_threads()
    if threads < 2:
        pytest.skip("a team needs two threads on two cores and the omp or workqueue layer")
    return threads


def test_no_thread_passes_the_barrier_before_all_arrive():
    threads = _threads_or_skip()
    seen = np.zeros((threads, 16), np.int64)  # a cache line each
    flat = np.arange(1 << 16, dtype=np.uint8)  # prefetched while waiting, every other round
    _rounds(sync.new_state(), threads, 20000, seen, flat)
    assert (seen[:, 0] == 20000).all()
    assert (seen[:, 1] == 0).all(), seen[:, 1]


@njit(parallel=True)
def _shared_q4_0(w0, w1, w2, X, O0, O1, O2, tile, q, m, hb, n_threads, state):
    for tid in prange(n_threads):
        team_tasks(2, w0, w1, w2, X, O0, O1, O2, tile, q, m, hb, tid, n_threads, state)


@pytest.mark.parametrize("tokens", [1, 70])  # one, and two chunks of a prompt's numbering
def test_a_matmul_shared_from_either_end_runs_every_task_once(tokens):
    """`team_tasks`: two threads take a matmul's tasks from either end (`sync.take`); run many
    times, each output has the bits of one parallel loop (a task run twice or never shows)."""
    from llamay_backends.cpu.kernels.interleaved import LAYOUTS
    from tests.unit.test_cpu_kernels import make_weights

    threads = _threads_or_skip()
    rng = np.random.default_rng(5)
    lay = LAYOUTS[K.Q4_0]
    weights = [K.interleave(K.Q4_0, make_weights("Q4_0", rows, 64, rng)) for rows in (8 * 2 * 37, 48, 16)]
    X = rng.standard_normal((tokens, 64)).astype(np.float32)
    alone = [np.empty((tokens, w.shape[0] * 8), np.float32) for w in weights]
    K.interleaved_multi([K.decode_call(K.Q4_0, None, w, 64, int8=True) for w in weights], X, alone)
    state = sync.new_state()
    for _ in range(200):
        outs = [np.full_like(a, np.nan) for a in alone]
        _shared_q4_0(*weights, X, *outs, lay.tile, lay.q, lay.m, lay.hb, threads, state)
        state[sync.TAKEN] = 0
        for a, b in zip(alone, outs):
            np.testing.assert_array_equal(a, b)


def _pair(path, n_ctx: int = 1024, kv: str = "f32"):
    """The same model twice: stretches run as a team, and with one parallel loop per op."""
    teamed = llamay.load(path, backend="cpu", n_ctx=n_ctx, kv_dtype=kv)
    single = llamay.load(path, backend="cpu", n_ctx=n_ctx, kv_dtype=kv)
    assert teamed.executable.program._team_entry is not None
    single.executable.program._team_entry = None
    return teamed, single


@pytest.mark.parametrize("kv", ["f32", "f16"])
def test_a_team_decodes_past_many_attention_pieces_with_the_decode_alike(tmp_path, kv):
    # 600 keys: pieces of 64 (past 16 pieces of 32), merged by the thread that owns the row; the
    # pages float32, or float16 read in place
    _threads_or_skip()
    if kv == "f16" and not K.HAS_F16C:
        pytest.skip("float16 pages are compiled only with F16C")
    # heads of 64 for the vector attention kernel; the float output matmul stays with `_run`
    path = write_family_gguf(tmp_path / "m.gguf", "llama", weight_type="Q4_0", rope_freqs=True, head_dim=64)
    teamed, single = _pair(path, kv=kv)
    pieces = [piece for pieces in teamed.executable.program._team_pieces.values() for piece in pieces]
    assert [teamed for _, _, teamed in pieces] == [True, False]
    prompt = [int(t) for t in np.random.default_rng(1).integers(3, 200, 560)]
    _decode_alike(teamed, single, prompt, 40)


def test_a_team_splits_a_batch_by_rows_with_the_decode_alike(tmp_path):
    """Three sequences of seven rows with biases on q, k and v: rows split between the threads,
    the logit rows selected."""
    _threads_or_skip()
    biases = {f"blk.{layer}.attn_{name}.bias": np.linspace(-1.0, 1.0, width)
              for layer in range(2) for name, width in (("q", 256), ("k", 128), ("v", 128))}
    # Q4_0 as the test above: one build of the team for both (each format set costs CI ~30 s)
    path = write_family_gguf(tmp_path / "m.gguf", "qwen2", weight_type="Q4_0", extra_tensors=biases, head_dim=64)
    results = []
    for model in _pair(path):
        contexts = [model.context() for _ in range(3)]
        for i, ctx in enumerate(contexts):
            ctx.extend([3 + i, 40, 41 + i] * (20 * i + 1))  # 3, 63 and 123 keys before the batch
        chunks = [SequenceChunk(ctx.seq, [7 * i + j for j in range(7)], all_logits=i != 1)
                  for i, ctx in enumerate(contexts)]
        results.append(model.forward.run_many(chunks))
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


@pytest.mark.model
def test_the_default_model_decodes_the_same_as_a_team(smollm_path):
    _threads_or_skip()
    teamed, single = _pair(smollm_path)
    _decode_alike(teamed, single, teamed.tokenize("The capital of France is") * 12, 24)


def test_no_team_when_turned_off_or_short_of_cores(tmp_path, monkeypatch):
    _threads_or_skip()
    path = write_family_gguf(tmp_path / "m.gguf", "llama", weight_type="Q8_0")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert team.team_threads() == 0  # two threads on one core: a barrier would wait for a time slice
    monkeypatch.undo()
    monkeypatch.setenv(P.TEAM_ENV, "0")
    model = llamay.load(path, backend="cpu", n_ctx=64)
    assert model.executable.program._team_entry is None
    assert numba.get_num_threads() >= 2


def test_the_thread_count_a_program_reads_each_pass_follows_numba():
    _threads_or_skip()
    read, before = team.thread_count_reader(), numba.get_num_threads()
    assert read() == before
    try:
        numba.set_num_threads(1)
        assert read() == numba.get_num_threads() == 1
        assert team.team_threads(before, read) == 0  # one thread: no team, the pass runs `_run`
    finally:
        numba.set_num_threads(before)
    assert team.team_threads(before, read) == before
