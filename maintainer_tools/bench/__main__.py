"""Entry point of ``python -m maintainer_tools.bench``."""

import sys

from maintainer_tools.bench import main

main(sys.argv[1:])
