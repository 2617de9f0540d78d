"""Starts tests/fakes/kube_apiserver.py (the fake Kubernetes API server) for the binding tests: a
fresh directory, a kubeconfig with a bearer token, helpers to create Sessions and map Pods to local
runtime sockets. Standard library only, so the C tests' runner can use it too."""
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = os.path.join(HERE, "..", "fakes", "kube_apiserver.py")
TOKEN = "test-token"
# The server generates a CA with openssl and starts an interpreter: generous on a loaded machine.
START_TIMEOUT = 60.0


class FakeKube:
    def __init__(self, ready_delay=0.3):
        self.dir = tempfile.mkdtemp(prefix="st_fake_kube_")
        self._log = open(os.path.join(self.dir, "server.log"), "wb")
        self.proc = subprocess.Popen(
            ["/usr/bin/python3", FAKE, "--dir", os.path.join(self.dir, "server"), "--token", TOKEN,
             "--ready-delay", str(ready_delay)],
            stdout=self._log, stderr=subprocess.STDOUT)
        ready = os.path.join(self.dir, "server", "ready.json")
        deadline = time.monotonic() + START_TIMEOUT
        while not os.path.exists(ready):
            if self.proc.poll() is not None:
                raise RuntimeError("the fake API server exited: " + self.log())
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError("the fake API server did not start")
            time.sleep(0.02)
        with open(ready) as f:
            self.port = json.load(f)["port"]
        self.server = "https://127.0.0.1:%d" % self.port
        self.ca = os.path.join(self.dir, "server", "ca.crt")
        self._ssl = ssl.create_default_context(cafile=self.ca)
        self.kubeconfig = os.path.join(self.dir, "kubeconfig")
        with open(self.kubeconfig, "w") as f:
            f.write("apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: %s\n"
                    "    certificate-authority: %s\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n"
                    "    user: u\n    namespace: default\ncurrent-context: fake\nusers:\n- name: u\n  user:\n"
                    "    token: %s\n" % (self.server, self.ca, TOKEN))

    def log(self):
        with open(os.path.join(self.dir, "server.log"), "rb") as f:
            return f.read().decode("utf-8", "replace")

    def request(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method,
                                     headers={"Authorization": "Bearer " + TOKEN,
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, context=self._ssl, timeout=30) as resp:
            return json.loads(resp.read() or b"null")

    def create_session(self, name, namespace="default"):
        return self.request("POST", "/apis/kelos.dev/v1alpha2/namespaces/%s/sessions" % namespace,
                            {"apiVersion": "kelos.dev/v1alpha2", "kind": "Session",
                             "metadata": {"name": name, "namespace": namespace}, "spec": {}})

    def register_pod(self, name, socket, namespace="default"):
        """The fake's pods/exec for Pod `name` bridges to the local runtime listening on `socket`."""
        return self.request("POST", "/_fake/pods", {"name": name, "namespace": namespace, "socket": socket})

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
