"""The deployment files agree with the code: docker-compose.yml, the Dockerfile, the Helm chart.

No broker and no Docker engine: the files are parsed and cross-checked against the App they
name (imported for real, so a renamed module or aggregate fails here, not at `compose up`).

When a ``helm`` binary is on PATH, the chart is also linted and rendered, the rendered
objects are checked and validated against Kubernetes' schemas (kubernetes-validate, strict). Those tests are skipped when helm is absent; `.ci/run` builds it from
the Go module proxy (``go install helm.sh/helm/v3/cmd/helm@v3.22.0``) so CI runs them. That
is the only skip in this file.
"""

from __future__ import annotations

import importlib
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

try:
    import yaml
except ModuleNotFoundError as exc:  # a failure, not a skip: CI must parse these files
    raise ImportError(
        "tests/unit/test_deploy_files.py needs PyYAML: add 'pyyaml>=6.0' to the dev extras"
    ) from exc

try:
    import kubernetes_validate
except ModuleNotFoundError as exc:  # likewise: the rendered manifests must be validated
    raise ImportError(
        "tests/unit/test_deploy_files.py needs kubernetes-validate: add 'kubernetes-validate>=1.28' "
        "to the dev extras"
    ) from exc

from tidings.shell.runtime.stopping import DEFAULT_STOP_GRACE_S, STOP_GRACE_ENV, parse_stop_grace

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
CHART = REPO / "helm" / "tidings"
TEMPLATES = CHART / "templates"

TIDINGS_SERVICES = ("topics", "worker", "producer")


# -- helpers ----------------------------------------------------------------------------


def _compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


def _services() -> dict[str, Any]:
    return _compose()["services"]


def _load_app(spec: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Import MODULE:ATTRIBUTE the way `tidings worker` does, from the repository root."""
    module_name, _, attribute = spec.partition(":")
    monkeypatch.syspath_prepend(str(REPO))
    return getattr(importlib.import_module(module_name), attribute)


def _worker_app_spec() -> str:
    command = _services()["worker"]["command"]
    assert command[0] == "worker", command
    return command[1]


def _producer_sends() -> list[list[str]]:
    """Every `tidings send` line of the producer's script, as argv lists ($@ expanded)."""
    script = _services()["producer"]["command"][0].replace("$$", "$")
    prefix = None
    sends = []
    for line in script.splitlines():
        words = shlex.split(line)
        if not words:
            continue
        if words[0] == "send()":
            # send() { tidings send MODULE:APP AGGREGATE ID "$@"; }
            body = words[words.index("{") + 1 : words.index("}")]
            prefix = [word.rstrip(";") for word in body if word not in ("$@;", "$@")]
        elif words[0] == "send":
            assert prefix is not None, "send is called before it is defined"
            sends.append([*prefix, *words[1:]])
        elif words[0] == "tidings":
            sends.append(words)
    return sends


def _env(service: dict[str, Any]) -> dict[str, str]:
    environment = service.get("environment", {})
    if isinstance(environment, list):
        environment = dict(item.split("=", 1) for item in environment)
    return {key: str(value) for key, value in environment.items()}


# -- docker-compose.yml ----------------------------------------------------------------


def test_compose_defines_kafka_topic_setup_worker_and_producer() -> None:
    assert {"kafka", "topics", "worker", "producer"} <= set(_services())


def test_compose_kafka_is_the_official_image_in_kraft_mode() -> None:
    kafka = _services()["kafka"]
    env = _env(kafka)
    assert kafka["image"] == "apache/kafka:4.1.1"
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"].startswith(f"{env['KAFKA_NODE_ID']}@kafka:")
    assert env["KAFKA_CONTROLLER_LISTENER_NAMES"] == "CONTROLLER"
    assert env["CLUSTER_ID"], "KRaft formats its storage with CLUSTER_ID"
    assert not any("ZOOKEEPER" in key for key in env)


def test_compose_kafka_advertises_one_listener_per_network() -> None:
    """Containers reach kafka:9092; the host reaches the published port on localhost."""
    kafka = _services()["kafka"]
    env = _env(kafka)
    listeners = dict(item.split("://") for item in env["KAFKA_LISTENERS"].split(","))
    advertised = dict(item.split("://") for item in env["KAFKA_ADVERTISED_LISTENERS"].split(","))
    protocols = dict(
        item.split(":") for item in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")
    )
    assert set(listeners) == set(protocols)
    assert set(advertised) == set(listeners) - {"CONTROLLER"}
    assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] in advertised

    published = {str(port).split(":")[0]: str(port).split(":")[1] for port in kafka["ports"]}
    host_listeners = [
        name for name, address in advertised.items() if address.startswith("localhost:")
    ]
    assert len(host_listeners) == 1
    host_port = advertised[host_listeners[0]].split(":")[1]
    assert published[host_port] == listeners[host_listeners[0]].rsplit(":", 1)[1]

    internal = [address for address in advertised.values() if address.startswith("kafka:")]
    for name in TIDINGS_SERVICES:
        assert _env(_services()[name])["TIDINGS_BOOTSTRAP"] in internal, name


def test_compose_worker_app_imports_and_declares_topics(monkeypatch: pytest.MonkeyPatch) -> None:
    app = _load_app(_worker_app_spec(), monkeypatch)
    specs = app.topic_specs()
    assert specs
    assert all(spec.name.startswith(f"{app.name}.") for spec in specs)


def test_compose_topic_setup_applies_the_topics_of_the_worker_app() -> None:
    assert _services()["topics"]["command"] == ["topics", "apply", _worker_app_spec()]


def test_compose_producer_sends_to_an_aggregate_of_the_worker_app(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = _load_app(_worker_app_spec(), monkeypatch)
    topics = {spec.name for spec in app.topic_specs()}
    sends = _producer_sends()
    assert [send[5] for send in sends] == ["Open", "Deposit", "Withdraw"]
    for send in sends:
        assert send[:3] == ["tidings", "send", _worker_app_spec()]
        aggregate = send[3]
        assert f"{app.name}.aggregate.{aggregate}.commands" in topics
        handles = {handle.name: handle for handle in app.aggregates}
        assert send[5] in handles[aggregate].definition.command_types


def test_compose_worker_healthcheck_asks_for_the_app_consumer_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = _load_app(_worker_app_spec(), monkeypatch)
    check = " ".join(_services()["worker"]["healthcheck"]["test"])
    assert f'describe_consumer_groups(["{app.name}"])' in check


def test_compose_services_start_in_order() -> None:
    services = _services()
    assert "healthcheck" in services["kafka"]
    assert services["topics"]["depends_on"]["kafka"]["condition"] == "service_healthy"
    worker_deps = services["worker"]["depends_on"]
    assert worker_deps["kafka"]["condition"] == "service_healthy"
    assert worker_deps["topics"]["condition"] == "service_completed_successfully"
    assert services["producer"]["depends_on"]["worker"]["condition"] == "service_healthy"


def test_compose_worker_restarts_and_keeps_state_on_a_named_volume() -> None:
    compose = _compose()
    worker = compose["services"]["worker"]
    assert worker["restart"] == "unless-stopped"
    data_dir = _env(worker)["TIDINGS_DATA_DIR"]
    volumes = {volume.split(":")[1]: volume.split(":")[0] for volume in worker["volumes"]}
    assert volumes[data_dir] in compose["volumes"]


def test_compose_tidings_services_share_one_built_image() -> None:
    services = _services()
    images = {services[name]["image"] for name in TIDINGS_SERVICES}
    assert len(images) == 1
    assert all(services[name].get("build") == "." for name in TIDINGS_SERVICES)


# -- Dockerfile ------------------------------------------------------------------------


def _dockerfile_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text(encoding="utf-8").replace("\\\n", " ")
    instructions = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            instructions.append((keyword.upper(), rest.strip()))
    return instructions


def test_dockerfile_installs_the_project_on_python_311_slim() -> None:
    instructions = _dockerfile_instructions()
    args = dict(
        rest.split("=", 1) for keyword, rest in instructions if keyword == "ARG" and "=" in rest
    )
    bases = [rest.split()[0] for keyword, rest in instructions if keyword == "FROM"]
    assert {base.replace("${PYTHON_IMAGE}", args["PYTHON_IMAGE"]) for base in bases} == {
        "python:3.11-slim"
    }
    assert any(keyword == "RUN" and "pip install '.[tracing]'" in rest for keyword, rest in instructions)
    assert ("COPY", "examples /app/examples") in instructions


def test_dockerfile_runs_tidings_as_a_non_root_user_with_a_data_volume() -> None:
    instructions = _dockerfile_instructions()
    users = [rest for keyword, rest in instructions if keyword == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    assert instructions[[k for k, _ in instructions].index("ENTRYPOINT")][1] == '["tidings"]'
    env = " ".join(rest for keyword, rest in instructions if keyword == "ENV")
    data_dir = re.search(r"TIDINGS_DATA_DIR=(\S+)", env)
    assert data_dir is not None
    assert ("VOLUME", f'["{data_dir.group(1)}"]') in instructions


def test_dockerignore_lets_in_exactly_what_pip_install_and_the_examples_need() -> None:
    lines = [
        line.strip()
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*"
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert {"pyproject.toml", "platform", "schemas", "topics", "examples"} <= allowed
    assert all(
        (REPO / name).exists()
        for name in ("pyproject.toml", "platform", "schemas", "topics", "examples")
    )


# -- Helm chart (source) ----------------------------------------------------------------


def _values() -> dict[str, Any]:
    return yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))


def test_chart_metadata_is_a_v2_application_chart() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    assert chart["apiVersion"] == "v2"
    assert chart["name"] == "tidings"
    assert chart["type"] == "application"
    assert chart["version"] and chart["appVersion"]


def test_chart_default_app_is_the_compose_app_and_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    values = _values()
    assert values["app"] == _worker_app_spec()
    assert _load_app(values["app"], monkeypatch).topic_specs()
    assert values["kafka"]["bootstrap"]
    assert values["replicaCount"] >= 1


def test_chart_statefulset_template_runs_the_worker_for_values_app() -> None:
    statefulset = (TEMPLATES / "statefulset.yaml").read_text(encoding="utf-8")
    helpers = (TEMPLATES / "_helpers.tpl").read_text(encoding="utf-8")
    assert "kind: StatefulSet" in statefulset
    assert "- worker\n" in statefulset
    # The App comes from .Values.app, through the helper that validates MODULE:APP.
    assert 'include "tidings.app" .' in statefulset
    app_helper = helpers.split('define "tidings.app"', 1)[1].split("{{- end }}\n\n", 1)[0]
    assert ".Values.app" in app_helper
    assert ".Values.kafka.bootstrap" in helpers and "TIDINGS_BOOTSTRAP" in helpers
    assert "TIDINGS_DATA_DIR" in statefulset and "volumeClaimTemplates" in statefulset
    assert 'terminationGracePeriodSeconds: {{ include "tidings.terminationGrace" . }}' in statefulset
    assert ".Values.worker.terminationGracePeriodSeconds" in helpers.split('define "tidings.terminationGrace"', 1)[1]
    assert ".Values.resources" in statefulset


def test_chart_has_headless_service_topics_hook_pdb_and_service_account() -> None:
    service = (TEMPLATES / "service.yaml").read_text(encoding="utf-8")
    assert "clusterIP: None" in service
    job = (TEMPLATES / "topics-job.yaml").read_text(encoding="utf-8")
    assert "kind: Job" in job and "helm.sh/hook: pre-install,pre-upgrade" in job
    assert "topics apply" in job or '["topics", "apply"' in job
    assert "kind: PodDisruptionBudget" in (TEMPLATES / "poddisruptionbudget.yaml").read_text(
        encoding="utf-8"
    )
    assert "kind: ServiceAccount" in (TEMPLATES / "serviceaccount.yaml").read_text(encoding="utf-8")


def test_chart_probes_ask_the_workers_livez_and_readyz_by_default_and_say_why() -> None:
    values = _values()
    worker = values["worker"]
    assert values["probes"] == {"enabled": True}
    for probe, path in (("livenessProbe", "/livez"), ("readinessProbe", "/readyz"), ("startupProbe", "/livez")):
        assert worker[probe]["httpGet"] == {"path": path, "port": "metrics"}, probe
    values_text = (CHART / "values.yaml").read_text(encoding="utf-8")
    reason = values_text.split("livenessProbe:", 1)[0].rsplit("# -- Liveness probe", 1)[1]
    assert "broker outage" in reason and "rebalances" in reason
    startup = values_text.split("startupProbe:", 1)[0].rsplit("# -- Startup probe", 1)[1]
    assert "Not on /readyz" in startup


def test_chart_serves_metrics_on_the_port_its_values_name() -> None:
    metrics = _values()["metrics"]
    assert (metrics["enabled"], metrics["port"], metrics["serviceMonitor"]["enabled"]) == (True, 9100, False)
    template = (TEMPLATES / "statefulset.yaml").read_text(encoding="utf-8")
    assert "--metrics-port" in template and "prometheus.io/scrape" in template


# -- Helm chart (rendered; needs helm on PATH) -----------------------------------------

HELM = shutil.which("helm")
needs_helm = pytest.mark.skipif(
    HELM is None, reason="helm is not on PATH (.ci/run builds it; see the module docstring)"
)


def _helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    assert HELM is not None
    return subprocess.run([HELM, *args], capture_output=True, text=True, check=check, timeout=120)


def _render(*set_values: str) -> list[dict[str, Any]]:
    args = ["template", "bank", str(CHART), "--namespace", "tidings"]
    for value in set_values:
        args += ["--set", value]
    return [doc for doc in yaml.safe_load_all(_helm(*args).stdout) if doc]


def _kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["kind"] == kind]


@needs_helm
def test_helm_lint_passes_strict() -> None:
    result = _helm("lint", "--strict", str(CHART), check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_helm
def test_helm_template_renders_every_kind_of_the_chart() -> None:
    kinds = sorted(doc["kind"] for doc in _render())
    assert kinds == sorted(
        ["ServiceAccount", "ServiceAccount", "Service", "StatefulSet", "Job", "PodDisruptionBudget"]
    )


@needs_helm
def test_helm_statefulset_runs_the_app_with_bootstrap_and_a_state_volume() -> None:
    docs = _render("kafka.bootstrap=kafka-0.kafka:9092", "replicaCount=3")
    (statefulset,) = _kind(docs, "StatefulSet")
    (headless,) = _kind(docs, "Service")
    spec = statefulset["spec"]
    (container,) = spec["template"]["spec"]["containers"]
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert spec["replicas"] == 3
    assert spec["serviceName"] == headless["metadata"]["name"]
    assert container["args"][:2] == ["worker", _values()["app"]]
    assert env["TIDINGS_BOOTSTRAP"] == "kafka-0.kafka:9092"
    (claim,) = spec["volumeClaimTemplates"]
    mounts = {mount["name"]: mount["mountPath"] for mount in container["volumeMounts"]}
    assert mounts[claim["metadata"]["name"]] == env["TIDINGS_DATA_DIR"]
    assert spec["template"]["spec"]["securityContext"]["runAsNonRoot"] is True


@needs_helm
def test_helm_topics_job_is_a_pre_install_and_pre_upgrade_hook_for_the_app() -> None:
    docs = _render()
    (job,) = _kind(docs, "Job")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    (container,) = job["spec"]["template"]["spec"]["containers"]
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env["TIDINGS_APP"] == _values()["app"]
    assert 'tidings topics apply "$(TIDINGS_APP)"' in container["args"][0]
    hook_accounts = [
        doc
        for doc in _kind(docs, "ServiceAccount")
        if "helm.sh/hook" in doc["metadata"].get("annotations", {})
    ]
    assert [account["metadata"]["name"] for account in hook_accounts] == [
        job["spec"]["template"]["spec"]["serviceAccountName"]
    ]


@needs_helm
def test_helm_without_persistence_uses_an_empty_dir() -> None:
    (statefulset,) = _kind(_render("persistence.enabled=false"), "StatefulSet")
    assert "volumeClaimTemplates" not in statefulset["spec"]
    volumes = {
        volume["name"]: volume for volume in statefulset["spec"]["template"]["spec"]["volumes"]
    }
    assert volumes["data"] == {"name": "data", "emptyDir": {}}


@needs_helm
def test_helm_refuses_an_app_that_is_not_module_colon_attribute() -> None:
    result = _helm("template", "bank", str(CHART), "--set", "app=examples/bank.py", check=False)
    assert result.returncode != 0
    assert "MODULE:ATTRIBUTE" in result.stderr


def _stop_grace(docs: list[dict[str, Any]]) -> tuple[int, float]:
    """The pod's terminationGracePeriodSeconds and the worker's stop grace, as the worker reads it."""
    (statefulset,) = _kind(docs, "StatefulSet")
    pod = statefulset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    (value,) = [item["value"] for item in container["env"] if item["name"] == STOP_GRACE_ENV]
    return pod["terminationGracePeriodSeconds"], parse_stop_grace(value)


@needs_helm
def test_helm_the_worker_exits_within_its_grace_five_seconds_before_the_kill(tmp_path: Path) -> None:
    # Kubernetes' default 30 s gives the worker its own default, whatever --set or a file says.
    assert _stop_grace(_render()) == (30, DEFAULT_STOP_GRACE_S)
    assert _stop_grace(_render("worker.terminationGracePeriodSeconds=90")) == (90, 85)
    assert _stop_grace(_render_with({"worker": {"terminationGracePeriodSeconds": 6}}, tmp_path)) == (6, 1)


@needs_helm
@pytest.mark.parametrize("bad", ["5", "7.5", "-1", "thirty", "3606"])
def test_helm_refuses_a_termination_grace_the_worker_could_not_keep(bad: str) -> None:
    result = _helm("template", "bank", str(CHART), "--set", f"worker.terminationGracePeriodSeconds={bad}",
                   check=False)
    assert result.returncode != 0
    assert "worker.terminationGracePeriodSeconds must be a whole number of seconds from 6 to 3605" in result.stderr


def _args(docs: list[dict[str, Any]]) -> list[str]:
    (statefulset,) = _kind(docs, "StatefulSet")
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    return list(container["args"])


@needs_helm
def test_helm_runs_several_worker_processes_per_pod_when_asked() -> None:
    assert "--processes" not in _args(_render())
    args = _args(_render("worker.processes=2"))
    assert args[args.index("--processes") + 1] == "2"


@needs_helm
@pytest.mark.parametrize("bad", ["0", "65", "-1", "1.5", "two"])
def test_helm_refuses_a_process_count_the_worker_would_refuse(bad: str) -> None:
    result = _helm("template", "bank", str(CHART), "--set", f"worker.processes={bad}", check=False)
    assert result.returncode != 0
    assert "worker.processes must be a whole number from 1 to 64" in result.stderr


@needs_helm
def test_helm_worker_serves_metrics_and_its_pods_carry_the_scrape_annotations() -> None:
    docs = _render("metrics.port=9200", "podAnnotations.team=payments",
                   "podAnnotations.prometheus\\.io/path=/custom")
    (statefulset,) = _kind(docs, "StatefulSet")
    template = statefulset["spec"]["template"]
    (container,) = template["spec"]["containers"]
    args = container["args"]
    assert args[args.index("--metrics-port") + 1] == "9200"
    assert container["ports"] == [{"name": "metrics", "containerPort": 9200, "protocol": "TCP"}]
    assert template["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9200",
        "prometheus.io/path": "/custom",  # podAnnotations win over the chart's
        "team": "payments",
    }


@needs_helm
def test_helm_without_metrics_serves_the_port_for_the_probes_only_and_asks_for_no_scrape() -> None:
    docs = _render("metrics.enabled=false")
    (statefulset,) = _kind(docs, "StatefulSet")
    template = statefulset["spec"]["template"]
    (container,) = template["spec"]["containers"]
    assert container["args"][container["args"].index("--metrics-port") + 1] == "9100"
    assert container["ports"] == [{"name": "metrics", "containerPort": 9100, "protocol": "TCP"}]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert "annotations" not in template["metadata"]
    (service,) = _kind(docs, "Service")
    assert "ports" not in service["spec"]


@needs_helm
def test_helm_without_metrics_and_probes_serves_nothing() -> None:
    docs = _render("metrics.enabled=false", "probes.enabled=false")
    (statefulset,) = _kind(docs, "StatefulSet")
    template = statefulset["spec"]["template"]
    (container,) = template["spec"]["containers"]
    assert "--metrics-port" not in container["args"]
    assert "ports" not in container
    assert not {"livenessProbe", "readinessProbe", "startupProbe"} & set(container)
    assert "annotations" not in template["metadata"]


@needs_helm
def test_helm_probes_reach_the_workers_port_and_render_valid_manifests() -> None:
    docs = _render("metrics.port=9300")
    for doc in docs:
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
    (statefulset,) = _kind(docs, "StatefulSet")
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"metrics": 9300}
    probes = {name: container[name] for name in ("livenessProbe", "readinessProbe", "startupProbe")}
    assert {name: (p["httpGet"]["path"], ports[p["httpGet"]["port"]]) for name, p in probes.items()} == {
        "livenessProbe": ("/livez", 9300), "readinessProbe": ("/readyz", 9300), "startupProbe": ("/livez", 9300)}
    # The liveness probe restarts a deaf worker before it would exit 70 by itself (120 s).
    live = probes["livenessProbe"]
    assert 15 + live["periodSeconds"] * live["failureThreshold"] < 120
    # A probe set to null is dropped; the others stay.
    (statefulset,) = _kind(_render("worker.startupProbe=null"), "StatefulSet")
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    assert "startupProbe" not in container and "livenessProbe" in container
    # The headless Service names the metrics port (what a ServiceMonitor scrapes).
    (service,) = _kind(docs, "Service")
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9300, "targetPort": "metrics",
                                         "protocol": "TCP"}]


SERVICE_MONITOR_CRD = REPO / "tests" / "data" / "crds" / "monitoring.coreos.com_servicemonitors.yaml"


def _unknown_fields(doc: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Fields of ``doc`` that ``schema`` does not declare (what an API server would prune
    silently: a misspelt field). A CRD schema leaves additionalProperties unset."""
    found: list[str] = []
    if isinstance(doc, dict) and "properties" in schema and "additionalProperties" not in schema:
        for key, value in doc.items():
            if key not in schema["properties"]:
                found.append(f"{path}.{key}")
            else:
                found += _unknown_fields(value, schema["properties"][key], f"{path}.{key}")
    elif isinstance(doc, list) and "items" in schema:
        for n, item in enumerate(doc):
            found += _unknown_fields(item, schema["items"], f"{path}[{n}]")
    return found


@needs_helm
def test_helm_service_monitor_is_valid_against_the_operators_crd_and_scrapes_the_service() -> None:
    import jsonschema  # kubernetes-validate's own dependency

    assert not [d for d in _render() if d["kind"] == "ServiceMonitor"], "off by default"
    docs = _render("metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.labels.release=prom",
                   "metrics.serviceMonitor.scrapeTimeout=10s")
    (monitor,) = _kind(docs, "ServiceMonitor")
    crd = yaml.safe_load(SERVICE_MONITOR_CRD.read_text(encoding="utf-8"))
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == monitor["apiVersion"].split("/")[1]]
    assert monitor["apiVersion"] == f"{crd['spec']['group']}/{version['name']}" and version["served"]
    assert monitor["kind"] == crd["spec"]["names"]["kind"]
    schema = version["schema"]["openAPIV3Schema"]
    jsonschema.Draft7Validator(schema).validate(monitor)
    assert _unknown_fields(monitor["spec"], schema["properties"]["spec"], "spec") == []
    kubernetes_validate.validate({"apiVersion": "v1", "kind": "ConfigMap", "metadata": monitor["metadata"]},
                                 kubernetes_validate.latest_version(), strict=True)  # its metadata is ObjectMeta
    # It selects the chart's Service, by that Service's labels, and scrapes its named port.
    (service,) = _kind(docs, "Service")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["tidings"]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint == {"port": "metrics", "path": "/metrics", "interval": "30s", "scrapeTimeout": "10s"}
    assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]}
    assert monitor["metadata"]["labels"]["release"] == "prom"
    # A misspelt field is what the strict check is for.
    broken = {**monitor["spec"], "endpoint": []}
    assert _unknown_fields(broken, schema["properties"]["spec"], "spec") == ["spec.endpoint"]


@needs_helm
def test_helm_refuses_a_service_monitor_without_metrics() -> None:
    result = _helm("template", "bank", str(CHART), "--set", "metrics.serviceMonitor.enabled=true",
                   "--set", "metrics.enabled=false", check=False)
    assert result.returncode != 0 and "metrics.serviceMonitor.enabled needs metrics.enabled" in result.stderr


def _notes(tmp_path: Path, *set_values: str) -> str:
    """NOTES.txt as an install prints it: ``helm template`` renders no NOTES, so a copy of
    the chart holds them as a named template, included in a ConfigMap."""
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    notes = (chart / "templates" / "NOTES.txt").read_text(encoding="utf-8")
    (chart / "templates" / "_notes.tpl").write_text('{{- define "test.notes" }}' + notes + "{{- end }}\n")
    (chart / "templates" / "notes.yaml").write_text(
        'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n  notes: |\n'
        '{{- include "test.notes" . | nindent 4 }}\n')
    args = ["template", "rel", str(chart), "--namespace", "ns", "--show-only", "templates/notes.yaml"]
    for value in set_values:
        args += ["--set", value]
    return str(yaml.safe_load(_helm(*args).stdout)["data"]["notes"])


@needs_helm
def test_helm_notes_print_commands_for_the_app_the_release_runs(tmp_path: Path) -> None:
    notes = _notes(tmp_path, "app=orders.app:app")
    assert "orders.app:app" in notes and "examples.bank" not in notes and "tidings send" not in notes
    assert "tidings offsets show orders.app:app" in notes
    assert "tidings deadletters --limit 20 orders.app:app" in notes
    assert "curl -s localhost:9100/readyz" in notes and "port-forward pod/rel-tidings-0 9100:metrics" in notes
    bank = _notes(tmp_path / "bank", "metrics.enabled=false", "probes.enabled=false")
    assert "tidings send examples.bank.app:app account alice Open" in bank
    assert "/readyz" not in bank and "/metrics" not in bank


# -- Helm chart: Kafka credentials and certificates (rendered; needs helm on PATH) ------

#: librdkafka properties the chart's Kafka values set, by the environment variable.
SECRET_ENV = ("TIDINGS_KAFKA_SASL_PASSWORD", "TIDINGS_KAFKA_SSL_KEY_PASSWORD")
SCRAM_WITH_CA_SECRET: dict[str, Any] = {"kafka": {
    "bootstrap": "my-cluster-kafka-bootstrap:9093", "securityProtocol": "SASL_SSL",
    "saslMechanism": "SCRAM-SHA-512",
    "credentials": {"existingSecret": "bank-scram", "usernameKey": "user", "passwordKey": "pass"},
    "tls": {"ca": {"secretName": "my-cluster-cluster-ca-cert", "key": "ca.crt"}},
}}
MUTUAL_TLS: dict[str, Any] = {"kafka": {
    "bootstrap": "b-1.msk.example.com:9094", "securityProtocol": "SSL",
    "tls": {"ca": {"secretName": "kafka-ca", "key": "ca.pem"},
            "clientCert": {"secretName": "bank-tls", "certKey": "user.crt", "keyKey": "user.key",
                           "keyPasswordKey": "user.keypass"}},
}}
CA_FROM_CONFIGMAP: dict[str, Any] = {"kafka": {
    "bootstrap": "kafka.internal:9093", "securityProtocol": "SASL_SSL", "saslMechanism": "PLAIN",
    "credentials": {"existingSecret": "bank-plain"},
    "tls": {"ca": {"configMapName": "company-ca", "key": "bundle.pem"}},
    "properties": {"client.rack": "use1-az1", "log_level": 3},
}}
PROPERTIES_SECRET: dict[str, Any] = {"kafka": {
    "bootstrap": "pkc-abc12.us-east-1.aws.confluent.cloud:9092",
    "configSecret": {"name": "confluent-client", "key": "client.properties"},
}}
STRIMZI_SCRAM_USER: dict[str, Any] = {"kafka": {
    "bootstrap": "my-cluster-kafka-bootstrap:9093", "securityProtocol": "SASL_SSL",
    "saslMechanism": "SCRAM-SHA-512",
    "credentials": {"existingSecret": "bank-worker", "username": "bank-worker"},
    "tls": {"ca": {"secretName": "my-cluster-cluster-ca-cert"}},
}}
MSK_IAM: dict[str, Any] = {"kafka": {
    "bootstrap": "b-1.msk.example.com:9098", "securityProtocol": "SASL_SSL",
    "saslMechanism": "OAUTHBEARER", "tokenProvider": "bank_auth.msk:token",
}}
COMBINATIONS = {"scram_ca_secret": SCRAM_WITH_CA_SECRET, "mtls": MUTUAL_TLS,
                "ca_configmap": CA_FROM_CONFIGMAP, "properties_secret": PROPERTIES_SECRET,
                "strimzi_scram": STRIMZI_SCRAM_USER, "msk_iam": MSK_IAM}


def _render_with(values: dict[str, Any], tmp_path: Path, check: bool = True) -> Any:
    file = tmp_path / "values.yaml"
    file.write_text(yaml.safe_dump(values), encoding="utf-8")
    result = _helm("template", "bank", str(CHART), "--namespace", "tidings", "-f", str(file), check=check)
    if not check:
        return result
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def _containers(docs: list[dict[str, Any]]) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """kind -> (pod spec, its one container) for the worker StatefulSet and the topics Job."""
    found = {}
    for kind in ("StatefulSet", "Job"):
        (doc,) = _kind(docs, kind)
        pod = doc["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        found[kind] = (pod, container)
    return found


def _kafka_env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in container["env"]
            if item["name"].startswith("TIDINGS_KAFKA_") or item["name"] == "TIDINGS_BOOTSTRAP"}


def _mounted_file(pod: dict[str, Any], container: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    """The volume and the key a file path of the container comes from (read-only mounts only)."""
    for mount in container["volumeMounts"]:
        prefix = mount["mountPath"].rstrip("/") + "/"
        if path.startswith(prefix):
            assert mount.get("readOnly") is True, mount
            (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
            source = volume.get("secret") or volume.get("configMap")
            (item,) = [i for i in source["items"] if i["path"] == path[len(prefix):]]
            return volume, item["key"]
    raise AssertionError(f"{path} is on no mount of {container['name']}")


def _secret_ref(item: dict[str, Any]) -> tuple[str, str]:
    assert "value" not in item, f"{item['name']} carries a value: a secret must come from a Secret"
    ref = item["valueFrom"]["secretKeyRef"]
    return ref["name"], ref["key"]


@needs_helm
@pytest.mark.parametrize("name", sorted(COMBINATIONS))
def test_helm_kafka_settings_render_valid_manifests_alike_for_workers_and_the_topics_job(
    name: str, tmp_path: Path,
) -> None:
    docs = _render_with(COMBINATIONS[name], tmp_path)
    for doc in docs:
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
    (worker_pod, worker), (job_pod, job) = _containers(docs).values()
    assert _kafka_env(worker) == _kafka_env(job)
    kafka_volumes = [v for v in worker_pod["volumes"] if v["name"].startswith("kafka-")]
    assert kafka_volumes == [v for v in job_pod["volumes"] if v["name"].startswith("kafka-")]
    assert ([m for m in worker["volumeMounts"] if m["name"].startswith("kafka-")]
            == [m for m in job["volumeMounts"] if m["name"].startswith("kafka-")])
    # Every file the environment names is on a read-only mount of a projected key.
    for variable in ("TIDINGS_KAFKA_SSL_CA_LOCATION", "TIDINGS_KAFKA_SSL_CERTIFICATE_LOCATION",
                     "TIDINGS_KAFKA_SSL_KEY_LOCATION", "TIDINGS_KAFKA_CONFIG"):
        item = _kafka_env(worker).get(variable)
        if item is not None:
            _mounted_file(worker_pod, worker, item["value"])
    for variable in SECRET_ENV:
        if variable in _kafka_env(worker):
            _secret_ref(_kafka_env(worker)[variable])


@needs_helm
def test_helm_scram_with_a_ca_secret(tmp_path: Path) -> None:
    pod, container = _containers(_render_with(SCRAM_WITH_CA_SECRET, tmp_path))["StatefulSet"]
    env = _kafka_env(container)
    assert env["TIDINGS_BOOTSTRAP"]["value"] == "my-cluster-kafka-bootstrap:9093"
    assert env["TIDINGS_KAFKA_SECURITY_PROTOCOL"]["value"] == "SASL_SSL"
    assert env["TIDINGS_KAFKA_SASL_MECHANISM"]["value"] == "SCRAM-SHA-512"
    assert _secret_ref(env["TIDINGS_KAFKA_SASL_USERNAME"]) == ("bank-scram", "user")
    assert _secret_ref(env["TIDINGS_KAFKA_SASL_PASSWORD"]) == ("bank-scram", "pass")
    volume, key = _mounted_file(pod, container, env["TIDINGS_KAFKA_SSL_CA_LOCATION"]["value"])
    assert volume["secret"]["secretName"] == "my-cluster-cluster-ca-cert" and key == "ca.crt"
    assert "TIDINGS_KAFKA_SSL_CERTIFICATE_LOCATION" not in env and "TIDINGS_KAFKA_CONFIG" not in env


@needs_helm
def test_helm_mutual_tls_mounts_the_client_certificate_and_key(tmp_path: Path) -> None:
    pod, container = _containers(_render_with(MUTUAL_TLS, tmp_path))["Job"]
    env = _kafka_env(container)
    assert env["TIDINGS_KAFKA_SECURITY_PROTOCOL"]["value"] == "SSL"
    files = {variable: _mounted_file(pod, container, env[variable]["value"])
             for variable in ("TIDINGS_KAFKA_SSL_CA_LOCATION", "TIDINGS_KAFKA_SSL_CERTIFICATE_LOCATION",
                              "TIDINGS_KAFKA_SSL_KEY_LOCATION")}
    assert files["TIDINGS_KAFKA_SSL_CA_LOCATION"][1] == "ca.pem"
    cert_volume, cert_key = files["TIDINGS_KAFKA_SSL_CERTIFICATE_LOCATION"]
    key_volume, key_key = files["TIDINGS_KAFKA_SSL_KEY_LOCATION"]
    assert cert_volume is key_volume and cert_volume["secret"]["secretName"] == "bank-tls"
    assert (cert_key, key_key) == ("user.crt", "user.key")
    # Only the two files: a Strimzi user Secret's user.p12 and user.password are not mounted.
    assert [item["key"] for item in cert_volume["secret"]["items"]] == ["user.crt", "user.key"]
    assert _secret_ref(env["TIDINGS_KAFKA_SSL_KEY_PASSWORD"]) == ("bank-tls", "user.keypass")
    assert not {"TIDINGS_KAFKA_SASL_MECHANISM", "TIDINGS_KAFKA_SASL_USERNAME", "TIDINGS_KAFKA_SASL_PASSWORD"} & set(env)


@needs_helm
def test_helm_ca_from_a_configmap_and_plain_properties_as_environment(tmp_path: Path) -> None:
    pod, container = _containers(_render_with(CA_FROM_CONFIGMAP, tmp_path))["StatefulSet"]
    env = _kafka_env(container)
    volume, key = _mounted_file(pod, container, env["TIDINGS_KAFKA_SSL_CA_LOCATION"]["value"])
    assert volume["configMap"]["name"] == "company-ca" and key == "bundle.pem"
    assert env["TIDINGS_KAFKA_CLIENT_RACK"]["value"] == "use1-az1"
    assert env["TIDINGS_KAFKA_LOG__LEVEL"]["value"] == "3"  # "_" in a property is "__"
    assert _secret_ref(env["TIDINGS_KAFKA_SASL_USERNAME"]) == ("bank-plain", "username")


@needs_helm
def test_helm_a_properties_file_from_a_secret_is_tidings_kafka_config(tmp_path: Path) -> None:
    pod, container = _containers(_render_with(PROPERTIES_SECRET, tmp_path))["Job"]
    env = _kafka_env(container)
    volume, key = _mounted_file(pod, container, env["TIDINGS_KAFKA_CONFIG"]["value"])
    assert volume["secret"]["secretName"] == "confluent-client" and key == "client.properties"
    assert set(env) == {"TIDINGS_BOOTSTRAP", "TIDINGS_KAFKA_CONFIG"}


@needs_helm
def test_helm_a_strimzi_scram_user_gives_the_username_as_a_value_and_the_password_from_its_secret(
    tmp_path: Path,
) -> None:
    _, container = _containers(_render_with(STRIMZI_SCRAM_USER, tmp_path))["StatefulSet"]
    env = _kafka_env(container)
    assert env["TIDINGS_KAFKA_SASL_USERNAME"] == {"name": "TIDINGS_KAFKA_SASL_USERNAME", "value": "bank-worker"}
    assert _secret_ref(env["TIDINGS_KAFKA_SASL_PASSWORD"]) == ("bank-worker", "password")


@needs_helm
@pytest.mark.parametrize("name", sorted(COMBINATIONS))
def test_helm_rendered_environment_is_the_connection_the_values_mean(name: str, tmp_path: Path) -> None:
    """The chart's variable names follow the code's rule (docs/kafka.md): resolved by
    KafkaConnection, they give the properties intended, secrets from their Secret."""
    from tidings.shell.runtime import oauth
    from tidings.shell.runtime.connection import KafkaConnection

    values = COMBINATIONS[name]["kafka"]
    _, container = _containers(_render_with(COMBINATIONS[name], tmp_path))["StatefulSet"]
    environ = {}
    for variable, item in _kafka_env(container).items():
        environ[variable] = item["value"] if "value" in item else "from-secret:" + ":".join(_secret_ref(item))
    if "TIDINGS_KAFKA_CONFIG" in environ:
        (tmp_path / "client.properties").write_text("security.protocol=SASL_SSL\n", encoding="utf-8")
        environ["TIDINGS_KAFKA_CONFIG"] = str(tmp_path / "client.properties")
    if "tokenProvider" in values:  # the image would have it; here a function of this repo
        environ["TIDINGS_KAFKA_TIDINGS_OAUTH_TOKEN_PROVIDER"] = "tidings.shell.runtime.oauth:load"
    connection = KafkaConnection.resolve(environ=environ)
    properties = dict(connection.properties)
    assert connection.bootstrap == values["bootstrap"]
    expected: dict[str, str] = {}
    if "securityProtocol" in values:
        expected["security.protocol"] = values["securityProtocol"]
    if "saslMechanism" in values:
        expected["sasl.mechanism"] = values["saslMechanism"]
    credentials = values.get("credentials")
    if credentials:
        expected["sasl.username"] = credentials.get("username") or (
            f"from-secret:{credentials['existingSecret']}:{credentials.get('usernameKey', 'username')}")
        expected["sasl.password"] = f"from-secret:{credentials['existingSecret']}:{credentials.get('passwordKey', 'password')}"
    tls = values.get("tls", {})
    if "ca" in tls:
        expected["ssl.ca.location"] = f"/etc/tidings/kafka/ca/{tls['ca'].get('key', 'ca.crt')}"
    if "clientCert" in tls:
        cert = tls["clientCert"]
        expected["ssl.certificate.location"] = f"/etc/tidings/kafka/client/{cert['certKey']}"
        expected["ssl.key.location"] = f"/etc/tidings/kafka/client/{cert['keyKey']}"
        expected["ssl.key.password"] = f"from-secret:{cert['secretName']}:{cert['keyPasswordKey']}"
    for key, value in values.get("properties", {}).items():
        expected[key] = str(value)
    if "configSecret" in values:
        expected["security.protocol"] = "SASL_SSL"  # from the mounted file
    assert properties == expected
    if "tokenProvider" in values:
        assert connection.token_hook is not None and connection.token_hook.provider is oauth.load


def _leaves(tree: Any, path: str = "") -> list[tuple[str, Any]]:
    if isinstance(tree, dict):
        return [leaf for key, value in tree.items() for leaf in _leaves(value, f"{path}.{key}".lstrip("."))]
    return [(path, tree)]


def test_chart_values_defaults_hold_no_secret_value() -> None:
    leaves = dict(_leaves(_values()))
    secret_like = {path: value for path, value in leaves.items() if not isinstance(value, bool)
                   and re.search(r"(password|secret|token|jaas)$", path.rsplit(".", 1)[-1], re.I)}
    # Only names of Secrets (empty by default) match; no password, key or token is a default.
    assert secret_like == {"kafka.credentials.existingSecret": ""}
    assert _values()["kafka"]["properties"] == {} and _values()["env"] == [] and _values()["envFrom"] == []


@needs_helm
@pytest.mark.parametrize(("values", "reason"), [
    ({"kafka": {"properties": {"sasl.password": "hunter2-9f2c"}}},
     "kafka.properties.sasl.password is a secret: it does not belong in values"),
    ({"kafka": {"properties": {"sasl.jaas.config": "x required password=\"hunter2-9f2c\";"}}},
     "kafka.properties.sasl.jaas.config is a secret"),
    ({"kafka": {"securityProtocol": "SSL", "tls": {"ca": {"secretName": "a", "configMapName": "b"}}}},
     "kafka.tls.ca: set secretName or configMapName, not both"),
    ({"kafka": {"securityProtocol": "SASL_PLAINTEXT", "tls": {"ca": {"configMapName": "b"}}}},
     "kafka.tls is set but kafka.securityProtocol is SASL_PLAINTEXT: use SSL or SASL_SSL"),
    ({"kafka": {"credentials": {"existingSecret": "s"}}}, "kafka.credentials.existingSecret needs kafka.saslMechanism"),
    ({"kafka": {"securityProtocol": "TLS"}}, "kafka.securityProtocol must be PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"),
])
def test_helm_refuses_kafka_values_that_cannot_work_or_would_hold_a_secret(
    values: dict[str, Any], reason: str, tmp_path: Path,
) -> None:
    result = _render_with(values, tmp_path, check=False)
    assert result.returncode != 0
    assert reason in result.stderr
    assert "hunter2-9f2c" not in result.stdout + result.stderr
