"""`parallax health` finds the daemon it checks without being told its config twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from relkit import PARALLAX, Lines, start_serve

from runner.errors import UsageError
from runner.health import daemon_health, pointer_dir, pointer_path, write_pointer

IMAGE_DEFAULT = "/work/config/parallax.toml"  # the Dockerfile's PARALLAX_CONFIG, absent here


def write_config(folder: Path, name: str = "serve.toml", runs: str = "runs") -> Path:
    """A config with one scheduled suite whose fire is hours away: the daemon only waits."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cases.jsonl").write_text('{"id": "a", "prompt": "a", "expect": {}}\n')
    endpoint = 'kind = "openai-chat"\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\n'
    path = folder / name
    path.write_text(
        f'runs_dir = "{runs}"\nserve_heartbeat_seconds = 0.2\n'
        f"[endpoints.ref]\n{endpoint}[endpoints.cand]\n{endpoint}"
        '[suites.nightly]\nfixtures = "cases.jsonl"\nreference = "ref"\ncandidate = "cand"\n'
        'schedule = "0 3 * * *"\n'
    )
    return path


def health(*args: str, cwd: Path) -> tuple[int, dict[str, Any]]:
    """`parallax health` as a probe runs it: in another directory, with the image's default
    PARALLAX_CONFIG naming a file that is not there."""
    done = subprocess.run(
        [*PARALLAX, "health", *args],
        cwd=cwd,
        env={**os.environ, "PARALLAX_CONFIG": IMAGE_DEFAULT},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


class Serving:
    """A real `parallax serve --config C` child, started and waited for, always ended."""

    def __init__(self, config: Path) -> None:
        self.proc = start_serve(config)
        self.lines = Lines(self.proc)

    def __enter__(self) -> Serving:
        self.started = self.lines.until_event("scheduler.started", timeout=60)
        return self

    def stop(self, signum: signal.Signals) -> int:
        self.proc.send_signal(signum)
        return self.proc.wait(timeout=60)

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.mark.slow
def test_health_without_config_checks_the_daemon_started_with_another_config(
    tmp_path: Path,
) -> None:
    """`serve --config elsewhere/serve.toml`, then `health` with no --config from another
    directory: it checks that daemon (exit 0), and once it stopped it reads unhealthy."""
    config = write_config(tmp_path / "elsewhere")
    probe_cwd = tmp_path / "probe"
    probe_cwd.mkdir()
    with Serving(config) as daemon:
        code, report = health(cwd=probe_cwd)
        assert (code, report["state"], report["config"]) == (0, "running", str(config))
        assert report["heartbeat"] == str(config.parent / "runs" / ".parallax-serve.json")
        assert daemon.started["pointer"] == str(pointer_path())
        assert daemon.stop(signal.SIGTERM) == 0
    code, report = health(cwd=probe_cwd)
    assert (code, report["reason"]) == (1, "scheduler is stopped")


@pytest.mark.slow
def test_a_daemon_that_started_and_died_reads_unhealthy(tmp_path: Path) -> None:
    """A daemon killed outright leaves a fresh-looking heartbeat: its pid being gone fails it."""
    config = write_config(tmp_path / "cfg", name="nightly-serve.toml")
    with Serving(config) as daemon:
        assert health(cwd=tmp_path)[0] == 0
        daemon.stop(signal.SIGKILL)
        code, report = health(cwd=tmp_path)
    assert code == 1
    assert report["reason"] == f"daemon process {daemon.proc.pid} is gone"


@pytest.mark.slow
def test_health_does_not_read_the_config_a_daemon_started_with(tmp_path: Path) -> None:
    """A config broken after the daemon started fails no probe of that daemon, with or without
    --config; a broken config no daemon started with still exits 78."""
    config = write_config(tmp_path / "cfg")
    with Serving(config):
        config.write_text("this is [not toml\n")
        assert health(cwd=tmp_path)[0] == 0
        assert health("--config", str(config), cwd=tmp_path)[0] == 0
        other = tmp_path / "other.toml"
        other.write_text("this is [not toml\n")
        refused = subprocess.run(
            [*PARALLAX, "health", "--config", str(other)],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
    assert refused.returncode == 78, refused.stderr
    assert refused.stderr.count("\n") == 1 and "other.toml" in refused.stderr


@pytest.mark.slow
def test_a_daemon_refused_by_the_lock_leaves_the_pointer_to_the_first(tmp_path: Path) -> None:
    """A second daemon on the same runs dir exits 64 before it writes the pointer: health goes
    on checking the first one."""
    shared = tmp_path / "runs"
    first = write_config(tmp_path / "a", runs=str(shared))
    second = write_config(tmp_path / "b", runs=str(shared))
    with Serving(first):
        refused = subprocess.run(
            [*PARALLAX, "serve", "--config", str(second)],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        code, report = health(cwd=tmp_path)
    assert refused.returncode == 64, refused.stderr
    assert (code, report["config"]) == (0, str(first))


def test_health_with_no_daemon_ever_started_here_has_nothing_to_check(tmp_path: Path) -> None:
    """A one-shot container's HEALTHCHECK: no pointer, so exit 0 and say nothing was checked."""
    code, report = health(cwd=tmp_path)
    assert code == 0
    assert report == {
        "healthy": True,
        "checked": False,
        "pointer": str(pointer_path()),
        "note": "no daemon was started here (no pointer); nothing to check",
    }


def test_health_with_config_and_no_daemon_is_unhealthy(tmp_path: Path) -> None:
    """Naming a config asks about its daemon: without a heartbeat that is exit 1, not 0."""
    code, report = health("--config", str(write_config(tmp_path)), cwd=tmp_path)
    assert (code, report["reason"]) == (
        1,
        "no heartbeat file: is `parallax serve` running with this config?",
    )


@pytest.mark.parametrize("spoil", ["open", "not-a-dir", "garbage", "relative"])
def test_a_pointer_that_cannot_be_trusted_reads_unhealthy(tmp_path: Path, spoil: str) -> None:
    """A pointer dir open to other users, a file in its place, or a pointer that names no
    absolute heartbeat is unhealthy with a reason: never "nothing to check"."""
    write_pointer(tmp_path / "runs" / ".parallax-serve.json", tmp_path / "c.toml")
    folder = pointer_dir()
    if spoil == "open":
        folder.chmod(0o755)
    elif spoil == "not-a-dir":
        pointer_path().unlink()
        folder.rmdir()
        folder.write_text("{}")
    else:
        pointer_path().write_text("[[[" if spoil == "garbage" else '{"heartbeat": "runs/hb"}')
    report = daemon_health(None)
    assert not report["healthy"]
    assert report["reason"].startswith("unreadable pointer: ")


def test_a_pointer_dir_another_user_owns_is_refused(tmp_path: Path) -> None:
    """Another user who made the pointer dir first could aim `health` anywhere: `serve` refuses
    to write there (exit 64) and `health` reads it unhealthy."""
    if os.geteuid() != 0:
        pytest.skip("handing a directory to another uid needs root")
    folder = pointer_dir()
    folder.mkdir(mode=0o700)
    os.chown(folder, 12345, 12345)
    with pytest.raises(UsageError, match="belongs to uid 12345"):
        write_pointer(tmp_path / "hb.json", tmp_path / "c.toml")
    assert "belongs to uid 12345" in daemon_health(None)["reason"]


def test_serve_without_a_writable_tmpdir_refuses_to_start(tmp_path: Path) -> None:
    """A daemon `health` could not find would read as "nothing to check" however stuck: it
    does not start, and says what to give it."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    done = subprocess.run(
        [*PARALLAX, "serve", "--config", str(write_config(tmp_path / "cfg"))],
        env={**os.environ, "TMPDIR": str(blocker)},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 64
    assert done.stderr.count("\n") == 1
    assert "cannot write the daemon pointer" in done.stderr and "writable TMPDIR" in done.stderr
