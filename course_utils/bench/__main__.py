"""Entry point of ``python -m course_utils.bench``."""

import sys

from course_utils.bench import main

main(sys.argv[1:])
