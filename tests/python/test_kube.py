"""SessionClient and Driver.for_session against the fake Kubernetes API server."""
import os
import time

import pytest

import sessionturn
from conftest import WAIT
from fake_kube import FakeKube


@pytest.fixture(scope="module")
def kube():
    with FakeKube() as k:
        k.create_session("s1")
        k.create_session("s2")
        k.create_session("gone")
        yield k


def wait_phase(client, name, phase):
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if client.get(name).phase == phase:
            return True
        time.sleep(0.05)
    return False


def test_session_client(kube):
    client = sessionturn.SessionClient(kubeconfig=kube.kubeconfig)
    assert client.namespace == "default"
    names = sorted(s.name for s in client.list())
    assert names == ["gone", "s1", "s2"]
    assert client.list("no-such-label=x") == []
    ready = client.wait_ready("s1", timeout=WAIT)
    assert ready.ready and ready.phase == "Ready" and ready.pod_name == "s1-pod"
    assert ready.raw["metadata"]["name"] == "s1"
    assert client.get("s1").namespace == "default"

    client.wait_ready("s2", timeout=WAIT)
    assert client.suspend("s2").suspend is True
    assert wait_phase(client, "s2", "Suspended")
    with pytest.raises(sessionturn.UnavailableError):
        client.wait_ready("s2", timeout=WAIT)
    client.resume("s2")
    assert client.wait_ready("s2", timeout=WAIT).ready

    client.delete("gone")
    with pytest.raises(sessionturn.NotFoundError) as info:
        client.get("gone")
    assert info.value.http_status == 404 and info.value.code == "not_found"
    with pytest.raises(sessionturn.TimeoutError):
        client.wait_ready("missing", timeout=0.5)


def test_bad_kubeconfig():
    with pytest.raises(sessionturn.Error, match="/nonexistent/kubeconfig"):
        sessionturn.SessionClient(kubeconfig="/nonexistent/kubeconfig")


def test_driver_for_session(kube, tmp_path):
    socket = str(tmp_path / "rt.sock")
    kube.register_pod("s1-pod", socket)
    with sessionturn.LocalRuntime(socket, echo_delay=0.005):
        d = sessionturn.Driver.for_session("s1", kubeconfig=kube.kubeconfig, wait_timeout=WAIT)
        assert "kube-exec:default/s1-pod" in repr(d)
        r = d.submit_turn("over exec", timeout=WAIT)
        assert r.status == "completed" and "over exec" in r.text
