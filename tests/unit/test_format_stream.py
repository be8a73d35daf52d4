"""benchmarks/format_stream.py: its specs parse as documented and bad ones are refused."""
from __future__ import annotations

import pytest

from tests.support.benchmark_scripts import load_script


@pytest.fixture(scope="module")
def stream():
    return load_script("format_stream")


def test_a_spec_names_format_size_and_optional_columns(stream):
    assert stream.parse_spec("q5_0:120") == ("Q5_0", 120.0, None)
    assert stream.parse_spec("Q8_0:160:640") == ("Q8_0", 160.0, 640)


@pytest.mark.parametrize("bad", ["Q4_0", "Q4_0:1:2:3", "Q4_0:many"])
def test_a_malformed_spec_is_refused(stream, bad):
    with pytest.raises(ValueError):
        stream.parse_spec(bad)
