"""The pictures: `bench -sweep -plot FILE.png` and `conformance -o html`, produced and opened."""
from __future__ import annotations

import html.parser

import pytest

from llamay_core.cli.main import main


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    from tests.support.tiny_gguf import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("pictures") / "tiny.gguf")


@pytest.mark.parametrize("sweep, points", [(["-sweep", "prompt"], ["pp16", "pp32"]), (["-sweep"], ["pp32/ub32"])])
def test_bench_sweep_draws_a_png_that_opens(tiny_path, tmp_path, capsys, sweep, points):
    image = pytest.importorskip("matplotlib.image")
    png = tmp_path / "sweep.png"
    code = main(["bench", "-m", str(tiny_path), "-backend", "reference", "-prompt", "32", "-gen", "0",
                 "-reps", "1", *sweep, "-plot", str(png)])
    out = capsys.readouterr().out
    assert code == 0 and f"plot: {png}" in out
    pixels = image.imread(png)
    assert pixels.ndim == 3 and pixels.shape[0] > 200 and pixels.shape[1] > 300
    assert pixels.std() > 0.01  # something was drawn
    assert [line.split()[0] for line in out.splitlines() if line.startswith("pp")] == points


def test_plot_without_a_sweep_is_a_one_line_error(tiny_path, tmp_path, capsys):
    assert main(["bench", "-m", str(tiny_path), "-backend", "reference", "-plot", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert "add -sweep" in err and len(err.strip().splitlines()) == 1


class Cells(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.tags: set[str] = set()

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)

    def handle_data(self, data):
        self.text.append(data)


def test_conformance_html_is_one_page_naming_every_op(tiny_path, tmp_path, capsys):
    from llamay_core.graph.ops import OP_NAMES
    from llamay_core.version import __version__

    page = tmp_path / "conformance.html"
    code = main(["conformance", "-backend", "example", "-m", str(tiny_path), "-o", "html", "-out", str(page)])
    assert code == 0 and f"wrote {page}" in capsys.readouterr().out
    text = page.read_text()
    parsed = Cells()
    parsed.feed(text)
    words = set(" ".join(parsed.text).replace(",", " ").split())
    assert set(OP_NAMES) <= words
    assert not {"script", "link", "img", "iframe"} & parsed.tags  # self-contained
    assert "example" in words and f"llamay {__version__}" in text and str(tiny_path) in text
    assert "background:hsl(" in text or "background:#b9e4c3" in text  # cells coloured by NMSE
    assert "Model level" in text


def test_html_cells_are_coloured_against_the_limit():
    from llamay_conformance.html_report import nmse_colour

    assert nmse_colour(None, 1e-7, False) == nmse_colour(1e-3, 1e-7, False)  # failures: one red
    far, near = nmse_colour(1e-14, 1e-7, True), nmse_colour(0.9e-7, 1e-7, True)
    assert far == "hsl(130, 65%, 80%)" and near == "hsl(31, 65%, 80%)"  # green far under, orange near


def test_conformance_counts_cases_on_a_progress_bar(tiny_path, capsys, monkeypatch):
    import contextlib
    import json
    import logging
    import re

    import llamay_core.cli.status_lines as status_lines

    lines = status_lines.status_lines

    @contextlib.contextmanager
    def as_on_a_terminal(quiet=False):
        with lines(quiet):
            logging.getLogger("llamay").setLevel(logging.INFO)
            yield

    monkeypatch.setattr(status_lines, "status_lines", as_on_a_terminal)
    code = main(["conformance", "-backend", "example", "-m", str(tiny_path), "-level", "op", "-o", "json"])
    captured = capsys.readouterr()
    cases = json.loads(captured.out)[0]["cases"]
    counts = [int(n) for n in re.findall(r"example \(ops\): (\d+)case", captured.err)]
    # The bar counts every case the backend runs; family-op cases it hands to a fallback through
    # the split run there too, so the bar may count more than the report's cases, never fewer.
    assert code == 0 and counts and counts[-1] >= len(cases) > 50
