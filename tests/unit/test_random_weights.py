"""benchmarks/random_weights.py: a model's skeleton, and a same-shaped model with random weights
(what a GPU machine that cannot carry the real file runs conformance and bench on)."""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize

from tests.support.benchmark_scripts import load_script


@pytest.fixture(scope="module")
def rw():
    return load_script("random_weights")


def test_fill_gives_the_same_tensors_and_metadata_and_a_working_model(rw, tiny_model_path, tmp_path):
    import llamay

    skel, out = tmp_path / "m.skel.gguf", tmp_path / "m-random.gguf"
    rw.skeleton(tiny_model_path, skel)
    assert skel.stat().st_size < tiny_model_path.stat().st_size
    rw.fill(skel, out, seed=3)
    real, made = GGUFReader(tiny_model_path), GGUFReader(out)
    assert [(t.name, t.tensor_type, list(t.shape)) for t in real.tensors] == \
        [(t.name, t.tensor_type, list(t.shape)) for t in made.tensors]
    assert {k: f.types for k, f in real.fields.items()} == {k: f.types for k, f in made.fields.items()}
    for key in ("tokenizer.ggml.tokens", "llama.block_count", "llama.rope.freq_base"):
        assert made.fields[key].contents() == real.fields[key].contents()
    text = llamay.load(out, backend="reference").generate("ab", max_tokens=4, ignore_eos=True)
    assert isinstance(text, str)


@pytest.mark.parametrize("type_name", ["Q4_1", "Q5_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "Q2_K", "F16"])
def test_weights_have_the_asked_scale_and_no_shared_offset(rw, type_name):
    data = rw._matrix("w", type_name, (64, 512), 0.05, seed=1)
    w = data.astype(np.float32) if type_name == "F16" else dequantize(data, GGMLQuantizationType[type_name])
    assert w.shape == (64, 512) and np.isfinite(w).all()
    assert 0.04 < w.std() < 0.06
    # trained blocks are centred: a mean shared by every row would make the matrix nearly rank one
    assert abs(w.mean()) < 0.1 * w.std()
