"""A snapshot records its page encoding: it restores on another backend with the same encoding
and is refused, with the reason, by a store that encodes pages differently."""
from __future__ import annotations


import numpy as np
import pytest

import llamay
from tests.support.plugins import registered_backends
from llamay_backends.reference.backend import ReferenceBackend
from llamay_core.errors import SnapshotError
from llamay_core.state.host_pages import HostPageStore

PROMPT = [5, 70, 80, 90, 100, 33, 12, 250, 7, 9, 11, 13, 200, 201]


class PackedStore(HostPageStore):
    """The standard bytes, under another name: as a backend with its own page layout would declare."""

    def __init__(self, spec):
        super().__init__(spec)
        self.encoding = f"packed/{spec.dtype}"


class PackedBackend(ReferenceBackend):
    name = "packed"
    version = "1"

    def kv_store(self, spec):
        return PackedStore(spec)


@pytest.fixture()
def packed_backend():
    with registered_backends("packed_plugin", {"packed": f"{__name__}:PackedBackend"}, priority=-50):
        yield "packed"


def load(path, backend, kv="f32"):
    return llamay.load(path, backend=backend, n_ctx=64, page_size=4, kv_dtype=kv)


def test_a_snapshot_restores_on_another_backend_with_the_same_encoding(tiny_model_path, tmp_path):
    pytest.importorskip("llamay_example_backend")
    ref = load(tiny_model_path, "reference")
    ctx = ref.context().prefill(PROMPT)
    path = tmp_path / "ctx.kv"
    ctx.snapshot(path)
    other = load(tiny_model_path, "example")
    assert type(other.store) is not type(ref.store) and other.store.encoding == ref.store.encoding
    restored = other.restore(path)
    assert restored.tokens == PROMPT
    np.testing.assert_allclose(restored.extend([42]), ctx.extend([42]), rtol=1e-4, atol=1e-4)


def test_another_encoding_is_refused_with_the_reason(tiny_model_path, tmp_path, packed_backend):
    path = tmp_path / "ctx.kv"
    load(tiny_model_path, "reference").context().prefill(PROMPT).snapshot(path)
    packed = load(tiny_model_path, packed_backend)
    in_use = packed.pool.pages_in_use
    with pytest.raises(SnapshotError, match=r"written by backend 'reference' as 'layers-kv/f32' .*backend "
                                            r"'packed' stores pages as 'packed/f32'.* cannot take them"):
        packed.restore(path)
    assert packed.pool.pages_in_use == in_use
    load(tiny_model_path, packed_backend).context().prefill(PROMPT).snapshot(path)
    assert load(tiny_model_path, packed_backend).restore(path).tokens == PROMPT  # same encoding: fine


@pytest.mark.parametrize("written, read", [("f32", "f16"), ("vq8", "f32")])
def test_another_dtype_is_refused(tiny_model_path, tmp_path, written, read):
    path = tmp_path / "ctx.kv"
    load(tiny_model_path, "reference", kv=written).context().prefill(PROMPT).snapshot(path)
    with pytest.raises(SnapshotError, match=f"snapshot is for KV dtype '{written}', this model has '{read}'"):
        load(tiny_model_path, "reference", kv=read).restore(path)
