"""`llamay bench` on the real small model: the seed's table and every machine format."""
from __future__ import annotations

import csv
import io
import json
import sqlite3

import pytest

from tests.e2e.test_ppl_and_cli import llamay_cli

pytestmark = pytest.mark.model

SMALL = ["-backend", "cpu", "-prompt", "32", "-gen", "4", "-reps", "1"]


def test_table_has_the_seed_rows(smollm_path):
    proc = llamay_cli("bench", "-m", str(smollm_path), *SMALL, "-forks", "2", "-pg", "16,4", "-d", "0,16")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("llamay ") and " · llama · " in lines[0] and "kv f32" in lines[0]
    assert lines[1].startswith("weights ") and "prompt 32 · generate 4" in lines[1]
    text = proc.stdout
    for row in ("phase", "prefill ", "decode ", "ttft ", "prefill @d16", "decode @d16", "ttft @d16", "fork x2",
                "snapshot", "restore", "pg"):
        assert f"\n{row}" in text, row
    assert "0 pages allocated" in text
    assert "Restoring a 32-token context is" in text


@pytest.mark.parametrize("fmt", ["json", "jsonl", "csv", "sql"])
def test_machine_formats_carry_samples_and_conditions(smollm_path, fmt):
    proc = llamay_cli("bench", "-m", str(smollm_path), *SMALL, "-o", fmt)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    if fmt == "json":
        rows = json.loads(out)
    elif fmt == "jsonl":
        rows = [json.loads(line) for line in out.splitlines()]
    elif fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(out)))
    else:
        db = sqlite3.connect(":memory:")
        db.executescript(out)
        cur = db.execute("SELECT * FROM llamay_bench")
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, r)) for r in cur.fetchall()]
    tests = {r["test"] for r in rows}
    assert {"pp32", "tg4", "ttft"} <= tests
    for r in rows:
        assert r["backend"] == "cpu" and r["threads"] and r["model_hash"]
    if fmt in ("json", "jsonl"):
        pp = next(r for r in rows if r["test"] == "pp32")
        assert len(pp["samples_ts"]) == 1 and pp["best_ts"] > 0


def test_bad_flags_are_one_line_errors(smollm_path):
    proc = llamay_cli("bench", "-m", str(smollm_path), "-pg", "5")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
