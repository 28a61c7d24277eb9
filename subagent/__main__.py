"""``python -m subagent``: the command line (:mod:`subagent.cli`)."""

import sys

from subagent.cli import main

if __name__ == "__main__":
    sys.exit(main())
