#!/usr/bin/env python3
"""The local model launcher under its old name: :mod:`subagent.local_model`, re-exported.

    python scripts/local_llm.py setup|serve|run ...   # python -m subagent.local_model ...
    import local_llm                                  # the same module object

Imported (``import local_llm``, with ``scripts/`` on the path), this module replaces itself
by ``subagent.local_model`` in ``sys.modules``: ``local_llm.X`` *is*
``subagent.local_model.X``, so a test that stubs ``local_llm._run`` stubs the launcher's own
step. The checkout's ``subagent`` comes first on the path, so a checkout's script runs the
checkout's launcher.
"""

from __future__ import annotations

import sys
from pathlib import Path

_CHECKOUT = str(Path(__file__).resolve().parent.parent)
if _CHECKOUT not in sys.path:
    sys.path.insert(0, _CHECKOUT)

from subagent import local_model  # noqa: E402

if __name__ == "__main__":
    sys.exit(local_model.main())
sys.modules[__name__] = local_model
