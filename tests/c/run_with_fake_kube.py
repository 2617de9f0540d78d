#!/usr/bin/python3
"""Runs a C test case against the fake Kubernetes API server: starts it, creates Sessions "s1" and "s2",
maps Pod "s1-pod" to a runtime socket the test will start, runs the command with ST_TEST_KUBECONFIG and
ST_TEST_RUNTIME_SOCKET set, and stops the server. Usage: run_with_fake_kube.py COMMAND..."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from fake_kube import FakeKube  # noqa: E402


def main():
    with FakeKube() as kube, tempfile.TemporaryDirectory(prefix="st_c_kube_") as d:
        socket = os.path.join(d, "runtime.sock")
        kube.create_session("s1")
        kube.create_session("s2")
        kube.register_pod("s1-pod", socket)
        env = dict(os.environ, ST_TEST_KUBECONFIG=kube.kubeconfig, ST_TEST_RUNTIME_SOCKET=socket)
        rc = subprocess.call(sys.argv[1:], env=env, timeout=120)
        if rc != 0:
            sys.stderr.write("fake API server log:\n" + kube.log()[-4000:])
        return rc


if __name__ == "__main__":
    sys.exit(main())
