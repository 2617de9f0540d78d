"""The shapes of the built-in kinds the fake Kubernetes API server stores generically (kube_objects.py):
field names and types for strict field validation (fieldValidation=Strict, which kubectl sends), list merge
keys for strategic merge patches (kube_patch.py), and the semantic checks a real API server makes that a
deployment most easily gets wrong. Standard library only.

The schemas are a subset of the Kubernetes API (v1.32): every field of the types the project's manifests
use, and free-form (ANY) for the rest of a type's fields that are listed but not described. A field that is
not listed at all is unknown, as it would be to the real API server in strict mode.
"""

import base64
import re

STR, INT, BOOL, INTSTR, QTY, ANY = "string", "integer", "boolean", "int-or-string", "quantity", "any"


class Map:
    """map[string]<value>."""
    def __init__(self, value=STR):
        self.value = value


class List:
    """A list; `key`: the strategic-merge key (patchStrategy merge); `merge`: a primitive list merged as a set."""
    def __init__(self, item, key=None, merge=False):
        self.item, self.key, self.merge = item, key, merge


MAP = Map(STR)
QTYMAP = Map(QTY)
STRS = List(STR)

TYPES = {
    "ObjectMeta": {
        "name": STR, "generateName": STR, "namespace": STR, "labels": MAP, "annotations": MAP, "uid": STR,
        "resourceVersion": STR, "generation": INT, "creationTimestamp": STR, "deletionTimestamp": STR,
        "deletionGracePeriodSeconds": INT, "finalizers": List(STR, merge=True),
        "ownerReferences": List("OwnerReference", key="uid"), "managedFields": ANY, "selfLink": STR,
    },
    "OwnerReference": {"apiVersion": STR, "kind": STR, "name": STR, "uid": STR, "controller": BOOL,
                       "blockOwnerDeletion": BOOL},
    "LocalObjectReference": {"name": STR},
    "ObjectReference": {"kind": STR, "namespace": STR, "name": STR, "uid": STR, "apiVersion": STR,
                        "resourceVersion": STR, "fieldPath": STR},
    "LabelSelector": {"matchLabels": MAP, "matchExpressions": List(ANY)},
    # core/v1
    "ServiceAccount": {"apiVersion": STR, "kind": STR, "metadata": "ObjectMeta",
                       "secrets": List("ObjectReference", key="name"),
                       "imagePullSecrets": List("LocalObjectReference", key="name"),
                       "automountServiceAccountToken": BOOL},
    "Secret": {"apiVersion": STR, "kind": STR, "metadata": "ObjectMeta", "data": MAP, "stringData": MAP,
               "type": STR, "immutable": BOOL},
    "PersistentVolumeClaim": {"apiVersion": STR, "kind": STR, "metadata": "ObjectMeta",
                              "spec": "PersistentVolumeClaimSpec", "status": ANY},
    "PersistentVolumeClaimSpec": {"accessModes": STRS, "resources": "VolumeResourceRequirements",
                                  "storageClassName": STR, "volumeMode": STR, "volumeName": STR,
                                  "selector": "LabelSelector", "dataSource": ANY, "dataSourceRef": ANY,
                                  "volumeAttributesClassName": STR},
    "VolumeResourceRequirements": {"requests": QTYMAP, "limits": QTYMAP},
    "Service": {"apiVersion": STR, "kind": STR, "metadata": "ObjectMeta", "spec": "ServiceSpec", "status": ANY},
    "ServiceSpec": {"type": STR, "selector": MAP, "ports": List("ServicePort", key="port"), "clusterIP": STR,
                    "clusterIPs": STRS, "externalIPs": STRS, "externalName": STR, "externalTrafficPolicy": STR,
                    "internalTrafficPolicy": STR, "sessionAffinity": STR, "sessionAffinityConfig": ANY,
                    "loadBalancerIP": STR, "loadBalancerSourceRanges": STRS, "loadBalancerClass": STR,
                    "ipFamilies": STRS, "ipFamilyPolicy": STR, "publishNotReadyAddresses": BOOL,
                    "allocateLoadBalancerNodePorts": BOOL, "healthCheckNodePort": INT, "trafficDistribution": STR},
    "ServicePort": {"name": STR, "protocol": STR, "appProtocol": STR, "port": INT, "targetPort": INTSTR,
                    "nodePort": INT},
    # apps/v1
    "Deployment": {"apiVersion": STR, "kind": STR, "metadata": "ObjectMeta", "spec": "DeploymentSpec",
                   "status": ANY},
    "DeploymentSpec": {"replicas": INT, "selector": "LabelSelector", "template": "PodTemplateSpec",
                       "strategy": "DeploymentStrategy", "minReadySeconds": INT, "revisionHistoryLimit": INT,
                       "paused": BOOL, "progressDeadlineSeconds": INT},
    "DeploymentStrategy": {"type": STR, "rollingUpdate": {"maxUnavailable": INTSTR, "maxSurge": INTSTR}},
    "PodTemplateSpec": {"metadata": "ObjectMeta", "spec": "PodSpec"},
    "PodSpec": {
        "containers": List("Container", key="name"), "initContainers": List("Container", key="name"),
        "ephemeralContainers": ANY, "volumes": List("Volume", key="name"), "serviceAccountName": STR,
        "serviceAccount": STR, "automountServiceAccountToken": BOOL, "securityContext": "PodSecurityContext",
        "restartPolicy": STR, "terminationGracePeriodSeconds": INT, "activeDeadlineSeconds": INT,
        "dnsPolicy": STR, "dnsConfig": ANY, "nodeSelector": MAP, "nodeName": STR, "hostNetwork": BOOL,
        "hostPID": BOOL, "hostIPC": BOOL, "hostUsers": BOOL, "shareProcessNamespace": BOOL,
        "imagePullSecrets": List("LocalObjectReference", key="name"), "affinity": ANY, "tolerations": List(ANY),
        "schedulerName": STR, "priorityClassName": STR, "priority": INT, "preemptionPolicy": STR,
        "enableServiceLinks": BOOL, "topologySpreadConstraints": List(ANY), "hostname": STR, "subdomain": STR,
        "setHostnameAsFQDN": BOOL, "runtimeClassName": STR, "overhead": ANY, "readinessGates": ANY,
        "hostAliases": ANY, "os": ANY, "resourceClaims": ANY, "schedulingGates": ANY, "resources": ANY,
    },
    "Container": {
        "name": STR, "image": STR, "command": STRS, "args": STRS, "workingDir": STR,
        "ports": List("ContainerPort", key="containerPort"), "env": List("EnvVar", key="name"),
        "envFrom": List("EnvFromSource"), "resources": "ResourceRequirements",
        "volumeMounts": List("VolumeMount", key="mountPath"), "volumeDevices": ANY, "livenessProbe": "Probe",
        "readinessProbe": "Probe", "startupProbe": "Probe", "lifecycle": ANY, "terminationMessagePath": STR,
        "terminationMessagePolicy": STR, "imagePullPolicy": STR, "securityContext": "SecurityContext",
        "stdin": BOOL, "stdinOnce": BOOL, "tty": BOOL, "resizePolicy": ANY, "restartPolicy": STR,
    },
    "ContainerPort": {"name": STR, "containerPort": INT, "protocol": STR, "hostPort": INT, "hostIP": STR},
    "EnvVar": {"name": STR, "value": STR, "valueFrom": "EnvVarSource"},
    "EnvVarSource": {"secretKeyRef": {"name": STR, "key": STR, "optional": BOOL},
                     "configMapKeyRef": {"name": STR, "key": STR, "optional": BOOL},
                     "fieldRef": {"apiVersion": STR, "fieldPath": STR},
                     "resourceFieldRef": {"containerName": STR, "resource": STR, "divisor": QTY}},
    "EnvFromSource": {"prefix": STR, "configMapRef": {"name": STR, "optional": BOOL},
                      "secretRef": {"name": STR, "optional": BOOL}},
    "ResourceRequirements": {"requests": QTYMAP, "limits": QTYMAP, "claims": ANY},
    "VolumeMount": {"name": STR, "mountPath": STR, "readOnly": BOOL, "subPath": STR, "subPathExpr": STR,
                    "mountPropagation": STR, "recursiveReadOnly": STR},
    "Probe": {"httpGet": {"path": STR, "port": INTSTR, "host": STR, "scheme": STR, "httpHeaders": ANY},
              "tcpSocket": {"port": INTSTR, "host": STR}, "exec": {"command": STRS}, "grpc": ANY,
              "initialDelaySeconds": INT, "timeoutSeconds": INT, "periodSeconds": INT, "successThreshold": INT,
              "failureThreshold": INT, "terminationGracePeriodSeconds": INT},
    "Capabilities": {"add": STRS, "drop": STRS},
    "SeccompProfile": {"type": STR, "localhostProfile": STR},
    "SecurityContext": {"runAsNonRoot": BOOL, "runAsUser": INT, "runAsGroup": INT, "readOnlyRootFilesystem": BOOL,
                        "allowPrivilegeEscalation": BOOL, "privileged": BOOL, "capabilities": "Capabilities",
                        "seccompProfile": "SeccompProfile", "seLinuxOptions": ANY, "windowsOptions": ANY,
                        "procMount": STR, "appArmorProfile": ANY},
    "PodSecurityContext": {"runAsNonRoot": BOOL, "runAsUser": INT, "runAsGroup": INT, "fsGroup": INT,
                           "fsGroupChangePolicy": STR, "supplementalGroups": List(INT),
                           "supplementalGroupsPolicy": STR, "seccompProfile": "SeccompProfile",
                           "seLinuxOptions": ANY, "seLinuxChangePolicy": STR, "sysctls": ANY, "windowsOptions": ANY,
                           "appArmorProfile": ANY},
    "Volume": {"name": STR, "persistentVolumeClaim": {"claimName": STR, "readOnly": BOOL},
               "emptyDir": {"medium": STR, "sizeLimit": QTY},
               "secret": {"secretName": STR, "items": ANY, "defaultMode": INT, "optional": BOOL},
               "configMap": {"name": STR, "items": ANY, "defaultMode": INT, "optional": BOOL},
               "projected": ANY, "downwardAPI": ANY, "hostPath": ANY, "ephemeral": ANY, "csi": ANY, "nfs": ANY,
               "image": ANY},
    # rbac.authorization.k8s.io/v1
    "Role": {"apiVersion": STR, "kind": STR, "metadata": "ObjectMeta", "rules": List("PolicyRule")},
    "PolicyRule": {"apiGroups": STRS, "resources": STRS, "verbs": STRS, "resourceNames": STRS,
                   "nonResourceURLs": STRS},
    "RoleBinding": {"apiVersion": STR, "kind": STR, "metadata": "ObjectMeta", "subjects": List("Subject"),
                    "roleRef": "RoleRef"},
    "Subject": {"kind": STR, "apiGroup": STR, "name": STR, "namespace": STR},
    "RoleRef": {"apiGroup": STR, "kind": STR, "name": STR},
}

QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?\d+))?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


def resolve(t):
    """A type spec with names looked up: a dict of fields, a Map, a List, or a scalar name."""
    return TYPES[t] if isinstance(t, str) and t in TYPES else t


# ---- strict decoding ------------------------------------------------------------------------------

def unknown_and_type_errors(value, t, path=""):
    """What strict decoding of `value` as type `t` reports, as the API server words it."""
    t = resolve(t)
    errs = []
    if value is None or t == ANY:
        return errs
    if isinstance(t, dict):
        if not isinstance(value, dict):
            return ['%s: expected an object, got %s' % (path or "<root>", type(value).__name__)]
        for k, v in value.items():
            p = path + "." + k if path else k
            if k not in t:
                errs.append('unknown field "%s"' % p)
            else:
                errs.extend(unknown_and_type_errors(v, t[k], p))
        return errs
    if isinstance(t, Map):
        if not isinstance(value, dict):
            return ['%s: expected a map, got %s' % (path, type(value).__name__)]
        for k, v in value.items():
            errs.extend(unknown_and_type_errors(v, t.value, "%s[%s]" % (path, k)))
        return errs
    if isinstance(t, List):
        if not isinstance(value, list):
            return ['%s: expected a list, got %s' % (path, type(value).__name__)]
        for i, v in enumerate(value):
            errs.extend(unknown_and_type_errors(v, t.item, "%s[%d]" % (path, i)))
        return errs
    ok = {STR: lambda v: isinstance(v, str),
          INT: lambda v: isinstance(v, int) and not isinstance(v, bool),
          BOOL: lambda v: isinstance(v, bool),
          INTSTR: lambda v: isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool)),
          QTY: lambda v: (isinstance(v, str) and QUANTITY.match(v) is not None)
          or (isinstance(v, (int, float)) and not isinstance(v, bool))}[t]
    if not ok(value):
        errs.append('%s: cannot decode %s as %s' % (path, json_repr(value), t))
    return errs


def json_repr(v):
    return '"%s"' % v if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else str(v)


# ---- semantic validation (field.ErrorList in the API server's words) -------------------------------

def validate(kind, obj):
    """The semantic errors the API server's validation reports for `obj` (a list of strings)."""
    errs = []
    md = obj.get("metadata") or {}
    name = md.get("name", "")
    name_re = DNS1035_LABEL if kind == "Service" else DNS1123_SUBDOMAIN
    if not name:
        errs.append("metadata.name: Required value: name or generateName is required")
    elif not name_re.match(name) or len(name) > (63 if kind == "Service" else 253):
        errs.append('metadata.name: Invalid value: "%s": a lowercase RFC 1123 %s must consist of lower case '
                    "alphanumeric characters or '-'" % (name, "label" if kind == "Service" else "subdomain"))
    for where, labels in (("metadata.labels", md.get("labels") or {}),):
        errs.extend(validate_labels(labels, where))
    check = globals().get("_validate_" + kind)
    if check:
        check(obj, errs)
    return errs


def validate_labels(labels, where):
    errs = []
    for k, v in labels.items():
        key = k.split("/")[-1]
        if not key or len(key) > 63 or not LABEL_VALUE.match(key):
            errs.append('%s: Invalid value: "%s": name part must consist of alphanumeric characters' % (where, k))
        if not isinstance(v, str) or len(v) > 63 or not LABEL_VALUE.match(v):
            errs.append('%s: Invalid value: "%s": a valid label must be an empty string or consist of '
                        "alphanumeric characters, '-', '_' or '.'" % (where, v))
    return errs


def _selector_matches(selector, labels):
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    return True


def _validate_Deployment(obj, errs):
    spec = obj.get("spec") or {}
    if spec.get("replicas", 1) < 0:
        errs.append("spec.replicas: Invalid value: %s: must be greater than or equal to 0" % spec["replicas"])
    sel = spec.get("selector")
    if not sel or not (sel.get("matchLabels") or sel.get("matchExpressions")):
        errs.append("spec.selector: Required value")
    tmpl = spec.get("template") or {}
    labels = (tmpl.get("metadata") or {}).get("labels") or {}
    if sel and not _selector_matches(sel, labels):
        errs.append("spec.template.metadata.labels: Invalid value: %s: `selector` does not match template `labels`"
                    % labels)
    strategy = spec.get("strategy") or {}
    if strategy.get("type") not in (None, "Recreate", "RollingUpdate"):
        errs.append('spec.strategy.type: Unsupported value: "%s": supported values: "Recreate", "RollingUpdate"'
                    % strategy["type"])
    if strategy.get("type") == "Recreate" and strategy.get("rollingUpdate") is not None:
        errs.append("spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy `type` is 'Recreate'")
    _validate_pod_spec(tmpl.get("spec") or {}, "spec.template.spec", errs)


def _validate_pod_spec(spec, where, errs):
    containers = spec.get("containers") or []
    if not containers:
        errs.append("%s.containers: Required value" % where)
    volumes = set()
    for i, v in enumerate(spec.get("volumes") or []):
        if not v.get("name"):
            errs.append("%s.volumes[%d].name: Required value" % (where, i))
        volumes.add(v.get("name"))
        sources = [k for k in v if k != "name"]
        if len(sources) != 1:
            errs.append("%s.volumes[%d]: Invalid value: must specify exactly 1 volume type" % (where, i))
        pvc = v.get("persistentVolumeClaim")
        if pvc is not None and not pvc.get("claimName"):
            errs.append("%s.volumes[%d].persistentVolumeClaim.claimName: Required value" % (where, i))
    for i, c in enumerate(containers):
        cw = "%s.containers[%d]" % (where, i)
        if not c.get("name") or not DNS1123_LABEL.match(c.get("name", "")):
            errs.append("%s.name: Required value (a DNS-1123 label)" % cw)
        if not c.get("image"):
            errs.append("%s.image: Required value" % cw)
        for j, m in enumerate(c.get("volumeMounts") or []):
            if m.get("name") not in volumes:
                errs.append('%s.volumeMounts[%d].name: Not found: "%s"' % (cw, j, m.get("name")))
            if not str(m.get("mountPath", "")).startswith("/"):
                errs.append("%s.volumeMounts[%d].mountPath: Required value (an absolute path)" % (cw, j))
        names = set()
        for j, p in enumerate(c.get("ports") or []):
            if not 1 <= p.get("containerPort", 0) <= 65535:
                errs.append("%s.ports[%d].containerPort: Invalid value: must be between 1 and 65535" % (cw, j))
            if p.get("name"):
                names.add(p["name"])
        for j, e in enumerate(c.get("env") or []):
            if not e.get("name") or not ENV_NAME.match(e["name"]):
                errs.append("%s.env[%d].name: Invalid value: a valid environment variable name" % (cw, j))
            src = e.get("valueFrom")
            if src is not None and "value" in e:
                errs.append("%s.env[%d].valueFrom: Invalid value: may not be specified when `value` is not empty"
                            % (cw, j))
            ref = (src or {}).get("secretKeyRef")
            if ref is not None and (not ref.get("name") or not ref.get("key")):
                errs.append("%s.env[%d].valueFrom.secretKeyRef: Required value: name and key" % (cw, j))
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            pr = c.get(probe)
            if pr is None:
                continue
            handlers = [h for h in ("httpGet", "tcpSocket", "exec", "grpc") if h in pr]
            if len(handlers) != 1:
                errs.append("%s.%s: Required value: must specify a handler type" % (cw, probe))
            port = (pr.get("httpGet") or pr.get("tcpSocket") or {}).get("port")
            if isinstance(port, str) and port not in names:
                errs.append('%s.%s: Invalid value: "%s": the container has no port of that name' % (cw, probe, port))
        limits = ((c.get("resources") or {}).get("limits") or {})
        requests = ((c.get("resources") or {}).get("requests") or {})
        for res, req in requests.items():
            if res in limits and quantity_value(req) > quantity_value(limits[res]):
                errs.append("%s.resources.requests: Invalid value: %s: must be less than or equal to %s limit"
                            % (cw, req, res))


SUFFIX = {"": 1, "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
          "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60}


def quantity_value(q):
    if isinstance(q, (int, float)):
        return float(q)
    m = re.match(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(.*)$", q)
    num, suffix = float(m.group(1)), m.group(2)
    if suffix[:1] in ("e", "E"):
        return num * 10 ** int(suffix[1:])
    return num * SUFFIX[suffix]


def _validate_Service(obj, errs):
    spec = obj.get("spec") or {}
    if spec.get("type", "ClusterIP") not in ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName"):
        errs.append('spec.type: Unsupported value: "%s"' % spec["type"])
    ports = spec.get("ports") or []
    if not ports and spec.get("type") != "ExternalName" and spec.get("clusterIP") != "None":
        errs.append("spec.ports: Required value")
    for i, p in enumerate(ports):
        if not 1 <= p.get("port", 0) <= 65535:
            errs.append("spec.ports[%d].port: Invalid value: must be between 1 and 65535" % i)
        if len(ports) > 1 and not p.get("name"):
            errs.append("spec.ports[%d].name: Required value" % i)


def _validate_PersistentVolumeClaim(obj, errs):
    spec = obj.get("spec") or {}
    if not spec.get("accessModes"):
        errs.append("spec.accessModes: Required value: at least 1 access mode is required")
    for m in spec.get("accessModes") or []:
        if m not in ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"):
            errs.append('spec.accessModes: Unsupported value: "%s"' % m)
    if "storage" not in ((spec.get("resources") or {}).get("requests") or {}):
        errs.append("spec.resources[storage]: Required value")


def _validate_Secret(obj, errs):
    for k, v in (obj.get("data") or {}).items():
        if not re.match(r"^[-._a-zA-Z0-9]+$", k):
            errs.append('data[%s]: Invalid value: a valid config key' % k)
        try:
            base64.b64decode(v, validate=True)
        except ValueError:
            errs.append("data[%s]: Invalid value: illegal base64 data" % k)


def _validate_Role(obj, errs):
    for i, r in enumerate(obj.get("rules") or []):
        w = "rules[%d]" % i
        if not r.get("verbs"):
            errs.append("%s.verbs: Required value: verbs must contain at least one value" % w)
        if r.get("nonResourceURLs"):
            errs.append("%s.nonResourceURLs: Invalid value: namespaced rules cannot apply to non-resource URLs" % w)
            continue
        if not r.get("apiGroups"):
            errs.append("%s.apiGroups: Required value: resource rules must supply at least one api group" % w)
        if not r.get("resources"):
            errs.append("%s.resources: Required value: resource rules must supply at least one resource" % w)


def _validate_RoleBinding(obj, errs):
    ref = obj.get("roleRef") or {}
    if ref.get("apiGroup") != "rbac.authorization.k8s.io":
        errs.append('roleRef.apiGroup: Unsupported value: "%s": supported values: "rbac.authorization.k8s.io"'
                    % ref.get("apiGroup", ""))
    if ref.get("kind") not in ("Role", "ClusterRole"):
        errs.append('roleRef.kind: Unsupported value: "%s": supported values: "ClusterRole", "Role"'
                    % ref.get("kind", ""))
    if not ref.get("name"):
        errs.append("roleRef.name: Required value")
    for i, s in enumerate(obj.get("subjects") or []):
        w = "subjects[%d]" % i
        if not s.get("name"):
            errs.append("%s.name: Required value" % w)
        if s.get("kind") == "ServiceAccount":
            if s.get("apiGroup"):
                errs.append('%s.apiGroup: Unsupported value: "%s": supported values: ""' % (w, s["apiGroup"]))
        elif s.get("kind") in ("User", "Group"):
            if s.get("apiGroup") != "rbac.authorization.k8s.io":
                errs.append('%s.apiGroup: Unsupported value: "%s"' % (w, s.get("apiGroup", "")))
        else:
            errs.append('%s.kind: Unsupported value: "%s": supported values: "ServiceAccount", "User", "Group"'
                        % (w, s.get("kind", "")))
