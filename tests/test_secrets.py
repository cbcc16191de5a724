"""Secrets stay out of everything parallax writes or says, even when an upstream echoes them.

The session-wide half of this check is in conftest.py: at the end of the test session every
file under pytest's temporary directories (except the configs tests wrote as input), every
captured output and every ParallaxError message is searched for the test secrets.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from faultserver import FaultServer
from relkit import (
    PARALLAX,
    SECRET_PREFIX,
    endpoint_toml,
    record,
    suite_toml,
    write_cases,
    write_config,
)

KEY = f"{SECRET_PREFIX}reflected-7f3a9c21"


@pytest.mark.slow
def test_a_key_echoed_back_by_the_server_never_reaches_a_file_or_a_log(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """An upstream that reflects Authorization into its body and headers leaks nothing to runs/."""
    prompts = write_cases(tmp_path, 4)
    fault_server.prompt_modes[prompts[0]] = "reflect"
    fault_server.prompt_modes[prompts[1]] = "reflect:503"
    fault_server.prompt_modes[prompts[2]] = "reflect:200"
    endpoints = "".join(
        endpoint_toml(side, fault_server.url("ok", side), key_env="PARALLEAK_KEY")
        for side in ("ref", "cand")
    )
    config = write_config(tmp_path, endpoints, suite_toml("s"))
    env = {**os.environ, "PARALLEAK_KEY": KEY}

    done = subprocess.run(
        [*PARALLAX, "run", "--config", str(config), "--junit", str(tmp_path / "runs" / "j.xml")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    run_dir = next((tmp_path / "runs" / "s").glob("2*"))
    report = subprocess.run(
        [*PARALLAX, "report", str(run_dir)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )

    assert done.returncode == 2, done.stderr
    assert {r.headers["authorization"] for r in fault_server.received()} == {f"Bearer {KEY}"}
    assert "rejected credentials" in (run_dir / "raw.jsonl").read_text()
    files = [p for p in (tmp_path / "runs").rglob("*") if p.is_file()]
    assert len(files) >= 6
    leaks = [p for p in files if KEY.encode() in p.read_bytes()]
    assert not leaks
    assert KEY not in done.stdout + done.stderr + report.stdout + report.stderr
    record("secrets", files_checked=len(files), leaks=0)
