"""Shared fixtures: the anyio backend, the loopback fault server (tests/faultserver.py) and the
llmock servers (tests/llmockkit.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import structlog
from faultserver import BacklogFull, FaultServer, backlog_full, refused_port
from hypothesis import HealthCheck, settings
from llmockkit import LlmockPool, LlmockServer, require_llmock

# the `browser` fixture: Debian's chromium through Playwright, once per module
pytest_plugins = ("browserkit",)

# How long an example or its data takes is the machine's business, not a property under test:
# no per-example deadline, and slow data generation is no failed health check.
settings.register_profile("parallax", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("parallax")


@pytest.fixture(autouse=True)
def _fresh_structlog() -> Iterator[None]:
    """A test that calls `main()` in-process configures structlog onto its captured stdout,
    which is closed after it: every later test would log into a closed file."""
    yield
    structlog.reset_defaults()


@pytest.fixture(autouse=True)
def _own_tmpdir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test, and every child it starts with this environment, gets its own TMPDIR: a
    daemon writes the pointer `parallax health` follows there (runner.health), and tests
    running side by side must not find each other's daemons, nor the machine's."""
    monkeypatch.setenv("TMPDIR", str(tmp_path_factory.mktemp("tmpdir")))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def fault_server() -> Iterator[FaultServer]:
    """A fresh server per test, so recorded requests and flaky counters never leak across."""
    with FaultServer() as server:
        yield server


@pytest.fixture
def closed_port() -> int:
    """A loopback port with no listener: connecting is refused."""
    return refused_port()


@pytest.fixture
def full_backlog() -> Iterator[BacklogFull]:
    """A listener that drops SYNs (full accept queue): connecting times out."""
    with backlog_full() as full:
        if not full.works:
            pytest.skip("kernel completed connects to a full backlog; no connect timeout here")
        yield full


@pytest.fixture(scope="session")
def llmock_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlmockPool]:
    """The session's llmock servers (tests/llmockkit.py), one per set of flags, started on first
    use and stopped at the end; skips where llmock is not installed."""
    require_llmock()
    pool = LlmockPool(tmp_path_factory.mktemp("llmock"))
    yield pool
    pool.close()


@pytest.fixture
def llmock(llmock_pool: LlmockPool) -> LlmockServer:
    """The default llmock server (tool_mode auto, varied replies), nothing queued or recorded."""
    return llmock_pool.get()


# --- session-wide: the secrets check and the reliability figures (tests/relkit.py) ----------
#
# Test secrets are recognisable (relkit.SECRET_PREFIX, and the older sk-test-/sk-live- keys,
# in any case: relkit.SECRET), as themselves or in a spelling that decodes back to them (a JSON
# or HTML escape, percent-encoding, base64: relkit.holds_test_secret).
# At the end of the session every file under this session's pytest temp dirs (except *.toml:
# configs are test *inputs*, some deliberately holding a key parallax must refuse), every
# captured stdout/stderr/log section and every ParallaxError message raised in-process is
# searched for them; a hit fails the session. The figures tests record are printed in the
# terminal summary and written to $PARALLAX_RELIABILITY_JSON (default <basetemp>/reliability.json).

import json  # noqa: E402 - appended section, kept apart from the fixtures above
import os  # noqa: E402
from pathlib import Path  # noqa: E402

import relkit  # noqa: E402

from runner.errors import ParallaxError  # noqa: E402

_holds_secret = relkit.holds_test_secret
_session: dict[str, object] = {"basetemp": None, "leaks": [], "outputs": 0, "messages": []}


def pytest_configure(config: pytest.Config) -> None:
    """Record every ParallaxError message raised in this process, for the secrets check."""
    original = ParallaxError.__init__
    if getattr(original, "_recorded", False):
        return
    messages: list[str] = _session["messages"]  # type: ignore[assignment]

    def recording(self: ParallaxError, message: str) -> None:
        messages.append(message)
        original(self, message)

    recording._recorded = True  # type: ignore[attr-defined]
    ParallaxError.__init__ = recording  # type: ignore[method-assign]


@pytest.fixture(scope="session", autouse=True)
def _remember_basetemp(tmp_path_factory: pytest.TempPathFactory) -> None:
    _session["basetemp"] = tmp_path_factory.getbasetemp()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    leaks: list[str] = _session["leaks"]  # type: ignore[assignment]
    for name, content in report.sections:
        _session["outputs"] = int(_session["outputs"]) + 1  # type: ignore[call-overload]
        if _holds_secret(content.encode("utf-8", "replace")):
            leaks.append(f"{report.nodeid}: {name}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    leaks: list[str] = _session["leaks"]  # type: ignore[assignment]
    messages: list[str] = _session["messages"]  # type: ignore[assignment]
    base = _session["basetemp"]
    files = 0
    if isinstance(base, Path) and base.is_dir():
        for path in base.rglob("*"):
            if path.is_file() and not path.is_symlink() and path.suffix != ".toml":
                files += 1
                if _holds_secret(path.read_bytes()):
                    leaks.append(str(path))
    leaks += [f"ParallaxError: {m[:120]}" for m in messages if _holds_secret(m.encode())]
    relkit.record(
        "secrets",
        session_files_scanned=files,
        session_outputs_scanned=int(_session["outputs"]),  # type: ignore[call-overload]
        session_error_messages_scanned=len(messages),
        session_leaks=len(leaks),
    )
    if leaks:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if isinstance(base, Path) and relkit.FIGURES:
        out = Path(os.environ.get("PARALLAX_RELIABILITY_JSON") or base / "reliability.json")
        figures = {k: dict(sorted(v.items())) for k, v in sorted(relkit.FIGURES.items())}
        out.write_text(json.dumps(figures, indent=2) + "\n")
        _session["figures_file"] = out


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    leaks: list[str] = _session["leaks"]  # type: ignore[assignment]
    if leaks:
        terminalreporter.section("SECRET LEAKS", red=True)
        for leak in leaks:
            terminalreporter.write_line(f"test secret found in {leak}")
    if relkit.FIGURES:
        terminalreporter.section("reliability figures")
        for section, counts in sorted(relkit.FIGURES.items()):
            shown = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
            terminalreporter.write_line(f"{section}: {shown}")
        if "figures_file" in _session:
            terminalreporter.write_line(f"written to {_session['figures_file']}")
