"""``python -m sessionturn.telegram [flags]``: the Telegram bridge, sessionturn-telegram (docs/bridges.md), run by the package: the
same flags, environment variables, exit statuses and signals. ``--help`` lists the flags. The local backend's
runtimes are ``sessionturn-local-runtime`` processes, found on PATH."""
from __future__ import annotations

import sys
from typing import List, Optional

from ._bridge import run


def main(argv: Optional[List[str]] = None) -> int:
    """Runs the bridge until SIGINT or SIGTERM (or a fatal platform error); its exit status."""
    return run("telegram", argv)


if __name__ == "__main__":
    sys.exit(main())
