"""Built-in kinds for the fake Kubernetes API server (kube_apiserver.py), enough for `kubectl apply -k deploy/`:
v1 Namespace, ServiceAccount, Secret, ConfigMap, Service, PersistentVolumeClaim; apps/v1 Deployment;
rbac.authorization.k8s.io/v1 Role and RoleBinding. Standard library only.

What it serves, as the real API server does for these kinds:
  * discovery: /apis/apps, /apis/apps/v1, /apis/rbac.authorization.k8s.io(/v1), and the entries that
    kube_apiserver.py adds to /api/v1 and /apis (core_resources(), api_groups());
  * OpenAPI v3 (/openapi/v3 and one document per group version) with the PATCH and POST operations and their
    `fieldValidation` parameter, which is what kubectl reads to decide that the server validates fields itself
    (so `kubectl apply` validates without `--validate=false`). The documents carry no schemas: kubectl then
    computes strategic merge patches from its compiled-in types, as it does for any built-in kind;
  * GET, LIST (label and field selectors; Table output for `kubectl get`), POST, PUT (resourceVersion
    conflicts), PATCH (strategic merge as kube_patch.py applies it, JSON merge, JSON patch), DELETE; `dryRun=All`
    stores nothing;
  * `fieldValidation=Strict` (kubectl's default): unknown fields and values of the wrong type are a 400
    "strict decoding error"; semantic validation (kube_schema.validate) is a 422 Invalid with the causes;
  * what the server fills in: uid, resourceVersion (the fake's one counter), creationTimestamp, generation
    (bumped when a Deployment's spec changes), a Secret's stringData folded into base64 data, a Service's
    type, clusterIP, port protocol and targetPort; and what it refuses to change: a Deployment's selector, a
    RoleBinding's roleRef, a Service's clusterIP;
  * namespaces: default, kube-system, kube-public and kube-node-lease exist from the start, others are created
    (`kubectl create namespace`); writing an object of these kinds into a namespace that does not exist is a
    404, as on a real cluster. (The kelos.dev resources of kube_apiserver.py do not check.)

What it simplifies: no watch on these kinds (405), no deletecollection, no server-side apply
(application/apply-patch+yaml is 415), no controllers (a Deployment never gets Pods or status, a PVC stays
Pending), no owner references or garbage collection, deleting a namespace leaves its objects, no ClusterRoles
or ClusterRoleBindings, no RBAC escalation check on Role creation. Authorization is kube_rbac.py's.

Control endpoint: GET /_fake/objects lists every stored object of these kinds (no auth, loopback).
"""

import base64
import copy
import datetime
import hashlib
import json
import re
import uuid

import kube_patch
import kube_schema

KINDS = [
    # group, version, plural, kind, singular, short names (all namespaced but Namespace)
    ("", "v1", "namespaces", "Namespace", "namespace", ["ns"]),
    ("", "v1", "serviceaccounts", "ServiceAccount", "serviceaccount", ["sa"]),
    ("", "v1", "secrets", "Secret", "secret", []),
    ("", "v1", "configmaps", "ConfigMap", "configmap", ["cm"]),
    ("", "v1", "services", "Service", "service", ["svc"]),
    ("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", "persistentvolumeclaim", ["pvc"]),
    ("apps", "v1", "deployments", "Deployment", "deployment", ["deploy"]),
    ("rbac.authorization.k8s.io", "v1", "roles", "Role", "role", []),
    ("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", "rolebinding", []),
]
kube_schema.TYPES.setdefault("ConfigMap", {"apiVersion": kube_schema.STR, "kind": kube_schema.STR,
                                           "metadata": "ObjectMeta", "data": kube_schema.MAP,
                                           "binaryData": kube_schema.MAP, "immutable": kube_schema.BOOL})
kube_schema.TYPES.setdefault("Namespace", {"apiVersion": kube_schema.STR, "kind": kube_schema.STR,
                                           "metadata": "ObjectMeta", "spec": {"finalizers": kube_schema.STRS},
                                           "status": kube_schema.ANY})
CLUSTER_SCOPED = {"Namespace"}
# Namespaces that exist from the start, as in a new cluster.
INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
BY_PLURAL = {(k[0], k[2]): k for k in KINDS}
VERBS = ["create", "delete", "get", "list", "patch", "update"]
# The kelos.dev resources kube_apiserver.py serves, listed in the OpenAPI documents too (so kubectl's
# field-validation check succeeds for them as well).
KELOS = [("kelos.dev", "v1alpha2", "sessions", "Session"), ("kelos.dev", "v1alpha2", "sessionspawners",
                                                                 "SessionSpawner")]


def gv_string(group, version):
    return version if group == "" else group + "/" + version


def prefix(group, version):
    return "/api/" + version if group == "" else "/apis/%s/%s" % (group, version)


def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class ObjectsState:
    def __init__(self, fake):
        self.fake = fake
        self.objects = {}  # (group, plural, namespace, name) -> object; namespace "" for a cluster-scoped one
        self.next_ip = 1
        for name in INITIAL_NAMESPACES:
            obj = {"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": name, "uid": str(uuid.uuid4()), "creationTimestamp": now_rfc3339(),
                                "resourceVersion": "1", "labels": {"kubernetes.io/metadata.name": name}},
                   "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}
            self.objects[("", "namespaces", "", name)] = obj

    def namespace_exists(self, name):
        with self.fake.lock:
            return ("", "namespaces", "", name) in self.objects

    def items(self, group, plural, namespace=None):
        with self.fake.lock:
            return [copy.deepcopy(o) for (g, p, ns, _), o in sorted(self.objects.items())
                    if g == group and p == plural and (namespace is None or ns == namespace)]

    def get(self, group, plural, namespace, name):
        with self.fake.lock:
            o = self.objects.get((group, plural, namespace, name))
            return copy.deepcopy(o) if o is not None else None


def state(fake):
    with fake.lock:
        st = getattr(fake, "_objects", None)
        if st is None:
            st = fake._objects = ObjectsState(fake)
        return st


# ---- discovery and OpenAPI -------------------------------------------------------------------------

def resource_entry(kind):
    group, version, plural, kname, singular, short = kind
    entry = {"name": plural, "singularName": singular, "namespaced": kname not in CLUSTER_SCOPED, "kind": kname,
             "verbs": VERBS}
    if short:
        entry["shortNames"] = short
    return entry


def core_resources():
    """Entries for /api/v1's APIResourceList."""
    return [resource_entry(k) for k in KINDS if k[0] == ""]


def api_groups():
    """Entries for /apis's APIGroupList."""
    out = []
    for group in sorted({k[0] for k in KINDS if k[0]}):
        gv = {"groupVersion": group + "/v1", "version": "v1"}
        out.append({"name": group, "versions": [gv], "preferredVersion": gv})
    return out


def openapi_gv_docs():
    """{ "api/v1": doc, "apis/apps/v1": doc, ... }: OpenAPI v3 documents with the write operations."""
    docs = {}
    entries = [(k[0], k[1], k[2], k[3]) for k in KINDS] + KELOS
    for group, version, plural, kind in entries:
        key = prefix(group, version)[1:]
        scope = "" if kind in CLUSTER_SCOPED else "/namespaces/{namespace}"
        doc = docs.setdefault(key, {"openapi": "3.0.0", "info": {"title": "Kubernetes (fake)", "version": "v1.32.0"},
                                    "paths": {}, "components": {"schemas": {}}})
        gvk = {"group": group, "version": version, "kind": kind}
        param = [{"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True},
                  "description": "Ignore, Warn or Strict"},
                 {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
                 {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": True}}]
        base = prefix(group, version) + scope + "/" + plural
        def op(action):
            return {"operationId": action + kind, "parameters": param, "x-kubernetes-action": action,
                    "x-kubernetes-group-version-kind": gvk, "responses": {"200": {"description": "OK"}}}
        doc["paths"][base] = {"post": op("post"), "get": dict(op("list"), parameters=[])}
        doc["paths"][base + "/{name}"] = {"patch": op("patch"), "put": op("put"), "get": dict(op("get"), parameters=[])}
    return docs


def openapi_root(docs):
    paths = {}
    for key, doc in sorted(docs.items()):
        digest = hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest().upper()
        paths[key] = {"serverRelativeURL": "/openapi/v3/%s?hash=%s" % (key, digest)}
    return {"paths": paths}


# ---- selectors and tables -------------------------------------------------------------------------

def labels_match(obj, selector):
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for part in filter(None, (p.strip() for p in selector.split(","))):
        m = re.match(r"^([^!=]+?)\s*(==|=|!=)\s*(.*)$", part)
        if m:
            key, op, val = m.groups()
            if (labels.get(key) == val) != (op != "!="):
                return False
        elif part.startswith("!"):
            if part[1:] in labels:
                return False
        elif part not in labels:
            return False
    return True


def fields_match(obj, selector):
    md = obj.get("metadata") or {}
    for part in filter(None, (p.strip() for p in selector.split(","))):
        neg = "!=" in part
        key, _, val = part.partition("!=" if neg else "=")
        val = val.lstrip("=")
        actual = {"metadata.name": md.get("name"), "metadata.namespace": md.get("namespace")}.get(key)
        if (actual == val) == neg:
            return False
    return True


def age(ts):
    try:
        t = datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    except (TypeError, ValueError):
        return "<unknown>"
    s = int((datetime.datetime.now(datetime.timezone.utc) - t).total_seconds())
    return "%ds" % s if s < 120 else "%dm" % (s // 60) if s < 7200 else "%dh" % (s // 3600)


def table(kind, objs, rv):
    def cells(o):
        spec = o.get("spec") or {}
        extra = {
            "Deployment": lambda: ["%d" % spec.get("replicas", 1), (spec.get("strategy") or {}).get("type", "")],
            "Service": lambda: [spec.get("type", ""), spec.get("clusterIP", ""),
                                ",".join("%s/%s" % (p.get("port"), p.get("protocol", "TCP"))
                                         for p in spec.get("ports") or [])],
            "PersistentVolumeClaim": lambda: [(o.get("status") or {}).get("phase", ""),
                                              ((spec.get("resources") or {}).get("requests") or {}).get("storage", "")],
            "Secret": lambda: [o.get("type", ""), "%d" % len(o.get("data") or {})],
        }.get(kind, lambda: [])()
        return [o["metadata"]["name"]] + extra + [age(o["metadata"].get("creationTimestamp"))]
    names = {"Deployment": ["Replicas", "Strategy"], "Service": ["Type", "Cluster-IP", "Port(s)"],
             "PersistentVolumeClaim": ["Status", "Capacity"], "Secret": ["Type", "Data"]}.get(kind, [])
    cols = [{"name": "Name", "type": "string", "format": "name", "description": "name", "priority": 0}]
    cols += [{"name": n, "type": "string", "format": "", "description": n, "priority": 0} for n in names]
    cols.append({"name": "Age", "type": "string", "format": "", "description": "age", "priority": 0})
    rows = [{"cells": cells(o), "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                           "metadata": o["metadata"]}} for o in objs]
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": rv},
            "columnDefinitions": cols, "rows": rows}


# ---- what the server fills in and refuses to change -----------------------------------------------

def fill_in(st, kind, obj, old):
    if kind == "Secret":
        string_data = obj.pop("stringData", None) or {}
        if string_data:
            data = obj.get("data") or {}
            for k, v in string_data.items():
                data[k] = base64.b64encode(v.encode()).decode()
            obj["data"] = data
        obj.setdefault("type", "Opaque")
    elif kind == "Service":
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        if "clusterIP" not in spec and spec["type"] != "ExternalName":
            if old is not None:
                spec["clusterIP"] = (old.get("spec") or {}).get("clusterIP")
            else:
                spec["clusterIP"] = "10.96.%d.%d" % (st.next_ip // 250, st.next_ip % 250 + 1)
                st.next_ip += 1
            spec["clusterIPs"] = [spec["clusterIP"]]
        for p in spec.get("ports") or []:
            p.setdefault("protocol", "TCP")
            p.setdefault("targetPort", p.get("port"))
    elif kind == "Namespace":
        obj.setdefault("metadata", {}).setdefault("labels", {})["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj["status"] = {"phase": "Active"}
    elif kind == "PersistentVolumeClaim":
        obj["status"] = (old or {}).get("status") or {"phase": "Pending"}
    elif kind == "Deployment":
        spec = obj.setdefault("spec", {})
        spec.setdefault("replicas", 1)
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
        spec.setdefault("strategy", {"type": "RollingUpdate",
                                     "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
        obj["status"] = (old or {}).get("status") or {}


def immutable_errors(kind, old, new):
    errs = []
    if kind == "Deployment" and (old.get("spec") or {}).get("selector") != (new.get("spec") or {}).get("selector"):
        errs.append("spec.selector: Invalid value: %s: field is immutable" % json.dumps(new["spec"].get("selector")))
    if kind == "RoleBinding" and old.get("roleRef") != new.get("roleRef"):
        errs.append("roleRef: Invalid value: %s: cannot change roleRef" % json.dumps(new.get("roleRef")))
    if kind == "Service":
        o, n = (old.get("spec") or {}).get("clusterIP"), (new.get("spec") or {}).get("clusterIP")
        if o and n and o != n:
            errs.append('spec.clusterIP: Invalid value: "%s": field is immutable' % n)
    return errs


# ---- the REST handler ------------------------------------------------------------------------------

PATH = re.compile(r"^/(?:api/(v1)|apis/([^/]+)/(v1))(?:/namespaces/([^/]+))?/([a-z]+)(?:/([^/]+))?$")


def route(handler, method, path, query):
    """Serves this module's discovery, OpenAPI and objects; False when the path is not one of them."""
    if method == "GET":
        for group in {k[0] for k in KINDS if k[0]}:
            gv = {"groupVersion": group + "/v1", "version": "v1"}
            if path == "/apis/" + group:
                handler.send_json(200, {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": [gv],
                                        "preferredVersion": gv})
                return True
            if path == "/apis/%s/v1" % group:
                handler.send_json(200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group + "/v1",
                                        "resources": [resource_entry(k) for k in KINDS if k[0] == group]})
                return True
        if path.startswith("/openapi/v3"):
            docs = openapi_gv_docs()
            key = path[len("/openapi/v3"):].strip("/")
            if not key:
                handler.send_json(200, openapi_root(docs))
            elif key in docs:
                handler.send_json(200, docs[key])
            else:
                handler.send_status(404, "NotFound", "the server could not find the requested resource")
            return True
    m = PATH.match(path)
    if not m:
        return False
    group = m.group(2) or ""
    kind = BY_PLURAL.get((group, m.group(5)))
    if kind is None:
        return False
    Objects(handler, kind, m.group(4), m.group(6), query).serve(method)
    return True


class Objects:
    def __init__(self, handler, kind, namespace, name, query):
        self.h, self.kind, self.ns, self.name = handler, kind, namespace, name
        self.group, self.version, self.plural, self.kname = kind[0], kind[1], kind[2], kind[3]
        self.query = query
        self.fake = handler.fake
        self.st = state(self.fake)

    def q(self, k, default=""):
        return self.query.get(k, [default])[0]

    def qualified(self):
        return self.plural + ("." + self.group if self.group else "")

    def not_found(self):
        self.h.send_status(404, "NotFound", '%s "%s" not found' % (self.qualified(), self.name),
                           details={"name": self.name, "group": self.group, "kind": self.plural})

    def serve(self, method):
        cluster_scoped = self.kname in CLUSTER_SCOPED
        if cluster_scoped and self.ns is not None:
            self.h.read_body()
            return self.h.send_status(404, "NotFound", "the server could not find the requested resource")
        if self.name is None and method == "GET":
            return self.list()
        if cluster_scoped:
            self.ns = ""
        elif self.ns is None:
            self.h.read_body()
            return self.h.send_status(405, "MethodNotAllowed", "%s are namespaced: name a namespace" % self.plural)
        elif method in ("POST", "PUT", "PATCH") and not self.st.namespace_exists(self.ns):
            self.h.read_body()
            return self.h.send_status(404, "NotFound", 'namespaces "%s" not found' % self.ns,
                                      details={"name": self.ns, "kind": "namespaces"})
        if self.name is None and method == "POST":
            return self.write(None)
        if self.name is None:
            self.h.read_body()
            return self.h.send_status(405, "MethodNotAllowed", "this fake has no %s on a collection of %s"
                                      % (method, self.plural))
        if method == "GET":
            obj = self.st.get(self.group, self.plural, self.ns, self.name)
            if obj is None:
                return self.not_found()
            if "as=Table" in self.h.headers.get("Accept", ""):
                return self.h.send_json(200, table(self.kname, [obj], obj["metadata"]["resourceVersion"]))
            return self.h.send_json(200, obj)
        if method in ("PUT", "PATCH"):
            return self.write(method)
        if method == "DELETE":
            self.h.read_body()
            with self.fake.lock:
                obj = self.st.objects.get((self.group, self.plural, self.ns, self.name))
                if obj is None:
                    return self.not_found()
                if self.q("dryRun") != "All":
                    del self.st.objects[(self.group, self.plural, self.ns, self.name)]
                    self.fake.next_rv()
            return self.h.send_json(200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                          "details": {"name": self.name, "group": self.group, "kind": self.plural,
                                                      "uid": obj["metadata"].get("uid")}})
        self.h.send_status(405, "MethodNotAllowed", "method not allowed")

    def list(self):
        if self.q("watch") in ("true", "1"):
            return self.h.send_status(405, "MethodNotAllowed", "this fake does not watch %s" % self.qualified())
        lsel, fsel = self.q("labelSelector"), self.q("fieldSelector")
        with self.fake.lock:
            items = [o for o in self.st.items(self.group, self.plural, self.ns)
                     if labels_match(o, lsel) and fields_match(o, fsel)]
            rv = str(self.fake.rv)
        if "as=Table" in self.h.headers.get("Accept", ""):
            return self.h.send_json(200, table(self.kname, items, rv))
        self.h.send_json(200, {"kind": self.kname + "List", "apiVersion": gv_string(self.group, self.version),
                               "metadata": {"resourceVersion": rv}, "items": items})

    def decode_body(self):
        raw = self.h.read_body()
        if self.h.headers.get("Content-Type", "").startswith("application/vnd.kubernetes.protobuf"):
            # Typed clients (`kubectl create namespace`) send protobuf; the fake reads a Namespace's name and
            # labels from it and nothing else.
            obj = namespace_from_protobuf(raw) if self.kname == "Namespace" else None
            if obj is None:
                self.h.send_status(415, "UnsupportedMediaType", "this fake reads protobuf for a Namespace only: "
                                   "send JSON (`kubectl apply -f`)")
            return obj
        try:
            return json.loads(raw)
        except ValueError:
            self.h.send_status(400, "BadRequest", "the body is not JSON (this fake accepts JSON bodies only)")
            return None

    def write(self, method):
        """POST (method None), PUT or PATCH."""
        ctype = self.h.headers.get("Content-Type", "").split(";")[0].strip()
        if method == "PATCH" and ctype == "application/apply-patch+yaml":
            self.h.read_body()
            return self.h.send_status(415, "UnsupportedMediaType", "this fake has no server-side apply: use "
                                      "client-side `kubectl apply` (the default)")
        body = self.decode_body()
        if body is None:
            return
        with self.fake.lock:
            key = (self.group, self.plural, self.ns, self.name)
            old = self.st.objects.get(key)
            if method is None:
                obj = body
                if not isinstance(obj, dict):
                    return self.h.send_status(400, "BadRequest", "the body is not an object")
                md = obj.setdefault("metadata", {})
                if not md.get("name") and md.get("generateName"):
                    md["name"] = md["generateName"] + uuid.uuid4().hex[:5]
                key = (self.group, self.plural, self.ns, md.get("name", ""))
                if self.ns and md.get("namespace") not in (None, "", self.ns):
                    return self.h.send_status(400, "BadRequest", "the namespace of the provided object does not "
                                              "match the namespace sent on the request")
                old = self.st.objects.get(key)
                if old is not None:
                    return self.h.send_status(409, "AlreadyExists", '%s "%s" already exists'
                                              % (self.qualified(), md.get("name")),
                                              details={"name": md.get("name"), "group": self.group,
                                                       "kind": self.plural})
                old = None
            else:
                if old is None:
                    return self.not_found()
                try:
                    obj = self.apply(method, ctype, old, body)
                except (kube_patch.PatchError, ValueError, KeyError, IndexError, TypeError) as e:
                    return self.h.send_status(422, "Invalid", "the patch could not be applied: %s" % e)
                if obj is None:
                    return
            if obj.get("kind") not in (None, self.kname) or obj.get("apiVersion") not in (
                    None, gv_string(self.group, self.version)):
                return self.h.send_status(400, "BadRequest", "%s/%s does not match %s"
                                          % (obj.get("apiVersion"), obj.get("kind"), self.qualified()))
            if self.q("fieldValidation") == "Strict":
                errs = kube_schema.unknown_and_type_errors(obj, self.kname)
                if errs:
                    return self.h.send_status(400, "BadRequest", '%s in version "%s" cannot be handled as a %s: '
                                              "strict decoding error: %s" % (self.kname, self.version, self.kname,
                                                                             ", ".join(errs)))
            obj["apiVersion"], obj["kind"] = gv_string(self.group, self.version), self.kname
            md = obj.setdefault("metadata", {})
            if self.ns:
                md["namespace"] = self.ns
            else:
                md.pop("namespace", None)
            if old is not None:
                for k in ("uid", "creationTimestamp", "name", "generation"):
                    if k in old["metadata"]:
                        md[k] = old["metadata"][k]
            fill_in(self.st, self.kname, obj, old)
            errs = kube_schema.validate(self.kname, obj) + (immutable_errors(self.kname, old, obj) if old else [])
            if errs:
                return self.h.send_status(422, "Invalid", '%s "%s" is invalid: %s' % (self.kname, md.get("name"),
                                                                                      "; ".join(errs)),
                                          details={"name": md.get("name"), "group": self.group, "kind": self.kname,
                                                   "causes": [{"message": e} for e in errs]})
            if old is None:
                md["uid"] = str(uuid.uuid4())
                md["creationTimestamp"] = now_rfc3339()
                if self.kname == "Deployment":
                    md["generation"] = 1
            elif self.kname == "Deployment" and obj.get("spec") != old.get("spec"):
                md["generation"] = old["metadata"].get("generation", 1) + 1
            changed = old is None or {k: v for k, v in obj.items() if k != "metadata"} != \
                {k: v for k, v in old.items() if k != "metadata"} or \
                {k: v for k, v in md.items() if k != "resourceVersion"} != \
                {k: v for k, v in old["metadata"].items() if k != "resourceVersion"}
            if changed:
                md["resourceVersion"] = self.fake.next_rv()
            else:
                md["resourceVersion"] = old["metadata"]["resourceVersion"]
            if self.q("dryRun") != "All":
                self.st.objects[(self.group, self.plural, self.ns, md["name"])] = obj
            out = copy.deepcopy(obj)
        self.h.send_json(201 if method is None else 200, out)

    def apply(self, method, ctype, old, body):
        """The object after a PUT or PATCH; None when an answer was sent already."""
        if method == "PUT":
            want = (body.get("metadata") or {}).get("resourceVersion")
            if want and want != old["metadata"]["resourceVersion"]:
                self.h.send_status(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": the object has been '
                                   "modified; please apply your changes to the latest version and try again"
                                   % (self.qualified(), self.name),
                                   details={"name": self.name, "group": self.group, "kind": self.plural})
                return None
            return copy.deepcopy(body)
        if ctype == "application/strategic-merge-patch+json":
            new = kube_patch.strategic_merge(old, body, self.kname)
        elif ctype == "application/merge-patch+json":
            new = merge_patch(old, body)
        elif ctype == "application/json-patch+json":
            new = json_patch(old, body)
        else:
            self.h.send_status(415, "UnsupportedMediaType", "the patch type %s is not supported" % ctype)
            return None
        want = (body.get("metadata") or {}).get("resourceVersion") if isinstance(body, dict) else None
        if want and want != old["metadata"]["resourceVersion"]:
            self.h.send_status(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": the object has been '
                               "modified; please apply your changes to the latest version and try again"
                               % (self.qualified(), self.name),
                               details={"name": self.name, "group": self.group, "kind": self.plural})
            return None
        return new


def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def json_patch(doc, ops):
    """RFC 6902 add, replace, remove and test; paths into objects and lists."""
    doc = copy.deepcopy(doc)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent = doc
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent[p]
        last = parts[-1]
        if op["op"] == "test":
            if (parent[int(last)] if isinstance(parent, list) else parent.get(last)) != op.get("value"):
                raise ValueError("test failed for " + op["path"])
        elif op["op"] in ("add", "replace"):
            if isinstance(parent, list):
                if last == "-":
                    parent.append(op["value"])
                elif op["op"] == "add":
                    parent.insert(int(last), op["value"])
                else:
                    parent[int(last)] = op["value"]
            else:
                parent[last] = op["value"]
        elif op["op"] == "remove":
            del parent[int(last) if isinstance(parent, list) else last]
        else:
            raise ValueError("unsupported op %s" % op["op"])
    return doc


def protobuf_fields(data):
    """[(field number, wire type, value)] of one protobuf message (varints and length-delimited fields)."""
    out, i = [], 0
    def varint():
        nonlocal i
        shift = value = 0
        while True:
            b = data[i]
            i += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return value
    while i < len(data):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            out.append((number, wire, varint()))
        elif wire == 2:
            n = varint()
            out.append((number, wire, data[i:i + n]))
            i += n
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            out.append((number, wire, data[i:i + size]))
            i += size
        else:
            raise ValueError("protobuf wire type %d" % wire)
    return out


def namespace_from_protobuf(raw):
    """A Namespace (metadata.name and labels) from the API server's protobuf envelope ("k8s\\0" + Unknown), or
    None when it is not one."""
    if not raw.startswith(b"k8s\x00"):
        return None
    try:
        unknown = protobuf_fields(raw[4:])
        body = next(v for n, w, v in unknown if n == 2 and w == 2)  # Unknown.raw
        meta = next(v for n, w, v in protobuf_fields(body) if n == 1 and w == 2)  # Namespace.metadata
        md = {}
        for n, w, v in protobuf_fields(meta):
            if n == 1 and w == 2:
                md["name"] = v.decode()
            elif n == 2 and w == 2 and v:
                md["generateName"] = v.decode()
            elif n == 11 and w == 2:  # labels: map entries {1: key, 2: value}
                entry = {k: val.decode() for k, _, val in protobuf_fields(v)}
                md.setdefault("labels", {})[entry.get(1, "")] = entry.get(2, "")
        return {"apiVersion": "v1", "kind": "Namespace", "metadata": md}
    except (StopIteration, IndexError, ValueError, UnicodeDecodeError):
        return None


def control(handler, method, path, body):
    """GET /_fake/objects; False for another path."""
    if path == "/_fake/objects" and method == "GET":
        st = state(handler.fake)
        with handler.fake.lock:
            handler.send_json(200, [copy.deepcopy(o) for _, o in sorted(st.objects.items())])
        return True
    return False
