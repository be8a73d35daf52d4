"""`llamay pull NAME`, `llamay models` and `llamay rm NAME`."""
from __future__ import annotations

import argparse


def configure_pull(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="a model name (any case; a family alone picks its default size), e.g. smollm2, "
                                "or hf:OWNER/REPO/FILE.gguf, or hf:OWNER/REPO[:QUANT]")
    p.add_argument("-force", "--force", action="store_true", help="fetch again even if present")


def run_pull(args: argparse.Namespace) -> int:
    from llamay_core.files.model_names import is_model_name, known_model
    from llamay_core.files.pull import pull

    if not is_model_name(args.name):
        known_model(args.name)  # one-line error naming the known models
    print(pull(args.name, force=args.force))
    return 0


def configure_models(p: argparse.ArgumentParser) -> None:
    pass


def human_size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def run_models(args: argparse.Namespace) -> int:
    from llamay_core.files.model_names import KNOWN_MODELS, local_path, models_dir

    print(f"{'NAME':<20} {'SIZE':>8}  {'DOWNLOADED':<10}  DESCRIPTION")
    for name, m in KNOWN_MODELS.items():
        path = local_path(name)
        state = "yes" if path.exists() else "no"
        print(f"{name:<20} {human_size(m.size_bytes):>8}  {state:<10}  {m.description}")
    hf = models_dir() / "hf"
    for path in sorted(hf.glob("**/*.gguf")) if hf.is_dir() else []:
        print(f"{'hf:' + str(path.relative_to(hf)):<20} {human_size(path.stat().st_size):>8}  {'yes':<10}")
    print(f"models folder: {models_dir()}")
    return 0


def configure_rm(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="a downloaded model: a known name or an hf: name (see llamay models)")


def run_rm(args: argparse.Namespace) -> int:
    from llamay_core.files.pull import remove

    print(f"removed {remove(args.name)}")
    return 0
