"""Runs a bridge program (sessionturn-telegram, sessionturn-slack) inside this Python process: the same C++ code,
flags, environment, exit statuses and signal handling (SIGINT and SIGTERM end it gracefully).

The bridge waits for SIGINT and SIGTERM itself, blocked in the calling thread: that works only when it is the
process's only thread, so it runs on the main thread of a process that has started no other (no thread of
``threading``, no sessionturn ``Context``), as ``python -m`` does. Like the program, it marks the process not
dumpable (``prctl(PR_SET_DUMPABLE, 0)``) once it read its secrets, for the rest of the process's life."""
from __future__ import annotations

import sys
import threading
from typing import List, Optional

from . import _sessionturn as _st


def run(platform: str, argv: Optional[List[str]] = None) -> int:
    """The bridge's exit status. ``argv``: its arguments (default ``sys.argv[1:]``)."""
    if not getattr(_st, "_has_bridges", False):
        print("sessionturn: this build has no bridges (built without SESSIONTURN_BUILD_EXAMPLES); run "
              "sessionturn-%s instead" % platform, file=sys.stderr)
        return 70
    from . import _router

    if threading.current_thread() is not threading.main_thread() or threading.active_count() > 1 or \
            len(_router._contexts) > 0:
        print("sessionturn: the %s bridge must run alone in its process (on the main thread, before any other "
              "thread or sessionturn Context starts): use python -m sessionturn.%s" % (platform, platform),
              file=sys.stderr)
        return 70
    args = list(sys.argv[1:] if argv is None else argv)
    program = "python -m sessionturn.%s" % platform
    # Flushed first: the bridge writes to the same file descriptors from C++.
    sys.stdout.flush()
    sys.stderr.flush()
    run_fn = _st._run_telegram if platform == "telegram" else _st._run_slack
    status = int(run_fn([program] + args))
    return status
