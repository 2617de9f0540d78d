#!/usr/bin/python3
"""Follow a Session's events (Ctrl-C to stop), printing one line per event.

    PYTHONPATH=build/python python3 examples/python/watch.py --socket /path/runtime.sock [--since ID]
"""
import argparse
import sys

import sessionturn


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--socket", help="the runtime's unix socket")
    where.add_argument("--session", help="a Kubernetes Session (kubeconfig from $KUBECONFIG)")
    p.add_argument("--namespace")
    p.add_argument("--since", type=int, default=None, help="resume after this event id")
    p.add_argument("--idle", type=float, default=None, help="stop after this many seconds without an event")
    args = p.parse_args()

    driver = (sessionturn.Driver.for_session(args.session, args.namespace) if args.session
              else sessionturn.Driver.unix(args.socket))
    try:
        with driver.events(args.since, timeout=args.idle) as stream:
            for event in stream:
                detail = event.text or event.tool_name or event.status
                print("%6d %-22s %-10s %s" % (event.id, event.type, event.turn_id, detail.replace("\n", " ")[:80]),
                      flush=True)
    except sessionturn.TimeoutError:
        return 0  # --idle passed
    except KeyboardInterrupt:
        return 0
    except sessionturn.Error as e:
        print("watch ended (%s): %s" % (e.code, e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
