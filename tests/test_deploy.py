"""deploy/*.yaml and the Dockerfile hold what their comments and the README promise."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from runner.arguments import build_parser
from runner.config import Config

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
IMAGE_UID = 10001  # the Dockerfile's USER
# Pod Security Standards, "restricted" (kubernetes.io/docs/concepts/security/pod-security-standards)
RESTRICTED_VOLUMES = {
    *("configMap", "csi", "downwardAPI", "emptyDir", "ephemeral"),
    *("persistentVolumeClaim", "projected", "secret"),
}
HOST_FIELDS = ("hostNetwork", "hostPID", "hostIPC", "hostUsers")


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def pod_templates() -> list[tuple[str, dict[str, Any]]]:
    """(file: kind, pod template) of every workload under deploy/."""
    found = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        for doc in documents(path.name):
            if doc.get("kind") == "CronJob":
                template = doc["spec"]["jobTemplate"]["spec"]["template"]
            elif doc.get("kind") in {"Deployment", "StatefulSet", "Job"}:
                template = doc["spec"]["template"]
            else:
                continue
            found.append((f"{path.name}: {doc['kind']}", template))
    return found


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """What Pod Security "restricted" would reject in this pod spec."""
    problems = [f"{field} is set" for field in HOST_FIELDS if pod.get(field)]
    pod_ctx = pod.get("securityContext") or {}
    for volume in pod.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            problems.append(f"volume {volume['name']} is {sorted(kinds)}")
    for container in [*pod.get("initContainers", []), *pod["containers"]]:
        ctx = {**pod_ctx, **(container.get("securityContext") or {})}
        name = container["name"]
        if ctx.get("runAsNonRoot") is not True:
            problems.append(f"{name}: runAsNonRoot is not true")
        if ctx.get("runAsUser") == 0:
            problems.append(f"{name}: runAsUser is 0")
        if (ctx.get("seccompProfile") or {}).get("type") not in {"RuntimeDefault", "Localhost"}:
            problems.append(f"{name}: seccompProfile is not RuntimeDefault or Localhost")
        if container.get("securityContext", {}).get("allowPrivilegeEscalation") is not False:
            problems.append(f"{name}: allowPrivilegeEscalation is not false")
        if container.get("securityContext", {}).get("privileged"):
            problems.append(f"{name}: privileged")
        caps = container.get("securityContext", {}).get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            problems.append(f"{name}: capabilities do not drop ALL")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            problems.append(f"{name}: capabilities add {caps['add']}")
        if any(port.get("hostPort") for port in container.get("ports") or []):
            problems.append(f"{name}: a hostPort")
    return problems


WHERE = [where.partition(":")[0] for where, _ in pod_templates()]


def test_every_workload_finds_its_pods() -> None:
    """The checks below cover the CronJob and the serve Deployment, not nothing."""
    assert [where for where, _ in pod_templates()] == [
        "cronjob.yaml: CronJob",
        "serve.yaml: Deployment",
    ]


@pytest.mark.parametrize(("where", "template"), pod_templates(), ids=WHERE)
def test_pods_meet_pod_security_restricted(where: str, template: dict[str, Any]) -> None:
    """seccompProfile RuntimeDefault, non-root as the image's uid, no privilege escalation,
    every capability dropped, only restricted volume types."""
    assert restricted_violations(template["spec"]) == [], where
    assert template["spec"]["securityContext"]["runAsUser"] == IMAGE_UID


def test_the_restricted_check_rejects_what_the_admission_would() -> None:
    """The checker itself: a pod without seccompProfile, root, or a hostPath is refused."""
    _, template = pod_templates()[0]
    pod = yaml.safe_load(yaml.safe_dump(template["spec"]))
    del pod["securityContext"]["seccompProfile"]
    pod["securityContext"]["runAsUser"] = 0
    pod["volumes"].append({"name": "host", "hostPath": {"path": "/"}})
    problems = restricted_violations(pod)
    assert "parallax: seccompProfile is not RuntimeDefault or Localhost" in problems
    assert "parallax: runAsUser is 0" in problems
    assert "volume host is ['hostPath']" in problems


@pytest.mark.parametrize(("where", "template"), pod_templates(), ids=WHERE)
def test_pods_carry_the_label_the_logql_queries_select(
    where: str, template: dict[str, Any]
) -> None:
    """The alerting guide's LogQL selects {app="parallax"}: every pod template carries it."""
    assert '{app="parallax"}' in (REPO / "docs" / "how-to" / "alerting.md").read_text()
    assert template["metadata"]["labels"]["app"] == "parallax", where


@pytest.mark.parametrize(("where", "template"), pod_templates(), ids=WHERE)
def test_pods_run_a_command_parallax_accepts_with_a_config_the_repo_has(
    where: str, template: dict[str, Any]
) -> None:
    """The args parse as a parallax command line and name a config under config/; a
    read-only root filesystem comes with a writable /tmp (the daemon's pointer for health)."""
    (container,) = template["spec"]["containers"]
    args = build_parser().parse_args(container["args"])
    assert (REPO / "config" / Path(args.config).relative_to("/work/config")).is_file()
    if container["securityContext"].get("readOnlyRootFilesystem"):
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        assert "emptyDir" in volumes[mounts["/tmp"]], where


def test_the_cronjob_fails_its_job_only_when_the_night_was_not_checked() -> None:
    """Review exits 0 (--exit-zero-on-review), a failed pod is not run again, and a drained
    node's pod is replaced without counting: no rule ignores an exit code, which would
    re-run every call."""
    (cronjob,) = [d for d in documents("cronjob.yaml") if d["kind"] == "CronJob"]
    job = cronjob["spec"]["jobTemplate"]["spec"]
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    assert job["template"]["spec"]["restartPolicy"] == "Never"  # podFailurePolicy needs it
    assert job["backoffLimit"] == 0
    (container,) = job["template"]["spec"]["containers"]
    assert build_parser().parse_args(container["args"]).exit_zero_on_review is True
    assert job["podFailurePolicy"]["rules"] == [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
    ]
    assert cronjob["metadata"]["labels"]["app"] == "parallax"


def test_the_serve_deployment_probes_health_without_a_config() -> None:
    """One daemon, stopped before its replacement starts, probed by plain `parallax health`
    (it finds the daemon by its pointer), with a grace longer than serve's."""
    (deployment,) = [d for d in documents("serve.yaml") if d["kind"] == "Deployment"]
    spec = deployment["spec"]
    assert (spec["replicas"], spec["strategy"]["type"]) == (1, "Recreate")
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert container["livenessProbe"]["exec"]["command"] == ["parallax", "health"]
    assert container["args"][0] == "serve" and "--config" in container["args"]
    assert pod["terminationGracePeriodSeconds"] > Config.model_fields["serve_grace_seconds"].default


def test_compose_serves_with_a_config_and_a_plain_health_check() -> None:
    """Compose names the config once, in the command; its health check is the image's, with no
    --config; the stop grace outlasts serve's; the LogQL label is on the container."""
    (compose,) = documents("compose.yaml")
    service = compose["services"]["parallax"]
    args = build_parser().parse_args(service["command"])
    assert args.command == "serve"
    assert (REPO / "config" / Path(args.config).relative_to("/work/config")).is_file()
    assert "PARALLAX_CONFIG" not in service["environment"]
    assert service["healthcheck"]["test"] == ["CMD", "parallax", "health"]
    minutes = re.fullmatch(r"(\d+)m", service["stop_grace_period"])
    assert minutes and int(minutes[1]) * 60 > Config.model_fields["serve_grace_seconds"].default
    assert service["labels"]["app"] == "parallax"


def test_the_dockerfile_names_its_base_once_and_checks_health_plainly() -> None:
    """Both stages are FROM one ARG (so a digest pin is one edit or one --build-arg), and the
    HEALTHCHECK is plain `parallax health`."""
    lines = (REPO / "Dockerfile").read_text().splitlines()
    froms = [line.split()[1] for line in lines if line.startswith("FROM ")]
    assert froms == ["${PYTHON_IMAGE}", "${PYTHON_IMAGE}"]
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in lines
    (health,) = [line for line in lines if line.startswith("HEALTHCHECK ")]
    assert json.loads(health.partition(" CMD ")[2]) == ["parallax", "health"]


def test_the_installed_package_ships_every_subpackage() -> None:
    """The Dockerfile installs parallax with `pip install .` (no editable install), which
    ships only the packages pyproject.toml lists: every package under runner/ must be one, or
    a command that imports it (`parallax import`) fails in the image."""
    import tomllib

    listed = set(
        tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(init.parent.relative_to(REPO).parts)
        for init in (REPO / "runner").rglob("__init__.py")
    }
    assert found - listed == set()
