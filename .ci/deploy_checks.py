"""Checks for deploy/ that no off-the-shelf validator makes; run by .ci/deploy.sh.

Subcommands (each prints what it checked and exits non-zero on a failure):
  sync-config DEFAULT_TOML POD_TOML     rewrite the pod config as the default plus the pod adjustments
                                        (needs only the standard library)
  config DEFAULT_TOML POD_TOML          the pod config differs from the default only where a pod must
  split RENDERED CORE_OUT CRD_OUT       core Kubernetes kinds vs custom resources, for separate validation
  manifests RENDERED POD_TOML [CM_NAME [STORE]]
                                        the Deployment, NetworkPolicy and PodMonitor hang together (and
                                        the ConfigMap is named CM_NAME exactly, if given and not empty;
                                        the sidecar's memory store is STORE, if given)
  render-node RENDERED POD_TOML COMPONENT_DIR [BIN]
                                        the render node: listening on all interfaces, a Service and a
                                        NetworkPolicy rule for the EPP, the example EPP configs naming a
                                        model folder and the Service; with BIN, serves the folders from
                                        CONTEXT_ASSEMBLER_HF_VOCAB and answers what llm-d and Dynamo send
  custom RULES FILE...                  PodMonitor / PrometheusRule against the prometheus-operator CRD
                                        models; a PrometheusRule must hold exactly the groups of RULES
  rules RULES TEST DASHBOARD OUT_RULES  metric names, test coverage of every alert, dashboard structure;
                                        writes the dashboard's queries as a rules file for promtool
  server BIN POD_TOML RENDERED          starts the binary, sends traffic built with stubs generated from
                                        proto/ (grpcio-tools), scrapes /metrics (prometheus_client's
                                        parser), checks names, types and counts
  dockerfile DOCKERFILE                 multi-stage, non-root, and the build stage copies every file the
                                        crate includes at compile time
  gateways DIR PROCESSOR BASE POD_TOML DOC ENVOY
                                        deploy/kubernetes/gateways (DIR) and docs/gateway.md (DOC): the
                                        processor folder rendered (PROCESSOR) as the sidecar behind a Service;
                                        every other file's kinds and fields (Envoy Gateway's and kgateway's
                                        against trees of their API types, Istio's against the cloudcoil
                                        models); each ext_proc aimed at that Service's or the base's (BASE)
                                        gRPC port, request path only, fail closed, context_assembler
                                        receivable where the API allows it, full duplex with trailers SEND,
                                        buffers within limits.max_request_bytes; the Envoy configuration of
                                        the EnvoyFilters and of DOC through ENVOY --mode validate
"""

import copy
import importlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.error
import urllib.parse
import urllib.request
from types import SimpleNamespace

try:
    import yaml
except ImportError:  # sync-config runs on a bare python3
    yaml = None

# Every assembler_* metric that alerts and the dashboard may use, with its type.
# The server must export each of them (histograms once a value is recorded).
EXPECTED_METRICS = {
    "assembler_requests_total": "counter",
    "assembler_request_duration_seconds": "histogram",
    "assembler_prefix_cache_lookups_total": "counter",
    "assembler_prefix_hash_changes_total": "counter",
    "assembler_prefix_volatile_total": "counter",
    "assembler_prompt_cache_divergences_total": "counter",
    "assembler_prompt_cache_expected_tokens_total": "counter",
    "assembler_prompt_cache_expected_misses_total": "counter",
    "assembler_prompt_cache_prefixes_flagged_total": "counter",
    "assembler_provider_cache_write_tokens_total": "counter",
    "assembler_provider_cache_diagnostics_total": "counter",
    "assembler_provider_cached_tokens_total": "counter",
    "assembler_provider_prompt_tokens_total": "counter",
    "assembler_segment_cache_lookups_total": "counter",
    "assembler_blocks_total": "counter",
    "assembler_items_dropped_total": "counter",
    "assembler_items_filtered_total": "counter",
    "assembler_budget_overflow_total": "counter",
    "assembler_prompt_tokens": "histogram",
    "assembler_requests_refused_total": "counter",
    "assembler_in_flight_requests": "gauge",
    "assembler_upload_budget_held_bytes": "gauge",
    "assembler_config_reloads_total": "counter",
    "assembler_claims_denied_total": "counter",
    "assembler_compactions_total": "counter",
    "assembler_compaction_tokens_saved": "histogram",
    "assembler_compaction_breaker_open_total": "counter",
    "assembler_phase_duration_seconds": "histogram",
    "assembler_memories_stored_total": "counter",
    "assembler_memory_recall_duration_seconds": "histogram",
    "assembler_memories_recalled_total": "counter",
    "assembler_memories_deleted_total": "counter",
    "assembler_memory_store_up": "gauge",
    "assembler_memory_recall_unavailable_total": "counter",
    "assembler_memory_recalls_in_flight": "gauge",
    "assembler_runtime_alive_tasks": "gauge",
    "assembler_trace_spans_dropped_total": "counter",
    "assembler_trace_spans_exported_total": "counter",
    "process_resident_memory_bytes": "gauge",
    "process_cpu_seconds_total": "counter",
    "process_open_fds": "gauge",
    "process_threads": "gauge",
}
# The reasons of assembler_trace_spans_dropped_total (src/telemetry/metrics.rs TRACE_DROP_REASONS).
TRACE_DROP_REASONS = ("queue_full", "export_failed", "too_many_phases")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
SIDECAR = "context-assembler"
# Where the sidecar keeps its SQLite memory database in a pod: a writable
# volume (the root filesystem is read-only), mounted by the Deployment.
POD_MEMORY_DIR = "/var/lib/context-assembler"
# The keys a pod changes, by (section, key), with the new value and why.
POD_ADJUSTMENTS = {
    ("server", "listen"): ('"0.0.0.0:50051"', "all interfaces, because the kubelet's gRPC probes dial the pod IP, never\n"
                           "# 127.0.0.1. The gateway still dials 127.0.0.1:50051; the NetworkPolicy admits\n"
                           "# no other pod to this port."),
    ("server", "metrics_listen"): ('"0.0.0.0:9464"', "all interfaces, so that Prometheus can scrape the pod IP."),
    ("server", "log_format"): ('"json"', "one JSON object per line for the log collector."),
    ("memory", "sqlite_path"): (f'"{POD_MEMORY_DIR}/memory.db"',
                                f"on the writable volume the Deployment mounts at {POD_MEMORY_DIR}\n"
                                "# (the root filesystem is read-only). In the base that volume is an emptyDir:\n"
                                "# the memories live as long as the pod, each pod has its own. For memory the\n"
                                "# pods share and that survives rescheduling, use PostgreSQL (the component\n"
                                "# deploy/kubernetes/components/postgres-memory; the URL from a Secret only)."),
}
POD_ADJUSTED_KEYS = set(POD_ADJUSTMENTS)
POD_HEADER = """\
# context-assembler in a pod: a copy of config/default.toml with four pod
# adjustments (marked "pod:" below); everything else must stay equal to the
# default, and .ci/deploy.sh fails when the two drift apart. Regenerate with
# python3 .ci/deploy_checks.py sync-config config/default.toml THIS_FILE
#
# Mounted read-only from the ConfigMap that kustomize generates from this file
# and passed with `--config`. Check a file without starting:
# `context-assembler config --check FILE`.
#
# Precedence: command-line flag > environment variable > this file > the
# embedded default. The image sets CONTEXT_ASSEMBLER_METRICS_LISTEN, which
# therefore wins over `metrics_listen` below (both say 0.0.0.0:9464).
# Unknown keys are errors. SIGHUP re-reads this file and applies [[models]],
# [policies.*], [compaction], cache.families and [auth] without dropping requests; the
# other sections ([memory] among them) need a restart. A file that does not
# validate is refused and the running configuration stays (deploy/README.md
# says how to signal the sidecar).

"""


class CheckFailed(Exception):
    pass


def fail(msg):
    raise CheckFailed(msg)


def ok(msg):
    print(f"  ok: {msg}")


def load_docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def port_of(addr):
    return int(addr.rsplit(":", 1)[1])


def render_listen(sidecar, conf):
    """The sidecar's render node address (its environment wins over the file), or None when off."""
    env = {e["name"]: e.get("value") for e in sidecar.get("env", [])}
    addr = env.get("CONTEXT_ASSEMBLER_RENDER_LISTEN") or conf.get("render", {}).get("listen", "off")
    return None if addr == "off" else addr


# ---------------------------------------------------------------- config


def flatten(table, prefix=()):
    out = {}
    for key, value in table.items():
        if isinstance(value, dict):
            out.update(flatten(value, prefix + (key,)))
        else:
            out[prefix + (key,)] = value
    return out


def cmd_sync_config(default_path, pod_path):
    with open(default_path) as f:
        text = f.read()
    head, sep, rest = text.partition("[server]\n")
    if not sep or any(line.strip() and not line.startswith("#") for line in head.splitlines()):
        fail(f"{default_path} must open with comments, then [server]")
    body = sep + rest
    for (section, key), (value, why) in POD_ADJUSTMENTS.items():
        # The section runs from its header to the next line opening with "[".
        start = re.search(rf"^\[{re.escape(section)}\]\n", body, re.M)
        if start is None:
            fail(f"{default_path}: no [{section}] section")
        end = re.compile(r"^\[", re.M).search(body, start.end())
        stop = end.start() if end else len(body)
        adjusted = f"# pod: {why}\n{key} = {value}"
        part, n = re.subn(rf"^{key} = .*$", lambda _, text=adjusted: text, body[start.end():stop], count=1,
                          flags=re.M)
        if n != 1:
            fail(f"{default_path}: no `{key} = ...` line in [{section}]")
        body = body[:start.end()] + part + body[stop:]
    with open(pod_path, "w") as f:
        f.write(POD_HEADER + body)
    ok(f"{pod_path} rewritten from {default_path}")


def cmd_config(default_path, pod_path):
    with open(default_path, "rb") as f:
        default = flatten(tomllib.load(f))
    with open(pod_path, "rb") as f:
        pod = flatten(tomllib.load(f))
    drift = sorted(
        ".".join(k)
        for k in default.keys() | pod.keys()
        if k not in POD_ADJUSTED_KEYS and default.get(k, "<absent>") != pod.get(k, "<absent>")
    )
    if drift:
        fail(f"{pod_path} differs from {default_path} at {', '.join(drift)}: run "
             f"`python3 .ci/deploy_checks.py sync-config {default_path} {pod_path}`")
    ok(f"{pod_path} equals {default_path} except {', '.join('.'.join(k) for k in sorted(POD_ADJUSTED_KEYS))}")
    if not pod[("server", "metrics_listen")].startswith("0.0.0.0:"):
        fail("server.metrics_listen must bind all interfaces in a pod, or Prometheus cannot scrape it")
    if not pod[("server", "listen")].startswith("0.0.0.0:"):
        fail("server.listen must bind all interfaces in a pod: the kubelet's gRPC probes dial the pod IP")
    ok(f"pod listens on {pod[('server', 'listen')]} (gRPC) and {pod[('server', 'metrics_listen')]} (metrics)")


# ---------------------------------------------------------------- manifests


def is_custom_resource(doc):
    group = doc["apiVersion"].rpartition("/")[0]
    return group.endswith(".coreos.com")


def cmd_split(rendered, core_out, crd_out):
    docs = load_docs(rendered)
    core = [d for d in docs if not is_custom_resource(d)]
    crds = [d for d in docs if is_custom_resource(d)]
    for path, part in ((core_out, core), (crd_out, crds)):
        with open(path, "w") as f:
            yaml.safe_dump_all(part, f, sort_keys=False)
    def kinds(part):
        return ", ".join(f"{d['kind']}/{d['metadata']['name']}" for d in part)

    ok(f"rendered {len(docs)} resources: core [{kinds(core)}], custom [{kinds(crds)}]")


def one(docs, kind):
    found = [d for d in docs if d["kind"] == kind]
    if len(found) != 1:
        fail(f"expected one {kind}, found {len(found)}")
    return found[0]


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def cmd_manifests(rendered, pod_toml, configmap_name=None, memory_store=None):
    docs = load_docs(rendered)
    with open(pod_toml, "rb") as f:
        conf = tomllib.load(f)
    grpc_port = port_of(conf["server"]["listen"])
    metrics_port = port_of(conf["server"]["metrics_listen"])
    drain = conf["server"]["drain_secs"]

    deploy = one(docs, "Deployment")
    configmap = one(docs, "ConfigMap")
    netpol = one(docs, "NetworkPolicy")
    podmon = one(docs, "PodMonitor")
    pod = deploy["spec"]["template"]["spec"]
    pod_labels = deploy["spec"]["template"]["metadata"]["labels"]
    if not selects(deploy["spec"]["selector"], pod_labels):
        fail("the Deployment's selector does not select its own pods")

    sidecars = [c for c in pod.get("initContainers", []) if c["name"] == SIDECAR]
    if len(sidecars) != 1 or sidecars[0].get("restartPolicy") != "Always":
        fail(f"{SIDECAR} must be an init container with restartPolicy: Always (a native sidecar)")
    sidecar = sidecars[0]
    ok(f"{SIDECAR} is a native sidecar (initContainers, restartPolicy: Always)")

    # With the render node on, readiness asks its GET /health instead (checked below).
    render = render_listen(sidecar, conf)
    grpc_probes = ("startupProbe", "livenessProbe") if render else ("startupProbe", "readinessProbe", "livenessProbe")
    for kind in grpc_probes:
        probe = sidecar.get(kind) or fail(f"{SIDECAR} has no {kind}")
        grpc = probe.get("grpc") or fail(f"{SIDECAR} {kind} is not a gRPC probe")
        if grpc.get("port") != grpc_port or grpc.get("service", "") != "":
            fail(f"{SIDECAR} {kind} must probe service \"\" on port {grpc_port}, the configured listen port")
    ok(f"{', '.join(grpc_probes)} are grpc.health.v1 on port {grpc_port}")

    ports = {p.get("name"): p["containerPort"] for p in sidecar.get("ports", [])}
    if ports.get("metrics") != metrics_port:
        fail(f"{SIDECAR} must name its metrics port 'metrics' = {metrics_port}")
    ok(f"named port metrics = {metrics_port}, matching server.metrics_listen")
    if render:
        render_port = port_of(render)
        if ports.get("render") != render_port:
            fail(f"{SIDECAR} must name its render port 'render' = {render_port}, the render listen port")
        probe = sidecar.get("readinessProbe") or fail(f"{SIDECAR} has no readinessProbe")
        get = probe.get("httpGet") or {}
        if (set(probe) & {"grpc", "tcpSocket", "exec"} or get.get("path") != "/health"
                or get.get("port") not in ("render", render_port) or get.get("scheme", "HTTP") != "HTTP"):
            fail(f"{SIDECAR} readinessProbe must be (only) an HTTP GET /health on port render = {render_port}")
        ok(f"render node on {render}: named port render = {render_port}, readinessProbe GET /health on it")
    pod_ports = [p["containerPort"] for c in pod.get("initContainers", []) + pod["containers"]
                 for p in c.get("ports", [])]
    if len(pod_ports) != len(set(pod_ports)):
        fail(f"two containers of the pod declare the same port: {sorted(pod_ports)}")
    ok(f"the pod's container ports {sorted(pod_ports)} are all different")

    # --config FILE must point into a read-only mount of the generated ConfigMap.
    args = sidecar.get("args", [])
    if "--config" not in args:
        fail(f"{SIDECAR} is not started with --config")
    config_path = args[args.index("--config") + 1]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    mount = next((m for m in sidecar.get("volumeMounts", [])
                  if config_path.startswith(m["mountPath"].rstrip("/") + "/")), None)
    if mount is None or not mount.get("readOnly"):
        fail(f"--config {config_path} is not inside a read-only volume mount")
    source = volumes[mount["name"]].get("configMap", {})
    key = config_path[len(mount["mountPath"].rstrip("/")) + 1:]
    if source.get("name") != configmap["metadata"]["name"] or key not in configmap.get("data", {}):
        fail(f"--config {config_path} is not a key of ConfigMap {configmap['metadata']['name']}")
    if tomllib.loads(configmap["data"][key]) != conf:
        fail(f"ConfigMap key {key} is not {pod_toml}")
    if configmap_name and configmap["metadata"]["name"] != configmap_name:
        fail(f"the ConfigMap is named {configmap['metadata']['name']}, not {configmap_name}")
    ok(f"--config {config_path} is {pod_toml}, mounted read-only from ConfigMap {configmap['metadata']['name']}")

    # A model folder (relative to the config file) must be on a read-only mount.
    for i, model in enumerate(conf.get("models", [])):
        if "tokenizer_dir" not in model:
            continue
        folder = os.path.normpath(os.path.join(os.path.dirname(config_path), model["tokenizer_dir"]))
        folder_mount = next((m for m in sidecar.get("volumeMounts", [])
                             if (folder + "/").startswith(m["mountPath"].rstrip("/") + "/")), None)
        if folder_mount is None or not folder_mount.get("readOnly"):
            fail(f"models[{i}].tokenizer_dir {folder} is not inside a read-only volume mount")
        kind = next((k for k in volumes[folder_mount["name"]] if k != "name"), "?")
        ok(f"models[{i}].tokenizer_dir {folder} is on the read-only {kind} volume {folder_mount['name']} at "
           f"{folder_mount['mountPath']}")

    grace = pod.get("terminationGracePeriodSeconds", 30)
    if grace <= drain:
        fail(f"terminationGracePeriodSeconds {grace} must exceed drain_secs {drain}")
    ok(f"terminationGracePeriodSeconds {grace} > drain_secs {drain}")

    pod_sc = pod.get("securityContext", {})
    for c in pod.get("initContainers", []) + pod["containers"]:
        sc = c.get("securityContext", {})
        name = c["name"]
        if not (sc.get("runAsNonRoot") or pod_sc.get("runAsNonRoot")):
            fail(f"{name}: runAsNonRoot is not set")
        if sc.get("readOnlyRootFilesystem") is not True:
            fail(f"{name}: readOnlyRootFilesystem must be true")
        if sc.get("allowPrivilegeEscalation") is not False:
            fail(f"{name}: allowPrivilegeEscalation must be false")
        if "ALL" not in sc.get("capabilities", {}).get("drop", []):
            fail(f"{name}: capabilities must drop ALL")
        seccomp = sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}
        if seccomp.get("type") != "RuntimeDefault":
            fail(f"{name}: seccompProfile must be RuntimeDefault")
        res = c.get("resources", {})
        for part in ("requests", "limits"):
            if not {"cpu", "memory"} <= res.get(part, {}).keys():
                fail(f"{name}: resources.{part} must set cpu and memory")
    ok("every container: non-root, read-only root, no privilege escalation, drops ALL, "
       "seccomp RuntimeDefault, cpu/memory requests and limits")

    # The memory store: environment variables win over the file.
    env = {e["name"]: e for e in sidecar.get("env", [])}
    memory = conf.get("memory", {})
    store = env.get("CONTEXT_ASSEMBLER_MEMORY_STORE", {}).get("value", memory.get("store", "sqlite"))
    if memory.get("postgres_url"):
        fail(f"{pod_toml}: memory.postgres_url must stay empty: the URL (with its password) comes from a Secret "
             f"as CONTEXT_ASSEMBLER_MEMORY_POSTGRES_URL, never from the ConfigMap")
    url_env = env.get("CONTEXT_ASSEMBLER_MEMORY_POSTGRES_URL")
    if url_env is not None and "secretKeyRef" not in url_env.get("valueFrom", {}):
        fail("CONTEXT_ASSEMBLER_MEMORY_POSTGRES_URL must come from a secretKeyRef, not a plain value")
    if store == "sqlite":
        db = env.get("CONTEXT_ASSEMBLER_MEMORY_SQLITE_PATH", {}).get("value", memory.get("sqlite_path", ""))
        db_mount = next((m for m in sidecar.get("volumeMounts", [])
                         if db.startswith(m["mountPath"].rstrip("/") + "/")), None)
        if not db.startswith("/") or db_mount is None or db_mount.get("readOnly"):
            fail(f"memory.sqlite_path {db!r} is not inside a writable volume mount (the root filesystem is "
                 f"read-only)")
        kind = next((k for k in volumes[db_mount["name"]] if k != "name"), "?")
        ok(f"memory store sqlite: {db} on the writable {kind} volume {db_mount['name']} at {db_mount['mountPath']}")
    elif store == "postgres":
        if url_env is None:
            fail("memory store postgres without CONTEXT_ASSEMBLER_MEMORY_POSTGRES_URL from a Secret")
        ref = url_env["valueFrom"]["secretKeyRef"]
        ok(f"memory store postgres: the URL from Secret {ref['name']} key {ref['key']}, not in the ConfigMap")
    elif store != "off":
        fail(f"unknown memory store {store!r}")
    else:
        ok("memory store off")
    if memory_store and store != memory_store:
        fail(f"the sidecar's memory store is {store}, not {memory_store}")

    addrs = [e.get("value") for c in pod["containers"] for e in c.get("env", [])]
    if f"127.0.0.1:{grpc_port}" not in addrs:
        fail(f"no container is pointed at the sidecar on 127.0.0.1:{grpc_port}")
    ok(f"the gateway dials the sidecar on 127.0.0.1:{grpc_port}")

    if not selects(netpol["spec"]["podSelector"], pod_labels):
        fail("the NetworkPolicy does not select the gateway pods")
    for rule in netpol["spec"].get("ingress", []):
        rule_ports = rule.get("ports") or fail("a NetworkPolicy ingress rule without ports admits every port")
        for p in rule_ports:
            if p.get("port") in (grpc_port, "grpc"):
                fail(f"the NetworkPolicy admits the sidecar's gRPC port {grpc_port}")
    ok(f"the NetworkPolicy admits no other pod to gRPC port {grpc_port}")

    if not selects(podmon["spec"]["selector"], pod_labels):
        fail("the PodMonitor does not select the gateway pods")
    endpoints = podmon["spec"]["podMetricsEndpoints"]
    if [e.get("port") for e in endpoints] != ["metrics"] or endpoints[0].get("path", "/metrics") != "/metrics":
        fail("the PodMonitor must scrape port 'metrics' at /metrics")
    ok("the PodMonitor selects the gateway pods and scrapes port 'metrics' at /metrics")


# ---------------------------------------------------------------- render node

# The EPPs' side of the render-node component, as examples beside it.
LLM_D_EXAMPLE = "llm-d-epp-config.example.yaml"
DYNAMO_EXAMPLE = "dynamo-epp-env.example.yaml"


def render_url(key, url, render_port, services):
    """Checks that an EPP's base URL reaches the render node: plain http (neither EPP speaks TLS to it),
    no path, and loopback on the render port (the EPP's own pod) or a Service of it on its port."""
    u = urllib.parse.urlsplit(url)
    if u.scheme != "http" or u.path.strip("/") or u.query or not u.hostname:
        fail(f"{key} {url}: must be a plain http:// base URL without a path")
    if u.hostname in ("localhost", "127.0.0.1"):
        want = render_port
    else:
        name = u.hostname.split(".")[0]
        if name not in services:
            fail(f"{key} {url}: {name} is not a Service of the render port ({', '.join(services)})")
        want = services[name]
    if (u.port or 80) != want:
        fail(f"{key} {url}: port {u.port or 80}, not {want}")


def http_call(url, body=None):
    """(status, body) of a GET, or of a JSON POST when `body` is given."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def cmd_render_node(rendered, pod_toml, component_dir, binary=None):
    docs = load_docs(rendered)
    with open(pod_toml, "rb") as f:
        conf = tomllib.load(f)
    deploy = one(docs, "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    pod_labels = deploy["spec"]["template"]["metadata"]["labels"]
    sidecar = next(c for c in pod["initContainers"] if c["name"] == SIDECAR)
    render = render_listen(sidecar, conf) or fail("the render node is off (CONTEXT_ASSEMBLER_RENDER_LISTEN, "
                                                  "render.listen)")
    if not render.startswith(("0.0.0.0:", "[::]:")):
        fail(f"the render node listens on {render}: the Service and the kubelet's probe dial the pod IP")
    port = port_of(render)

    services = {d["metadata"]["name"]: p["port"] for d in docs if d["kind"] == "Service"
                and d["spec"].get("selector") and selects({"matchLabels": d["spec"]["selector"]}, pod_labels)
                for p in d["spec"]["ports"] if p.get("targetPort") in ("render", port)}
    if not services:
        fail("no Service selects the gateway pods on the render port")
    netpol = one(docs, "NetworkPolicy")
    rules = [r for r in netpol["spec"].get("ingress", []) if any(p.get("port") in ("render", port)
                                                                 for p in r.get("ports", []))]
    if not rules or not all(r.get("from") for r in rules):
        fail("the NetworkPolicy must admit the render port from the EPP's pods only (rules with `from`)")
    ok(f"render node on {render}: Service {', '.join(f'{n}:{p}' for n, p in services.items())}; the "
       "NetworkPolicy admits the port from selected peers only")

    folders = {m["name"]: m["tokenizer_dir"] for m in conf.get("models", [])
               if "tokenizer_dir" in m and not m.get("prefix")}
    if not folders:
        fail(f"{pod_toml} names no model folder (tokenizer_dir): the render node would render nothing")
    with open(os.path.join(component_dir, LLM_D_EXAMPLE)) as f:
        epp = yaml.safe_load(f)
    producers = [p for p in epp.get("plugins", []) if p.get("type") in ("token-producer", "tokenizer")]
    if len(producers) != 1:
        fail(f"{LLM_D_EXAMPLE}: expected one token-producer plugin, found {len(producers)}")
    params = producers[0].get("parameters", {})
    render_url(f"{LLM_D_EXAMPLE} vllm.url", params.get("vllm", {}).get("url", "http://localhost:8000"), port, services)
    with open(os.path.join(component_dir, DYNAMO_EXAMPLE)) as f:
        env = {e["name"]: e.get("value") for e in yaml.safe_load(f)}
    if env.get("DYN_EPP_TOKENIZER_PROTOCOL") != "vllm-render":
        fail(f"{DYNAMO_EXAMPLE}: DYN_EPP_TOKENIZER_PROTOCOL must be vllm-render")
    render_url(f"{DYNAMO_EXAMPLE} DYN_EPP_TOKENIZER_SERVICE_URL", env.get("DYN_EPP_TOKENIZER_SERVICE_URL", ""), port,
               services)
    names = {f"{LLM_D_EXAMPLE} modelName": params.get("modelName"),
             f"{DYNAMO_EXAMPLE} DYN_MODEL_NAME": env.get("DYN_MODEL_NAME")}
    for key, name in names.items():
        if name not in folders:
            fail(f"{key} {name!r} is not a model folder of {pod_toml} ({', '.join(folders)})")
    ok(f"the examples point llm-d's token-producer and Dynamo's EPP (vllm-render) at it, as model "
       f"{', '.join(sorted(set(names.values())))}")
    if binary is None:
        return

    # Live: the folders as the pod mounts them, from the vocabularies CI fetched (a folder mounted at
    # MOUNT/x is read from VOCAB/x), then the requests each EPP sends.
    vocab = os.environ.get("CONTEXT_ASSEMBLER_HF_VOCAB", "target/hf-vocab")
    with open(pod_toml) as f:
        text = f.read()
    for folder in folders.values():
        mount = next(m["mountPath"] for m in sidecar["volumeMounts"]
                     if folder.startswith(m["mountPath"].rstrip("/") + "/"))
        local = os.path.abspath(os.path.join(vocab, os.path.relpath(folder, mount)))
        if not os.path.isdir(local):
            print(f"  SKIP: no {local} (CONTEXT_ASSEMBLER_HF_VOCAB, .ci/hf_vocab.sh): the render node is not started")
            return
        line = f"tokenizer_dir = {json.dumps(folder)}"
        if line not in text:
            fail(f"{pod_toml} has no line {line} to point at {local}")
        text = text.replace(line, f"tokenizer_dir = {json.dumps(local)}")
    path = sidecar["readinessProbe"]["httpGet"]["path"]
    work = tempfile.mkdtemp(prefix="deploy-ci-render-")
    config = os.path.join(work, "context-assembler.toml")
    with open(config, "w") as f:
        f.write(text)
    base = f"http://127.0.0.1:{free_port()}"
    cmd = [binary, "--config", config, "--listen", f"127.0.0.1:{free_port()}", "--metrics-listen", "off",
           "--render-listen", base.removeprefix("http://"), "--memory-store", "off"]
    log_path = os.environ.get("DEPLOY_CI_SERVER_LOG", os.devnull)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                fail(f"the render node exited with {proc.returncode} before serving (log: {log_path})")
            try:
                if http_call(base + path)[0] == 200:
                    break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                fail(f"GET {path} never answered 200")
            time.sleep(0.05)
        ok(f"GET {path} on the render port: 200 (the readiness probe), {len(folders)} folder(s) from {vocab}")

        served = {m["id"] for m in json.loads(http_call(base + "/v1/models")[1])["data"]}
        llm_d, dynamo = names.values()
        # llm-d's warm-up body (text parts, `model` stamped), then a Dynamo client's body as it is.
        sent = {
            "llm-d chat": ("/v1/chat/completions/render",
                           {"model": llm_d, "messages": [{"role": "user", "content": [{"type": "text",
                                                                                        "text": "warmup"}]}]}),
            "llm-d completion": ("/v1/completions/render", {"model": llm_d, "prompt": "warmup"}),
            "Dynamo chat": ("/v1/chat/completions/render",
                            {"model": dynamo, "messages": [{"role": "user", "content": "hello"}], "stream": True,
                             "max_tokens": 16, "nvext": {"agent_hints": {}}}),
        }
        for what, (route, body) in sent.items():
            status, answer = http_call(base + route, body)
            answer = json.loads(answer)
            first = answer[0] if isinstance(answer, list) and answer else answer
            if status != 200 or not isinstance(first, dict) or not first.get("token_ids"):
                fail(f"{what} render: {status} {str(answer)[:300]}")
        unknown = {"model": "deploy-ci-no-such-model", "messages": [{"role": "user", "content": "hello"}]}
        if http_call(base + "/v1/chat/completions/render", unknown)[0] != 404:
            fail("a render for a model the node does not serve did not answer 404")
        if not set(names.values()) <= served:
            fail(f"GET /v1/models does not list {', '.join(set(names.values()) - served)}")
        ok(f"GET /v1/models lists {', '.join(sorted(served))}; {', '.join(sent)} renders answer token ids; "
           "an unknown model 404")

        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=conf["server"]["drain_secs"] + 5)
        if code != 0:
            fail(f"SIGTERM: the render node exited with {code}")
        ok("SIGTERM: drained and exited 0")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(work, ignore_errors=True)


def unknown_keys(given, dumped, path=""):
    """Keys of `given` that a model dropped on the way through (fields it does not know)."""
    if isinstance(given, dict) and isinstance(dumped, dict):
        out = []
        for key, value in given.items():
            if key not in dumped:
                out.append(f"{path}.{key}".lstrip("."))
            else:
                out += unknown_keys(value, dumped[key], f"{path}.{key}")
        return out
    if isinstance(given, list) and isinstance(dumped, list):
        if len(given) != len(dumped):
            return [f"{path} (items dropped)"]
        pairs = zip(given, dumped, strict=True)
        return [k for i, (g, d) in enumerate(pairs) for k in unknown_keys(g, d, f"{path}[{i}]")]
    return []


def cmd_custom(rules_path, *paths):
    from cloudcoil.models.prometheus_operator import v1  # types, enums and patterns of the CRDs

    models = {"PodMonitor": v1.PodMonitor, "PrometheusRule": v1.PrometheusRule}
    for path in paths:
        for doc in load_docs(path):
            kind = doc["kind"]
            if doc["apiVersion"] != "monitoring.coreos.com/v1" or kind not in models:
                fail(f"{path}: unexpected custom resource {doc['apiVersion']} {kind}")
            model = models[kind].model_validate(copy.deepcopy(doc))
            dumped = model.model_dump(by_alias=True, exclude_unset=True, mode="json")
            extra = unknown_keys(doc, dumped)
            if extra:
                fail(f"{kind}/{doc['metadata']['name']}: unknown fields {', '.join(extra)}")
            if kind == "PrometheusRule" and doc["spec"]["groups"] != load_docs(rules_path)[0]["groups"]:
                fail(f"{path}: its groups are not those of {rules_path}")
            ok(f"{kind}/{doc['metadata']['name']} matches the monitoring.coreos.com/v1 schema "
               f"(types, enums, patterns, no unknown fields)")


# ---------------------------------------------------------------- rules and dashboard

NAME = re.compile(r"\b(?:assembler|process)_[a-z0-9_]+")


def base_name(name):
    for suffix in HISTOGRAM_SUFFIXES:
        stem = name[: -len(suffix)]
        if name.endswith(suffix) and EXPECTED_METRICS.get(stem) == "histogram":
            return stem
    return name


def check_names(where, exprs):
    used = {base_name(n) for e in exprs for n in NAME.findall(e)}
    unknown = sorted(used - EXPECTED_METRICS.keys())
    if unknown:
        fail(f"{where} uses metrics the server does not export: {', '.join(unknown)}")
    for e in exprs:
        for n in NAME.findall(e):
            b = base_name(n)
            if EXPECTED_METRICS[b] == "histogram" and n == b:
                fail(f"{where}: histogram {b} used without _bucket/_sum/_count in: {e}")
    return used


def dashboard_queries(dash):
    panels = []
    for p in dash["panels"]:
        panels.append(p)
        panels.extend(p.get("panels", []))
    return panels


def cmd_rules(rules_path, test_path, dash_path, out_rules):
    rules = [r for g in load_docs(rules_path)[0]["groups"] for r in g["rules"]]
    alerts = [r for r in rules if "alert" in r]
    for r in alerts:
        if "for" not in r or r.get("labels", {}).get("severity") not in ("critical", "warning", "info"):
            fail(f"{r['alert']}: every alert needs `for` and a severity label")
        notes = r.get("annotations", {})
        if not notes.get("summary") or "Runbook:" not in notes.get("description", ""):
            fail(f"{r['alert']}: needs a summary and a description with a Runbook: hint")
    used = check_names(rules_path, [r["expr"] for r in rules])
    ok(f"{len(alerts)} alerts have `for`, severity, summary and a runbook hint; "
       f"metrics used: {', '.join(sorted(used))}")

    fires, quiet = set(), set()
    for test in load_docs(test_path)[0]["tests"]:
        for case in test.get("alert_rule_test", []):
            (fires if case.get("exp_alerts") else quiet).add(case["alertname"])
    names = {r["alert"] for r in alerts}
    missing = sorted(f"{a} ({'fires' if a not in fires else 'stays quiet'})"
                     for a in names for s in (fires, quiet) if a not in s)
    if missing:
        fail(f"{test_path} lacks a case where {', '.join(missing)}")
    ok(f"{test_path} tests every alert both firing and quiet")

    with open(dash_path) as f:
        dash = json.load(f)
    if dash.get("schemaVersion", 0) < 36:
        fail("the dashboard's schemaVersion is older than Grafana 9")
    variables = {v["name"]: v for v in dash.get("templating", {}).get("list", [])}
    ds_var = variables.get("DS_PROMETHEUS", {})
    if ds_var.get("type") != "datasource" or ds_var.get("query") != "prometheus":
        fail("the dashboard needs a datasource variable DS_PROMETHEUS of type prometheus")
    panels = dashboard_queries(dash)
    ids = [p["id"] for p in panels]
    if len(ids) != len(set(ids)):
        fail("dashboard panel ids are not unique")
    exprs = []
    for p in panels:
        g = p.get("gridPos", {})
        if g.get("x", 0) + g.get("w", 0) > 24 or not g.get("h"):
            fail(f"panel {p['title']!r}: bad gridPos {g}")
        if p["type"] == "row":
            continue
        sources = [p.get("datasource")] + [t.get("datasource") for t in p.get("targets", [])]
        if any((s or {}).get("uid") != "${DS_PROMETHEUS}" for s in sources):
            fail(f"panel {p['title']!r} does not use the ${{DS_PROMETHEUS}} datasource variable")
        if not p.get("targets") or not all(t.get("expr") for t in p["targets"]):
            fail(f"panel {p['title']!r} has no query")
        exprs += [t["expr"] for t in p["targets"]]
    for v in variables.values():
        if v.get("type") == "query":
            exprs.append(re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", v["definition"]))
    dash_used = check_names(dash_path, exprs)
    unused = sorted(EXPECTED_METRICS.keys() - dash_used)
    if unused:
        fail(f"no dashboard panel shows {', '.join(unused)}")
    rows = sum(p["type"] == "row" for p in panels)
    ok(f"dashboard: {len(panels) - rows} panels in {rows} rows, {len(exprs)} queries, ${{DS_PROMETHEUS}} everywhere, "
       f"every exported metric shown")

    # promtool has no expression checker: hand it the queries as recording rules,
    # with Grafana's variables replaced by what they expand to.
    expand = {"$__rate_interval": "5m", "$__range": "1h", "$__interval": "1m", "$namespace": ".*", "$pod": ".*"}
    records = []
    for i, e in enumerate(exprs):
        for var, value in expand.items():
            e = e.replace(var, value)
        if "$" in e:
            fail(f"unexpanded variable in dashboard query: {e}")
        records.append({"record": f"dashboard:query_{i}", "expr": e})
    with open(out_rules, "w") as f:
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": records}]}, f, sort_keys=False)
    ok(f"dashboard queries written to {out_rules} for promtool")


# ---------------------------------------------------------------- server

# The contract the traffic is built from. Its Python stubs are generated at run time, so a field, enum
# value, message or RPC renamed or removed there fails the check by name (a field, value or message before
# the server starts), and a renumbered field is sent under its new number, as a server built from the same
# file reads it.
PROTO_ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "proto"))
PROTO_FILE = "context_assembler/v1/assembler.proto"
PROTO = os.path.relpath(os.path.join(PROTO_ROOT, PROTO_FILE))  # as failures name it


def generated_stubs():
    """(assembler_pb2, assembler_pb2_grpc), generated from PROTO_FILE by grpcio-tools' protoc into a
    temporary directory and imported from there."""
    with tempfile.TemporaryDirectory(prefix="deploy-ci-stubs-") as out:
        run = subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"--proto_path={PROTO_ROOT}",
                              f"--python_out={out}", f"--grpc_python_out={out}", PROTO_FILE],
                             capture_output=True, text=True)
        if run.returncode != 0:
            fail(f"grpc_tools.protoc could not compile {PROTO}:\n{run.stderr.strip()}")
        module = PROTO_FILE.removesuffix(".proto").replace("/", ".")
        sys.path.insert(0, out)
        try:
            return importlib.import_module(f"{module}_pb2"), importlib.import_module(f"{module}_pb2_grpc")
        finally:
            sys.path.remove(out)


def traffic(pb, breaker_failures):
    """Every request cmd_server sends, built with the generated message classes `pb`. A field, enum
    value or message the contract lacks, or a value of the wrong type, fails here and says which."""

    def assemble(request_id, max_input_tokens, items, recall=None):
        evidence = [pb.Item(id=f"doc-{i}", content=f"Document {i}: " + "the quick brown fox jumps. " * 12,
                            score=1.0 - i / 10, source=f"kb/{i}.md")
                    for i in range(items)]
        return pb.AssembleRequest(
            request_id=request_id, model="gpt-4o", max_input_tokens=max_input_tokens,
            static_segments=[pb.Segment(id="system", kind=pb.SEGMENT_KIND_SYSTEM,
                                        content="You answer from the documents provided.")],
            blocks=[pb.Block(name="kb", kind=pb.BLOCK_KIND_EVIDENCE, items=evidence)],
            query="What do the documents say?", principal=pb.Principal(id="deploy-ci"), recall=recall)

    def compact(request_id, session_id, trigger_tokens, target_tokens, preserve_recent, messages=8):
        # `messages` alternating user and assistant text messages of a few hundred tokens each.
        turn = "the quick brown fox jumps over the lazy dog. " * 40
        turns = [pb.ConversationMessage(id=f"m{i}", role=pb.ROLE_USER if i % 2 == 0 else pb.ROLE_ASSISTANT,
                                        content=[pb.ContentBlock(text=f"Turn {i}: " + turn)])
                 for i in range(messages)]
        return pb.CompactRequest(request_id=request_id, model="gpt-4o", session_id=session_id, messages=turns,
                                 trigger_tokens=trigger_tokens, target_tokens=target_tokens,
                                 preserve_recent=preserve_recent)

    try:
        return SimpleNamespace(
            list_models=pb.ListModelsRequest(),
            count_tokens=pb.CountTokensRequest(model="gpt-4o", text="hello world"),
            assembles=[assemble(f"deploy-ci-{i}", 300, items=8) for i in range(3)],
            overflow=assemble("deploy-ci-overflow", 5, items=1),
            # One compaction under its target, then one session whose compactions all end over target
            # until its breaker opens (after compaction.breaker_failures in a row), and one more, trimmed instead.
            compact=compact("deploy-ci-compact", "deploy-ci-ok", 100, 100000, 2),
            breaker=[compact(f"deploy-ci-breaker-{i}", "deploy-ci-breaker", 100, 1, 2)
                     for i in range(breaker_failures + 1)],
            retain=pb.RetainRequest(
                idempotency_key="deploy-ci-retain", subject="deploy-ci", request_id="deploy-ci-retain",
                observations=[pb.Observation(type="decision",
                                             text="Deploy checks recall the quick brown fox decision.")]),
            list_memories=pb.ListMemoriesRequest(subject="deploy-ci"),
            recall=assemble("deploy-ci-recall", 2000, items=1,
                            recall=pb.Recall(subject="deploy-ci", query="quick brown fox decision")),
            forget=pb.ForgetRequest(subject="deploy-ci"),
        )
    except (AttributeError, ValueError, TypeError) as e:
        fail(f"the requests this check sends no longer fit {PROTO}: {e} (update traffic() in "
             f".ci/deploy_checks.py)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(url):
    """The metric families of one scrape, as prometheus_client's text-format parser reads them."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    try:
        return list(text_string_to_metric_families(text))
    except ValueError as e:
        fail(f"{url} does not parse as the Prometheus text format: {e!r}")


def exported(families):
    """{name: type} by the names the scrape exposes. The parser names a counter's family without its
    _total (as OpenMetrics does); a sample without a # TYPE line is a family of its own, of type unknown,
    and counts for its histogram's base name when it is a _bucket/_sum/_count of an expected histogram."""
    types = {}
    for family in families:
        if family.type == "counter":
            types[family.name + "_total"] = "counter"
        elif family.type == "unknown":
            stem = base_name(family.name)
            types.setdefault(stem, "histogram" if stem != family.name else "unknown")
        else:
            types[family.name] = family.type
    return types


def sample(families, name, **labels):
    """The value of the first sample named `name` whose labels include `labels`, or None."""
    return next((s.value for family in families for s in family.samples
                 if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())), None)


def cmd_server(binary, pod_toml, rendered):
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    pb, pb_grpc = generated_stubs()
    with open(pod_toml, "rb") as f:
        failures = tomllib.load(f).get("compaction", {}).get("breaker_failures", 3)
    sent = traffic(pb, failures)
    ok(f"requests built with the classes grpcio-tools generated from {PROTO}")

    grpc_addr = f"127.0.0.1:{free_port()}"
    metrics_addr = f"127.0.0.1:{free_port()}"
    helptext = subprocess.run([binary, "--help"], capture_output=True, text=True, check=True).stdout
    if "--config" in helptext:
        # The sidecar's own arguments from the rendered Deployment, with the
        # ConfigMap's path replaced by the file it is generated from.
        deploy = one(load_docs(rendered), "Deployment")
        sidecar = next(c for c in deploy["spec"]["template"]["spec"]["initContainers"] if c["name"] == SIDECAR)
        args = list(sidecar["args"])
        args[args.index("--config") + 1] = pod_toml
        ok(f"starting the binary with the manifest's arguments {sidecar['args']} (--config {pod_toml})")
    else:
        args = []
        print("  SKIP: this binary has no --config: the pod config and the manifest's arguments are not "
              "checked against it")
    cmd = [binary, *args, "--listen", grpc_addr, "--metrics-listen", metrics_addr]
    memory = "--memory-sqlite-path" in helptext
    if memory:
        # The pod's database path is a volume that does not exist here.
        db_dir = tempfile.mkdtemp(prefix="deploy-ci-memory-")
        cmd += ["--memory-store", "sqlite", "--memory-sqlite-path", os.path.join(db_dir, "memory.db")]
    else:
        print("  SKIP: this binary has no memory store: Retain, recall and Forget are not exercised")
    log_path = os.environ.get("DEPLOY_CI_SERVER_LOG", os.devnull)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        channel = grpc.insecure_channel(grpc_addr)
        health = health_pb2_grpc.HealthStub(channel)
        statuses = []
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                fail(f"the server exited with {proc.returncode} before serving (log: {log_path})")
            try:
                reply = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=2)  # as the kubelet asks
                statuses.append(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
                if statuses[-1] == "SERVING":
                    break
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE:
                    fail(f"grpc.health.v1.Health/Check: {e.code()}")
            if time.monotonic() > deadline:
                fail(f"health never turned SERVING: {statuses[-5:]}")
            time.sleep(0.05)
        seen = " -> ".join(dict.fromkeys(statuses))
        ok(f"grpc.health.v1 Check(\"\") on {grpc_addr}: {seen} (what the probes ask)")

        stub = pb_grpc.AssemblerStub(channel)

        def call(rpc, request):
            method = getattr(stub, rpc, None) or fail(f"{PROTO} has no rpc Assembler.{rpc}")
            return method(request, timeout=10)

        call("ListModels", sent.list_models)
        call("CountTokens", sent.count_tokens)
        for request in sent.assembles:
            call("Assemble", request)
        try:
            call("Assemble", sent.overflow)
            fail("an Assemble over budget was not refused")
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.FAILED_PRECONDITION:
                fail(f"an Assemble over budget answered {e.code()}, not FAILED_PRECONDITION")
        ok("traffic: ListModels, CountTokens, 3 Assemble under budget pressure, 1 budget overflow")

        call("Compact", sent.compact)
        for request in sent.breaker:
            call("Compact", request)
        ok(f"traffic: 1 Compact under target, {failures} over target (the session's breaker opens), 1 trimmed")

        if memory:
            # Retain one observation (twice with the same key: the replay
            # stores nothing), list it, recall it into an Assemble, forget it.
            call("Retain", sent.retain)
            call("Retain", sent.retain)
            if not call("ListMemories", sent.list_memories).memories:
                fail("ListMemories listed nothing after a Retain")
            call("Assemble", sent.recall)
            call("Forget", sent.forget)
            ok("traffic: 2 Retain of one observation (the second a replay), ListMemories, 1 Assemble recalling it, "
               "Forget of the subject")

        url = f"http://{metrics_addr}/metrics"
        families = scrape(url)
        promtool = os.environ.get("DEPLOY_CI_PROMTOOL")
        if promtool:
            with urllib.request.urlopen(url, timeout=5) as r:
                page = r.read()
            lint = subprocess.run([promtool, "check", "metrics"], input=page, capture_output=True)
            findings = (lint.stdout + lint.stderr).decode().strip()
            if lint.returncode != 0 or findings:
                fail(f"promtool check metrics on {url}: {findings or lint.returncode}")
            ok(f"promtool check metrics: no findings on {url}")
        types = exported(families)
        missing = sorted(n for n in EXPECTED_METRICS if n not in types)
        wrong = sorted(f"{n} is {types[n]}, expected {t}" for n, t in EXPECTED_METRICS.items()
                       if n in types and types[n] not in (t, "unknown"))
        assemblies = 4 if memory else 3
        if sample(families, "assembler_requests_total", rpc="Assemble", code="OK") != assemblies:
            fail(f"assembler_requests_total{{rpc=\"Assemble\",code=\"OK\"}} is not {assemblies} after "
                 f"{assemblies} assemblies")
        if memory:
            if sample(families, "assembler_memories_stored_total", type="decision") != 1:
                fail("assembler_memories_stored_total{type=\"decision\"} is not 1 after a Retain and its replay")
            if sample(families, "assembler_memories_recalled_total") != 1:
                fail("assembler_memories_recalled_total is not 1 after recalling the one memory")
            if sample(families, "assembler_memory_recall_duration_seconds_count") != 1:
                fail("assembler_memory_recall_duration_seconds recorded no recall")
            if sample(families, "assembler_memories_deleted_total", cause="forget") != 1:
                fail("assembler_memories_deleted_total{cause=\"forget\"} is not 1 after forgetting the one memory")
            if sample(families, "assembler_memories_deleted_total", cause="retention") != 0:
                fail("assembler_memories_deleted_total{cause=\"retention\"} is not 0 at start")
        # The pod exports no traces: every span series is there, at zero, for the alert's ratio.
        spans = {reason: sample(families, "assembler_trace_spans_dropped_total", reason=reason)
                 for reason in TRACE_DROP_REASONS}
        spans["exported"] = sample(families, "assembler_trace_spans_exported_total")
        if any(v != 0 for v in spans.values()):
            fail(f"the trace span series are not all 0 at start without a collector: {spans}")
        ok(f"no collector: assembler_trace_spans_dropped_total{{reason}} ({', '.join(TRACE_DROP_REASONS)}) "
           "and assembler_trace_spans_exported_total exported at 0")
        if sample(families, "assembler_budget_overflow_total", model="gpt-4o") != 1:
            fail("assembler_budget_overflow_total{model=\"gpt-4o\"} is not 1 after one overflow")
        compactions = {outcome: sample(families, "assembler_compactions_total", source="compact", outcome=outcome)
                       for outcome in ("compacted", "compacted_over_target", "breaker_trimmed")}
        if compactions != {"compacted": 1, "compacted_over_target": failures, "breaker_trimmed": 1}:
            fail(f"assembler_compactions_total{{source=\"compact\"}} by outcome is {compactions} after 1 compaction "
                 f"under target, {failures} over target and 1 breaker trim")
        if sample(families, "assembler_compaction_breaker_open_total") != 1:
            fail("assembler_compaction_breaker_open_total is not 1 after one session's breaker opened")
        if not sample(families, "assembler_compaction_tokens_saved_count", source="compact"):
            fail("assembler_compaction_tokens_saved{source=\"compact\"} recorded nothing after a compaction")
        if wrong:
            fail("; ".join(wrong))
        if missing:
            fail(f"{url} lacks {', '.join(missing)} (used by deploy/prometheus)")
        extra = sorted(n for n in types if n.startswith("assembler_") and n not in EXPECTED_METRICS)
        ok(f"{url} exports all {len(EXPECTED_METRICS)} metrics the rules and dashboard use, with their types"
           + (f"; exported but unused: {', '.join(extra)}" if extra else ""))

        if args:
            os.kill(proc.pid, signal.SIGHUP)
            deadline = time.monotonic() + 10
            while sample(scrape(url), "assembler_config_reloads_total", result="applied") != 1:
                if time.monotonic() > deadline:
                    fail("SIGHUP did not count an applied reload of the pod config")
                time.sleep(0.1)
            ok("SIGHUP reloaded the pod config: assembler_config_reloads_total{result=\"applied\"} = 1")

        proc.send_signal(signal.SIGTERM)
        with open(pod_toml, "rb") as f:
            drain = tomllib.load(f)["server"]["drain_secs"]
        code = proc.wait(timeout=drain + 5)
        if code != 0:
            fail(f"SIGTERM: the server exited with {code}")
        ok("SIGTERM: drained and exited 0")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if memory:
            shutil.rmtree(db_dir, ignore_errors=True)


# ---------------------------------------------------------------- dockerfile

INCLUDE = re.compile(r'include_(?:str|bytes)!\(\s*"([^"]+)"\s*\)')


def cmd_dockerfile(path):
    with open(path) as f:
        lines = [line.strip() for line in f if line.strip() and not line.lstrip().startswith("#")]
    stages = [line for line in lines if line.upper().startswith("FROM ")]
    if len(stages) < 2:
        fail(f"{path} is not a multi-stage build")
    final = lines[lines.index(stages[-1]):]
    users = [line.split()[1] for line in final if line.upper().startswith("USER ")]
    if not users or users[-1].split(":")[0] in ("0", "root"):
        fail(f"{path}: the runtime stage must end with a non-root USER")
    ok(f"{path}: {len(stages)} stages, runtime {stages[-1].split()[1]} as USER {users[-1]}")

    copied = set()
    for line in lines[: lines.index(stages[-1])]:
        if line.upper().startswith("COPY ") and "--from=" not in line:
            copied.update(os.path.normpath(a).split(os.sep)[0] for a in line.split()[1:-1] if not a.startswith("--"))
    needed = {}
    for root, _, files in os.walk("src"):
        for name in files:
            if name.endswith(".rs"):
                source = os.path.join(root, name)
                with open(source) as f:
                    for rel in INCLUDE.findall(f.read()):
                        target = os.path.normpath(os.path.join(root, rel))
                        needed.setdefault(target.split(os.sep)[0], source)
    missing = sorted(f"{top}/ (for {src})" for top, src in needed.items() if top not in copied)
    if missing:
        fail(f"{path}: the build stage does not COPY {', '.join(missing)}")
    ok(f"{path}: the build stage copies {', '.join(sorted(copied))}, including every include_str!/include_bytes! "
       f"source ({', '.join(sorted(needed)) or 'none'})")


# ---------------------------------------------------------------- gateways (ext_proc)

# deploy/kubernetes/gateways: no schema package exists for Envoy Gateway's and kgateway's CRDs, so their fields are
# checked against these trees, written from the API types (Envoy Gateway api/v1alpha1 ext_proc_types.go,
# envoyextensionypolicy_types.go, clienttrafficpolicy_types.go, connection_types.go, ratelimit_types.go; kgateway
# api/v1alpha1/kgateway gateway_extensions_types.go, ext_proc_types.go, traffic_policy_types.go,
# listener_policy_types.go). A dict lists the keys allowed (each with the tree of its value), a one-item list is a
# list of that tree, a set is an enum, ANY accepts whatever the API accepts there (not descended into), None any
# scalar. Only what these files use is spelled out in full.
ANY = object()
METADATA_NAMESPACE = "context_assembler"
EG_GROUP = "gateway.envoyproxy.io/v1alpha1"
KG_GROUP = "gateway.kgateway.dev/v1alpha1"
ISTIO_GROUP = "networking.istio.io/v1alpha3"
EXT_PROC_TYPE = "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor"
# Gateway API's Duration (GEP-2257), as Envoy Gateway and kgateway validate it.
API_DURATION = re.compile(r"^([0-9]{1,5}(h|m|s|ms)){1,4}$")
# A resource.Quantity as Envoy Gateway's bufferLimit pattern admits it.
QUANTITY = re.compile(r"^([1-9][0-9]*)([EPTGMK]i|[EPTGMk])?$")
QUANTITY_UNITS = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
                  "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}

TARGET_REFS = [{"group": None, "kind": None, "name": None, "sectionName": None}]
BACKEND_REF = {"group": None, "kind": None, "name": None, "namespace": None, "port": None, "weight": None}
EG_BODY = {"Streamed", "Buffered", "BufferedPartial", "FullDuplexStreamed"}
EG_MODE_OPTIONS = {"body": EG_BODY, "attributes": [None]}
EG_EXT_PROC = {
    "backendRefs": [BACKEND_REF], "backendSettings": ANY, "messageTimeout": None, "failOpen": None,
    "processingMode": {"request": EG_MODE_OPTIONS, "response": EG_MODE_OPTIONS, "allowModeOverride": None},
    "shadowMode": None, "metadata": {"accessibleNamespaces": [None], "writableNamespaces": [None]},
    "statusOnError": None,
}
EG_COST = {"from": {"Number", "Metadata"}, "number": None, "metadata": {"namespace": None, "key": None}}
EG_RATE_LIMIT_RULE = {
    "clientSelectors": [{"headers": [{"type": {"Exact", "RegularExpression", "Distinct"}, "name": None,
                                      "value": None, "invert": None}],
                         "methods": ANY, "path": ANY, "sourceCIDR": ANY, "queryParams": ANY}],
    "limit": {"requests": None, "unit": {"Second", "Minute", "Hour", "Day", "Week", "Month", "Year"},
              "fromMetadata": {"namespace": None, "key": None}},
    "cost": {"request": EG_COST, "response": EG_COST},
    "shared": None, "shadowMode": None, "xRateLimitHeaders": {"Off", "DraftVersion03"},
}
KG_HEADER_MODE = {"DEFAULT", "SEND", "SKIP"}
KG_BODY_MODE = {"NONE", "STREAMED", "BUFFERED", "BUFFERED_PARTIAL", "FULL_DUPLEX_STREAMED"}
KG_PROCESSING_MODE = {"requestHeaderMode": KG_HEADER_MODE, "responseHeaderMode": KG_HEADER_MODE,
                      "requestBodyMode": KG_BODY_MODE, "responseBodyMode": KG_BODY_MODE,
                      "requestTrailerMode": KG_HEADER_MODE, "responseTrailerMode": KG_HEADER_MODE}
API_SPECS = {
    (EG_GROUP, "EnvoyExtensionPolicy"): {
        "targetRefs": TARGET_REFS, "targetSelectors": ANY, "mergeType": None, "wasm": ANY, "extProc": [EG_EXT_PROC],
        "lua": ANY, "dynamicModule": ANY},
    (EG_GROUP, "ClientTrafficPolicy"): {
        "targetRefs": TARGET_REFS, "targetSelectors": ANY, "tcpKeepalive": ANY, "enableProxyProtocol": None,
        "proxyProtocol": ANY, "clientIPDetection": ANY, "tls": ANY, "path": ANY, "headers": ANY, "timeout": ANY,
        "connection": {"connectionLimit": ANY, "bufferLimit": None, "socketBufferLimit": None,
                       "maxAcceptPerSocketEvent": None},
        "http1": ANY, "http2": ANY, "http3": ANY, "grpc": ANY, "healthCheck": ANY},
    (EG_GROUP, "BackendTrafficPolicy"): {
        "targetRefs": TARGET_REFS, "targetSelectors": ANY,
        "rateLimit": {"type": {"Global", "Local"}, "global": {"rules": [EG_RATE_LIMIT_RULE]},
                      "local": {"rules": [EG_RATE_LIMIT_RULE]}}},
    (KG_GROUP, "GatewayExtension"): {
        "type": {"ExtAuth", "ExtProc", "RateLimit", "JWT", "OAuth2"},
        "extProc": {
            "grpcService": {"backendRef": BACKEND_REF, "authority": None, "requestTimeout": None, "retry": ANY},
            "failOpen": None, "processingMode": KG_PROCESSING_MODE, "allowProcessingModeOverride": None,
            "allowedProcessingModeOverrides": [KG_PROCESSING_MODE], "messageTimeout": None,
            "maxMessageTimeout": None, "statPrefix": None,
            "routeCacheAction": {"FromResponse", "Clear", "Retain"},
            "metadataOptions": {"forwarding": {"typed": [None], "untyped": [None]}},
            "filterStage": {"stage": {"Fault", "AuthN", "AuthZ", "RateLimit", "Route"},
                            "predicate": {"Before", "During", "After"}, "weight": None}},
        "extAuth": ANY, "rateLimit": ANY, "jwt": ANY, "oauth2": ANY},
    (KG_GROUP, "TrafficPolicy"): {
        "targetRefs": TARGET_REFS, "targetSelectors": ANY,
        "extProc": {"extensionRef": {"name": None, "namespace": None}, "processingMode": KG_PROCESSING_MODE,
                    "disable": ANY}},
    (KG_GROUP, "ListenerPolicy"): {
        "targetRefs": [{"group": None, "kind": None, "name": None}], "targetSelectors": ANY,
        "default": {"proxyProtocol": ANY, "perConnectionBufferLimitBytes": None, "httpSettings": ANY},
        "perPort": ANY},
}
# What each folder holds: file -> the (apiVersion, kind) of each document, in order.
GATEWAY_FILES = {
    "envoy-gateway/extproc-buffered.yaml": [(EG_GROUP, "EnvoyExtensionPolicy")],
    "envoy-gateway/extproc-full-duplex.yaml": [(EG_GROUP, "EnvoyExtensionPolicy")],
    "envoy-gateway/clienttrafficpolicy.yaml": [(EG_GROUP, "ClientTrafficPolicy")],
    "envoy-gateway/ratelimit.yaml": [(EG_GROUP, "BackendTrafficPolicy")],
    "kgateway/gatewayextension.yaml": [(KG_GROUP, "GatewayExtension")],
    "kgateway/trafficpolicy.yaml": [(KG_GROUP, "TrafficPolicy")],
    "kgateway/listenerpolicy.yaml": [(KG_GROUP, "ListenerPolicy")],
    "istio/envoyfilter-gateway.yaml": [(ISTIO_GROUP, "EnvoyFilter")],
    "istio/envoyfilter-sidecar.yaml": [(ISTIO_GROUP, "EnvoyFilter")],
    "llm-d/envoy-gateway.yaml": [(EG_GROUP, "EnvoyExtensionPolicy")],
    "llm-d/istio.yaml": [(ISTIO_GROUP, "EnvoyFilter")],
}
# The processor folder, rendered: kind -> name.
PROCESSOR_RESOURCES = {"ConfigMap": None, "Deployment": SIDECAR, "Service": SIDECAR, "NetworkPolicy": SIDECAR,
                       "PodDisruptionBudget": SIDECAR, "PodMonitor": f"{SIDECAR}-ext-proc"}


def check_tree(value, spec, path):
    """Fails on a key `spec` does not allow, an enum value outside its set, or a list where a map belongs."""
    if spec is ANY:
        return
    if spec is None:
        if isinstance(value, (dict, list)):
            fail(f"{path}: a scalar in the API, not a {type(value).__name__}")
    elif isinstance(spec, set):
        if value not in spec:
            fail(f"{path}: {value!r} is not one of {', '.join(sorted(spec))}")
    elif isinstance(spec, list):
        if not isinstance(value, list):
            fail(f"{path}: a list in the API")
        for i, item in enumerate(value):
            check_tree(item, spec[0], f"{path}[{i}]")
    else:
        if not isinstance(value, dict):
            fail(f"{path}: an object in the API")
        for key, item in value.items():
            if key not in spec:
                fail(f"{path}.{key}: no such field in the API (known: {', '.join(spec)})")
            check_tree(item, spec[key], f"{path}.{key}")


def quantity_bytes(where, value):
    m = QUANTITY.match(str(value))
    if not m:
        fail(f"{where}: {value!r} is not a quantity Envoy Gateway accepts")
    return int(m.group(1)) * QUANTITY_UNITS[m.group(2)]


def ext_proc_filters(doc):
    """(path, typed_config) of every ext_proc filter an EnvoyFilter inserts."""
    out = []
    for i, patch in enumerate(doc["spec"].get("configPatches", [])):
        value = patch.get("patch", {}).get("value") or {}
        cfg = value.get("typed_config") or {}
        if patch.get("applyTo") == "HTTP_FILTER" and cfg.get("@type") == EXT_PROC_TYPE:
            out.append((f"configPatches[{i}]", value))
    return out


def check_envoy_ext_proc(where, value, full_duplex):
    """A plain Envoy ext_proc filter (an EnvoyFilter's patch or docs/gateway.md): its own name, the request path
    only, metadata receivable, fail closed; full duplex with trailers SEND, buffered with a message timeout."""
    if value["name"] == "envoy.filters.http.ext_proc":
        fail(f"{where}: name it other than envoy.filters.http.ext_proc (Istio's InferencePool processor has "
             f"that name and is configured per route by it)")
    cfg = value["typed_config"]
    mode = cfg.get("processing_mode", {})
    want = {"request_header_mode": "SEND", "response_header_mode": "SKIP", "response_body_mode": "NONE",
            "response_trailer_mode": "SKIP",
            "request_body_mode": "FULL_DUPLEX_STREAMED" if full_duplex else "BUFFERED",
            "request_trailer_mode": "SEND" if full_duplex else "SKIP"}
    wrong = {k: mode.get(k) for k, v in want.items() if mode.get(k) != v}
    if wrong:
        fail(f"{where}: processing_mode must be {want}, differs at {wrong}")
    if cfg.get("failure_mode_allow", False) is not False or cfg.get("allow_mode_override", False) is not False:
        fail(f"{where}: failure_mode_allow and allow_mode_override must be false")
    if not full_duplex and "message_timeout" not in cfg:
        fail(f"{where}: BUFFERED needs a message_timeout (Envoy's 200 ms default is short for a whole fit)")
    namespaces = cfg.get("metadata_options", {}).get("receiving_namespaces", {}).get("untyped", [])
    if METADATA_NAMESPACE not in namespaces:
        fail(f"{where}: metadata_options.receiving_namespaces.untyped must hold {METADATA_NAMESPACE}")
    return cfg["grpc_service"]["envoy_grpc"]["cluster_name"]


def envoy_validate(envoy, where, bootstrap, work):
    path = os.path.join(work, re.sub(r"[^A-Za-z0-9_.-]", "_", where.removesuffix(".yaml")) + ".yaml")
    with open(path, "w") as f:
        yaml.safe_dump(bootstrap, f, sort_keys=False)
    proc = subprocess.run([envoy, "--mode", "validate", "-c", path, "-l", "error"], capture_output=True, text=True,
                          timeout=60)
    if proc.returncode != 0:
        # Envoy's log prefix ([time][thread][level][logger] [file:line]) says nothing here.
        message = re.sub(r"^(\[[^]]*\])+ \[[^]]*\] ", "", (proc.stderr or proc.stdout).strip(), flags=re.M)
        fail(f"{where}: envoy --mode validate: {message[-800:]}")


def stub_cluster(name, port=1):
    return {"name": name, "type": "STATIC", "connect_timeout": "1s",
            "typed_extension_protocol_options": {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": {}}}},
            "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {
                "socket_address": {"address": "127.0.0.1", "port_value": port}}}}]}]}}


def envoy_filter_bootstrap(doc):
    """A bootstrap holding what an EnvoyFilter patches in: its HTTP filters before a router, its clusters, its
    listener fields, plus a stub for each cluster Istio would generate (outbound|...), for envoy --mode validate."""
    router = {"name": "envoy.filters.http.router",
              "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}
    listener = {"name": "check", "address": {"socket_address": {"address": "127.0.0.1", "port_value": 10000}},
                "filter_chains": [{"filters": [{"name": "envoy.filters.network.http_connection_manager",
                                                "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3."
                 "HttpConnectionManager",
        "stat_prefix": "check",
        "route_config": {"virtual_hosts": [{"name": "all", "domains": ["*"],
                                            "routes": [{"match": {"prefix": "/"}, "route": {"cluster": "upstream"}}]}]},
        "http_filters": [router]}}]}]}
    clusters = [stub_cluster("upstream")]
    for patch in doc["spec"]["configPatches"]:
        value = patch["patch"]["value"]
        if patch["applyTo"] == "HTTP_FILTER":
            hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
            hcm["http_filters"].insert(len(hcm["http_filters"]) - 1, value)
        elif patch["applyTo"] == "CLUSTER":
            clusters.append(value)
        elif patch["applyTo"] == "LISTENER":
            listener.update(value)
        else:
            fail(f"EnvoyFilter/{doc['metadata']['name']}: no validation for applyTo {patch['applyTo']}")
    known = {c["name"] for c in clusters}
    for _, value in ext_proc_filters(doc):
        name = value["typed_config"]["grpc_service"]["envoy_grpc"]["cluster_name"]
        if name not in known:
            clusters.append(stub_cluster(name))
            known.add(name)
    return {"static_resources": {"listeners": [listener], "clusters": clusters}}


def check_processor(rendered, pod_toml):
    """deploy/kubernetes/gateways/processor rendered: the sidecar as its own Deployment behind a Service. Returns
    (Service name, its gRPC port)."""
    docs = load_docs(rendered)
    with open(pod_toml, "rb") as f:
        conf = tomllib.load(f)
    grpc_port = port_of(conf["server"]["listen"])
    metrics_port = port_of(conf["server"]["metrics_listen"])
    kinds = sorted(f"{d['kind']}/{d['metadata']['name']}" for d in docs)
    if sorted(d["kind"] for d in docs) != sorted(PROCESSOR_RESOURCES) or any(
            PROCESSOR_RESOURCES[d["kind"]] not in (None, d["metadata"]["name"]) for d in docs):
        fail(f"processor renders {', '.join(kinds)}; expected one each of {', '.join(PROCESSOR_RESOURCES)} (did the "
             f"base gain a resource its delete patches should drop?)")
    ok(f"processor renders {', '.join(kinds)} (the base's ConfigMap, its example gateway dropped)")
    deploy, service, netpol, pdb, podmon, configmap = (one(docs, k) for k in (
        "Deployment", "Service", "NetworkPolicy", "PodDisruptionBudget", "PodMonitor", "ConfigMap"))
    pod = deploy["spec"]["template"]["spec"]
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    if not selects(deploy["spec"]["selector"], labels):
        fail("the processor Deployment's selector does not select its own pods")
    containers = pod["containers"]
    if [c["name"] for c in containers] != [SIDECAR] or pod.get("initContainers"):
        fail(f"the processor pod must run {SIDECAR} alone")
    c = containers[0]
    ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
    if ports.get("grpc") != grpc_port or ports.get("metrics") != metrics_port:
        fail(f"{SIDECAR} must name ports grpc = {grpc_port} and metrics = {metrics_port} (server.listen, "
             f"server.metrics_listen)")
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        probe = (c.get(kind) or {}).get("grpc") or fail(f"processor {kind} is not a gRPC probe")
        if probe.get("port") != grpc_port or probe.get("service", "") != "":
            fail(f"processor {kind} must ask grpc.health.v1 for service \"\" on port {grpc_port}")
    args = c.get("args", [])
    config_path = args[args.index("--config") + 1] if "--config" in args else fail("processor: no --config")
    mount = next((m for m in c.get("volumeMounts", []) if config_path.startswith(m["mountPath"].rstrip("/") + "/")),
                 None)
    volume = next((v for v in pod["volumes"] if mount and v["name"] == mount["name"]), {})
    key = config_path.rsplit("/", 1)[1]
    if (mount is None or not mount.get("readOnly") or volume.get("configMap", {}).get("name")
            != configmap["metadata"]["name"] or tomllib.loads(configmap["data"].get(key, "")) != conf):
        fail(f"processor --config {config_path} must be {pod_toml}, read-only from ConfigMap "
             f"{configmap['metadata']['name']}")
    ok(f"processor: ports grpc {grpc_port} and metrics {metrics_port}, gRPC probes, --config {config_path} = "
       f"{pod_toml} from ConfigMap {configmap['metadata']['name']}")
    sc = c.get("securityContext", {})
    pod_sc = pod.get("securityContext", {})
    if not ((sc.get("runAsNonRoot") or pod_sc.get("runAsNonRoot")) and sc.get("readOnlyRootFilesystem") is True
            and sc.get("allowPrivilegeEscalation") is False and "ALL" in sc.get("capabilities", {}).get("drop", [])
            and (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type") == "RuntimeDefault"
            and {"cpu", "memory"} <= c.get("resources", {}).get("limits", {}).keys()):
        fail("processor: non-root, read-only root, no privilege escalation, drop ALL, seccomp RuntimeDefault and "
             "cpu/memory limits")
    if pod.get("terminationGracePeriodSeconds", 30) <= conf["server"]["drain_secs"]:
        fail("processor: terminationGracePeriodSeconds must exceed drain_secs")
    ok("processor: hardened as the base's sidecar, grace period over drain_secs")

    if not selects({"matchLabels": service["spec"]["selector"]}, labels):
        fail(f"Service {service['metadata']['name']} does not select the processor pods")
    svc_ports = [p for p in service["spec"]["ports"] if p.get("targetPort") in ("grpc", grpc_port)]
    if len(svc_ports) != 1 or svc_ports[0].get("appProtocol") != "kubernetes.io/h2c":
        fail(f"Service {service['metadata']['name']} needs one port to the gRPC port with appProtocol "
             f"kubernetes.io/h2c")
    svc_port = svc_ports[0]["port"]
    ok(f"Service {service['metadata']['name']}:{svc_port} -> container port grpc {grpc_port}, appProtocol "
       f"kubernetes.io/h2c")
    if not selects(netpol["spec"]["podSelector"], labels):
        fail("the processor NetworkPolicy does not select its pods")
    for rule in netpol["spec"].get("ingress", []):
        if not rule.get("ports") or not rule.get("from"):
            fail("every ingress rule of the processor NetworkPolicy must name its ports and its sources")
    grpc_rules = [r for r in netpol["spec"]["ingress"] if any(p.get("port") in ("grpc", grpc_port)
                                                                for p in r["ports"])]
    if not grpc_rules:
        fail("the processor NetworkPolicy admits no gateway proxy to the gRPC port")
    ok(f"NetworkPolicy: gRPC port {grpc_port} from the gateway proxies only ({len(grpc_rules)} rule)")
    if not selects(pdb["spec"]["selector"], labels) or not (
            1 <= pdb["spec"].get("minAvailable", 0) < deploy["spec"]["replicas"]):
        fail("the PodDisruptionBudget must select the processors and keep 1 <= minAvailable < replicas")
    ok(f"{deploy['spec']['replicas']} replicas, PodDisruptionBudget minAvailable {pdb['spec']['minAvailable']}")
    job = labels.get(podmon["spec"].get("jobLabel", ""), "")
    if (not selects(podmon["spec"]["selector"], labels) or job != SIDECAR
            or [e.get("port") for e in podmon["spec"]["podMetricsEndpoints"]] != ["metrics"]):
        fail(f"the processor PodMonitor must scrape port metrics of its pods as job {SIDECAR} (jobLabel), which "
             f"the alert rules match")
    ok(f"PodMonitor {podmon['metadata']['name']}: port metrics, job {job}")
    return service["metadata"]["name"], svc_port


def check_doc(doc_path, envoy, grpc_port, max_bytes, work):
    """docs/gateway.md: every YAML block parses; the complete Envoy configuration, and it with the full-duplex
    http_filters, pass envoy --mode validate; the Python sketch compiles; relative links resolve."""
    with open(doc_path) as f:
        text = f.read()
    blocks = re.findall(r"^```(\w+)\n(.*?)^```", text, re.S | re.M)
    yamls = [yaml.safe_load(body) for lang, body in blocks if lang == "yaml"]
    bootstraps = [b for b in yamls if isinstance(b, dict) and "static_resources" in b]
    fragments = [b for b in yamls if isinstance(b, dict) and set(b) == {"http_filters"}]
    if len(bootstraps) != 1 or len(fragments) != 1:
        fail(f"{doc_path}: expected one complete Envoy configuration and one http_filters block, found "
             f"{len(bootstraps)} and {len(fragments)}")
    ok(f"{doc_path}: {len(yamls)} YAML blocks parse")
    bootstrap = bootstraps[0]
    listener = bootstrap["static_resources"]["listeners"][0]
    hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
    if not 0 < listener.get("per_connection_buffer_limit_bytes", 0) <= max_bytes:
        fail(f"{doc_path}: the listener's per_connection_buffer_limit_bytes must be set, at most "
             f"limits.max_request_bytes ({max_bytes})")
    for label, filters, duplex in (("buffered", hcm["http_filters"], False),
                                   ("full duplex", fragments[0]["http_filters"], True)):
        found = [f for f in filters if f.get("typed_config", {}).get("@type") == EXT_PROC_TYPE]
        if len(found) != 1 or filters[-1]["name"] != "envoy.filters.http.router":
            fail(f"{doc_path}: the {label} http_filters must hold one ext_proc filter, then the router")
        cluster_name = check_envoy_ext_proc(f"{doc_path} ({label})", found[0], duplex)
        cluster = next((c for c in bootstrap["static_resources"]["clusters"] if c["name"] == cluster_name), None)
        address = (cluster or {}).get("load_assignment", {}).get("endpoints", [{}])[0].get("lb_endpoints", [{}])[0]
        sock = address.get("endpoint", {}).get("address", {}).get("socket_address", {})
        if (sock.get("address"), sock.get("port_value")) != ("127.0.0.1", grpc_port):
            fail(f"{doc_path}: cluster {cluster_name} must reach the sidecar on 127.0.0.1:{grpc_port}")
    envoy_validate(envoy, "doc-buffered", bootstrap, work)
    duplex = copy.deepcopy(bootstrap)
    duplex["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"] = \
        fragments[0]["http_filters"]
    envoy_validate(envoy, "doc-full-duplex", duplex, work)
    ok(f"{doc_path}: the Envoy configuration passes envoy --mode validate, buffered and with the full-duplex "
       f"http_filters (ext_proc to 127.0.0.1:{grpc_port}, request path only, {METADATA_NAMESPACE} receivable)")
    for lang, body in blocks:
        if lang == "python":
            try:
                compile(body, f"{doc_path} (python block)", "exec")
            except SyntaxError as e:
                fail(f"{doc_path}: the Python sketch does not compile: {e}")
    ok(f"{doc_path}: the Python sketch compiles")


def check_links(paths):
    """Relative links of these Markdown files point at files or folders that exist."""
    count = 0
    for path in paths:
        with open(path) as f:
            text = f.read()
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" in target:
                continue
            if not os.path.exists(os.path.normpath(os.path.join(os.path.dirname(path), target))):
                fail(f"{path}: link {target} does not exist")
            count += 1
    ok(f"{count} relative links of {len(paths)} Markdown files resolve")


def cmd_gateways(gateways_dir, processor_rendered, base_rendered, pod_toml, doc_path, envoy):
    """deploy/kubernetes/gateways and docs/gateway.md (see the module docstring)."""
    from cloudcoil.models.istio.networking import v1alpha3 as istio_networking

    with open(pod_toml, "rb") as f:
        conf = tomllib.load(f)
    grpc_port = port_of(conf["server"]["listen"])
    max_bytes = conf["limits"]["max_request_bytes"]
    base = one(load_docs(base_rendered), "Deployment")["spec"]["template"]["spec"]
    sidecar = next(c for c in base.get("initContainers", []) if c["name"] == SIDECAR)
    base_port = {p.get("name"): p["containerPort"] for p in sidecar.get("ports", [])}.get("grpc")
    if base_port != grpc_port:
        fail(f"deploy/kubernetes/base names gRPC port {base_port}, server.listen says {grpc_port}")
    service, svc_port = check_processor(processor_rendered, pod_toml)

    files = sorted(os.path.relpath(os.path.join(root, name), gateways_dir)
                   for root, _, names in os.walk(gateways_dir) for name in names
                   if name.endswith((".yaml", ".yml"))
                   and os.path.relpath(root, gateways_dir).split(os.sep)[0] != "processor")
    if files != sorted(GATEWAY_FILES):
        fail(f"{gateways_dir}: files {files}, expected {sorted(GATEWAY_FILES)} (add a new one to GATEWAY_FILES)")
    work = tempfile.mkdtemp(prefix="gateways-")
    try:
        for rel, kinds in GATEWAY_FILES.items():
            path = os.path.join(gateways_dir, rel)
            docs = load_docs(path)
            if [(d.get("apiVersion"), d.get("kind")) for d in docs] != kinds:
                fail(f"{path}: expected {kinds}")
            for doc in docs:
                name = (doc.get("metadata") or {}).get("name") or fail(f"{path}: a document without metadata.name")
                where = f"{rel} {doc['kind']}/{name}"
                if doc["kind"] == "EnvoyFilter":
                    try:
                        model = istio_networking.EnvoyFilter.model_validate(copy.deepcopy(doc))
                    except ValueError as e:  # pydantic's ValidationError
                        fail(f"{where}: not a {ISTIO_GROUP} EnvoyFilter: {e}")
                    dumped = model.model_dump(by_alias=True, exclude_unset=True, mode="json")
                    extra = unknown_keys(doc, dumped)
                    if extra:
                        fail(f"{where}: unknown fields {', '.join(extra)}")
                    check_envoy_filter(where, doc, service, svc_port, grpc_port, max_bytes)
                    envoy_validate(envoy, rel, envoy_filter_bootstrap(doc), work)
                    ok(f"{where}: Istio {ISTIO_GROUP} schema (cloudcoil), its Envoy configuration passes "
                       f"envoy --mode validate")
                else:
                    check_tree(doc.get("spec"), API_SPECS[(doc["apiVersion"], doc["kind"])], f"{where} spec")
                    CHECKS[doc["kind"]](where, doc["spec"], service, svc_port, max_bytes)
        check_doc(doc_path, envoy, grpc_port, max_bytes, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    check_links([doc_path] + sorted(os.path.join(root, name) for root, _, names in os.walk(gateways_dir)
                                    for name in names if name.endswith(".md")))


def check_backend_ref(where, ref, service, svc_port):
    if (ref.get("group", ""), ref.get("kind", "Service"), ref.get("name"), ref.get("port")) != (
            "", "Service", service, svc_port):
        fail(f"{where}: the ext_proc backend must be Service {service} port {svc_port}, not {ref}")


def check_extension_policy(where, spec, service, svc_port, _max_bytes):
    for i, ep in enumerate(spec["extProc"]):
        at = f"{where} extProc[{i}]"
        for ref in ep["backendRefs"]:
            check_backend_ref(at, ref, service, svc_port)
        mode = ep.get("processingMode", {})
        body = mode.get("request", {}).get("body")
        if body not in ("Buffered", "FullDuplexStreamed") or "response" in mode or mode.get("allowModeOverride"):
            fail(f"{at}: the request body Buffered or FullDuplexStreamed, no response processing, no mode "
                 f"override")
        if ep.get("failOpen") is not False:
            fail(f"{at}: failOpen must be stated false (FullDuplexStreamed requires it; the files say why for "
                 f"Buffered)")
        if body == "Buffered" and not API_DURATION.match(str(ep.get("messageTimeout", ""))):
            fail(f"{at}: Buffered needs a messageTimeout (Gateway API duration)")
        if body == "FullDuplexStreamed" and "messageTimeout" in ep:
            fail(f"{at}: Envoy runs no message timeout in full duplex: drop messageTimeout")
        if METADATA_NAMESPACE not in ep.get("metadata", {}).get("writableNamespaces", []):
            fail(f"{at}: metadata.writableNamespaces must hold {METADATA_NAMESPACE}")
        ok(f"{at}: {body} to Service {service}:{svc_port}, failOpen false, request only, {METADATA_NAMESPACE} "
           f"writable")


def check_client_traffic_policy(where, spec, _service, _svc_port, max_bytes):
    limit = quantity_bytes(f"{where} connection.bufferLimit", spec["connection"]["bufferLimit"])
    if not 32768 < limit <= max_bytes:
        fail(f"{where}: bufferLimit {limit} must raise Envoy Gateway's 32 KiB, at most limits.max_request_bytes "
             f"({max_bytes})")
    if any(r["kind"] != "Gateway" for r in spec["targetRefs"]):
        fail(f"{where}: a ClientTrafficPolicy targets Gateways")
    ok(f"{where}: bufferLimit {limit} bytes (limits.max_request_bytes {max_bytes})")


def check_backend_traffic_policy(where, spec, _service, _svc_port, _max_bytes):
    rules = spec["rateLimit"]["global"]["rules"]
    costs = [r.get("cost", {}).get("request", {}) for r in rules]
    if not costs or any(c.get("from") != "Metadata" or c.get("metadata") != {"namespace": METADATA_NAMESPACE,
                                                                              "key": "input_tokens"}
                        for c in costs):
        fail(f"{where}: every global rule's cost.request must be from Metadata {METADATA_NAMESPACE}/input_tokens")
    ok(f"{where}: global rate limit charged {METADATA_NAMESPACE}/input_tokens")


def check_gateway_extension(where, spec, service, svc_port, _max_bytes):
    ep = spec["extProc"]
    check_backend_ref(where, ep["grpcService"]["backendRef"], service, svc_port)
    mode = ep["processingMode"]
    duplex = mode.get("requestBodyMode") == "FULL_DUPLEX_STREAMED"
    want = {"requestHeaderMode": "SEND", "requestBodyMode": mode.get("requestBodyMode"),
            "requestTrailerMode": "SEND" if duplex else "SKIP", "responseHeaderMode": "SKIP",
            "responseBodyMode": "NONE", "responseTrailerMode": "SKIP"}
    if mode != want or mode["requestBodyMode"] not in ("BUFFERED", "FULL_DUPLEX_STREAMED"):
        fail(f"{where}: processingMode must be {want} (request path only; trailers SEND in full duplex)")
    if ep.get("failOpen") is not False or ep.get("allowProcessingModeOverride", False) is not False:
        fail(f"{where}: failOpen must be stated false (kgateway defaults it to true) and no mode override")
    if not duplex and not API_DURATION.match(str(ep.get("messageTimeout", ""))):
        fail(f"{where}: BUFFERED needs a messageTimeout")
    # kgateway's API has no receiving namespaces (metadataOptions.forwarding only): nothing to allow; the
    # headers carry the count. Forwarding context_assembler to the processor would be pointless.
    ok(f"{where}: {mode['requestBodyMode']} to Service {service}:{svc_port}, failOpen false, request only "
       f"({METADATA_NAMESPACE} not receivable: kgateway's API has no receiving namespaces)")


def check_traffic_policy(where, spec, _service, _svc_port, _max_bytes):
    if spec["extProc"].get("extensionRef", {}).get("name") != SIDECAR:
        fail(f"{where}: extProc.extensionRef must name GatewayExtension {SIDECAR}")
    ok(f"{where}: extProc.extensionRef {SIDECAR}")


def check_listener_policy(where, spec, _service, _svc_port, max_bytes):
    limit = spec["default"]["perConnectionBufferLimitBytes"]
    if not 1 << 20 < limit <= max_bytes:
        fail(f"{where}: perConnectionBufferLimitBytes {limit} must raise kgateway's 1 MiB, at most "
             f"limits.max_request_bytes ({max_bytes})")
    ok(f"{where}: perConnectionBufferLimitBytes {limit} (limits.max_request_bytes {max_bytes})")


def check_envoy_filter(where, doc, service, svc_port, grpc_port, max_bytes):
    filters = ext_proc_filters(doc)
    if len(filters) != 1:
        fail(f"{where}: expected one ext_proc HTTP_FILTER patch")
    at, value = filters[0]
    duplex = value["typed_config"]["processing_mode"]["request_body_mode"] == "FULL_DUPLEX_STREAMED"
    cluster = check_envoy_ext_proc(f"{where} {at}", value, duplex)
    added = {p["patch"]["value"]["name"]: p["patch"]["value"] for p in doc["spec"]["configPatches"]
             if p["applyTo"] == "CLUSTER" and p["patch"]["operation"] == "ADD"}
    if cluster in added:
        sock = added[cluster]["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"][
            "socket_address"]
        if (sock["address"], sock["port_value"]) != ("127.0.0.1", grpc_port):
            fail(f"{where}: cluster {cluster} must reach the pod's sidecar on 127.0.0.1:{grpc_port}")
        target = f"127.0.0.1:{grpc_port} (pod-local)"
    else:
        m = re.fullmatch(r"outbound\|(\d+)\|\|([a-z0-9-]+)\.([A-Za-z0-9-]+)\.svc\.cluster\.local", cluster)
        if not m or (int(m.group(1)), m.group(2)) != (svc_port, service):
            fail(f"{where}: cluster {cluster} is not Istio's outbound cluster of Service {service} port {svc_port}")
        target = f"Service {service}:{svc_port}"
    listeners = [p["patch"]["value"] for p in doc["spec"]["configPatches"] if p["applyTo"] == "LISTENER"]
    for patch in listeners:
        if not 0 < patch.get("per_connection_buffer_limit_bytes", 0) <= max_bytes:
            fail(f"{where}: per_connection_buffer_limit_bytes must be at most limits.max_request_bytes ({max_bytes})")
    mode = "FULL_DUPLEX_STREAMED" if duplex else "BUFFERED"
    ok(f"{where}: {value['name']} {mode} to {target}, failure_mode_allow false, request only, "
       f"{METADATA_NAMESPACE} receivable{', listener buffer raised' if listeners else ''}")


CHECKS = {
    "EnvoyExtensionPolicy": check_extension_policy,
    "ClientTrafficPolicy": check_client_traffic_policy,
    "BackendTrafficPolicy": check_backend_traffic_policy,
    "GatewayExtension": check_gateway_extension,
    "TrafficPolicy": check_traffic_policy,
    "ListenerPolicy": check_listener_policy,
}


COMMANDS = {
    "sync-config": cmd_sync_config,
    "config": cmd_config,
    "split": cmd_split,
    "manifests": cmd_manifests,
    "render-node": cmd_render_node,
    "custom": cmd_custom,
    "rules": cmd_rules,
    "server": cmd_server,
    "dockerfile": cmd_dockerfile,
    "gateways": cmd_gateways,
}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(__doc__)
    try:
        COMMANDS[sys.argv[1]](*sys.argv[2:])
    except CheckFailed as e:
        print(f"  FAILED: {e}", file=sys.stderr)
        sys.exit(1)
