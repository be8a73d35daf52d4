"""The llamay version, read from the installed distribution when there is one."""
from importlib import metadata

try:
    __version__ = metadata.version("llamay")
except metadata.PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"
