"""The container images, compose file, Kubernetes manifests and dashboard: linted, validated
against their schemas, and held to the settings the code reads."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.settings import OTHER_VARIABLES, markdown_table, variable_names
from serve.settings import ServeSettings

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
BIN = Path(sys.executable).parent
UIS1_IMAGES = ("uis1-api", "uis1-trainer")


def _tool(name: str) -> str:
    path = BIN / name
    return str(path) if path.exists() else name


# --- Dockerfile -----------------------------------------------------------------------------------


def _stages() -> dict[str, list[str]]:
    """Each stage's instructions (continuation lines joined), by stage name."""
    text = re.sub(r"\\\n\s*", " ", (REPO / "Dockerfile").read_text())
    stages: dict[str, list[str]] = {}
    current: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if match := re.match(r"FROM\s+\S+\s+AS\s+(\S+)", line, re.IGNORECASE):
            current = stages.setdefault(match.group(1), [])
        current.append(line)
    return stages


def test_the_dockerfile_passes_hadolint() -> None:
    result = subprocess.run(
        [_tool("hadolint"), "--no-color", str(REPO / "Dockerfile")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_images_run_as_a_user_with_a_healthcheck_and_the_api_image_has_no_torch() -> None:
    stages = _stages()
    assert {"api", "trainer"} <= set(stages)
    assert list(stages)[-1] == "api"  # a plain `docker build .` gives the service image
    for name in ("api", "trainer"):
        users = [line for line in stages[name] if line.startswith("USER ")]
        assert users == ["USER 10001:10001"], name
        assert any(line.startswith("HEALTHCHECK") for line in stages[name]), name
        assert not any(re.search(r"(PASSWORD|SECRET|TOKEN|KEY)\w*=", line) for line in stages[name]), name
    assert 'CMD ["uis1", "healthcheck"]' in " ".join(stages["api"])
    api_build, trainer_build = " ".join(stages["api-build"]), " ".join(stages["trainer-build"])
    assert "requirements/core.lock" in api_build
    assert "train.lock" not in api_build
    assert "requirements/train.lock" in trainer_build
    core = (REPO / "requirements" / "core.lock").read_text()
    assert not re.search(r"^(torch|transformers|deepspeed)==", core, re.MULTILINE)
    assert re.search(r"^deepspeed==", (REPO / "requirements" / "train.lock").read_text(), re.MULTILINE)


def _ignored(path: str, patterns: list[str]) -> bool:
    """.dockerignore semantics for the patterns used here: the last matching pattern wins."""
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        body = pattern.removeprefix("!").rstrip("/").removeprefix("**/")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatch(p, body) or fnmatch.fnmatch(p.split("/")[-1], body) for p in prefixes):
            ignored = not negate
    return ignored


def test_every_file_the_images_copy_exists_and_passes_the_dockerignore() -> None:
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    sources = [
        source
        for lines in _stages().values()
        for line in lines
        if line.startswith("COPY ") and "--from=" not in line
        for source in line.split()[1:-1]
    ]
    assert "requirements/core.lock" in sources
    for source in sources:
        assert (REPO / source).exists(), source
        assert not _ignored(source, patterns), f"{source} is excluded by .dockerignore"
    for package in ("agent", "serve"):
        files = [p.relative_to(REPO).as_posix() for p in (REPO / package).rglob("*.py")]
        assert files
        assert not any(_ignored(f, patterns) for f in files)
    assert _ignored("tests/conftest.py", patterns)
    assert _ignored(".venv/bin/python", patterns)
    assert _ignored("agent/__pycache__/x.pyc", patterns)


# --- compose.yaml ----------------------------------------------------------------------------------


def _interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?error} in every string."""
    if isinstance(value, dict):
        return {k: _interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        name, op, arg = match.group(1), match.group(2), match.group(3)
        if env.get(name):
            return env[name]
        if op == ":?":
            raise KeyError(f"{name}: {arg}")
        return arg or ""

    return re.sub(r"\$\{(\w+)(?:(:-|:\?)([^}]*))?\}", one, value)


def _env_example() -> dict[str, str]:
    env = {}
    for line in (DEPLOY / "compose.env.example").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            env[name] = value.strip('"')
    return env


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    raw = yaml.safe_load((REPO / "compose.yaml").read_text())
    env = {**_env_example(), "POSTGRES_PASSWORD": "s3cret"}
    with pytest.raises(KeyError, match="POSTGRES_PASSWORD"):  # refuses to start without a password
        _interpolate(raw, {k: v for k, v in env.items() if k != "POSTGRES_PASSWORD"})
    return dict(_interpolate(raw, env))


def test_the_compose_file_matches_the_compose_spec() -> None:
    result = subprocess.run(
        [_tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(REPO / "compose.yaml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_publishes_only_the_api_and_keeps_vllm_on_an_internal_network(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    assert {"vllm", "api", "scheduler", "postgres", "adb"} <= set(services)
    published = {name for name, s in services.items() if s.get("ports")}
    assert published == {"api"}
    assert services["api"]["ports"] == ["127.0.0.1:8080:8080"]  # loopback unless the operator says so
    assert compose["networks"]["internal"]["internal"] is True
    for name in ("vllm", "postgres", "adb", "scheduler"):
        assert services[name]["networks"] == ["internal"], name
    assert "expose" not in services["vllm"]
    vllm_env = services["vllm"]["environment"]
    assert vllm_env["VLLM_SERVER_DEV_MODE"] == "1"  # which is why it must stay internal
    command = services["vllm"]["command"]
    assert command[0] == "/models/ui-s1-7b"
    assert '--limit-mm-per-prompt={"image":2,"video":0}' in command
    assert "--enable-lora" in command


def test_compose_references_resolve_and_dependencies_have_no_cycle(compose: dict[str, Any]) -> None:
    services = compose["services"]
    stages = set(_stages())
    for name, service in services.items():
        for network in service.get("networks", []):
            assert network in compose["networks"], (name, network)
        for secret in service.get("secrets", []):
            assert secret in compose["secrets"], (name, secret)
        for mount in service.get("volumes", []):
            source = mount.split(":")[0]
            if source.startswith("./deploy/"):  # the project's own files (./models is the operator's)
                assert (REPO / source).exists(), (name, source)
            elif not source.startswith(("/", ".")):
                assert source in compose["volumes"], (name, source)
        if "build" in service:
            assert service["build"]["target"] in stages, name
        for dependency in service.get("depends_on", {}):
            assert dependency in services, (name, dependency)

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"depends_on cycle: {' -> '.join((*path, name))}"
        for dependency in services[name].get("depends_on", {}):
            visit(dependency, (*path, name))

    for name in services:
        visit(name, ())
    # The volume the images write to is made theirs before anything mounts it.
    for name in ("api", "scheduler", "vllm"):
        assert services[name]["depends_on"]["init-data"] == {"condition": "service_completed_successfully"}


# --- Kubernetes --------------------------------------------------------------------------------------


def _manifests() -> list[Path]:
    return sorted((DEPLOY / "k8s").glob("*.yaml"))


def _documents() -> Iterator[tuple[Path, dict[str, Any]]]:
    for path in _manifests():
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                yield path, doc


def test_every_manifest_matches_the_kubernetes_schema(tmp_path: Path) -> None:
    paths = _manifests()
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == sorted(f"k8s/{p.name}" for p in paths)
    result = subprocess.run(
        [_tool("kubernetes-validate"), "--strict", *map(str, paths)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {portz: []}\n")
    # The validator does reject what the schema forbids.
    assert (
        subprocess.run(
            [_tool("kubernetes-validate"), "--strict", "--quiet", str(bad)], capture_output=True, check=False
        ).returncode
        != 0
    )


def test_the_kustomization_renders_and_every_rendered_object_validates(tmp_path: Path) -> None:
    if shutil.which("kubectl") is None:  # .ci/run installs it (Debian's kubernetes-client)
        if os.environ.get("CI"):
            pytest.fail("kubectl is not installed: .ci/run installs Debian's kubernetes-client")
        pytest.skip("kubectl (with kustomize) is not installed")
    copy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy)
    for name in ("api-keys", "database-url", "postgres-password"):
        (copy / "secrets" / name).write_text("placeholder\n")
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(copy)], capture_output=True, text=True, check=False
    )
    assert rendered.returncode == 0, rendered.stderr
    out = tmp_path / "rendered.yaml"
    out.write_text(rendered.stdout)
    result = subprocess.run(
        [_tool("kubernetes-validate"), "--strict", str(out)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] != "Namespace"} == {"uis1"}
    secret = next(d for d in docs if d["kind"] == "Secret")
    assert set(secret["data"]) == {"api-keys", "database-url", "postgres-password"}
    cronjob = next(d for d in docs if d["kind"] == "CronJob")
    config_volume = next(
        v
        for v in cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["volumes"]
        if v["name"] == "config"
    )
    config_map = next(d for d in docs if d["kind"] == "ConfigMap")
    assert config_volume["configMap"]["name"] == config_map["metadata"]["name"]  # the generated name
    assert yaml.safe_load(config_map["data"]["retrain.yaml"]) == yaml.safe_load(
        (DEPLOY / "retrain.yaml").read_text()
    )


def _pods() -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(object name, pod labels, pod spec) of every workload."""
    for _, doc in _documents():
        spec = doc.get("spec", {})
        if doc["kind"] == "CronJob":
            template = spec["jobTemplate"]["spec"]["template"]
        elif "template" in spec:
            template = spec["template"]
        else:
            continue
        yield doc["metadata"]["name"], template["metadata"]["labels"], template["spec"]


def _selected(policy: dict[str, Any], labels: dict[str, str]) -> bool:
    wanted = policy["spec"]["podSelector"].get("matchLabels", {})
    return all(labels.get(k) == v for k, v in wanted.items())


def test_network_policies_let_only_the_api_reach_vllm_adb_and_postgres() -> None:
    policies = [doc for _, doc in _documents() if doc["kind"] == "NetworkPolicy"]
    pods = {name: labels for name, labels, _ in _pods()}
    api = pods["uis1-api"]
    default_deny = [p for p in policies if p["spec"]["podSelector"] == {}]
    assert default_deny
    assert default_deny[0]["spec"]["policyTypes"] == ["Ingress"]
    assert "ingress" not in default_deny[0]["spec"]
    for target, port, allowed in (
        ("uis1-vllm", 8000, {"uis1-api"}),
        ("uis1-adb", 5037, {"uis1-api"}),
        ("uis1-postgres", 5432, {"uis1-api", "uis1-retrain"}),
    ):
        rules = [
            rule for p in policies if _selected(p, pods[target]) for rule in p["spec"].get("ingress", [])
        ]
        assert rules, target
        for rule in rules:
            assert rule.get("from"), f"{target}: a rule without `from` admits everyone"
            assert [p["port"] for p in rule["ports"]] == [port]
            sources = {
                name for name, labels in pods.items() for peer in rule["from"] if labels_match(peer, labels)
            }
            assert sources == allowed, target
    api_rules = [rule for p in policies if _selected(p, api) for rule in p["spec"].get("ingress", [])]
    assert [[p["port"] for p in rule["ports"]] for rule in api_rules] == [[8080]]
    services = {doc["metadata"]["name"]: doc for _, doc in _documents() if doc["kind"] == "Service"}
    assert all(s["spec"].get("type", "ClusterIP") == "ClusterIP" for s in services.values())


def labels_match(peer: dict[str, Any], labels: dict[str, str]) -> bool:
    wanted = peer.get("podSelector", {}).get("matchLabels", {})
    return "namespaceSelector" not in peer and all(labels.get(k) == v for k, v in wanted.items())


def test_uis1_pods_run_as_non_root_without_privilege_escalation() -> None:
    for name, _, spec in _pods():
        for container in spec["containers"]:
            assert container["securityContext"]["allowPrivilegeEscalation"] is False, name
            if container["image"].split(":")[0] in UIS1_IMAGES:
                assert spec["securityContext"]["runAsNonRoot"] is True, name
                assert spec["securityContext"]["runAsUser"] == 10001, name
    vllm = next(spec for name, _, spec in _pods() if name == "uis1-vllm")["containers"][0]
    assert vllm["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert vllm["readinessProbe"]["httpGet"]["path"] == "/health"


# --- settings ---------------------------------------------------------------------------------------


def _deploy_env() -> list[tuple[str, str, str]]:
    """(where, variable, value) of every variable a uis1 container is given."""
    found: list[tuple[str, str, str]] = []
    samples = {
        "database-url": "postgresql+psycopg://uis1:pw@db:5432/uis1",
        "metadata.name": "uis1-api-7d9c-x2",
    }
    for name, _, spec in _pods():
        for container in spec["containers"]:
            if container["image"].split(":")[0] not in UIS1_IMAGES:
                continue
            for var in container.get("env", []):
                ref = var.get("valueFrom", {})
                value = (
                    var.get("value")
                    or samples[
                        ref.get("secretKeyRef", {}).get("key") or ref.get("fieldRef", {}).get("fieldPath")
                    ]
                )
                found.append((f"k8s {name}", var["name"], value))
    raw = yaml.safe_load((REPO / "compose.yaml").read_text())
    services = _interpolate(raw, {**_env_example(), "POSTGRES_PASSWORD": "pw"})["services"]
    for name, service in services.items():
        if service.get("image", "").split(":")[0] in UIS1_IMAGES:
            for var, value in service.get("environment", {}).items():
                found.append((f"compose {name}", var, str(value)))
    for line in _stages()["api"] + _stages()["trainer"] + _stages()["base"]:
        if line.startswith("ENV "):
            for var, value in re.findall(r"(\w+)=(\S+)", line):
                found.append(("Dockerfile", var, value))
    return found


def test_every_variable_the_deployment_sets_is_a_setting_and_its_value_is_valid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    known = variable_names(ServeSettings)
    found = _deploy_env()
    by_place: dict[str, dict[str, str]] = {}
    for where, var, value in found:
        if var.startswith("UIS1_"):
            assert var in known, f"{where}: {var} is not a setting (it would be ignored)"
            by_place.setdefault(where.split(" ")[0] + " " + where.split(" ")[-1], {})[var] = value
        else:
            assert var in {
                "PYTHONDONTWRITEBYTECODE",
                "PYTHONUNBUFFERED",
                "PIP_NO_CACHE_DIR",
                "PATH",
                "HOME",
                "PIP_DISABLE_PIP_VERSION_CHECK",
                "HF_HOME",
                "TRITON_CACHE_DIR",
            }, (where, var)
    assert {"k8s uis1-api", "k8s uis1-retrain", "compose api", "compose scheduler"} <= set(by_place)
    for where, variables in by_place.items():
        for name in [n for n in os.environ if n.startswith("UIS1_")]:
            monkeypatch.delenv(name)
        for var, value in variables.items():
            monkeypatch.setenv(var, value)
        settings = ServeSettings()  # raises on a value the setting refuses
        for var, value in variables.items():
            node: Any = settings
            for part in var.removeprefix("UIS1_").lower().split("__"):
                node = getattr(node, part)
            if isinstance(node, list | tuple):
                assert [str(v) for v in node] == json.loads(value), (where, var)
            elif isinstance(node, bool | int | float):
                assert node == json.loads(value.lower()), (where, var)
            else:
                assert str(node) == value, (where, var)


def test_the_operator_docs_list_exactly_the_settings_the_code_defines() -> None:
    text = (DEPLOY / "README.md").read_text()
    begin, end = "<!-- settings: begin -->\n", "<!-- settings: end -->"
    assert begin in text
    assert end in text
    documented = text.split(begin, 1)[1].split(end, 1)[0]
    assert documented == markdown_table(ServeSettings), "regenerate with `uis1 settings --markdown`"
    for local in (str(REPO), str(Path.home()), socket.gethostname()):  # nothing of the machine it ran on
        assert f"`{local}" not in documented, local
        assert f'"{local}' not in documented, local
    known = variable_names(ServeSettings) | OTHER_VARIABLES
    for doc in (REPO / "README.md", DEPLOY / "README.md", REPO / "compose.yaml", REPO / "Dockerfile"):
        for var in re.findall(r"\bUIS1_[A-Z0-9_]*[A-Z0-9]", doc.read_text()):
            assert var in known, f"{doc.name} mentions {var}, which no setting reads"


def test_the_retrain_config_the_deployment_mounts_is_valid() -> None:
    pytest.importorskip("torch")
    from train.config import load_retrain_config

    config = load_retrain_config(DEPLOY / "retrain.yaml")
    assert config.base_model == Path("/models/ui-s1-7b")
    assert config.work_dir == Path("/data/retrain")
    assert config.rl["learner"]["lora"]["rank"] <= 64  # vLLM runs with --max-lora-rank 64
    from typer.testing import CliRunner

    from train.cli import retrain_app

    result = CliRunner().invoke(retrain_app, ["--config", str(DEPLOY / "retrain.yaml"), "--check"])
    assert result.exit_code == 0, result.output
    assert "valid (stages rl" in result.output


# --- dashboard --------------------------------------------------------------------------------------


def dashboard_metrics() -> set[str]:
    dashboard = json.loads((DEPLOY / "grafana" / "uis1-dashboard.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert exprs
    assert all(panel["targets"] for panel in dashboard["panels"])
    return {m for expr in exprs for m in re.findall(r"\b(?:uis1_|vllm:)[a-z_]+", expr)}


def test_the_dashboard_queries_only_metrics_the_service_exports() -> None:
    from serve.ops import metrics

    families = {family.name for family in metrics.REGISTRY.collect()}
    wanted = {m for m in dashboard_metrics() if m.startswith("uis1_")}
    assert len(wanted) >= 7
    for name in wanted:
        base = re.sub(r"_(bucket|count|sum|total|info)$", "", name)
        assert base in families or name in families, name
