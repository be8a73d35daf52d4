"""Registers `llamay conformance` through the commands hook: the core never imports this package."""
from llamay_core.hookspecs import hookimpl


def _configure(parser):
    from llamay_conformance.command import configure

    configure(parser)


def _run(args):
    from llamay_conformance.command import run

    return run(args)


@hookimpl
def llamay_register_commands(commands):
    commands("conformance", "check backends op by op and per model against reference", _configure, _run)
