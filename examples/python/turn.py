#!/usr/bin/python3
"""Submit one turn and print the reply as it streams, answering questions on the terminal.

    PYTHONPATH=build/python python3 examples/python/turn.py --socket /path/runtime.sock "hello"
    PYTHONPATH=build/python python3 examples/python/turn.py --local "hello"      # a local echo runtime
    PYTHONPATH=build/python python3 examples/python/turn.py --session my-session "hello"  # Kubernetes
"""
import argparse
import sys

import sessionturn


def on_event(event):
    # Runs on the driver's worker thread: print and return quickly.
    if event.type == "assistant.delta":
        print(event.text, end="", flush=True)
    elif event.type == "tool.started":
        print("\n[tool %s]" % event.tool_name, flush=True)


def on_question(request, responder):
    # A script has nobody to ask when stdin is not a terminal: pick the first option then.
    answers = {}
    for q in request.questions:
        choice = q.options[0] if q.options else "yes"
        if sys.stdin.isatty():
            print("\n%s %s" % (q.question, q.options))
            choice = input("> ").strip() or choice
        print("\n[question] %s -> %s" % (q.question, choice))
        answers[q.id] = [choice]
    responder.answer(answers)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--socket", help="the runtime's unix socket")
    where.add_argument("--session", help="a Kubernetes Session (kubeconfig from $KUBECONFIG)")
    where.add_argument("--local", action="store_true", help="start a local echo runtime")
    p.add_argument("--namespace")
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("prompt")
    args = p.parse_args()

    runtime = sessionturn.LocalRuntime() if args.local else None
    try:
        if runtime:
            driver = runtime.driver()
        elif args.session:
            driver = sessionturn.Driver.for_session(args.session, args.namespace)
        else:
            driver = sessionturn.Driver.unix(args.socket)
        result = driver.submit_turn(args.prompt, timeout=args.timeout, on_event=on_event, on_question=on_question)
    except sessionturn.Error as e:
        print("\nturn failed (%s): %s" % (e.code, e), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted: the turn was withdrawn", file=sys.stderr)
        return 130
    finally:
        if runtime:
            runtime.stop()
    print("\n--- %s %s\n%s" % (result.turn_id, result.status, result.text))
    return 0 if result.status == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
