#!/usr/bin/python3
"""deploy/ against the fake Kubernetes API server (tests/fakes/kube_apiserver.py), with the real kubectl:

  * `kubectl apply -k deploy/` creates every object, reads back as written (the Role's rules, the Deployments'
    security context, Recreate, the state volume, probes, Secrets), applies again as "unchanged", takes an
    overlay's changes as strategic merge patches, and `kubectl delete -k` removes it all;
  * the fake has teeth: an unknown field, a volume mount without its volume, a request the Role does not grant
    are refused as a real API server refuses them;
  * sessionturn-telegram runs as the Deployment says (its command, args and environment resolved from the
    objects in the fake, the Secret included) with the ServiceAccount's token, RBAC enforced by the fake, against
    the Telegram fake: whole turns, /status, /sessions, a wake from an idle suspension, /suspend, /resume,
    /delete. Every request it made is granted by deploy/role.yaml, and every verb there was used by some step;
  * sessionturn-slack likewise, in Socket Mode against the Slack fake, for one turn within the Role.

Each test starts its own processes (the fakes, the bridge, a local runtime per Session Pod) and ends them.
Without kubectl it prints SESSIONTURN_TEST_SKIPPED. The build dir is $SESSIONTURN_BINARY_DIR.
Run: python3 tests/kube/test_deploy.py (ctest -R 'kube:deploy').
"""

import base64
import copy
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.dirname(os.path.dirname(HERE))
DEPLOY = os.path.join(SOURCE_DIR, "deploy")
KUBE_FAKE = os.path.join(SOURCE_DIR, "tests", "fakes", "kube_apiserver.py")
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "chat"))
from bridge_support import ANN, BRIDGE, RUNTIME, TOKEN  # noqa: E402
from bridge_support import Fake as TelegramFake  # noqa: E402
from bridge_support import request, stop_process  # noqa: E402
import slack_bridge_support as slack  # noqa: E402

SLACK_BRIDGE = slack.BRIDGE
NS = "sessionturn"  # deploy/kustomization.yaml's namespace
ADMIN_TOKEN = "admin-token"
SA_TOKEN = "bridge-service-account-token"
CHAT = ANN["id"]  # Ann's private chat with the bot

# The Role, as the (apiGroup, resource, verb) it grants: what the bridge is expected to need, no more.
EXPECTED_GRANTS = {("kelos.dev", "sessions", v) for v in ("get", "list", "watch", "create", "patch", "delete")} | {
    ("kelos.dev", "sessionspawners", "get"), ("", "pods/exec", "get"), ("", "pods/exec", "create")}
# A granted verb that no step of the bridge test can exercise, with the reason. Empty: every one is used.
UNEXERCISED = {}


def kubectl_missing():
    return shutil.which("kubectl") is None


class KubeFake:
    """The fake API server in its own directory, with an admin kubeconfig; always stopped."""

    def __init__(self, root):
        self.dir = os.path.join(root, "kube")
        os.makedirs(self.dir)
        self.log = open(os.path.join(self.dir, "server.log"), "w")
        self.proc = subprocess.Popen([sys.executable, KUBE_FAKE, "--dir", os.path.join(self.dir, "server"),
                                      "--token", ADMIN_TOKEN, "--ready-delay", "0.2"],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        ready = os.path.join(self.dir, "server", "ready.json")
        deadline = time.monotonic() + 60  # openssl makes a CA and two certificates first
        while not os.path.exists(ready):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the fake API server did not start: " + self.output())
            time.sleep(0.02)
        with open(ready) as f:
            self.port = json.load(f)["port"]
        self.server = "https://127.0.0.1:%d" % self.port
        self.ca = os.path.join(self.dir, "server", "ca.crt")
        self.ssl = ssl.create_default_context(cafile=self.ca)
        self.admin_kubeconfig = self.kubeconfig("admin", ADMIN_TOKEN)

    def stop(self):
        stop_process(self.proc)
        self.log.close()

    def output(self):
        with open(os.path.join(self.dir, "server.log")) as f:
            return f.read()

    def kubeconfig(self, name, token, namespace="default"):
        path = os.path.join(self.dir, "kubeconfig-" + name)
        with open(path, "w") as f:
            yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "current-context": "fake",
                            "clusters": [{"name": "fake", "cluster": {"server": self.server,
                                                                      "certificate-authority": self.ca}}],
                            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": name,
                                                                      "namespace": namespace}}],
                            "users": [{"name": name, "user": {"token": token}}]}, f)
        return path

    def call(self, method, path, body=None, token=ADMIN_TOKEN):
        """(status, parsed answer) of one API or /_fake/ request."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        if token:
            headers["Authorization"] = "Bearer " + token
        req = urllib.request.Request(self.server + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=30, context=self.ssl) as resp:
                raw, status = resp.read(), resp.status
        except urllib.error.HTTPError as e:
            raw, status = e.read(), e.code
        return status, json.loads(raw) if raw else None

    def control(self, path, body=None):
        status, out = self.call("GET" if body is None else "POST", "/_fake/" + path, body, token=None)
        if status != 200:
            raise AssertionError("/_fake/%s: %s %s" % (path, status, out))
        return out

    def sessions(self):
        status, out = self.call("GET", "/apis/kelos.dev/v1alpha2/namespaces/%s/sessions" % NS)
        assert status == 200, out
        return out["items"]


class DeployCase(unittest.TestCase):
    maxDiff = None

    def setUp(self):
        if kubectl_missing():
            self.skipTest("kubectl is not installed")
        self.root = tempfile.mkdtemp(prefix="st-deploy-")
        if os.environ.get("SESSIONTURN_KEEP_TEST_DIRS", "") not in ("", "0"):
            print("\n%s: %s" % (self.id(), self.root), file=sys.stderr)
        else:
            self.addCleanup(shutil.rmtree, self.root, True)
        self.kube = KubeFake(self.root)
        self.addCleanup(self.kube.stop)

    def kubectl(self, *args, kubeconfig=None, check=True, stdin=None):
        argv = ["kubectl", "--kubeconfig", kubeconfig or self.kube.admin_kubeconfig, "--cache-dir",
                os.path.join(self.root, "kubectl-cache"), "--request-timeout=30s", *args]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60, input=stdin,
                           env=dict(os.environ, HOME=self.root))
        if check and r.returncode != 0:
            self.fail("%s: exit %d\n%s%s" % (" ".join(args), r.returncode, r.stdout, r.stderr))
        return r

    def get_json(self, *args):
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def apply_deploy(self):
        self.kubectl("create", "namespace", NS)
        return self.kubectl("apply", "-k", DEPLOY).stdout

    @staticmethod
    def manifests():
        """The objects of deploy/'s files, by (kind, name)."""
        out = {}
        for name in sorted(os.listdir(DEPLOY)):
            if name.endswith(".yaml") and name != "kustomization.yaml":
                with open(os.path.join(DEPLOY, name)) as f:
                    for doc in yaml.safe_load_all(f):
                        if doc:
                            out[(doc["kind"], doc["metadata"]["name"])] = (name, doc)
        return out

    @staticmethod
    def grants(role):
        return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
                for v in rule["verbs"]}

    @staticmethod
    def container(deployment):
        containers = deployment["spec"]["template"]["spec"]["containers"]
        assert len(containers) == 1, containers
        return containers[0]

    @staticmethod
    def flags(args):
        """{"--flag": value} of --flag=value arguments."""
        out = {}
        for a in args:
            key, _, value = a.partition("=")
            out[key] = value
        return out


class Manifests(DeployCase):
    def test_apply_read_back_reapply_overlay_delete(self):
        out = self.apply_deploy()
        files = self.manifests()
        in_kustomization = {k: v for k, v in files.items() if v[0] != "secret.example.yaml"}
        self.assertEqual(len(re.findall(r" created$", out, re.M)), len(in_kustomization), out)

        live = self.get_json("deployment,role,rolebinding,serviceaccount,service,persistentvolumeclaim", "-n", NS)
        self.assertEqual(sorted((o["kind"], o["metadata"]["name"]) for o in live["items"]),
                         sorted(in_kustomization), "every object of kustomization.yaml, and only those")
        by = {(o["kind"], o["metadata"]["name"]): o for o in live["items"]}
        for key, obj in by.items():
            self.assertEqual(obj["metadata"]["namespace"], NS, key)
            self.assertEqual(obj["metadata"]["labels"]["app.kubernetes.io/part-of"], "sessionturn", key)

        # The Role: exactly the verbs the bridge uses, no wildcard, no resourceNames.
        role = by[("Role", "sessionturn-bridge")]
        self.assertEqual(self.grants(role), EXPECTED_GRANTS)
        for rule in role["rules"]:
            self.assertNotIn("*", rule["verbs"] + rule["resources"] + rule["apiGroups"], rule)
            self.assertNotIn("resourceNames", rule)
        binding = by[("RoleBinding", "sessionturn-bridge")]
        self.assertEqual(binding["roleRef"], {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                              "name": "sessionturn-bridge"})
        self.assertEqual(binding["subjects"], [{"kind": "ServiceAccount", "name": "sessionturn-bridge",
                                                "namespace": NS}])
        self.assertIn(("ServiceAccount", "sessionturn-bridge"), by)

        secrets = {n: doc for (kind, n), (_, doc) in files.items() if kind == "Secret"}
        for platform, mode in (("telegram", "poll"), ("slack", "socket")):
            with self.subTest(platform=platform):
                self.check_deployment(by, platform, mode, secrets)

        # The flags the Deployments pass are flags the programs take.
        self.check_flags(by[("Deployment", "sessionturn-telegram")], BRIDGE)
        self.check_flags(by[("Deployment", "sessionturn-slack")], SLACK_BRIDGE)

        # Applied again: nothing to change.
        again = self.kubectl("apply", "-k", DEPLOY).stdout
        self.assertEqual(len(re.findall(r" unchanged$", again, re.M)), len(in_kustomization), again)

        # An overlay, as a team customises the base: a new image, one more flag, an env var less and one more,
        # a larger memory limit. kubectl sends strategic merge patches; the rest of the object stays.
        work = os.path.join(self.root, "kustomize")
        shutil.copytree(DEPLOY, os.path.join(work, "deploy"))
        os.makedirs(os.path.join(work, "team"))
        with open(os.path.join(work, "team", "kustomization.yaml"), "w") as f:
            f.write("""resources:
- ../deploy
images:
- name: registry.example.com/sessionturn
  newName: ghcr.io/acme/sessionturn
  newTag: 0.2.0
patches:
- target: {kind: Deployment, name: sessionturn-telegram}
  patch: |
    - {op: add, path: /spec/template/spec/containers/0/args/-, value: --allow-users=42}
    - {op: remove, path: /spec/template/spec/containers/0/env/2}
    - {op: add, path: /spec/template/spec/containers/0/env/-, value: {name: EXTRA, value: "1"}}
    - {op: replace, path: /spec/template/spec/containers/0/resources/limits/memory, value: 512Mi}
""")
        changed = self.kubectl("apply", "-k", os.path.join(work, "team")).stdout
        self.assertIn("deployment.apps/sessionturn-telegram configured", changed)
        self.assertIn("serviceaccount/sessionturn-bridge unchanged", changed)
        before = by[("Deployment", "sessionturn-telegram")]
        after = self.get_json("deployment", "sessionturn-telegram", "-n", NS)
        c0, c1 = self.container(before), self.container(after)
        self.assertEqual(c1["image"], "ghcr.io/acme/sessionturn:0.2.0")
        self.assertEqual(c1["args"], c0["args"] + ["--allow-users=42"])
        self.assertEqual([e["name"] for e in c1["env"]], [e["name"] for e in c0["env"][:2]] + ["EXTRA"])
        self.assertEqual(c1["resources"]["limits"]["memory"], "512Mi")
        self.assertEqual(c1["volumeMounts"], c0["volumeMounts"])
        self.assertEqual(c1["securityContext"], c0["securityContext"])
        self.assertEqual(after["spec"]["strategy"], {"type": "Recreate"})
        self.assertEqual(after["metadata"]["generation"], before["metadata"]["generation"] + 1)
        # And back to the base.
        self.kubectl("apply", "-k", DEPLOY)
        restored = self.get_json("deployment", "sessionturn-telegram", "-n", NS)
        self.assertEqual(restored["spec"]["template"], before["spec"]["template"])

        deleted = self.kubectl("delete", "-k", DEPLOY).stdout
        self.assertEqual(len(re.findall(r" deleted$", deleted, re.M)), len(in_kustomization), deleted)
        self.assertEqual(self.get_json("deployment,role,rolebinding,serviceaccount,service,pvc", "-n", NS)["items"], [])

    def check_deployment(self, by, platform, mode, secrets):
        name = "sessionturn-" + platform
        d = by[("Deployment", name)]
        spec, pod = d["spec"], d["spec"]["template"]["spec"]
        c = self.container(d)
        self.assertEqual(spec["replicas"], 1)
        self.assertEqual(spec["strategy"], {"type": "Recreate"})  # the SQLite store has one writer
        self.assertEqual(c["command"], [name])
        flags = self.flags(c["args"])
        self.assertEqual(flags["--backend"], "kubernetes")
        self.assertEqual(flags["--namespace"], "$(POD_NAMESPACE)")
        self.assertEqual(flags["--mode"], mode)
        self.assertTrue(flags["--spawner"])
        env = {e["name"]: e for e in c["env"]}
        self.assertEqual(env["POD_NAMESPACE"]["valueFrom"], {"fieldRef": {"fieldPath": "metadata.namespace"}})
        # The service account and its token (the in-cluster configuration).
        self.assertEqual(pod["serviceAccountName"], "sessionturn-bridge")
        self.assertIs(pod["automountServiceAccountToken"], True)
        # Locked down.
        self.assertIs(pod["securityContext"]["runAsNonRoot"], True)
        self.assertIsInstance(pod["securityContext"]["runAsUser"], int)
        self.assertNotEqual(pod["securityContext"]["runAsUser"], 0)
        self.assertEqual(pod["securityContext"]["seccompProfile"], {"type": "RuntimeDefault"})
        sc = c["securityContext"]
        self.assertIs(sc["readOnlyRootFilesystem"], True)
        self.assertIs(sc["allowPrivilegeEscalation"], False)
        self.assertIs(sc["runAsNonRoot"], True)
        self.assertEqual(sc["capabilities"], {"drop": ["ALL"]})
        for kind in ("requests", "limits"):
            self.assertEqual(set(c["resources"][kind]), {"cpu", "memory"}, kind)
        # The state directory is the PersistentVolumeClaim, which exists; /tmp is writable.
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        state_dir = flags["--state-dir"]
        claim = volumes[mounts[state_dir]]["persistentVolumeClaim"]["claimName"]
        pvc = by[("PersistentVolumeClaim", claim)]
        self.assertEqual(pvc["spec"]["accessModes"], ["ReadWriteOnce"])
        self.assertIn("storage", pvc["spec"]["resources"]["requests"])
        self.assertIn("emptyDir", volumes[mounts["/tmp"]])
        # --listen, the probes, the metrics annotations and the Service agree on the port.
        listen_port = int(flags["--listen"].rsplit(":", 1)[1])
        self.assertTrue(flags["--listen"].startswith("0.0.0.0:"))
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
            get = c[probe]["httpGet"]
            self.assertEqual(get["path"], path)
            self.assertEqual(ports.get(get["port"], get["port"]), listen_port)
        annotations = d["spec"]["template"]["metadata"]["annotations"]
        self.assertEqual(annotations["prometheus.io/scrape"], "true")
        self.assertEqual(int(annotations["prometheus.io/port"]), listen_port)
        self.assertEqual(annotations["prometheus.io/path"], "/metrics")
        svc = by[("Service", name)]
        self.assertEqual(svc["spec"]["selector"], d["spec"]["selector"]["matchLabels"])
        for k, v in svc["spec"]["selector"].items():
            self.assertEqual(d["spec"]["template"]["metadata"]["labels"][k], v)
        self.assertEqual([ports.get(p["targetPort"], p["targetPort"]) for p in svc["spec"]["ports"]], [listen_port])
        # Every secret the Deployment reads is a key of secret.example.yaml's Secret, and nothing else is there.
        refs = {(e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
                for e in c["env"] if "secretKeyRef" in e.get("valueFrom", {})}
        self.assertTrue(refs)
        for secret_name, key in refs:
            self.assertIn(key, secrets[secret_name]["stringData"], (secret_name, key))
        self.assertEqual({(n, k) for n, s in secrets.items() for k in s["stringData"]
                          if n == "sessionturn-" + platform}, refs)
        for e in c["env"]:
            if "secretKeyRef" in e.get("valueFrom", {}):
                self.assertEqual(e["name"], e["valueFrom"]["secretKeyRef"]["key"])  # one name throughout
            if "value" in e:
                self.assertNotRegex(e["value"], r"(?i)token|secret")  # no secret in a plain value

    def check_flags(self, deployment, program):
        if not os.access(program, os.X_OK):
            print("note: %s is not built: its Deployment's flags are not checked against --help" % program,
                  file=sys.stderr)
            return
        help_text = subprocess.run([program, "--help"], capture_output=True, text=True, timeout=30).stdout
        for flag in self.flags(self.container(deployment)["args"]):
            self.assertRegex(help_text, r"(?m)^\s*(-\w,\s*)?%s\b" % re.escape(flag), "%s --help" % program)

    def test_secret_example_holds_placeholders_only(self):
        self.kubectl("create", "namespace", NS)
        self.kubectl("apply", "-n", NS, "-f", os.path.join(DEPLOY, "secret.example.yaml"))
        for name, (_, doc) in ((n, v) for (k, n), v in self.manifests().items() if k == "Secret"):
            live = self.get_json("secret", name, "-n", NS)
            self.assertEqual(set(live["data"]), set(doc["stringData"]))
            for key, value in live["data"].items():
                self.assertRegex(base64.b64decode(value).decode(), r"^<.*>$", "%s/%s is a placeholder" % (name, key))
        with open(os.path.join(DEPLOY, "kustomization.yaml")) as f:
            self.assertNotIn("secret.example.yaml", yaml.safe_load(f)["resources"])


class FakeHasTeeth(DeployCase):
    """What makes a clean apply mean something: the fake refuses what a real API server refuses."""

    def test_unknown_fields_bad_mounts_and_ungranted_requests_are_refused(self):
        self.apply_deploy()
        _, (_, deployment) = next((k, v) for k, v in self.manifests().items() if k[0] == "Deployment")
        typo = copy.deepcopy(deployment)
        sc = self.container(typo)["securityContext"]
        sc["readOnlyRootFilesytem"] = sc.pop("readOnlyRootFilesystem")
        r = self.kubectl("apply", "-n", NS, "-f", "-", stdin=json.dumps(typo), check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn('strict decoding error: unknown field "spec.template.spec.containers[0].securityContext.'
                      'readOnlyRootFilesytem"', r.stderr)
        unmounted = copy.deepcopy(deployment)
        unmounted["metadata"]["name"] = "unmounted"
        unmounted["spec"]["template"]["spec"]["volumes"].pop(0)
        r = self.kubectl("apply", "-n", NS, "-f", "-", stdin=json.dumps(unmounted), check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("volumeMounts[0].name: Not found", r.stderr)
        r = self.kubectl("apply", "-n", "nowhere", "-f", "-", stdin=json.dumps(dict(deployment, metadata={
            "name": "x"})), check=False)
        self.assertIn('namespaces "nowhere" not found', r.stderr)

        # The ServiceAccount may do what the Role says, and nothing else.
        self.kube.control("rbac/tokens", {"token": SA_TOKEN, "serviceAccount": {"namespace": NS,
                                                                                 "name": "sessionturn-bridge"}})
        sa = self.kube.kubeconfig("sa", SA_TOKEN, NS)
        self.kubectl("get", "sessions.kelos.dev", kubeconfig=sa)
        for args, verb, what in ((("get", "pods"), "list", '"pods"'),
                                 (("get", "secrets"), "list", '"secrets"'),
                                 (("delete", "deployment", "sessionturn-telegram"), "delete", '"deployments"'),
                                 (("get", "sessions.kelos.dev", "-A"), "list", '"sessions"')):
            r = self.kubectl(*args, kubeconfig=sa, check=False)
            self.assertNotEqual(r.returncode, 0, args)
            self.assertIn('User "system:serviceaccount:%s:sessionturn-bridge" cannot %s resource %s'
                          % (NS, verb, what), r.stderr)
        # A WebSocket exec (a GET) needs both get and create on pods/exec: without create it is refused.
        _, role = self.manifests()[("Role", "sessionturn-bridge")]
        for rule in role["rules"]:
            if rule["resources"] == ["pods/exec"]:
                rule["verbs"] = ["get"]
        self.kubectl("apply", "-n", NS, "-f", "-", stdin=json.dumps(role))
        exec_path = "/api/v1/namespaces/%s/pods/p/exec?command=x&stdin=true&stdout=true" % NS
        status, out = self.kube.call("GET", exec_path, token=SA_TOKEN)
        self.assertEqual(status, 403, out)
        self.assertIn('cannot create resource "pods/exec"', out["message"])
        audit = self.kube.control("audit?user=system:serviceaccount:%s:sessionturn-bridge" % NS)
        self.assertEqual([(a["verb"], a["check"], a["allowed"]) for a in audit if a["subresource"] == "exec"],
                         [("get", "request", True), ("create", "websocket-upgrade", False)])


class BridgeInTheCluster(DeployCase):
    """A bridge run as its Deployment in deploy/ says, with the ServiceAccount's rights only: the objects applied
    with kubectl, the Secret from secret.example.yaml with the fake platform's tokens, the SessionSpawner the
    Deployment names, and each Session's Pod a local runtime."""

    bridge_program = None  # set by the subclass

    def setUp(self):
        missing = [p for p in (self.bridge_program, RUNTIME) if not os.access(p, os.X_OK)]
        if missing:
            print("SESSIONTURN_TEST_SKIPPED: not built: %s" % ", ".join(missing))
            self.skipTest("not built")
        super().setUp()

    def deploy_for(self, name, secret_values):
        """Applies deploy/, the Secret of Deployment `name` with secret_values, its SessionSpawner and its
        ServiceAccount's token; returns the Deployment as the fake has it."""
        self.apply_deploy()
        deployment = self.get_json("deployment", name, "-n", NS)
        with open(os.path.join(DEPLOY, "secret.example.yaml")) as f:
            secret = next(d for d in yaml.safe_load_all(f) if d["metadata"]["name"] == name)
        self.assertTrue(set(secret_values) <= set(secret["stringData"]), secret_values)
        secret["stringData"] = secret_values
        self.kubectl("apply", "-n", NS, "-f", "-", stdin=json.dumps(secret))
        # The SessionSpawner the Deployment names (Kelos's, created by whoever runs the cluster).
        self.spawner = self.flags(self.container(deployment)["args"])["--spawner"]
        status, out = self.kube.call("POST", "/apis/kelos.dev/v1alpha2/namespaces/%s/sessionspawners" % NS, {
            "apiVersion": "kelos.dev/v1alpha2", "kind": "SessionSpawner", "metadata": {"name": self.spawner},
            "spec": {"sessionTemplate": {"metadata": {"labels": {"team": "bridge-test"}},
                                         "spec": {"agent": "claude-code"}}}})
        self.assertEqual(status, 201, out)
        # The Pod's identity: the ServiceAccount, RBAC enforced.
        sa = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        self.kube.control("rbac/tokens", {"token": SA_TOKEN, "serviceAccount": {"namespace": NS, "name": sa}})
        self.sa_user = "system:serviceaccount:%s:%s" % (NS, sa)
        return deployment

    def start_bridge_as_deployed(self, deployment, api_url, user, ready_line):
        """The container of `deployment` as a process here: its command, its args with $(VAR) expanded, its env
        resolved from the objects in the fake; the state volume a directory, the listen address loopback, the
        ServiceAccount's token in a kubeconfig instead of the mounted one, the platform fake's URL, and `user`
        allowed and an admin."""
        c = self.container(deployment)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self.root}
        for e in c["env"]:
            src = e.get("valueFrom")
            if src is None:
                env[e["name"]] = e["value"]
            elif "fieldRef" in src:
                self.assertEqual(src["fieldRef"]["fieldPath"], "metadata.namespace")
                env[e["name"]] = deployment["metadata"]["namespace"]
            else:
                ref = src["secretKeyRef"]
                data = self.get_json("secret", ref["name"], "-n", NS).get("data") or {}
                if ref["key"] in data:
                    env[e["name"]] = base64.b64decode(data[ref["key"]]).decode()
                else:
                    self.assertTrue(ref.get("optional"), "%s: the Secret has no %s" % (e["name"], ref["key"]))
        args = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in c["args"]]
        self.assertEqual(self.flags(args)["--namespace"], NS)
        state_dir = os.path.join(self.root, "state-volume")
        os.makedirs(state_dir)
        args = [a for a in args if self.flags([a]).keys().isdisjoint({"--state-dir", "--listen"})]
        self.assertEqual(os.path.basename(self.bridge_program), c["command"][0])
        argv = [self.bridge_program] + args + [
            "--state-dir=" + state_dir, "--listen=127.0.0.1:0", "--api-url=" + api_url,
            "--kubeconfig=" + self.kube.kubeconfig("bridge", SA_TOKEN, "default"),
            "--allow-users=%s" % user, "--admins=%s" % user, "--log-level=debug"]
        self.err_path = os.path.join(self.root, "bridge.err")
        with open(self.err_path, "w") as err:
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL, env=env)
        self.addCleanup(stop_process, proc)
        m = self.wait_for(lambda: proc.poll() is None and re.search(
            r"^ready: %s.*, backend kubernetes.*, listening (\S+)$" % ready_line, self.bridge_stderr(), re.M)
            or self.assertIsNone(proc.poll(), self.bridge_stderr()), "the bridge's ready line", timeout=30)
        base = "http://" + m.group(1)
        # What the kubelet's probes and Prometheus would ask.
        self.assertEqual(request(base + "/healthz")[0], 200)
        self.wait_for(lambda: request(base + "/readyz")[0] == 200, "/readyz")
        status, metrics = request(base + "/metrics")
        self.assertEqual(status, 200)
        self.assertIn("sessionturn_", metrics)
        return proc

    def first_turn(self, send, wait_reply):
        """A first message: its Session appears, gets a Pod (a local runtime, started here, before the fake's
        controller makes the Session Ready) and the reply comes. Returns the Session."""
        self.kube.control("config", {"controller": False})
        send()
        session = self.wait_for(lambda: self.kube.sessions(), "the Session to be created")[0]
        self.start_pod_runtime(session["metadata"]["name"])
        self.kube.control("config", {"controller": True})
        wait_reply()
        self.assertEqual(session["metadata"]["labels"]["team"], "bridge-test")  # the spawner's template
        self.assertEqual(session["metadata"]["ownerReferences"][0]["name"], self.spawner)
        return session

    def step(self, steps, name, action):
        """Runs action; records the (apiGroup, resource, verb) of the ServiceAccount's requests meanwhile."""
        before = len(self.kube.control("audit?user=" + self.sa_user))
        action()
        used = [(a["apiGroup"], a["resource"] + ("/" + a["subresource"] if a["subresource"] else ""), a["verb"])
                for a in self.kube.control("audit?user=" + self.sa_user)[before:] if not a["nonResourceURL"]]
        steps.append((name, used))
        return used

    def check_against_role(self, steps, every_verb_used):
        """Every request was granted; every verb used is in the Role; with every_verb_used, every verb of the
        Role was used by a step (or is in UNEXERCISED with its reason)."""
        role = self.get_json("role", "sessionturn-bridge", "-n", NS)
        audit = self.kube.control("audit?user=" + self.sa_user)
        self.assertEqual([a for a in audit if not a["allowed"]], [], "requests the Role did not grant")
        self.assertTrue(all(a["namespace"] == NS for a in audit if not a["nonResourceURL"]))
        used_all = {u for _, used in steps for u in used}
        granted = self.grants(role)
        self.assertEqual(used_all - granted, set(), "used but not granted")
        if every_verb_used:
            self.assertEqual(granted - used_all - set(UNEXERCISED), set(), "granted but never used by a step")
        print("\n%s: verbs the bridge used, by step:" % os.path.basename(self.bridge_program), file=sys.stderr)
        for name, used in steps:
            print("  %s: %s" % (name, ", ".join(sorted({"%s %s%s" % (v, r, "." + g if g else "")
                                                         for g, r, v in used}))), file=sys.stderr)

    def bridge_stderr(self):
        with open(self.err_path, errors="replace") as f:
            return f.read()

    def start_pod_runtime(self, session_name):
        """A local runtime behind the Session's Pod (the fake's controller names it <session>-pod)."""
        pod = session_name + "-pod"
        d = os.path.join(self.root, "pods", pod)
        os.makedirs(d)
        sock = os.path.join(d, "runtime.sock")
        with open(os.path.join(d, "runtime.log"), "w") as log:
            proc = subprocess.Popen([RUNTIME, "serve", "--socket", sock, "--state-dir", d, "--provider", "echo",
                                     "--session-name", session_name], stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
        self.addCleanup(stop_process, proc)
        self.wait_for(lambda: os.path.exists(sock), "the Pod's runtime socket")
        self.kube.control("pods", {"name": pod, "namespace": NS, "socket": sock})

    def session(self, name):
        status, out = self.kube.call("GET", "/apis/kelos.dev/v1alpha2/namespaces/%s/sessions/%s" % (NS, name))
        return out if status == 200 else None

    def annotation(self, name, key):
        return ((self.session(name) or {}).get("metadata", {}).get("annotations") or {}).get(key)

    def phase(self, name):
        return ((self.session(name) or {}).get("status") or {}).get("phase")

    def wait_for(self, predicate, what, timeout=20, interval=0.05):
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                self.fail("timed out after %ss waiting for %s\n%s" % (timeout, what, self.diagnostics()))
            time.sleep(interval)

    def diagnostics(self):
        try:
            return "bridge stderr (last 4000 characters):\n" + self.bridge_stderr()[-4000:]
        except (AttributeError, OSError):
            return ""


class TelegramBridgeInTheCluster(BridgeInTheCluster):
    bridge_program = BRIDGE

    def test_turns_and_commands_use_exactly_the_roles_verbs(self):
        deployment = self.deploy_for("sessionturn-telegram", {"TELEGRAM_BOT_TOKEN": TOKEN})
        telegram = TelegramFake(self.root)
        self.addCleanup(telegram.stop)
        bridge = self.start_bridge_as_deployed(deployment, telegram.url, ANN["id"], "telegram bot @")
        self.kube.control("audit/clear", {})
        steps = []

        def first():
            self.first_session = self.first_turn(
                lambda: telegram.send(CHAT, "hello from the cluster"),
                lambda: self.assertIn("hello from the cluster", telegram.wait_reply(CHAT, "echo #1:", timeout=30)["text"]))
        used = self.step(steps, "first message: a new Session from the spawner, a whole turn over exec", first)
        for grant in (("kelos.dev", "sessions", "get"), ("kelos.dev", "sessionspawners", "get"),
                      ("kelos.dev", "sessions", "create"), ("kelos.dev", "sessions", "list"),
                      ("kelos.dev", "sessions", "watch"), ("", "pods/exec", "get"), ("", "pods/exec", "create")):
            self.assertIn(grant, used)
        name = self.first_session["metadata"]["name"]

        self.step(steps, "/status", lambda: (telegram.send(CHAT, "/status"),
                                             telegram.wait_text(CHAT, "Phase: Ready", timeout=20)))
        self.step(steps, "/sessions", lambda: (telegram.send(CHAT, "/sessions"),
                                               telegram.wait_text(CHAT, "Sessions of this chat", timeout=20)))

        def wake():
            self.kube.control("idle-suspend", {"namespace": NS, "name": name})
            telegram.send(CHAT, "after a nap")
            self.assertIn("after a nap", telegram.wait_reply(CHAT, "echo #2:", timeout=30)["text"])
            # The resume is acknowledged after the turn's first history.end.
            self.wait_for(lambda: self.annotation(name, "kelos.dev/session-idle-resume-acknowledgement"),
                          "the resume acknowledgement")
            self.assertEqual(self.annotation(name, "kelos.dev/session-idle-resume-acknowledgement"),
                             self.annotation(name, "kelos.dev/session-idle-resume-request"))
        used = self.step(steps, "a message to an idle-suspended Session: resume request, turn, acknowledgement", wake)
        self.assertIn(("kelos.dev", "sessions", "patch"), used)

        self.step(steps, "/suspend", lambda: (
            telegram.send(CHAT, "/suspend"), telegram.wait_text(CHAT, "Suspended", timeout=20),
            self.wait_for(lambda: self.phase(name) == "Suspended", "Suspended")))
        self.step(steps, "/resume and a turn", lambda: (
            telegram.send(CHAT, "/resume"), telegram.wait_text(CHAT, "Resumed", timeout=20),
            telegram.send(CHAT, "back again"),
            self.assertIn("back again", telegram.wait_reply(CHAT, "echo #3:", timeout=30)["text"])))

        def delete():
            telegram.send(CHAT, "/delete " + name)
            telegram.wait_text(CHAT, "again within a minute", timeout=20)
            telegram.send(CHAT, "/delete " + name)
            telegram.wait_text(CHAT, "Deleted", timeout=20)
            self.assertEqual(self.kube.sessions(), [])
        used = self.step(steps, "/delete (an admin, confirmed)", delete)
        self.assertIn(("kelos.dev", "sessions", "delete"), used)

        self.assertEqual(stop_process(bridge), 0, self.bridge_stderr())
        self.check_against_role(steps, every_verb_used=True)


class SlackBridgeInTheCluster(BridgeInTheCluster):
    bridge_program = SLACK_BRIDGE

    def test_a_turn_in_socket_mode_within_the_role(self):
        deployment = self.deploy_for("sessionturn-slack", {"SLACK_BOT_TOKEN": slack.BOT_TOKEN,
                                                           "SLACK_APP_TOKEN": slack.APP_TOKEN})
        self.assertEqual(self.flags(self.container(deployment)["args"])["--mode"], "socket")
        fake = slack.SlackFake(self.root)
        self.addCleanup(fake.stop)
        bridge = self.start_bridge_as_deployed(deployment, fake.api_url, slack.ANN, "slack bot @")
        fake.wait_connections(1)
        self.kube.control("audit/clear", {})
        steps = []
        used = self.step(steps, "a direct message: a new Session from the spawner, a whole turn over exec",
                         lambda: self.first_turn(
                             lambda: fake.say(slack.DM_ANN, "hello from slack"),
                             lambda: self.assertIn("hello from slack",
                                                   fake.wait_reply(slack.DM_ANN, "echo #1:", timeout=30)["text"])))
        for grant in (("kelos.dev", "sessions", "create"), ("kelos.dev", "sessionspawners", "get"),
                      ("", "pods/exec", "get"), ("", "pods/exec", "create")):
            self.assertIn(grant, used)
        self.assertEqual(stop_process(bridge), 0, self.bridge_stderr())
        self.check_against_role(steps, every_verb_used=False)  # the Telegram case goes through every verb


if __name__ == "__main__":
    if kubectl_missing():
        print("SESSIONTURN_TEST_SKIPPED: kubectl is not installed (not on PATH)")
        sys.exit(0)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # ctest's timeout: the cleanups still run
    unittest.main(verbosity=2)
