"""Authorization for the fake Kubernetes API server (kube_apiserver.py): every authenticated request described
in Kubernetes authorization terms and recorded (the audit log), and RBAC enforced for the tokens registered as
ServiceAccounts. Standard library only.

Request attributes follow the API server's RequestInfo: the verb is get/list/watch for reads (a GET on a
collection is list, `watch=true` makes it watch), create for POST, update for PUT, patch for PATCH, delete for
DELETE on an object and deletecollection on a collection; the API group ("" for the core group), the resource,
the subresource, the namespace, and the name (for list and watch, the name a `metadata.name=` field selector
picks). A pods/exec (also attach, portforward) WebSocket upgrade is a GET and is authorized as `get`; Kubernetes
1.35 adds a second, synthetic `create` check for it (feature gate AuthorizePodWebsocketUpgradeCreatePermission,
beta and on by default), and SPDY, a POST, was always `create`. The fake makes both checks and records both.
Requests to paths outside the resource API (/api, /apis, /version, /openapi/...) are non-resource requests:
verb get, `nonResourceURL` the path; every authenticated user may make them, as the default `system:discovery`
ClusterRole allows.

RBAC, as the RBAC authorizer evaluates it, for namespaced requests: the RoleBindings of the request's namespace
whose subjects name the user (a ServiceAccount subject's namespace defaults to the binding's), each granting the
rules of the Role it refers to (a roleRef to a ClusterRole grants nothing here: the fake stores no ClusterRoles,
and there are no ClusterRoleBindings). A rule matches when its apiGroups, resources ("resource/subresource" for
a subresource, "*" for any) and verbs hold the request's (or "*"), and its resourceNames are empty or hold the
request's name. Anything else is refused with 403 and the API server's message.

Control endpoints (JSON bodies; no auth, loopback, as every /_fake/ endpoint):
  POST /_fake/rbac/tokens {"token", "serviceAccount": {"namespace", "name"}}: requests with this bearer token are
                           the ServiceAccount system:serviceaccount:NS:NAME (groups system:serviceaccounts,
                           system:serviceaccounts:NS, system:authenticated) and RBAC decides what they may do
  GET  /_fake/audit        the authorization checks made, oldest first (the last 50,000 to 100,000): [{"user", "verb", "apiGroup", "resource",
                           "subresource", "namespace", "name", "nonResourceURL", "check", "allowed", "method",
                           "path"}]; `check` is "request", or "websocket-upgrade" for the synthetic create.
                           ?user=NAME keeps that user's only.
  POST /_fake/audit/clear
"""

import re
import urllib.parse

import kube_objects

SA_PREFIX = "system:serviceaccount:"
AUDIT_LIMIT = 100000  # the oldest half goes when it is reached (long benchmarks)


class RbacState:
    def __init__(self):
        self.tokens = {}  # token -> (user, [groups])
        self.audit = []


def state(fake):
    """The RBAC state of a FakeState (created on first use, under fake.lock)."""
    with fake.lock:
        st = getattr(fake, "_rbac", None)
        if st is None:
            st = fake._rbac = RbacState()
        return st


def token_user(fake, token):
    """The ServiceAccount user a registered token authenticates as, or None."""
    entry = state(fake).tokens.get(token)
    return entry[0] if entry else None


def attributes(method, path, query):
    """The authorization checks a request needs: a list of attribute dicts."""
    parts = [p for p in path.split("/") if p]
    def q(k):
        return query.get(k, [""])[0]
    info = None
    if len(parts) >= 2 and parts[0] == "api":
        group, rest = "", parts[2:]
        info = (group, rest)
    elif len(parts) >= 3 and parts[0] == "apis":
        group, rest = parts[1], parts[3:]
        info = (group, rest)
    if info is None or not info[1]:
        return [{"verb": method.lower(), "nonResourceURL": path, "apiGroup": "", "resource": "",
                 "subresource": "", "namespace": "", "name": "", "check": "request"}]
    group, rest = info
    ns = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        # As RequestInfoFactory: /namespaces/NS/RESOURCE/... is namespaced; /namespaces/NS[/status|/finalize]
        # is the Namespace NS itself.
        ns = rest[1]
        if len(rest) > 2 and rest[2] not in ("status", "finalize"):
            rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    watch = q("watch") in ("true", "1")
    if method in ("GET", "HEAD"):
        verb = "get" if name else ("watch" if watch else "list")
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete" if name else "deletecollection"}.get(method, method.lower())
    if not name and verb in ("list", "watch"):
        m = re.match(r"^metadata\.name=(.+)$", q("fieldSelector"))
        if m and "," not in m.group(1):
            name = m.group(1)
    base = {"apiGroup": group, "resource": resource, "subresource": sub, "namespace": ns, "name": name,
            "nonResourceURL": ""}
    checks = [dict(base, verb=verb, check="request")]
    if (group == "" and resource == "pods" and sub in ("exec", "attach", "portforward") and method == "GET"):
        checks.append(dict(base, verb="create", check="websocket-upgrade"))
    return checks


def rule_allows(rule, a):
    def has(values, v):
        return "*" in values or v in values
    if not has(rule.get("verbs") or [], a["verb"]):
        return False
    if not has(rule.get("apiGroups") or [], a["apiGroup"]):
        return False
    resources = rule.get("resources") or []
    wanted = a["resource"] + ("/" + a["subresource"] if a["subresource"] else "")
    if not ("*" in resources or wanted in resources or (a["subresource"] and "*/" + a["subresource"] in resources)):
        return False
    names = rule.get("resourceNames") or []
    return not names or a["name"] in names


def subject_matches(subject, user, groups, binding_ns):
    kind = subject.get("kind")
    if kind == "ServiceAccount":
        return user == SA_PREFIX + (subject.get("namespace") or binding_ns) + ":" + subject.get("name", "")
    if kind == "User":
        return user == subject.get("name")
    if kind == "Group":
        return subject.get("name") in groups
    return False


def allowed(fake, user, groups, a):
    if a["nonResourceURL"]:
        return True  # system:discovery / system:public-info-viewer
    if not a["namespace"]:
        return False  # no ClusterRoleBindings in this fake
    ostate = kube_objects.state(fake)
    for binding in ostate.items("rbac.authorization.k8s.io", "rolebindings", a["namespace"]):
        if not any(subject_matches(s, user, groups, a["namespace"]) for s in binding.get("subjects") or []):
            continue
        ref = binding.get("roleRef") or {}
        if ref.get("kind") != "Role":
            continue
        role = ostate.get("rbac.authorization.k8s.io", "roles", a["namespace"], ref.get("name", ""))
        if role and any(rule_allows(r, a) for r in role.get("rules") or []):
            return True
    return False


def forbidden_message(user, a):
    what = a["resource"] + ("/" + a["subresource"] if a["subresource"] else "")
    group = a["apiGroup"]
    subject = ('%s%s "%s"' % (a["resource"], "." + group if group else "", a["name"])) if a["name"] else \
        (a["resource"] + ("." + group if group else ""))
    where = ' in the namespace "%s"' % a["namespace"] if a["namespace"] else " at the cluster scope"
    return '%s is forbidden: User "%s" cannot %s resource "%s" in API group "%s"%s' % (
        subject, user, a["verb"], what, group, where)


def authorize(handler, user, method, path, query):
    """Records the request's checks; for a registered ServiceAccount enforces RBAC. True when allowed; else the
    403 is sent."""
    fake = handler.fake
    st = state(fake)
    entry = next((e for e in st.tokens.values() if e[0] == user), None)
    groups = entry[1] if entry else ["system:authenticated"]
    checks = attributes(method, path, query)
    verdict = True
    refused = None
    for a in checks:
        ok = allowed(fake, user, groups, a) if entry else True
        with fake.lock:
            st.audit.append(dict(a, user=user, allowed=ok, method=method, path=path))
            if len(st.audit) > AUDIT_LIMIT:
                del st.audit[:len(st.audit) - AUDIT_LIMIT // 2]
        if not ok and verdict:
            verdict, refused = False, a
    if not verdict:
        handler.read_body()
        handler.send_status(403, "Forbidden", forbidden_message(user, refused),
                            details={"name": refused["name"], "group": refused["apiGroup"],
                                     "kind": refused["resource"]})
    return verdict


def control(handler, method, path, body):
    """Answers the /_fake/rbac/ and /_fake/audit endpoints; False for another path."""
    fake = handler.fake
    st = state(fake)
    url = urllib.parse.urlsplit(handler.path)
    if path == "/_fake/rbac/tokens" and method == "POST":
        sa = body["serviceAccount"]
        user = SA_PREFIX + sa["namespace"] + ":" + sa["name"]
        st.tokens[body["token"]] = (user, ["system:serviceaccounts", "system:serviceaccounts:" + sa["namespace"],
                                           "system:authenticated"])
        handler.send_json(200, {"ok": True, "user": user})
        return True
    if path == "/_fake/audit" and method == "GET":
        who = urllib.parse.parse_qs(url.query).get("user", [None])[0]
        handler.send_json(200, [a for a in st.audit if who is None or a["user"] == who])
        return True
    if path == "/_fake/audit/clear" and method == "POST":
        st.audit.clear()
        handler.send_json(200, {"ok": True})
        return True
    return False
