"""`python -m tests.backends ARGS`: the llamay CLI with the test backends registered."""
import sys

from llamay_core.cli.main import main
from tests.backends.plugin import register

register()
sys.exit(main(sys.argv[1:]))
