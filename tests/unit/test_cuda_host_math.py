"""The CUDA kernels' format and paging code, compiled by nvcc for the host and run on the CPU.

quant.cuh and paging.cuh mark their functions __host__ __device__, so the exact code the GPU runs
for reading GGML blocks (dequant8), for one lane's share of a decode dot product (row_dot_lane,
summed over 32 lanes here as the warp shuffle does there) and for KV page addressing (kv_index)
is checked against gguf.quants.dequantize and the host PageLayout. The one difference on the
host is the f16 conversion (a bit-exact software one instead of the hardware instruction).
What this cannot check: shuffles, shared memory, tensor cores, launches (a GPU session's job).
"""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

from llamay_backends.cuda import formats
from llamay_backends.cuda.kernel_sources import KERNEL_DIR
from llamay_backends.cuda.paging import PageLayout

HARNESS = r"""
#include "quant.cuh"
#include "paging.cuh"
#include <cstdio>
#include <cstdlib>
#include <vector>

template <int T>
void run(const u8* data, long long row_bytes, int rows, int k, const float* x, float* deq, float* dot) {
    for (int r = 0; r < rows; r++) {
        const u8* row = data + r * row_bytes;
        for (int g = 0; g < k / 8; g++) Format<T>::dequant8(row, g, deq + (long long)r * k + 8 * g);
        float s = 0.0f;
        for (int lane = 0; lane < 32; lane++) s += row_dot_lane<T>(row, x, k, lane, 32);
        dot[r] = s;
    }
}

static std::vector<char> slurp(const char* path) {
    FILE* f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    std::vector<char> buf(n);
    if (fread(buf.data(), 1, n, f) != (size_t)n) exit(3);
    fclose(f);
    return buf;
}

int main(int argc, char** argv) {
    if (argv[1][0] == 'k') {  // kv page_size kw vw n_layers: every index of pages 0..2
        int ps = atoi(argv[2]), kw = atoi(argv[3]), vw = atoi(argv[4]), nl = atoi(argv[5]);
        for (int p = 0; p < 3; p++) for (int l = 0; l < nl; l++) for (int v = 0; v < 2; v++)
            for (int s = 0; s < ps; s++) for (int c = 0; c < (v ? vw : kw); c++)
                printf("%lld\n", kv_index(p, l, v, s, c, ps, kw, vw, nl));
        return 0;
    }
    int code = atoi(argv[1]), rows = atoi(argv[2]), k = atoi(argv[3]);
    long long row_bytes = atoll(argv[4]);
    std::vector<char> data = slurp(argv[5]), xs = slurp(argv[6]);
    std::vector<float> out((size_t)rows * k + rows);
    const u8* d = (const u8*)data.data();
    const float* x = (const float*)xs.data();
#define CASE(name, c) case c: run<c>(d, row_bytes, rows, k, x, out.data(), out.data() + (size_t)rows * k); break;
    switch (code) { LLAMAY_FOR_EACH_FORMAT(CASE) default: return 2; }
    FILE* f = fopen(argv[7], "wb");
    fwrite(out.data(), sizeof(float), out.size(), f);
    fclose(f);
    return 0;
}
"""

# Byte offsets of each block's f16 scale fields: set to sane values so random bytes decode finitely.
F16_FIELDS = {"Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,), "Q4_K": (0, 2),
              "Q5_K": (0, 2), "Q6_K": (208,)}


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not installed")
    d = tmp_path_factory.mktemp("cuda_host")
    (d / "harness.cu").write_text(HARNESS)
    exe = d / "harness"
    proc = subprocess.run(["nvcc", "-x", "cu", "-I", str(KERNEL_DIR), str(d / "harness.cu"), "-o", str(exe)],
                          capture_output=True, text=True)
    if proc.returncode:
        pytest.fail(f"nvcc could not build the host harness:\n{proc.stderr}")
    return exe


def random_rows(type_name: str, rows: int, k: int, rng: np.random.Generator) -> np.ndarray:
    qtype = GGMLQuantizationType[type_name]
    block, size = GGML_QUANT_SIZES[qtype]
    if type_name in ("F32", "F16"):
        return rng.standard_normal((rows, k)).astype(np.float32 if type_name == "F32" else np.float16).view(np.uint8)
    if type_name == "BF16":
        return (rng.standard_normal((rows, k)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    data = rng.integers(0, 256, (rows, k // block, size), dtype=np.uint8)
    for off in F16_FIELDS[type_name]:
        scales = (rng.random((rows, k // block)) * 0.1 + 0.01).astype(np.float16)
        data[:, :, off:off + 2] = scales.view(np.uint8).reshape(rows, k // block, 2)
    return data.reshape(rows, -1)


@pytest.mark.parametrize("type_name", sorted(formats.WEIGHT_TYPES))
def test_dequant8_and_lane_dot_match_gguf(harness, tmp_path, type_name):
    rng = np.random.default_rng(7)
    rows, k = 5, 512
    data = random_rows(type_name, rows, k, rng)
    x = rng.standard_normal(k).astype(np.float32)
    (tmp_path / "w.bin").write_bytes(data.tobytes())
    (tmp_path / "x.bin").write_bytes(x.tobytes())
    code = int(GGMLQuantizationType[type_name])
    subprocess.run([str(harness), str(code), str(rows), str(k), str(data.shape[1]), str(tmp_path / "w.bin"),
                    str(tmp_path / "x.bin"), str(tmp_path / "out.bin")], check=True)
    out = np.fromfile(tmp_path / "out.bin", np.float32)
    ours, dots = out[:rows * k].reshape(rows, k), out[rows * k:]
    expected = dequantize(data, GGMLQuantizationType[type_name]).astype(np.float32).reshape(rows, k)
    np.testing.assert_array_equal(ours, expected)  # level 1: dequantization is exact
    ref_dot = expected.astype(np.float64) @ x.astype(np.float64)
    np.testing.assert_allclose(dots, ref_dot, rtol=1e-4, atol=1e-4 * np.abs(expected).sum(axis=1).max())


def test_kv_index_matches_the_host_layout(harness):
    layout = PageLayout(page_size=4, kw=6, vw=2, n_layers=2)
    proc = subprocess.run([str(harness), "kv", "4", "6", "2", "2"], check=True, capture_output=True, text=True)
    got = [int(v) for v in proc.stdout.split()]
    expected = [layout.index(p, l, bool(v), s, c) for p in range(3) for l in range(2) for v in range(2)
                for s in range(4) for c in range(2 if v else 6)]
    assert got == expected
    assert sorted(got) == list(range(3 * layout.page_elems))  # every slot once: no overlap, no gap
