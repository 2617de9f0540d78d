"""bench/exec_turn's Python comparison: the same exchange over pods/exec with Debian's python3-kubernetes
client (kubernetes.stream.stream): open the exec, write subscribe + message, read stdout until our
turn.completed, close. Prints one latency per turn in milliseconds.

Usage: /usr/bin/python3 bench/py_kube_exec.py KUBECONFIG NAMESPACE POD TURNS"""
import json
import sys
import time
import uuid

from kubernetes import client, config
from kubernetes.stream import stream


def main() -> None:
    kubeconfig, namespace, pod, turns = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    config.load_kube_config(config_file=kubeconfig)
    api = client.CoreV1Api()
    for i in range(turns):
        t0 = time.perf_counter()
        ws = stream(api.connect_get_namespaced_pod_exec, pod, namespace, container="kelos-agent",
                    command=["/kelos/bin/kelos-session-runtime", "client"], stdin=True, stdout=True,
                    stderr=True, tty=False, _preload_content=False)
        request_id = str(uuid.uuid4())
        ws.write_stdin(json.dumps({"type": "subscribe", "historyBounds": True, "historyItems": 1,
                                   "historyBytes": 1024}) + "\n" +
                       json.dumps({"type": "message", "requestId": request_id, "text": f"python turn {i}"}) + "\n")
        buf = ""
        turn_id = None
        done = False
        while not done and ws.is_open():
            ws.update(timeout=30)
            if ws.peek_stdout():
                buf += ws.read_stdout()
                *lines, buf = buf.split("\n")
                for line in lines:
                    try:
                        ev = json.loads(line)
                    except ValueError:
                        continue
                    if ev.get("requestId") == request_id and ev.get("type", "").startswith("user.message"):
                        turn_id = ev.get("turnId")
                    elif turn_id and ev.get("turnId") == turn_id and ev.get("type") == "turn.completed":
                        done = True
        ws.close()
        if not done:
            raise SystemExit("python exec turn did not complete")
        print(f"{(time.perf_counter() - t0) * 1000.0:.3f}", flush=True)


if __name__ == "__main__":
    main()
