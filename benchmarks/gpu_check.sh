#!/usr/bin/env bash
# The CUDA backend's GPU check, in one call on a machine with an NVIDIA GPU (see docs/backends.md):
#   bash benchmarks/gpu_check.sh            # results under $OUT (default ./gpu-check-out)
# 1. CuPy: already installed, else from wheels in $LLAMAY_WHEELS or shared/wheels (no network needed).
# 2. llamay version (is cuda available, on what), nvidia-smi, the kernels' compile check.
# 3. conformance of the cuda backend: the op grid once, then each model against reference.
# 4. llamay bench on each model: pp512/tg128 at f32 and f16 KV, plus the reference-free gpu lines.
# Every step writes its own file and the script goes on after a failure; the exit code is the
# number of failed steps. $GPU_CHECK_MODELS names the models (default smollm2:135m and
# qwen2.5-coder:0.5b, which must already be in $LLAMAY_HOME/models), names or .gguf paths. A
# machine that can fetch nothing and carry little (a lent GPU machine) runs on same-shaped models
# with random weights, written there from skeletons: benchmarks/random_weights.py.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-check-out}"
mkdir -p "$OUT"
failures=0
PYTHON="${PYTHON:-python3}"
step() {  # step NAME COMMAND...: run, keep stdout+stderr in $OUT/NAME.txt, count a failure
    local name="$1"; shift
    echo "== $name: $*"
    if timeout "${STEP_TIMEOUT:-900}" "$@" >"$OUT/$name.txt" 2>&1; then
        echo "   ok"
    else
        echo "   FAILED (exit $?), see $OUT/$name.txt"; tail -5 "$OUT/$name.txt"
        failures=$((failures + 1))
    fi
}

if ! "$PYTHON" -c "import cupy" 2>/dev/null; then
    wheels="${LLAMAY_WHEELS:-shared/wheels}"
    step install-cupy "$PYTHON" -m pip install --no-index --find-links "$wheels" "${CUPY_PACKAGE:-cupy-cuda12x}"
fi
# NVRTC and the CUDA headers it needs (cuda_fp16.h, mma.h): a toolkit if there is one, else wheels.
if ! ls /usr/local/cuda*/include/crt/mma.h >/dev/null 2>&1; then
    step install-cuda-headers "$PYTHON" -m pip install --no-index --find-links "${LLAMAY_WHEELS:-shared/wheels}" \
        nvidia-cuda-nvrtc-cu12 nvidia-cuda-runtime-cu12 nvidia-cuda-nvcc-cu12
fi
if ! "$PYTHON" -c "import llamay_core" 2>/dev/null; then  # else installed already (a carried wheel)
    "$PYTHON" -m pip install -q -e . >"$OUT/install-llamay.txt" 2>&1 || failures=$((failures + 1))
fi

step nvidia-smi nvidia-smi
step version llamay version -v
step compile-check "$PYTHON" -m llamay_backends.cuda.compile_check --keep "$OUT/ptx"
step cuda-unit-tests "$PYTHON" -m pytest -q -p no:cacheprovider tests/unit/test_cuda_backend.py tests/unit/test_cuda_host_math.py

level=all  # the op grid does not depend on the model: the first model's run covers it
for model in ${GPU_CHECK_MODELS:-smollm2:135m qwen2.5-coder:0.5b}; do
    tag="$(basename "$model" .gguf)"; tag="${tag//[:.]/-}"
    step "conformance-$tag" llamay conformance -backend cuda -m "$model" -level "$level"
    level=model
    step "bench-$tag-f32" llamay bench -m "$model" -backend cuda -prompt 512 -gen 128 -reps 3
    step "bench-$tag-f16" llamay bench -m "$model" -backend cuda -prompt 512 -gen 128 -reps 3 -kv f16
done

# Goals (issue 9): qwen2.5-coder:0.5b on an H200, decode >= 1,000 tok/s and pp512 >= 20,000 tok/s.
grep -h -E "^(prefill|decode|gpu time|cuda graphs)" "$OUT"/bench-*-f32.txt >"$OUT/summary.txt" 2>/dev/null
echo "failed steps: $failures" | tee -a "$OUT/summary.txt"
exit "$failures"
