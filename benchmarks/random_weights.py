"""A model's skeleton (metadata, tokenizer and tensor list, no weights), and random weights for it.

For a machine that cannot fetch models (a lent GPU machine has no network, and its copy of the
working tree is capped at 64 MiB): carry the skeleton, a few MiB, and write a model there with the
real file's shapes, types, metadata and tokenizer and seeded random weights. Speed depends on
shapes and types, not on values; conformance compares a backend with reference on the same file,
so random weights check the kernels as real ones do (golden tokens need the real file).

    python benchmarks/random_weights.py skeleton MODEL.gguf MODEL.skel.gguf
    python benchmarks/random_weights.py fill MODEL.skel.gguf MODEL-random.gguf [--seed 0]

Weights get the scale of a trained model's, so that activations stay finite through every layer
and logits are peaked enough for a top-1 comparison to mean something: projections of std
1/sqrt(fan-in), the token and output matrices 3/sqrt(n_embd), norm weights near 1, biases near 0.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize, quantize

from llamay_conformance.weights import F16_FIELDS, FLOAT_TYPES, random_tensor

TENSORS_KEY = "llamay.skeleton.tensors"
LOGIT_STD = 3.0
CALIBRATION_ROWS = 32
QUANTIZABLE = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0")  # gguf.quants.quantize writes these
# k-quants with a min (w = d*scale*q - dmin*min): dmin/d that centres a block of uniform random
# quants and 6- or 4-bit scales and mins, as a trained block is. Without it every row shares a
# positive mean, the matrices are nearly rank one, and the model collapses onto one token.
CENTRING = {"Q2_K": 1.5, "Q4_K": 7.5, "Q5_K": 15.5}


def _copy_fields(reader: GGUFReader, writer: GGUFWriter, skip: tuple[str, ...]) -> None:
    """Every key of `reader` into `writer` with its exact value type (header fields aside)."""
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name in skip:
            continue
        kind = field.types[0]
        sub = field.types[1] if kind == GGUFValueType.ARRAY and len(field.types) > 1 else None
        writer.add_key_value(name, field.contents(), kind, sub_type=sub)


def skeleton(model: Path, out: Path) -> None:
    reader = GGUFReader(model)
    arch = reader.fields["general.architecture"].contents()
    writer = GGUFWriter(str(out), arch)
    _copy_fields(reader, writer, skip=("general.architecture",))
    entries = [f"{t.name}\t{t.tensor_type.name}\t{','.join(str(int(n)) for n in t.shape)}" for t in reader.tensors]
    writer.add_array(TENSORS_KEY, entries)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _target_std(name: str, shape: tuple[int, ...], n_embd: int) -> float:
    if name in ("token_embd.weight", "output.weight"):
        return LOGIT_STD / np.sqrt(n_embd)
    return 1.0 / np.sqrt(shape[-1])


def _vector(name: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if "norm" in name:
        return (1 + 0.05 * rng.standard_normal(n)).astype(np.float32)
    if "rope_freqs" in name or "rope_factors" in name:
        return np.ones(n, np.float32)
    return (0.02 * rng.standard_normal(n)).astype(np.float32)


def _matrix(name: str, type_name: str, shape: tuple[int, ...], std: float, seed: int) -> np.ndarray:
    """Weights of std `std` in `type_name`: Gaussian values quantized where gguf-py can, else
    random raw blocks (every bit pattern of the quants) with centred, calibrated scales."""
    rng = np.random.default_rng(seed)
    if type_name in FLOAT_TYPES:
        return random_tensor(name, type_name, shape, rng, scale=std).data
    if type_name in QUANTIZABLE:
        return quantize((rng.standard_normal(shape, dtype=np.float32) * std), GGMLQuantizationType[type_name])
    sample_shape = (min(CALIBRATION_ROWS, int(np.prod(shape[:-1]))), shape[-1])
    unit = float(dequantize(_raw_blocks(name, type_name, sample_shape, seed, 1.0),
                            GGMLQuantizationType[type_name]).std())
    return _raw_blocks(name, type_name, shape, seed, std / unit).reshape(*shape[:-1], -1)


def _raw_blocks(name: str, type_name: str, shape: tuple[int, ...], seed: int, scale: float) -> np.ndarray:
    raw = random_tensor(name, type_name, shape, np.random.default_rng(seed), scale=scale).data
    if type_name in CENTRING:
        blocks = raw.reshape(-1, GGML_QUANT_SIZES[GGMLQuantizationType[type_name]][1])  # a view of raw
        d_at, dmin_at = F16_FIELDS[type_name]
        d = blocks[:, d_at:d_at + 2].copy().view(np.float16)
        blocks[:, dmin_at:dmin_at + 2] = (d.astype(np.float32) * CENTRING[type_name]).astype(np.float16).view(np.uint8)
    return raw


def fill(skel: Path, out: Path, seed: int = 0) -> None:
    reader = GGUFReader(skel)
    arch = reader.fields["general.architecture"].contents()
    n_embd = int(reader.fields[f"{arch}.embedding_length"].contents())
    writer = GGUFWriter(str(out), arch)
    _copy_fields(reader, writer, skip=("general.architecture", TENSORS_KEY))
    rng = np.random.default_rng(seed)
    for i, entry in enumerate(reader.fields[TENSORS_KEY].contents()):
        name, type_name, dims = entry.split("\t")
        shape = tuple(int(n) for n in reversed(dims.split(",")))  # GGUF lists ne0 first; numpy rows last
        ggml_type = GGMLQuantizationType[type_name]
        if len(shape) == 1:
            values = _vector(name, shape[0], rng)
            writer.add_tensor(name, values if type_name == "F32" else values.astype(np.float16))
            continue
        data = _matrix(name, type_name, shape, _target_std(name, shape, n_embd), seed * 100_003 + i)
        if type_name in ("F32", "F16"):
            writer.add_tensor(name, data)
        else:
            writer.add_tensor(name, data, raw_shape=data.shape, raw_dtype=ggml_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("skeleton", help="metadata, tokenizer and tensor list of MODEL, no weights")
    s.add_argument("model", type=Path)
    s.add_argument("out", type=Path)
    f = sub.add_parser("fill", help="a model with the skeleton's shapes and types and random weights")
    f.add_argument("skeleton", type=Path)
    f.add_argument("out", type=Path)
    f.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.command == "skeleton":
        skeleton(args.model, args.out)
    else:
        fill(args.skeleton, args.out, args.seed)
    print(f"wrote {args.out} ({args.out.stat().st_size / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
