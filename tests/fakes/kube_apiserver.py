#!/usr/bin/python3
"""A small, faithful fake of the Kubernetes API server for sessionturn's tests (standard library only).

It serves HTTPS with a CA generated per run (openssl CLI), bearer-token and client-certificate auth,
the discovery documents kubectl reads (/version, /api, /api/v1, /apis, /apis/kelos.dev/v1alpha2),
kelos.dev/v1alpha2 sessions and sessionspawners (GET, LIST with label/field selectors, POST, PUT,
PATCH merge/strategic/json with resourceVersion conflicts, DELETE, WATCH with resourceVersion,
BOOKMARKs and 410 Gone), core pods GET, a small Session controller, and control endpoints under
/_fake/ (no auth; loopback only) for tests. kube_objects.py adds the built-in kinds a deployment uses
(Namespace, ServiceAccount, Secret, ConfigMap, Service, PersistentVolumeClaim, Deployment, Role, RoleBinding) with the
discovery and OpenAPI documents `kubectl apply` needs; kube_rbac.py records every request in Kubernetes
authorization terms and enforces RBAC for tokens registered as ServiceAccounts.

Usage: kube_apiserver.py --dir DIR [--token TOKEN] [--ready-delay SECONDS] [--port 0]
On start it writes DIR/ca.crt, DIR/client.crt, DIR/client.key (a client certificate the server
accepts, CN "cert-user") and, once listening, DIR/ready.json {"port": N} (written atomically), and
prints "READY <port>" on stdout.

pods/exec hook: GET/POST /api/v1/namespaces/NS/pods/POD/exec imports kube_exec_ws lazily and calls
handle_exec(handler, pod_socket_path, params, **exec_faults): `handler` is the BaseHTTPRequestHandler
(its request not yet answered), `pod_socket_path` the local runtime socket set with
POST /_fake/pods {"name", "namespace"?, "socket"} (None for a Pod that only exists because a Ready
Session names it), `params` the parsed query (dict of lists, as urllib.parse.parse_qs returns), and
exec_faults the keyword arguments last set with POST /_fake/exec-faults (protocols, exit_code,
stderr_text, drop_after_bytes: see kube_exec_ws.py).

Control endpoints (JSON bodies):
  POST /_fake/config        {"ready_delay", "resume_delay", "bookmark_interval", "controller": bool,
                             "tokens": [...], "forbidden_tokens": [...]}
  POST /_fake/sessions/status {"namespace", "name", "status": {...} (merged), "conditions"?: [...]}
  POST /_fake/idle-suspend  {"namespace", "name"}: Suspended by the idle policy
  POST /_fake/faults        {"status", "count", "retry_after"?, "method"?, "path_contains"?}
  POST /_fake/refuse-watches {"count"}: the next N watch requests answer 405
  POST /_fake/compact       {}: every resourceVersion before now is gone (watches from it get 410)
  POST /_fake/pods          {"name", "namespace"?, "socket"}
  POST /_fake/exec-faults   {"protocols"?, "exit_code"?, "stderr_text"?, "drop_after_bytes"?}: for every
                             later exec (replaces the previous settings)
  POST /_fake/rbac/tokens, GET /_fake/audit, POST /_fake/audit/clear: see kube_rbac.py
  GET  /_fake/objects       the objects of the built-in kinds (kube_objects.py)
  GET  /_fake/log           the requests seen: [{"method","path","query","auth","user_agent","status",
                             "content_type","accept","peer"}] (peer: the client's address and port, which
                             shows whether connections are reused)
  POST /_fake/log/clear
"""

import argparse
import copy
import datetime
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import kube_objects  # built-in kinds (ServiceAccount, Secret, Service, PVC, Deployment, Role, RoleBinding)
import kube_rbac  # request attributes, the audit log, RBAC for ServiceAccount tokens

GROUP = "kelos.dev"
VERSION = "v1alpha2"
GV = GROUP + "/" + VERSION
RESOURCES = {
    "sessions": {"kind": "Session", "singular": "session", "short": ["sess"]},
    "sessionspawners": {"kind": "SessionSpawner", "singular": "sessionspawner", "short": []},
}
IDLE_REQUEST = "kelos.dev/session-idle-resume-request"
IDLE_REQUEST_TIME = "kelos.dev/session-idle-resume-request-time"


def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def make_certs(d):
    """A CA, a server certificate for 127.0.0.1/localhost/kube.test, a client certificate."""
    def run(*args):
        subprocess.run(["openssl", *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    p = lambda n: os.path.join(d, n)
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
        "-subj", "/CN=fake-kube-ca", "-keyout", p("ca.key"), "-out", p("ca.crt"),
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    with open(p("server.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kube.test\n"
                "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
    with open(p("client.ext"), "w") as f:
        f.write("basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n")
    for name, subj in (("server", "/CN=fake-kube-apiserver"), ("client", "/CN=cert-user/O=system:masters")):
        run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", subj,
            "-keyout", p(name + ".key"), "-out", p(name + ".csr"))
        run("x509", "-req", "-in", p(name + ".csr"), "-CA", p("ca.crt"), "-CAkey", p("ca.key"),
            "-CAcreateserial", "-days", "2", "-out", p(name + ".crt"), "-extfile", p(name + ".ext"))


def status_body(code, reason, message, details=None):
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}
    if details:
        body["details"] = details
    return body


def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if not isinstance(target, dict):
        target = {}
    out = dict(target)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


class PatchError(Exception):
    pass


def json_pointer(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError("invalid JSON pointer " + path)
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def json_patch(doc, ops):
    doc = copy.deepcopy(doc)
    if not isinstance(ops, list):
        raise PatchError("a JSON patch must be a list")
    for op in ops:
        kind, parts = op.get("op"), json_pointer(op.get("path", ""))
        if not parts:
            raise PatchError("cannot patch the root")
        parent = doc
        for p in parts[:-1]:
            if isinstance(parent, list):
                parent = parent[int(p)]
            elif isinstance(parent, dict) and p in parent:
                parent = parent[p]
            else:
                raise PatchError("path " + op["path"] + " does not exist")
        last = parts[-1]
        if kind == "test":
            cur = parent[int(last)] if isinstance(parent, list) else parent.get(last, None)
            if cur != op.get("value"):
                raise PatchError("test failed for " + op["path"])
        elif kind in ("add", "replace"):
            if isinstance(parent, list):
                if last == "-":
                    parent.append(op["value"])
                elif kind == "add":
                    parent.insert(int(last), op["value"])
                else:
                    parent[int(last)] = op["value"]
            else:
                if kind == "replace" and last not in parent:
                    raise PatchError("path " + op["path"] + " does not exist")
                parent[last] = op["value"]
        elif kind == "remove":
            if isinstance(parent, list):
                del parent[int(last)]
            elif last in parent:
                del parent[last]
            else:
                raise PatchError("path " + op["path"] + " does not exist")
        else:
            raise PatchError("unsupported op " + str(kind))
    return doc


def parse_label_selector(sel):
    reqs = []
    for part in filter(None, (p.strip() for p in sel.split(","))):
        m = re.match(r"^([^!=]+?)\s*(==|=|!=)\s*(.*)$", part)
        if m:
            reqs.append((m.group(1), m.group(2), m.group(3)))
        elif part.startswith("!"):
            reqs.append((part[1:], "!exists", None))
        else:
            reqs.append((part, "exists", None))
    return reqs


def labels_match(obj, reqs):
    labels = obj.get("metadata", {}).get("labels", {}) or {}
    for key, op, val in reqs:
        if op in ("=", "==") and labels.get(key) != val:
            return False
        if op == "!=" and labels.get(key) == val:
            return False
        if op == "exists" and key not in labels:
            return False
        if op == "!exists" and key in labels:
            return False
    return True


def fields_match(obj, sel):
    for part in filter(None, (p.strip() for p in sel.split(","))):
        neg = "!=" in part
        key, _, val = part.partition("!=" if neg else "=")
        val = val.lstrip("=")
        md = obj.get("metadata", {})
        actual = {"metadata.name": md.get("name"), "metadata.namespace": md.get("namespace")}.get(key)
        if (actual == val) == neg:
            return False
    return True


class FakeState:
    def __init__(self, args):
        self.lock = threading.Condition()
        self.rv = 100
        self.oldest_rv = 100  # watches from an older resourceVersion get 410 Gone
        self.objects = {}  # (plural, ns, name) -> obj
        self.events = []  # (rv, type, plural, ns, obj)
        self.tokens = {args.token} if args.token else set()
        self.forbidden_tokens = set()
        self.ready_delay = args.ready_delay
        self.resume_delay = args.ready_delay
        self.bookmark_interval = 1.0
        self.controller = True
        self.faults = []
        self.refuse_watches = 0
        self.pods = {}  # (ns, name) -> socket
        self.exec_faults = {}
        self.log = []
        self.due = {}  # (ns, name) -> monotonic time when Pending becomes Ready
        self.port = 0

    def next_rv(self):
        self.rv += 1
        return str(self.rv)

    def emit(self, etype, plural, obj):
        # Called with the lock held.
        self.events.append((int(obj["metadata"]["resourceVersion"]), etype, plural,
                            obj["metadata"].get("namespace", ""), copy.deepcopy(obj)))
        if len(self.events) > 10000:
            self.events = self.events[-5000:]
            self.oldest_rv = max(self.oldest_rv, self.events[0][0] - 1)
        self.lock.notify_all()

    def store(self, plural, obj, etype):
        md = obj["metadata"]
        md["resourceVersion"] = self.next_rv()
        self.objects[(plural, md.get("namespace", ""), md["name"])] = obj
        self.emit(etype, plural, obj)
        return obj


def session_condition(status, ready, reason, message=""):
    status["conditions"] = [
        {"type": "Ready", "status": "True" if ready else "False", "reason": reason, "message": message,
         "lastTransitionTime": now_rfc3339()},
    ]


def controller_loop(state):
    """Drives Sessions: Pending -> Ready after ready_delay; spec.suspend -> Suspended; resume requests."""
    while True:
        time.sleep(0.05)
        with state.lock:
            if not state.controller:
                continue
            for key, obj in list(state.objects.items()):
                if key[0] != "sessions":
                    continue
                ns, name = key[1], key[2]
                spec = obj.setdefault("spec", {})
                st = obj.setdefault("status", {})
                ann = obj["metadata"].setdefault("annotations", {}) or {}
                obj["metadata"]["annotations"] = ann
                phase = st.get("phase", "")
                changed = False
                ready_reason = next((c.get("reason") for c in st.get("conditions", []) if c.get("type") == "Ready"), "")
                if spec.get("suspend") is True:
                    if phase != "Suspended":
                        st["phase"] = "Suspended"
                        st.pop("podName", None)
                        st["message"] = "Session suspended by its owner"
                        session_condition(st, False, "Suspended", st["message"])
                        changed = True
                elif phase == "":
                    st["phase"] = "Pending"
                    st["message"] = "Waiting for the Pod"
                    session_condition(st, False, "PodPending")
                    state.due[(ns, name)] = time.monotonic() + state.ready_delay
                    changed = True
                elif phase == "Suspended" and ready_reason == "IdlePolicyTriggered":
                    if ann.get(IDLE_REQUEST) and not ann.get(IDLE_REQUEST_TIME):
                        ann[IDLE_REQUEST_TIME] = now_rfc3339()
                        st["phase"] = "Pending"
                        st["message"] = "Resuming after an idle suspension"
                        session_condition(st, False, "Resuming")
                        state.due[(ns, name)] = time.monotonic() + state.resume_delay
                        changed = True
                elif phase == "Suspended":
                    # The owner cleared spec.suspend.
                    st["phase"] = "Pending"
                    st["message"] = "Resuming"
                    session_condition(st, False, "Resuming")
                    state.due[(ns, name)] = time.monotonic() + state.resume_delay
                    changed = True
                elif phase == "Pending":
                    due = state.due.get((ns, name))
                    if due is None:
                        state.due[(ns, name)] = time.monotonic() + state.ready_delay
                    elif time.monotonic() >= due:
                        st["phase"] = "Ready"
                        st["podName"] = name + "-pod"
                        st["podUID"] = str(uuid.uuid4())
                        st["message"] = ""
                        session_condition(st, True, "PodReady")
                        state.due.pop((ns, name), None)
                        changed = True
                if changed:
                    state.store("sessions", obj, "MODIFIED")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-kube-apiserver"

    def setup(self):
        super().setup()
        # Headers and body are separate writes: with Nagle's algorithm the body waits for the
        # client's delayed ACK (40 ms a response on a kept-alive connection). API servers set it.
        try:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass

    def log_message(self, fmt, *args):  # quiet
        pass

    @property
    def fake(self):
        return self.server.fake

    # ---- responses ----
    def send_json(self, code, body, extra_headers=None):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (extra_headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self._status = code

    def send_status(self, code, reason, message, extra_headers=None, details=None):
        self.send_json(code, status_body(code, reason, message, details), extra_headers)

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    break
                data += self.rfile.read(size)
                self.rfile.readline()
            return data
        return self.rfile.read(n) if n else b""

    # ---- dispatch ----
    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_PATCH(self):
        self.dispatch("PATCH")

    def do_DELETE(self):
        self.dispatch("DELETE")

    def dispatch(self, method):
        self._status = 0
        url = urllib.parse.urlsplit(self.path)
        path, query = url.path, urllib.parse.parse_qs(url.query)
        entry = {"method": method, "path": path, "query": url.query,
                 "auth": self.auth_kind(), "user_agent": self.headers.get("User-Agent", ""),
                 "content_type": self.headers.get("Content-Type", ""), "accept": self.headers.get("Accept", ""),
                 "peer": "%s:%d" % self.client_address[:2]}
        try:
            if path.startswith("/_fake/"):
                self.control(method, path)
                return
            with self.fake.lock:
                self.fake.log.append(entry)
            if not self.authorize():
                return
            if self.inject_fault(method, path):
                return
            self.route(method, path, query)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.close_connection = True
        finally:
            entry["status"] = self._status

    def auth_kind(self):
        h = self.headers.get("Authorization", "")
        if h.startswith("Bearer "):
            return "bearer"
        try:
            if self.connection.getpeercert():
                return "certificate"
        except (AttributeError, ValueError):
            pass
        return "none"

    def authorize(self):
        h = self.headers.get("Authorization", "")
        user = None
        if h.startswith("Bearer "):
            token = h[len("Bearer "):]
            if token in self.fake.forbidden_tokens:
                self.send_status(403, "Forbidden", "sessions.kelos.dev is forbidden: User \"forbidden\" cannot "
                                 "access this resource")
                return False
            if token in self.fake.tokens:
                user = "token-user"
            else:
                user = kube_rbac.token_user(self.fake, token)
        else:
            try:
                cert = self.connection.getpeercert()
                if cert:
                    user = "cert-user"
            except (AttributeError, ValueError):
                pass
        if user is None:
            self.send_status(401, "Unauthorized", "Unauthorized")
            return False
        url = urllib.parse.urlsplit(self.path)
        return kube_rbac.authorize(self, user, self.command, url.path, urllib.parse.parse_qs(url.query))

    def inject_fault(self, method, path):
        with self.fake.lock:
            for f in self.fake.faults:
                if f["count"] <= 0:
                    continue
                if f.get("method") and f["method"] != method:
                    continue
                if f.get("path_contains") and f["path_contains"] not in path:
                    continue
                f["count"] -= 1
                break
            else:
                return False
        # Read the request body first: left unread it would be parsed as the next request on this
        # kept-alive connection (and answered with an error the client's next request would get).
        self.read_body()
        code = int(f["status"])
        headers = {"Retry-After": str(f["retry_after"])} if "retry_after" in f else {}
        reason = {429: "TooManyRequests", 409: "Conflict", 500: "InternalError", 503: "ServiceUnavailable"}.get(
            code, "InternalError")
        self.send_status(code, reason, "injected fault " + str(code), headers)
        return True

    # ---- control ----
    def control(self, method, path):
        st = self.fake
        body = {}
        if method in ("POST", "PUT", "PATCH"):
            raw = self.read_body()
            body = json.loads(raw) if raw else {}
        with st.lock:
            if path == "/_fake/log" and method == "GET":
                self.send_json(200, st.log)
                return
            if path == "/_fake/log/clear":
                st.log.clear()
            elif path == "/_fake/config":
                for k in ("ready_delay", "resume_delay", "bookmark_interval", "controller"):
                    if k in body:
                        setattr(st, k, body[k])
                if "tokens" in body:
                    st.tokens = set(body["tokens"])
                if "forbidden_tokens" in body:
                    st.forbidden_tokens = set(body["forbidden_tokens"])
            elif path == "/_fake/sessions/status":
                key = ("sessions", body.get("namespace", "default"), body["name"])
                obj = st.objects.get(key)
                if obj is None:
                    self.send_status(404, "NotFound", "no such session")
                    return
                obj["status"] = merge_patch(obj.get("status", {}), body.get("status", {}))
                if "conditions" in body:
                    obj["status"]["conditions"] = body["conditions"]
                st.store("sessions", obj, "MODIFIED")
            elif path == "/_fake/idle-suspend":
                key = ("sessions", body.get("namespace", "default"), body["name"])
                obj = st.objects.get(key)
                if obj is None:
                    self.send_status(404, "NotFound", "no such session")
                    return
                s = obj.setdefault("status", {})
                s["phase"] = "Suspended"
                s.pop("podName", None)
                s["message"] = "Suspended after being idle"
                session_condition(s, False, "IdlePolicyTriggered", s["message"])
                st.store("sessions", obj, "MODIFIED")
            elif path == "/_fake/faults":
                st.faults.append(body)
            elif path == "/_fake/refuse-watches":
                st.refuse_watches = int(body.get("count", 1))
            elif path == "/_fake/compact":
                st.oldest_rv = st.rv
            elif path == "/_fake/pods":
                st.pods[(body.get("namespace", "default"), body["name"])] = body["socket"]
            elif path == "/_fake/exec-faults":
                st.exec_faults = body
            elif kube_rbac.control(self, method, path, body) or kube_objects.control(self, method, path, body):
                return
            else:
                self.send_status(404, "NotFound", "unknown control endpoint " + path)
                return
        self.send_json(200, {"ok": True, "resourceVersion": str(st.rv)})

    # ---- API ----
    def route(self, method, path, query):
        st = self.fake
        if method == "GET" and path in ("/version", "/version/"):
            self.send_json(200, {"major": "1", "minor": "32", "gitVersion": "v1.32.0-fake", "platform": "linux/amd64"})
            return
        if method == "GET" and path == "/api":
            self.send_json(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:%d" % st.port}]})
            return
        if method == "GET" and path == "/apis":
            gv = {"groupVersion": GV, "version": VERSION}
            self.send_json(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                {"name": GROUP, "versions": [gv], "preferredVersion": gv}] + kube_objects.api_groups()})
            return
        if method == "GET" and path == "/api/v1":
            self.send_json(200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1", "resources": [
                {"name": "pods", "singularName": "pod", "namespaced": True, "kind": "Pod", "verbs": ["get", "list"],
                 "shortNames": ["po"]},
                {"name": "pods/exec", "singularName": "", "namespaced": True, "kind": "PodExecOptions",
                 "verbs": ["create", "get"]}] + kube_objects.core_resources()})
            return
        if method == "GET" and path == "/apis/" + GV:
            res = []
            for plural, info in RESOURCES.items():
                res.append({"name": plural, "singularName": info["singular"], "namespaced": True,
                            "kind": info["kind"], "shortNames": info["short"],
                            "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]})
                res.append({"name": plural + "/status", "singularName": "", "namespaced": True,
                            "kind": info["kind"], "verbs": ["get", "patch", "update"]})
            self.send_json(200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GV, "resources": res})
            return
        if method == "GET" and path == "/apis/" + GROUP:
            gv = {"groupVersion": GV, "version": VERSION}
            self.send_json(200, {"kind": "APIGroup", "apiVersion": "v1", "name": GROUP, "versions": [gv],
                                 "preferredVersion": gv})
            return
        m = re.match(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)(/exec)?$", path)
        if m:
            self.pod_route(method, m.group(1), m.group(2), m.group(3), query)
            return
        m = re.match(r"^/apis/" + re.escape(GV) + r"(?:/namespaces/([^/]+))?/([a-z]+)(?:/([^/]+))?(/status)?$", path)
        if m and m.group(2) in RESOURCES:
            self.resource_route(method, m.group(1), m.group(2), m.group(3), query)
            return
        if kube_objects.route(self, method, path, query):
            return
        self.send_status(404, "NotFound", "the server could not find the requested resource")

    def pod_route(self, method, ns, name, exec_suffix, query):
        st = self.fake
        with st.lock:
            sock = st.pods.get((ns, name))
            if sock is None:
                # A Ready Session's Pod exists too.
                for (plural, sns, sname), obj in st.objects.items():
                    if plural == "sessions" and sns == ns and obj.get("status", {}).get("podName") == name:
                        sock = ""
        if sock is None:
            self.send_status(404, "NotFound", 'pods "%s" not found' % name, details={"name": name, "kind": "pods"})
            return
        pod = {"name": name, "namespace": ns, "socket": sock}
        if exec_suffix:
            # ---- pods/exec hook: the WebSocket side lives in kube_exec_ws.py (another module). ----
            try:
                from kube_exec_ws import handle_exec  # noqa: imported lazily on purpose
            except ImportError as e:
                self.send_status(501, "NotImplemented", "pods/exec is not available in this fake: %s" % e)
                return
            with st.lock:
                faults = dict(st.exec_faults)
            if "protocols" in faults:
                faults["protocols"] = tuple(faults["protocols"])
            self._status = 101
            handle_exec(self, sock or None, query, **faults)
            self.close_connection = True
            return
        if method != "GET":
            self.send_status(405, "MethodNotAllowed", "only GET on pods")
            return
        self.send_json(200, {"kind": "Pod", "apiVersion": "v1", "metadata": {
            "name": name, "namespace": ns, "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, ns + "/" + name)),
            "resourceVersion": "1", "creationTimestamp": now_rfc3339()},
            "spec": {"containers": [{"name": "kelos-agent", "image": "kelos/agent:fake"}]},
            "status": {"phase": "Running", "containerStatuses": [{"name": "kelos-agent", "ready": True,
                                                                   "restartCount": 0, "image": "kelos/agent:fake",
                                                                   "imageID": "", "state": {"running": {}}}]}})

    def wants_table(self):
        return "as=Table" in self.headers.get("Accept", "")

    def to_table(self, plural, objs, rv):
        rows = []
        for o in objs:
            st_ = o.get("status", {})
            rows.append({"cells": [o["metadata"]["name"], st_.get("phase", ""), st_.get("podName", ""),
                                   o["metadata"].get("creationTimestamp", "")], "object": o})
        return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": rv},
                "columnDefinitions": [
                    {"name": "Name", "type": "string", "format": "name", "description": "name", "priority": 0},
                    {"name": "Phase", "type": "string", "format": "", "description": "phase", "priority": 0},
                    {"name": "Pod", "type": "string", "format": "", "description": "pod", "priority": 0},
                    {"name": "Created", "type": "string", "format": "", "description": "created", "priority": 0}],
                "rows": rows}

    def resource_route(self, method, ns, plural, name, query):
        st = self.fake
        info = RESOURCES[plural]
        q = lambda k, d="": query.get(k, [d])[0]
        if name is None and method == "GET" and q("watch") in ("true", "1"):
            self.watch(ns, plural, query)
            return
        if name is None and method == "GET":
            sel, fsel = parse_label_selector(q("labelSelector")), q("fieldSelector")
            with st.lock:
                items = [copy.deepcopy(o) for (p, ons, _), o in sorted(st.objects.items())
                         if p == plural and (ns is None or ons == ns) and labels_match(o, sel)
                         and fields_match(o, fsel)]
                rv = str(st.rv)
            if self.wants_table():
                self.send_json(200, self.to_table(plural, items, rv))
            else:
                self.send_json(200, {"kind": info["kind"] + "List", "apiVersion": GV,
                                     "metadata": {"resourceVersion": rv}, "items": items})
            return
        if ns is None:
            self.send_status(404, "NotFound", "the server could not find the requested resource")
            return
        if name is None and method == "POST":
            raw = self.read_body()
            try:
                obj = json.loads(raw)
            except ValueError:
                self.send_status(400, "BadRequest", "the body is not JSON")
                return
            md = obj.setdefault("metadata", {})
            if not md.get("name") and md.get("generateName"):
                md["name"] = md["generateName"] + uuid.uuid4().hex[:5]
            if not md.get("name"):
                self.send_status(422, "Invalid", info["kind"] + ' is invalid: metadata.name: Required value')
                return
            if obj.get("kind") not in (None, info["kind"]):
                self.send_status(400, "BadRequest", "kind %s does not match %s" % (obj.get("kind"), plural))
                return
            with st.lock:
                if (plural, ns, md["name"]) in st.objects:
                    self.send_status(409, "AlreadyExists", '%s.%s "%s" already exists' % (plural, GROUP, md["name"]),
                                     details={"name": md["name"], "group": GROUP, "kind": plural})
                    return
                obj["apiVersion"], obj["kind"] = GV, info["kind"]
                md["namespace"] = ns
                md["uid"] = str(uuid.uuid4())
                md["creationTimestamp"] = now_rfc3339()
                md["generation"] = 1
                if plural == "sessions":
                    obj.pop("status", None)
                st.store(plural, obj, "ADDED")
                out = copy.deepcopy(obj)
            self.send_json(201, out)
            return
        if name is None:
            self.send_status(405, "MethodNotAllowed", "method not allowed on a collection")
            return
        key = (plural, ns, name)
        not_found = lambda: self.send_status(404, "NotFound", '%s.%s "%s" not found' % (plural, GROUP, name),
                                             details={"name": name, "group": GROUP, "kind": plural})
        if method == "GET":
            with st.lock:
                obj = copy.deepcopy(st.objects.get(key))
                rv = str(st.rv)
            if obj is None:
                not_found()
            elif self.wants_table():
                self.send_json(200, self.to_table(plural, [obj], rv))
            else:
                self.send_json(200, obj)
            return
        if method == "DELETE":
            self.read_body()
            with st.lock:
                obj = st.objects.pop(key, None)
                if obj is not None:
                    obj["metadata"]["resourceVersion"] = st.next_rv()
                    st.emit("DELETED", plural, obj)
                    obj = copy.deepcopy(obj)
            if obj is None:
                not_found()
            else:
                self.send_json(200, obj)
            return
        if method in ("PATCH", "PUT"):
            raw = self.read_body()
            try:
                body = json.loads(raw)
            except ValueError:
                self.send_status(400, "BadRequest", "the body is not JSON")
                return
            ctype = self.headers.get("Content-Type", "").split(";")[0].strip()
            with st.lock:
                cur = st.objects.get(key)
                if cur is None:
                    not_found()
                    return
                try:
                    if method == "PUT":
                        new = body
                    elif ctype in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
                        new = merge_patch(cur, body)
                    elif ctype == "application/json-patch+json":
                        new = json_patch(cur, body)
                    else:
                        self.send_status(415, "UnsupportedMediaType", "the patch type %s is not supported" % ctype)
                        return
                except (PatchError, ValueError, IndexError, KeyError, TypeError) as e:
                    self.send_status(422, "Invalid", "the patch could not be applied: %s" % e)
                    return
                want_rv = (new.get("metadata") or {}).get("resourceVersion")
                if want_rv and want_rv != cur["metadata"]["resourceVersion"]:
                    self.send_status(409, "Conflict", 'Operation cannot be fulfilled on %s.%s "%s": the object has '
                                     'been modified; please apply your changes to the latest version and try again'
                                     % (plural, GROUP, name), details={"name": name, "group": GROUP, "kind": plural})
                    return
                for k in ("uid", "creationTimestamp", "namespace", "name"):
                    new.setdefault("metadata", {})[k] = cur["metadata"].get(k)
                new["apiVersion"], new["kind"] = GV, info["kind"]
                if new == cur:
                    out = copy.deepcopy(cur)  # no-op patches keep the resourceVersion, as the API server does
                else:
                    st.store(plural, new, "MODIFIED")
                    out = copy.deepcopy(new)
            self.send_json(200, out)
            return
        self.send_status(405, "MethodNotAllowed", "method not allowed")

    def watch(self, ns, plural, query):
        st = self.fake
        q = lambda k, d="": query.get(k, [d])[0]
        with st.lock:
            if st.refuse_watches > 0:
                st.refuse_watches -= 1
                refuse = True
            else:
                refuse = False
        if refuse:
            self.send_status(405, "MethodNotAllowed", "watch refused (injected)")
            return
        sel, fsel = parse_label_selector(q("labelSelector")), q("fieldSelector")
        bookmarks = q("allowWatchBookmarks") == "true"
        timeout = float(q("timeoutSeconds", "1800") or 1800)
        since = q("resourceVersion")
        table = self.wants_table()
        with st.lock:
            if since in ("", "0"):
                # "Any" resourceVersion: start with synthetic ADDED events for what exists now.
                pos_rv = st.rv
                initial = [("ADDED", copy.deepcopy(o)) for (p, ons, _), o in sorted(st.objects.items())
                           if p == plural and (ns is None or ons == ns) and labels_match(o, sel)
                           and fields_match(o, fsel)]
            else:
                try:
                    pos_rv = int(since)
                except ValueError:
                    self.send_status(400, "BadRequest", "invalid resourceVersion " + since)
                    return
                initial = []
                if pos_rv < st.oldest_rv:
                    gone = True
                else:
                    gone = False
                if gone:
                    pass
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._status = 200

        def send_event(etype, obj):
            if table and etype != "BOOKMARK" and etype != "ERROR":
                obj = self.to_table(plural, [obj], obj["metadata"]["resourceVersion"])
            line = (json.dumps({"type": etype, "object": obj}) + "\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.flush()

        try:
            if since not in ("", "0") and pos_rv < st.oldest_rv:
                send_event("ERROR", status_body(410, "Expired", "too old resource version: %d (%d)" %
                                                (pos_rv, st.oldest_rv)))
                self.wfile.write(b"0\r\n\r\n")
                return
            for etype, obj in initial:
                send_event(etype, obj)
            end = time.monotonic() + timeout
            last_bookmark = time.monotonic()
            while True:
                with st.lock:
                    batch = [(rv, t, o) for (rv, t, p, ons, o) in st.events
                             if rv > pos_rv and p == plural and (ns is None or ons == ns)]
                    if not batch:
                        wait = min(end, last_bookmark + float(st.bookmark_interval)) - time.monotonic()
                        if wait > 0:
                            st.lock.wait(wait)
                        batch = [(rv, t, o) for (rv, t, p, ons, o) in st.events
                                 if rv > pos_rv and p == plural and (ns is None or ons == ns)]
                    current_rv = st.rv
                for rv, etype, obj in batch:
                    pos_rv = max(pos_rv, rv)
                    if labels_match(obj, sel) and fields_match(obj, fsel):
                        send_event(etype, obj)
                now = time.monotonic()
                if now >= end:
                    break
                if bookmarks and now - last_bookmark >= float(st.bookmark_interval):
                    last_bookmark = now
                    pos_rv = max(pos_rv, current_rv) if not batch else pos_rv
                    send_event("BOOKMARK", {"kind": RESOURCES[plural]["kind"], "apiVersion": GV,
                                            "metadata": {"resourceVersion": str(pos_rv)}})
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            self.close_connection = True


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        # A client that hangs up is normal in tests; anything else goes to stderr.
        exc = sys.exc_info()[1]
        if isinstance(exc, (BrokenPipeError, ConnectionResetError, ssl.SSLError, socket.timeout)):
            return
        super().handle_error(request, client_address)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--token", default="test-token")
    ap.add_argument("--ready-delay", type=float, default=0.3)
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    make_certs(args.dir)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    state = FakeState(args)
    srv = Server(("127.0.0.1", args.port), Handler)
    srv.fake = state
    state.port = srv.server_address[1]
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(args.dir, "server.crt"), os.path.join(args.dir, "server.key"))
    ctx.load_verify_locations(os.path.join(args.dir, "ca.crt"))
    ctx.verify_mode = ssl.CERT_OPTIONAL  # client certificates authenticate when presented
    ctx.set_alpn_protocols(["http/1.1"])
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True, do_handshake_on_connect=False)
    threading.Thread(target=controller_loop, args=(state,), daemon=True).start()
    tmp = os.path.join(args.dir, "ready.json.tmp")
    with open(tmp, "w") as f:
        json.dump({"port": state.port}, f)
    os.replace(tmp, os.path.join(args.dir, "ready.json"))
    print("READY %d" % state.port, flush=True)
    try:
        srv.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
