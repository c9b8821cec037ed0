"""The deployment files agree with the code: docker-compose.yml, the Dockerfile, the Helm chart.

No broker and no Docker engine: the files are parsed and cross-checked against the App they
name (imported for real, so a renamed module or aggregate fails here, not at `compose up`).

When a ``helm`` binary is on PATH, the chart is also linted and rendered and the rendered
objects are checked. Those tests are skipped when helm is absent; `.ci/run` builds it from
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
    assert any(keyword == "RUN" and "pip install ." in rest for keyword, rest in instructions)
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
    assert ".Values.worker.terminationGracePeriodSeconds" in statefulset
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


def test_chart_values_document_why_there_is_no_default_liveness_probe() -> None:
    values_text = (CHART / "values.yaml").read_text(encoding="utf-8")
    assert _values()["worker"]["livenessProbe"] == {}
    reason = values_text.split("livenessProbe:", 1)[0].rsplit("# -- Liveness probe", 1)[1]
    assert "exits non-zero" in reason and "rebalance" in reason


def test_chart_serves_metrics_on_the_port_its_values_name() -> None:
    assert _values()["metrics"] == {"enabled": True, "port": 9100}
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
    assert "livenessProbe" not in container
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
def test_helm_without_metrics_serves_none_and_asks_for_no_scrape() -> None:
    (statefulset,) = _kind(_render("metrics.enabled=false"), "StatefulSet")
    template = statefulset["spec"]["template"]
    (container,) = template["spec"]["containers"]
    assert "--metrics-port" not in container["args"]
    assert "ports" not in container
    assert "annotations" not in template["metadata"]
