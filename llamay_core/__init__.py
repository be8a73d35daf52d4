"""llamay's engine: files, graph, plugins, state engine, generation and the command line.

The public Python API lives in the `llamay` package; this package holds the machinery.
"""
from llamay_core.version import __version__

__all__ = ["__version__"]
