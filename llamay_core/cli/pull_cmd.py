"""`llamay pull NAME` and `llamay models`."""
from __future__ import annotations

import argparse


def configure_pull(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="a model name, e.g. smollm2:135m, or hf:OWNER/REPO/FILE.gguf")
    p.add_argument("-force", "--force", action="store_true", help="fetch again even if present")


def run_pull(args: argparse.Namespace) -> int:
    from llamay_core.files.model_names import is_model_name, known_model
    from llamay_core.files.pull import pull

    if not is_model_name(args.name):
        known_model(args.name)  # one-line error naming the known models
    path = pull(args.name, force=args.force)
    print(path)
    return 0


def configure_models(p: argparse.ArgumentParser) -> None:
    pass


def run_models(args: argparse.Namespace) -> int:
    from llamay_core.files.model_names import KNOWN_MODELS, local_path

    for name, m in KNOWN_MODELS.items():
        path = local_path(name)
        state = f"pulled  {path}" if path.exists() else "not pulled"
        print(f"{name:<20} {m.description:<58} {state}")
    return 0
