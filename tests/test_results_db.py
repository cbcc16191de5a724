"""The results database: every finished run and merge recorded once, after its run dir is
complete, in SQLite by default or in PostgreSQL (`results_url`); an outage costs the run
nothing but an `alert.results_db` line, and the next run or `parallax index` catches up.

Runs go through the command line against the loopback fault server. PostgreSQL is a real
server each test module starts in a temp dir (`initdb`, `pg_ctl`, as RECIPES.md says); where
they are missing the PostgreSQL tests skip, saying so.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from faultserver import FaultServer
from relkit import PARALLAX, RUN_TIMEOUT, SECRET_PREFIX, run_parallax

from runner.config import load_config
from runner.gate import GATE_CLASSES
from runner.history import run_dirs
from runner.results.schema import CASES as CASES_TABLE
from runner.results.schema import MERGES, RUNS
from runner.results.store import in_run_order
from runner.retention import prune

# a test here runs several parallax processes and database servers: bounded as a hung run is,
# not by the 60 s a test gets by default, which a loaded machine's start-ups can pass
pytestmark = pytest.mark.timeout(RUN_TIMEOUT)

N = 4
CASES = [
    {
        "id": f"case-{i:02d}",
        "stratum": ("easy", "medium", "stretch")[i % 3],
        "prompt": f"Say ok {i}.",
        "expect": {"must_include": ["ok"]},
    }
    for i in range(12)
]


def _project(root: Path, server: FaultServer, *, results_url: str | None = None) -> Path:
    """A one-suite project; `runs_dir` from the environment when PARALLAX_RUNS_DIR is set."""
    (root / "snapshots").mkdir(parents=True)
    endpoints = "".join(
        f'[endpoints.{name}]\nkind = "openai-chat"\nbase_url = "{server.url("ok", name)}"\n'
        f'model = "{name}-1"\nretry = {{ attempts = 1 }}\n'
        for name in ("ref", "cand")
    )
    url = f'results_url = "{results_url}"\n' if results_url else ""
    (root / "parallax.toml").write_text(
        'runs_dir = "${PARALLAX_RUNS_DIR:-runs}"\nsnapshots_dir = "snapshots"\n'
        f"{url}{endpoints}"
        '[suites.s]\nfixtures = "cases.jsonl"\nreference = "ref"\ncandidate = "cand"\n',
        "utf-8",
    )
    (root / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in CASES), "utf-8")
    return root


def _run(root: Path, *args: str | Path) -> tuple[int, list[dict[str, Any]], Path]:
    """`parallax run` (or ARGS): its exit code, log lines and the run dir it made."""
    suite = root / "runs" / "s"
    before = set(suite.iterdir()) if suite.is_dir() else set()
    done = run_parallax(*(args or ("run", "--config", "parallax.toml")), cwd=root)
    assert "Traceback" not in done.stderr, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    (made,) = {p for p in suite.iterdir() if p.is_dir()} - before
    return done.returncode, events, made


def _sqlite(path: Path, sql: str) -> list[tuple[Any, ...]]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return db.execute(sql).fetchall()


def _runs(query: Any) -> dict[str, dict[str, Any]]:
    return {
        row[0]: dict(zip(RUNS.names, row, strict=True))
        for row in query(f"SELECT {', '.join(RUNS.names)} FROM runs")
    }


DASHBOARD = Path(__file__).resolve().parent.parent / "deploy" / "grafana-results.json"


def _dashboard_queries() -> list[str]:
    """deploy/grafana-results.json's queries as Grafana sends them, for suite `s`."""
    dashboard = json.loads(DASHBOARD.read_text("utf-8"))
    variables = [v["query"] for v in dashboard["templating"]["list"] if v["name"] == "suite"]
    panels = [t["rawSql"] for p in dashboard["panels"] for t in p["targets"]]
    macros = {"${suite:sqlstring}": "'s'", "$__unixEpochFrom()": "0", "$__unixEpochTo()": "4e9"}
    queries = []
    for sent in (*variables, *panels):
        for macro, value in macros.items():
            sent = sent.replace(macro, value)  # noqa: PLW2901
        queries.append(sent)
    return queries


def _check_dashboard(query: Any) -> None:
    """Every dashboard query runs and finds the suite's nights: pass rates, gates, no cost."""
    suites, rates, gates, cost = (query(sql) for sql in _dashboard_queries())
    assert suites == [("s",)]
    assert rates and {row[1] for row in rates} == {"s reference", "s candidate"}
    assert gates and all(isinstance(row[0], int) for row in gates)
    assert cost == []  # no endpoint has a price: no cost to chart


def _check_run_row(row: dict[str, Any], run_dir: Path) -> None:
    """A runs row says what the run dir's summary says."""
    summary = json.loads((run_dir / "summary.json").read_text())
    assert row["suite"] == "s" and row["exit_code"] == summary["exit_code"]
    assert row["verdict"] == summary["verdict"] and row["cases"] == len(CASES)
    assert {g: row[f"gate_{g}"] for g in GATE_CLASSES} == summary["gate_counts"]
    assert row["ref_pass_rate"] == 1.0 and row["run_dir"] == str(run_dir.absolute())
    assert row["ref_tokens"] == summary["usage"]["sides"]["reference"]["total_tokens"]


def test_sqlite_records_each_run_once_index_rebuilds_it_and_retention_prunes_its_rows(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    root = _project(tmp_path / "p", fault_server)
    db = root / "runs" / "parallax.db"
    code, _, first = _run(root)
    assert code == json.loads((first / "summary.json").read_text())["exit_code"]
    assert db.is_file()
    code, _, second = _run(root)
    query = lambda sql: _sqlite(db, sql)  # noqa: E731
    runs = _runs(query)
    assert set(runs) == {first.name, second.name}
    _check_run_row(runs[first.name], first)
    assert query("SELECT count(*) FROM cases") == [(2 * len(CASES),)]
    case = query(
        "SELECT gate, ref_transport, ref_schema, ref_passed, cand_misses FROM cases "
        f"WHERE run_id = '{first.name}' AND case_id = 'case-03'"
    )
    assert case == [("new_case", "ok", "ok", 1, "")]
    every = {t.name: query(f"SELECT * FROM {t.name} ORDER BY 1, 2") for t in (RUNS, CASES_TABLE)}

    # recorded twice: nothing changes; deleted: `parallax index` brings back the same rows
    done = run_parallax("index", "runs", cwd=root)
    assert done.returncode == 0 and "0 run(s) recorded" in done.stderr, done.stderr
    assert {t: query(f"SELECT * FROM {t} ORDER BY 1, 2") for t in every} == every
    db.unlink()
    done = run_parallax("index", "runs", cwd=root)
    assert done.returncode == 0 and "2 run(s) recorded" in done.stderr, done.stderr
    assert {t: query(f"SELECT * FROM {t} ORDER BY 1, 2") for t in every} == every

    done = run_parallax("history", "--all", "--json", cwd=root)
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    # in the order they ran, even when both started in one second (`run_order`)
    assert [r["run_id"] for r in listed["runs"]] == [first.name, second.name]
    assert listed["notes"] == []
    _check_dashboard(query)
    text = run_parallax("history", "--all", cwd=root).stdout
    assert first.name in text and runs[first.name]["verdict"] in text

    # retention deletes the older run (the latest finished stays): its rows go with it
    loaded = load_config(root / "parallax.toml")
    prune(loaded, now=datetime.now(UTC) + timedelta(days=400))
    assert not first.exists() and second.exists()
    assert set(_runs(query)) == {second.name}
    assert query(f"SELECT count(*) FROM cases WHERE run_id = '{first.name}'") == [(0,)]


def test_an_outage_keeps_the_exit_code_and_files_and_the_next_run_catches_up(
    tmp_path: Path, fault_server: FaultServer, closed_port: int
) -> None:
    """A results_url at a closed port: the run exits as it would, its files are whole, one
    alert.results_db line says where (never the password); with the database back (here the
    SQLite default) the next run records both runs."""
    password = f"{SECRET_PREFIX}dbpass"
    url = f"postgresql://parallax:{password}@127.0.0.1:{closed_port}/results"
    root = _project(tmp_path / "p", fault_server, results_url=url)
    code, events, run_dir = _run(root)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert code == summary["exit_code"] and code in (0, 1) and (run_dir / "report.html").is_file()
    (alert,) = [e for e in events if e["event"] == "alert.results_db"]
    assert alert["results"] == f"postgresql://127.0.0.1:{closed_port}/results"
    assert alert["run_id"] == run_dir.name and alert["error"].startswith("OperationalError")
    assert password not in json.dumps(events)
    assert [e["event"] for e in events][-2:] == ["run.finished", "alert.results_db"]

    # `index` is about the database: there an outage is the command's failure, exit 74
    done = run_parallax("index", "runs", "--config", "parallax.toml", cwd=root)
    assert done.returncode == 74 and done.stderr.count("\n") == 1, done.stderr
    assert password not in done.stderr

    config = root / "parallax.toml"
    config.write_text(config.read_text().replace(f'results_url = "{url}"\n', ""))
    _, events, second = _run(root)
    assert not [e for e in events if e["event"] == "alert.results_db"]
    assert set(_runs(lambda sql: _sqlite(root / "runs" / "parallax.db", sql))) == {
        run_dir.name,
        second.name,
    }


def _four_shards_at_once(root: Path, night: Path) -> list[str]:
    """N shard processes at once, `run --shard env` as the Indexed Job's pods: their logs."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("PARALLAX_")}
    base |= {"NO_PROXY": "127.0.0.1", "PARALLAX_SHARDS": str(N)}
    pods = [
        subprocess.Popen(
            [*PARALLAX, "run", "--config", "parallax.toml", "--shard", "env"],
            cwd=root,
            env=base | {"JOB_COMPLETION_INDEX": str(i), "PARALLAX_RUNS_DIR": str(night)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(N)
    ]
    logs = []
    for pod in pods:
        out, err = pod.communicate(timeout=RUN_TIMEOUT)
        assert pod.returncode in (0, 1), err
        logs.append(out)
    return logs


def test_four_shards_write_one_sqlite_file_at_once(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """Four shard processes on one machine share the night's `parallax.db`: each run one row,
    every case once, no writer refused."""
    root = _project(tmp_path / "p", fault_server)
    night = root / "runs" / "shards" / "night-1"
    for out in _four_shards_at_once(root, night):
        assert "alert.results_db" not in out
    query = lambda sql: _sqlite(night / "parallax.db", sql)  # noqa: E731
    runs = _runs(query)
    assert sorted(r["shard_index"] for r in runs.values()) == list(range(N))
    assert query("SELECT count(DISTINCT case_id), count(*) FROM cases") == [(len(CASES),) * 2]


def _history(root: Path) -> tuple[str, str]:
    """`parallax history --suite s` (text): its stdout and stderr."""
    done = run_parallax("history", "--config", "parallax.toml", "--suite", "s", cwd=root)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return done.stdout, done.stderr


def _run_lines(text: str) -> list[str]:
    """history's row of each run (its start first), the columns' padding aside."""
    return [" ".join(line.split()) for line in text.splitlines() if line.startswith("  20")]


def test_a_suites_history_reads_sqlite_as_the_files_say_its_rows_alone_and_an_outage(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """One suite's text history with `runs/parallax.db` is the one of the run dirs alone;
    with the run dirs gone, the database's rows alone list the same runs (each row as the
    files had it, and where its dir was); a broken database is a note, and the files."""
    root = _project(tmp_path / "p", fault_server)
    db = root / "runs" / "parallax.db"
    _, _, first = _run(root)
    _, _, second = _run(root)
    assert db.is_file()
    from_db, err = _history(root)
    assert err == "" and len(_run_lines(from_db)) == 2
    assert "usage: reference" in from_db  # the lines under a row: from its run dir
    db.rename(db.with_name("kept.db"))
    from_files, err = _history(root)
    assert (from_files, err) == (from_db, "")

    db.with_name("kept.db").rename(db)
    moved = tmp_path / "elsewhere"
    shutil.move(root / "runs" / "s", moved)
    rows_only, err = _history(root)
    assert err == "" and _run_lines(rows_only) == _run_lines(from_files)
    for run_dir in (first, second):
        assert f"from the results database: {run_dir.absolute()}" in rows_only
    assert "usage:" not in rows_only  # what only a run dir holds is not made up
    shutil.move(moved, root / "runs" / "s")

    db.write_bytes(b"not a database, " * 64)
    broken, err = _history(root)
    assert broken == from_files
    assert err == "parallax: runs/parallax.db: DatabaseError; read the run dirs\n", err


def test_runs_of_one_second_sort_by_their_end_from_their_dirs_and_from_their_rows(
    tmp_path: Path,
) -> None:
    """Two runs started in one second: their dirs and their database rows sort the same way,
    by when each finished, whatever their names' random part says."""
    ends = {"20261202T144856Z-8e24d4": ".200+00:00", "20261202T144856Z-7cadbe": ".900+00:00"}
    for name, end in ends.items():
        (tmp_path / name).mkdir()
        summary = {"finished_at": f"2026-12-02T14:48:57{end}"}
        (tmp_path / name / "summary.json").write_text(json.dumps(summary))
    (tmp_path / "20261202T144856Z-000000").mkdir()  # unfinished: no summary, no end yet
    rows = [{"run_id": n, "finished_at": f"2026-12-02T14:48:57{e}"} for n, e in ends.items()]
    rows.append({"run_id": "20261202T144856Z-000000", "finished_at": None})
    oldest_first = ["20261202T144856Z-000000", *ends]
    assert [d.name for d in run_dirs(tmp_path)] == oldest_first
    assert [r["run_id"] for r in in_run_order(reversed(rows))] == oldest_first


def test_a_bad_results_url_is_a_config_error(tmp_path: Path, fault_server: FaultServer) -> None:
    root = _project(tmp_path / "p", fault_server, results_url="mysql://h/db")
    done = run_parallax("run", "--config", "parallax.toml", cwd=root)
    assert done.returncode == 78 and "results_url" in done.stderr, done.stderr


# --- PostgreSQL -------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    """A throwaway PostgreSQL cluster on loopback; its superuser's URL (no database)."""
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.skip("PostgreSQL's initdb/pg_ctl are not installed (Debian: postgresql)")
    user = {"user": "nobody"} if os.getuid() == 0 else {}  # initdb refuses to run as root
    home = Path(tempfile.mkdtemp(prefix="parallax-pg-"))
    if user:
        shutil.chown(home, "nobody")
    data, port = home / "data", _free_port()
    subprocess.run(
        [initdb, "-D", data, "-U", "parallax", "--auth=trust", "-E", "UTF8", "--no-sync"],
        check=True,
        capture_output=True,
        **user,  # type: ignore[arg-type]
    )
    options = f"-k {home} -p {port} -c listen_addresses=127.0.0.1 -c fsync=off"
    subprocess.run(
        [pg_ctl, "-D", data, "-l", home / "log", "-w", "-o", options, "start"],
        check=True,
        capture_output=True,
        **user,  # type: ignore[arg-type]
    )
    try:
        yield f"postgresql://parallax@127.0.0.1:{port}"
    finally:
        subprocess.run(
            [pg_ctl, "-D", data, "-m", "immediate", "stop"],
            check=False,
            capture_output=True,
            **user,  # type: ignore[arg-type]
        )
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def database(postgres: str, request: pytest.FixtureRequest) -> str:
    """A fresh database of the test's own on the module's server."""
    import psycopg

    name = "t_" + "".join(c if c.isalnum() else "_" for c in request.node.name)[:50].lower()
    with psycopg.connect(f"{postgres}/postgres", autocommit=True) as db:
        db.execute(f"DROP DATABASE IF EXISTS {name}")
        db.execute(f"CREATE DATABASE {name}")
    return f"{postgres}/{name}"


def _pg(url: str) -> Any:
    import psycopg

    def query(sql: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(url) as db:
            return db.execute(sql).fetchall()

    return query


def test_postgres_four_shards_and_two_projects_at_once_then_index_after_deletion(
    tmp_path: Path, fault_server: FaultServer, database: str
) -> None:
    """Four shard processes write at once (the Indexed Job's way), and the merge after them;
    then two projects (two hosts' configs) run at the same time into the same database.
    Each run is one row; `index` changes nothing, and after the tables are emptied it
    brings back the same rows."""
    root = _project(tmp_path / "p", fault_server, results_url=database)
    night = root / "runs" / "shards" / "night-1"
    for out in _four_shards_at_once(root, night):
        assert "alert.results_db" not in out
    query = _pg(database)
    shard_rows = _runs(query)
    assert len(shard_rows) == N
    assert sorted(r["shard_index"] for r in shard_rows.values()) == list(range(N))
    assert sum(r["cases"] for r in shard_rows.values()) == len(CASES)
    code, _, merged = _run(root, "merge", "--config", "parallax.toml", night / "s")
    assert code == json.loads((merged / "summary.json").read_text())["exit_code"]
    runs = _runs(query)
    assert runs[merged.name]["merged"] == 1 and runs[merged.name]["shard_index"] is None
    merges = query(f"SELECT {', '.join(MERGES.names)} FROM merges ORDER BY shard_index")
    assert [(m[0], m[1], m[2]) for m in merges] == [(merged.name, i, N) for i in range(N)]
    assert {m[3] for m in merges} == set(shard_rows)

    # two daemons' projects at the same moment, each with its own runs dir
    others = [_project(tmp_path / f"d{i}", fault_server, results_url=database) for i in (1, 2)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARALLAX_")}
    env["NO_PROXY"] = "127.0.0.1"
    both = [
        subprocess.Popen(
            [*PARALLAX, "run", "--config", "parallax.toml"],
            cwd=other,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for other in others
    ]
    for proc in both:
        out, err = proc.communicate(timeout=RUN_TIMEOUT)
        assert proc.returncode in (0, 1) and "alert.results_db" not in out, err
    runs = _runs(query)
    assert len(runs) == N + 1 + 2
    assert query("SELECT count(*) FROM cases") == [(len(CASES) * 4,)]  # shards, merge, two runs
    _check_run_row(runs[merged.name], merged)

    tables = ("runs", "cases", "merges")
    every = {t: query(f"SELECT * FROM {t} ORDER BY 1, 2") for t in tables}
    done = run_parallax("index", "runs", "--config", "parallax.toml", cwd=root)
    assert done.returncode == 0 and "0 run(s) recorded" in done.stderr, done.stderr
    with contextlib.closing(__import__("psycopg").connect(database, autocommit=True)) as db:
        for table in tables:
            db.execute(f"DELETE FROM {table}")
    for project in (root, *others):
        done = run_parallax("index", "runs", "--config", "parallax.toml", cwd=project)
        assert done.returncode == 0, done.stderr
    assert {t: query(f"SELECT * FROM {t} ORDER BY 1, 2") for t in tables} == every

    _check_dashboard(query)
    done = run_parallax("history", "--all", "--json", "--config", "parallax.toml", cwd=root)
    assert len(json.loads(done.stdout)["runs"]) == N + 3  # the fleet's, not only this dir's


def test_a_hand_edited_run_dir_is_indexed_with_nulls_where_its_values_are_no_values(
    tmp_path: Path, fault_server: FaultServer, database: str
) -> None:
    """PostgreSQL checks types where SQLite does not: a summary edited by hand (a text exit
    code, a count past 64 bits, a cost of 1e400) is recorded with nulls there, and the runs
    beside it are recorded too, never refused as a whole."""
    root = _project(tmp_path / "p", fault_server, results_url=database)
    _, _, run_dir = _run(root)
    edited = run_dir.with_name(run_dir.name[:-6] + "edited")
    shutil.copytree(run_dir, edited)
    summary = json.loads((edited / "summary.json").read_text())
    summary["exit_code"] = "x"
    summary["gate_counts"]["new_case"] = 10**30
    summary["usage"]["sides"]["reference"]["cost_usd"] = "1e400"
    summary["served_models"]["candidate"] = [1, 2]
    (edited / "summary.json").write_text(json.dumps(summary))
    # a case id may hold a NUL, which PostgreSQL's text refuses: it is kept as its escape
    verdicts = json.loads((edited / "disagreement.json").read_text())
    first = sorted(verdicts["cases"])[0]
    verdicts["cases"]["nul\x00id"] = verdicts["cases"].pop(first)
    (edited / "disagreement.json").write_text(json.dumps(verdicts))
    done = run_parallax("index", "runs", "--config", "parallax.toml", cwd=root)
    assert done.returncode == 0 and "1 run(s) recorded" in done.stderr, done.stderr
    query = _pg(database)
    row = _runs(query)[edited.name]
    assert row["exit_code"] is None and row["gate_new_case"] is None
    assert row["ref_cost_usd"] is None and row["cand_models"] == ""
    assert row["verdict"] == summary["verdict"] and row["cases"] == len(CASES)
    ids = query(f"SELECT case_id FROM cases WHERE run_id = '{edited.name}' ORDER BY case_id")
    assert sorted(case_id for (case_id,) in ids) == sorted(
        {*verdicts["cases"]} - {"nul\x00id"} | {"nul\\x00id"}
    )


def test_two_daemons_record_into_one_postgres_at_once(
    tmp_path: Path, fault_server: FaultServer, database: str
) -> None:
    """Two `parallax serve` daemons (two hosts' configs), each running its suite at once
    (`--run-now`): each run is recorded from the daemon, one row each, none lost."""
    from relkit import Lines, start_serve

    daemons = []
    for name in ("d1", "d2"):
        root = _project(tmp_path / name, fault_server, results_url=database)
        config = root / "parallax.toml"
        config.write_text(config.read_text() + 'schedule = "0 3 * * *"\n')  # the suite's
        daemons.append(start_serve(config, "--run-now"))
    lines = [Lines(proc) for proc in daemons]
    try:
        for seen in lines:
            seen.until_event("scheduler.job_finished", timeout=RUN_TIMEOUT)
    finally:
        for proc in daemons:
            proc.send_signal(signal.SIGTERM)
        for proc in daemons:
            try:
                proc.wait(timeout=60)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(timeout=10)
                for stream in (proc.stdout, proc.stderr):
                    if stream is not None:
                        stream.close()
    runs = _runs(_pg(database))
    assert len(runs) == 2
    assert {Path(r["run_dir"]).parts[-4] for r in runs.values()} == {"d1", "d2"}
    assert _pg(database)("SELECT count(*) FROM cases") == [(2 * len(CASES),)]


def test_a_suites_history_lists_another_machines_runs_from_postgres_and_survives_an_outage(
    tmp_path: Path, fault_server: FaultServer, database: str, closed_port: int
) -> None:
    """Two machines' projects record into one PostgreSQL database: each one's text history of
    the suite lists the other's run too, as that machine's own history has it (its run dir
    is not here); with only its own runs it is the history of its run dirs; an unreachable
    server is a note, then the run dirs."""
    here = _project(tmp_path / "here", fault_server, results_url=database)
    _, _, mine = _run(here)
    from_db, err = _history(here)
    assert err == "" and len(_run_lines(from_db)) == 1
    config = here / "parallax.toml"
    with_url = config.read_text()
    config.write_text(with_url.replace(f'results_url = "{database}"\n', ""))
    assert _history(here) == (from_db, "")  # no runs/parallax.db: the run dirs

    other = _project(tmp_path / "other", fault_server, results_url=database)
    _, _, there = _run(other)
    config.write_text(with_url)
    fleet, err = _history(here)
    theirs, _ = _history(other)
    assert err == "" and len(_run_lines(fleet)) == 2
    assert _run_lines(fleet) == _run_lines(theirs)  # each machine: its own row, the other's
    assert _run_lines(fleet)[0] == _run_lines(from_db)[0]
    assert f"from the results database: {there.absolute()}" in fleet
    assert f"from the results database: {mine.absolute()}" in theirs

    down = f"postgresql://parallax@127.0.0.1:{closed_port}/results"
    config.write_text(with_url.replace(database, down))
    text, err = _history(here)
    assert text == from_db
    shown = f"postgresql://127.0.0.1:{closed_port}/results"  # the user left out, as in logs
    assert err == f"parallax: {shown}: OperationalError; read the run dirs\n", err
