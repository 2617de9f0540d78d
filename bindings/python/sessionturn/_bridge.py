"""Runs a bridge program (sessionturn-telegram, sessionturn-slack) inside this Python process: the same C++ code,
flags, environment, exit statuses and signal handling (SIGINT and SIGTERM end it gracefully)."""
from __future__ import annotations

import sys
from typing import List, Optional

from . import _sessionturn as _st


def run(platform: str, argv: Optional[List[str]] = None) -> int:
    """The bridge's exit status. ``argv``: its arguments (default ``sys.argv[1:]``)."""
    if not getattr(_st, "_has_bridges", False):
        print("sessionturn: this build has no bridges (built without SESSIONTURN_BUILD_EXAMPLES); run "
              "sessionturn-%s instead" % platform, file=sys.stderr)
        return 70
    args = list(sys.argv[1:] if argv is None else argv)
    program = "python -m sessionturn.%s" % platform
    # Flushed first: the bridge writes to the same file descriptors from C++.
    sys.stdout.flush()
    sys.stderr.flush()
    run_fn = _st._run_telegram if platform == "telegram" else _st._run_slack
    status = int(run_fn([program] + args))
    return status
