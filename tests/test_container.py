# ruff: noqa: E501  # the recipe's shell lines stay verbatim from RECIPES.md
"""The real Dockerfile, built and run with podman (no Docker engine here; RECIPES.md's recipe).

Skips with the reason when podman or debootstrap cannot be installed, or without root.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from faultserver import FaultServer

ROOT = Path(__file__).resolve().parent.parent
UNSHARE = ["unshare", "-m", "--propagation", "private"]
WORK = Path(os.environ.get("PARALLAX_CTR_WORK", "/tmp/ctr"))  # the recipe's $W, reused

# ../shared/RECIPES.md, "Build and run the Dockerfile without a Docker engine", step by step:
# a debootstrapped stand-in for python:3.11-slim, an OCI-runtime wrapper without rlimits and
# cgroups, podman in a private mount namespace with /sys/fs/cgroup/unified unmounted.
# One addition: `podman exec` hands crun a --process file, whose rlimits are dropped too.
PREPARE = r"""
set -euo pipefail
W=$1; R=$W/rootfs; mkdir -p $W
if [ ! -x $R/usr/bin/python3 ]; then
  debootstrap --variant=minbase bookworm $R >/dev/null
  cp /etc/resolv.conf $R/etc/resolv.conf
  chroot $R /bin/bash -c 'apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3 python3-venv python3-pip ca-certificates >/dev/null'
fi
mkdir -p $R/usr/local/share/ca-certificates
cp /usr/local/share/ca-certificates/*.crt $R/usr/local/share/ca-certificates/ 2>/dev/null || true
chroot $R update-ca-certificates >/dev/null
tar -C $R -cf - . | podman import - localhost/bookworm-py:local >/dev/null
mkdir -p $W/bin; cat > $W/bin/crun <<'WRAP'
#!/bin/bash
args=("$@"); for ((i=0; i<${#args[@]}; i++)); do
  [[ "${args[$i]}" == "--bundle" || "${args[$i]}" == "-b" ]] && b="${args[$((i+1))]}"
  [[ "${args[$i]}" == --bundle=* ]] && b="${args[$i]#--bundle=}"
  [[ "${args[$i]}" == "--process" ]] && pr="${args[$((i+1))]}"
  [[ "${args[$i]}" == --process=* ]] && pr="${args[$i]#--process=}"
done
[[ -n "${pr:-}" && -f "$pr" ]] && python3 -c 'import json,sys; p=sys.argv[1]; d=json.load(open(p)); d.pop("rlimits",None); json.dump(d,open(p,"w"))' "$pr"
[[ -n "${b:-}" && -f "$b/config.json" ]] && python3 -c 'import json,sys; p=sys.argv[1]; d=json.load(open(p)); d.get("process",{}).pop("rlimits",None); json.dump(d,open(p,"w"))' "$b/config.json"
exec /usr/bin/crun --cgroup-manager=disabled "$@"
WRAP
chmod +x $W/bin/crun
printf '[containers]\ncgroups = "disabled"\n[engine]\nruntime = "crun"\n[engine.runtimes]\ncrun = ["%s/bin/crun"]\n' "$W" > $W/containers.conf
printf 'FROM localhost/bookworm-py:local\nRUN ln -sf /usr/bin/python3 /usr/local/bin/python && ln -sf /usr/bin/pip3 /usr/local/bin/pip && rm -f /usr/lib/python3.11/EXTERNALLY-MANAGED\n' > $W/Dockerfile.standin
"""

# Inside `unshare -m`: build, the one-shot demo, then serve until healthy, then SIGTERM.
# `--format docker` keeps HEALTHCHECK (the OCI image format has no such field).
SCENARIO = r"""
set -euo pipefail
W=$1; CTX=$2; T=$3
umount /sys/fs/cgroup/unified 2>/dev/null || true
KEPT=$(podman images -q --no-trunc -f dangling=true)
podman build -q --network host -f $W/Dockerfile.standin -t docker.io/library/python:3.11-slim $W >/dev/null
podman build -q --format docker --network host -t localhost/parallax:test $CTX >/dev/null
echo "HEALTHCHECK $(podman image inspect --format '{{json .Config.Healthcheck}}' localhost/parallax:test)"
echo "UID $(podman run --rm --network host --entrypoint id localhost/parallax:test -u)"
set +e
podman run --rm --network host \
  -v $CTX/config:/work/config:ro -v $CTX/fixtures:/work/fixtures:ro \
  -v $CTX/snapshots:/work/snapshots:ro -v $T/runs:/work/runs \
  localhost/parallax:test run --config /work/config/demo.toml >$T/oneshot.log 2>$T/oneshot.err
echo "ONESHOT $?"
set -e
# the image's own HEALTHCHECK, run by podman (`--health-interval disable`: no systemd timer
# here; `healthcheck run` runs it on demand), first in a one-shot `run` container whose
# candidate hangs, so it is still running: no daemon ever started there, nothing to check
podman rm -f parallax-oneshot-test parallax-serve-test >/dev/null 2>&1 || true
podman run -d --name parallax-oneshot-test --network host --health-interval disable \
  -v $T/config:/work/config:ro -v $T/fixtures:/work/fixtures:ro -v $T/oneshot-runs:/work/runs \
  localhost/parallax:test run --config /work/config/hanging.toml >/dev/null
echo "ONESHOT_HEALTH $(podman healthcheck run parallax-oneshot-test 2>&1; echo $?)" | tr '\n' ' '; echo
podman rm -f parallax-oneshot-test >/dev/null 2>&1 || true
# then serve, told its config by --config only: health must find it without being told
podman run -d --name parallax-serve-test --network host --health-interval disable \
  -v $T/config:/work/config:ro -v $CTX/fixtures:/work/fixtures:ro \
  -v $CTX/snapshots:/work/snapshots:ro -v $T/serve-runs:/work/runs \
  localhost/parallax:test serve --config /work/config/serve.toml >/dev/null
healthy=1
for _ in $(seq 1 60); do
  if podman healthcheck run parallax-serve-test >/dev/null 2>&1; then healthy=0; break; fi
  sleep 1
done
echo "HEALTH $healthy"
echo "STATUS $(podman inspect --format '{{.State.Health.Status}}' parallax-serve-test)"
podman kill --signal TERM parallax-serve-test >/dev/null
echo "EXIT $(timeout 60 podman wait parallax-serve-test)"
podman logs parallax-serve-test >$T/serve.log 2>$T/serve.err
podman rm -f parallax-serve-test >/dev/null 2>&1 || true
# the images this run left untagged (the last run's, re-tagged, and the build stage) go:
# storage grew by some 0.5 GB a run until a build failed for want of space; untagged images
# that were there before are left alone
for id in $(podman images -q --no-trunc -f dangling=true); do
  case " $KEPT " in *" $id "*) ;; *) podman rmi "$id" >/dev/null 2>&1 || true ;; esac
done
"""

SERVE_CONFIG = """\
runs_dir = "../runs"
snapshots_dir = "../snapshots"
input_root = ".."
serve_grace_seconds = 5
serve_heartbeat_seconds = 1

[endpoints.reference]
kind = "recorded"
model = "ref-frozen-2026-09"
cassette = "../fixtures/cassettes/reference.jsonl"

[endpoints.candidate]
kind = "recorded"
model = "cand-2026-11"
cassette = "../fixtures/cassettes/candidate.jsonl"

[suites.cities]
fixtures = "../fixtures/cities.jsonl"
reference = "reference"
candidate = "candidate"
schedule = "0 3 * * *"
"""


HANGING_CONFIG = """\
runs_dir = "../runs"
input_root = ".."

[endpoints.reference]
kind = "openai-chat"
model = "m"
base_url = "{ok}"

[endpoints.candidate]
kind = "openai-chat"
model = "m"
base_url = "{hang}"
retry = {{ attempts = 1 }}

[suites.hanging]
fixtures = "../fixtures/cases.jsonl"
reference = "reference"
candidate = "candidate"
"""


def _need_podman() -> None:
    """Skip with the reason when the recipe cannot run on this machine."""
    if os.geteuid() != 0:
        pytest.skip("the podman recipe (debootstrap, chroot, unshare -m) needs root")
    missing = [tool for tool in ("podman", "debootstrap", "unshare") if not shutil.which(tool)]
    if missing:
        install = subprocess.run(
            ["apt-get", "install", "-y", "-q", "podman", "debootstrap"],
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
        still = [tool for tool in ("podman", "debootstrap", "unshare") if not shutil.which(tool)]
        if install.returncode != 0 or still:
            pytest.skip(f"cannot install {', '.join(still or missing)}: {install.stderr[-200:]}")


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_image_runs_the_one_shot_demo_and_serves_until_sigterm(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """Built from the real Dockerfile (`--format docker`, which keeps HEALTHCHECK): non-root, a
    complete demo run dir; the image's health check passes in a one-shot container and in
    `serve --config F`; SIGTERM stops serve with exit 0."""
    _need_podman()
    # the host's TMPDIR (conftest gives each test its own) is no path inside the chroot
    host = {k: v for k, v in os.environ.items() if k != "TMPDIR"}
    prepared = subprocess.run(
        ["bash", "-c", PREPARE, "prepare", str(WORK)],
        env=host,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    if prepared.returncode != 0:
        pytest.skip(f"could not make the stand-in base image: {prepared.stderr[-300:]}")
    for name in ("runs", "serve-runs", "oneshot-runs", "config", "fixtures"):
        (tmp_path / name).mkdir()
        (tmp_path / name).chmod(0o777)  # the image's user (uid 10001) writes the volumes
    (tmp_path / "config" / "serve.toml").write_text(SERVE_CONFIG)  # not the image's default
    (tmp_path / "config" / "hanging.toml").write_text(
        HANGING_CONFIG.format(ok=fault_server.url("ok"), hang=fault_server.url("hang"))
    )
    (tmp_path / "fixtures" / "cases.jsonl").write_text(
        json.dumps({"id": "a", "prompt": "a", "expect": {"must_include": ["a"]}}) + "\n"
    )
    env = {**host, "CONTAINERS_CONF": str(WORK / "containers.conf")}
    done = subprocess.run(
        [*UNSHARE, "bash", "-c", SCENARIO, "scenario", str(WORK), str(ROOT), str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=1100,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)

    assert "parallax" in report["HEALTHCHECK"], done.stdout
    assert "health" in report["HEALTHCHECK"]
    assert report["UID"] == "10001"
    oneshot_err = (tmp_path / "oneshot.err").read_text()
    assert report["ONESHOT"] in {"0", "1", "2", "3"}, oneshot_err[-2000:]
    run_dirs = sorted(p for p in (tmp_path / "runs").glob("*/*") if p.is_dir())
    demo_suites = tomllib.loads((ROOT / "config" / "demo.toml").read_text())["suites"]
    assert sorted(d.parent.name for d in run_dirs) == sorted(demo_suites)  # one run per suite
    for run_dir in run_dirs:
        assert json.loads((run_dir / "manifest.json").read_text())["finished_at"] is not None
        assert (run_dir / "summary.json").is_file()
        assert run_dir.stat().st_uid == 10001

    oneshot_health = report["ONESHOT_HEALTH"].split()
    assert oneshot_health[-1] == "0", report["ONESHOT_HEALTH"]
    assert report["HEALTH"] == "0", (tmp_path / "serve.log").read_text()[-2000:]
    assert report["STATUS"] == "healthy"
    assert report["EXIT"] == "0"
    last = json.loads((tmp_path / "serve.log").read_text().splitlines()[-1])
    assert last["event"] == "scheduler.stopped"
