"""`llamay serve -replicas 2 -ray-address ADDR` joins a running Ray cluster, serves, drains on SIGTERM,
and leaves the cluster up with only its own applications removed.

The "cluster" is a Ray instance this test starts on loopback (one node: this project's
machines have no second one).
"""
from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

ray = pytest.importorskip("ray", reason="needs the cluster extra: pip install 'llamay[cluster]'")
serve = pytest.importorskip("ray.serve")

from tests.e2e.test_cluster import MODEL, model_available  # noqa: E402

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not model_available(), reason="smollm2 is not downloaded")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def ray_cluster() -> Iterator[str]:
    ray.init(address="local", include_dashboard=False, num_cpus=2, _node_ip_address="127.0.0.1",
             log_to_driver=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        serve.shutdown()
        ray.shutdown()


def test_the_command_joins_a_cluster_serves_and_drains_on_sigterm(tmp_path, ray_cluster):
    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "llamay_core.cli.main", "serve", "-m", MODEL, "-replicas", "2",
                                 "-ray-address", ray_cluster, "-backend", "cpu", "-ctx", "512", "-concurrency", "2",
                                 "-port", str(port)], cwd=REPO, stdout=err, stderr=subprocess.STDOUT)
    try:
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120)
        deadline = time.monotonic() + 300
        while True:
            try:
                if client.get("/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(1)
        assert len(serve.status().applications) == 2
        result: dict[str, Any] = {}

        def stream() -> None:
            body = {"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0, "ignore_eos": True,
                    "stream": True}
            with client.stream("POST", "/v1/completions", json=body) as r:
                result["events"] = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]

        streamer = threading.Thread(target=stream)
        streamer.start()
        time.sleep(1.5)
        proc.send_signal(signal.SIGTERM)
        streamer.join(120)
        # uvicorn re-raises SIGTERM once drained; Ray's driver handler turns it into exit(15).
        assert proc.wait(120) in (0, signal.SIGTERM, -signal.SIGTERM), log.read_text()
        events = result["events"]
        assert events[-1] == "[DONE]"
        assert json.loads(events[-2])["choices"][0]["finish_reason"] == "length"
        assert len(events) == 42  # 40 tokens, the finish chunk, [DONE]: nothing cut short
        # The cluster is still up; only this front's applications are gone.
        assert ray.is_initialized() and serve.status().applications == {}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
