"""Usage, cost and latency per side: the fold, the price math, the config, and real runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from llmockkit import LlmockServer, Protocol
from relkit import run_parallax
from reportkit import page_cases

from runner.config import Price, load_config
from runner.cost.usage import Call, UsageFold, call_of, cost_usd, percentiles, tokens_of
from runner.errors import ConfigError
from runner.gate import Folds
from runner.model import Outcome
from runner.protocols import Kind
from runner.protocols.wire import Tokens


def _outcome(side: str = "candidate", **fields: Any) -> Outcome:
    row: dict[str, Any] = {
        "case_id": "c1",
        "side": side,
        "fixture_sha": "f",
        "transport": "ok",
        "schema": "ok",
        "task_score": 1.0,
        "elapsed_ms": 100,
    }
    return Outcome.from_json(row | fields)


def test_openai_and_anthropic_usage_normalise_to_prompt_completion_and_cached() -> None:
    """OpenAI's cached_tokens and Anthropic's cache reads are both cached prompt tokens."""
    openai = {
        "prompt_tokens": 120,
        "completion_tokens": 30,
        "prompt_tokens_details": {"cached_tokens": 100},
    }
    anthropic = {"input_tokens": 20, "output_tokens": 30, "cache_read_input_tokens": 100}
    assert tokens_of(Kind.OPENAI_CHAT, openai) == Tokens(120, 30, 100)
    assert tokens_of(Kind.ANTHROPIC_MESSAGES, anthropic) == Tokens(120, 30, 100)
    plain = {"input_tokens": 7, "output_tokens": 3}
    assert tokens_of(Kind.ANTHROPIC_MESSAGES, plain) == Tokens(7, 3, 0)


def test_responses_and_gemini_usage_normalise_to_prompt_completion_and_cached() -> None:
    """The Responses API counts cached tokens inside input_tokens, as chat does; Gemini
    counts its cached content inside the prompt and bills thoughts as output, and a count it
    leaves out (its JSON omits zeros) is 0."""
    responses = {
        "input_tokens": 120,
        "input_tokens_details": {"cached_tokens": 100},
        "output_tokens": 30,
        "output_tokens_details": {"reasoning_tokens": 10},
        "total_tokens": 150,
    }
    assert tokens_of(Kind.OPENAI_RESPONSES, responses) == Tokens(120, 30, 100)
    plain = {"input_tokens": 7, "output_tokens": 3}
    assert tokens_of(Kind.OPENAI_RESPONSES, plain) == Tokens(7, 3, 0)
    gemini = {
        "promptTokenCount": 110,
        "toolUsePromptTokenCount": 10,
        "candidatesTokenCount": 20,
        "thoughtsTokenCount": 10,
        "cachedContentTokenCount": 100,
        "totalTokenCount": 150,
    }
    assert tokens_of(Kind.GEMINI, gemini) == Tokens(120, 30, 100)
    assert tokens_of(Kind.GEMINI, {"promptTokenCount": 7}) == Tokens(7, 0, 0)


@pytest.mark.parametrize(
    ("kind", "usage"),
    [
        (Kind.GEMINI, {"promptTokenCount": "7"}),
        (Kind.GEMINI, {"promptTokenCount": 7, "candidatesTokenCount": -1}),
        (Kind.GEMINI, {"promptTokenCount": 7, "cachedContentTokenCount": 10**12}),
        (Kind.GEMINI, {"candidatesTokenCount": 3}),  # no prompt count: no usage
        (
            Kind.OPENAI_RESPONSES,
            {
                "input_tokens": 7,
                "output_tokens": 3,
                "input_tokens_details": {"cached_tokens": 10**12},
            },
        ),
        (Kind.OPENAI_RESPONSES, {"input_tokens_details": {"cached_tokens": 1}}),
    ],
)
def test_responses_and_gemini_counts_that_are_no_counts_are_no_usage(
    kind: Kind, usage: Any
) -> None:
    assert tokens_of(kind, usage) is None


@pytest.mark.parametrize("kind", list(Kind))
@pytest.mark.parametrize(
    "usage",
    [None, {}, {"prompt_tokens": 5}, {"input_tokens": "5", "output_tokens": 1}, {"x": 1}],
)
def test_usage_without_both_counts_is_no_usage(kind: Kind, usage: Any) -> None:
    """A reply that does not say both counts as numbers has unknown usage, in any protocol."""
    assert tokens_of(kind, usage) is None


SHAPES = [
    (Kind.OPENAI_CHAT, {"prompt_tokens": 9, "completion_tokens": 2}),
    (
        Kind.OPENAI_RESPONSES,
        {"input_tokens": 9, "output_tokens": 2, "input_tokens_details": {"cached_tokens": 4}},
    ),
    (
        Kind.ANTHROPIC_MESSAGES,
        {"input_tokens": 5, "output_tokens": 2, "cache_read_input_tokens": 4},
    ),
    (Kind.GEMINI, {"promptTokenCount": 9, "candidatesTokenCount": 2}),
]


@pytest.mark.parametrize(("kind", "usage"), SHAPES)
def test_an_http_json_api_s_usage_is_read_in_whichever_known_shape_it_has(
    kind: Kind, usage: dict[str, Any]
) -> None:
    """An API of its own may report usage as any provider does: read as that provider's."""
    assert tokens_of(Kind.HTTP_JSON, usage) == tokens_of(kind, usage) is not None


def test_a_kind_that_is_no_protocol_reads_no_usage() -> None:
    assert tokens_of("recorded", {"prompt_tokens": 1, "completion_tokens": 1}) is None


def test_a_call_without_usage_counts_as_unknown_cost_never_zero() -> None:
    """Cost is summed over the calls that said their usage; the rest are counted unknown."""
    fold = UsageFold()
    usage = {"prompt_tokens": 10, "completion_tokens": 5}
    fold.add("candidate", call_of(_outcome(usage=usage), Kind.OPENAI_CHAT))
    fold.add("candidate", call_of(_outcome(transport="timeout", task_score=None), Kind.OPENAI_CHAT))
    price = Price(input_per_mtok=1.0, output_per_mtok=2.0)
    block = fold.summary({"candidate": price}, ("reference", "candidate"), stratified=False)
    cand = block["sides"]["candidate"]
    assert (cand["calls"], cand["calls_with_usage"], cand["cost_unknown_calls"]) == (2, 1, 1)
    assert cand["cost_usd"] == 0.00002
    assert block["sides"]["reference"]["calls"] == 0
    assert block["ratios"]["overall"]["cost_usd"] is None  # the reference has nothing


def test_an_unpriced_side_has_no_cost_and_every_call_unknown() -> None:
    """Without a price the cost is null, not zero, and no call's cost is known."""
    fold = UsageFold()
    row = _outcome("reference", usage={"input_tokens": 3, "output_tokens": 4})
    fold.add("reference", call_of(row, Kind.ANTHROPIC_MESSAGES))
    ref = fold.summary({}, ("reference", "candidate"), stratified=False)["sides"]["reference"]
    assert (ref["cost_usd"], ref["cost_unknown_calls"], ref["total_tokens"]) == (None, 1, 7)


def test_price_math_is_exact_to_the_cent_on_large_totals() -> None:
    """Integer token totals priced once: 1,234,567 cached of 9,876,543 prompt tokens."""
    price = Price(input_per_mtok=2.5, output_per_mtok=10.0, cached_input_per_mtok=1.25)
    # (8,641,976 * 2.5 + 1,234,567 * 1.25 + 3,333,333 * 10) / 1e6 = 21.60494 + 1.54320875 + 33.33333
    assert cost_usd(9_876_543, 3_333_333, 1_234_567, price) == 56.481479
    assert round(cost_usd(9_876_543, 3_333_333, 1_234_567, price), 2) == 56.48
    # cached tokens cost the input rate when no cached rate is set
    assert cost_usd(1_000_000, 0, 500_000, Price(input_per_mtok=3, output_per_mtok=15)) == 3.0


def test_percentiles_are_nearest_rank_on_known_data() -> None:
    """p50/p90/p99 of 1..100 are 50, 90, 99; of one value, that value; of none, None."""
    assert percentiles(list(range(1, 101))) == {"p50": 50, "p90": 90, "p99": 99}
    assert percentiles(list(range(10, 0, -1))) == {"p50": 5, "p90": 9, "p99": 10}
    assert percentiles([7]) == {"p50": 7, "p90": 7, "p99": 7}
    assert percentiles([]) is None


def test_latency_counts_admitted_calls_only_and_ttft_streams_only() -> None:
    """A schema miss has no latency in the percentiles; a stream's ttft_ms does count."""
    fold = UsageFold()
    for row in (
        _outcome(elapsed_ms=100, ttft_ms=40),
        _outcome(elapsed_ms=300),
        _outcome(elapsed_ms=9_000, schema="not_json", task_score=None),
    ):
        fold.add("candidate", call_of(row, Kind.OPENAI_CHAT))
    cand = fold.summary({}, ("reference", "candidate"), stratified=False)["sides"]["candidate"]
    assert cand["latency_ms"] == {"p50": 100, "p90": 300, "p99": 300}
    assert cand["ttft_ms"] == {"p50": 40, "p90": 40, "p99": 40}


def test_strata_and_ratios_are_per_stratum_and_overall() -> None:
    """Each stratum has its own block, and candidate/reference ratios per stratum."""
    fold = UsageFold()
    usage = {"prompt_tokens": 100, "completion_tokens": 0}
    for side, stratum, ms in (
        ("reference", "easy", 100),
        ("candidate", "easy", 150),
        ("reference", "hard", 200),
        ("candidate", "hard", 200),
    ):
        fold.add(side, Call(stratum, tokens_of(Kind.OPENAI_CHAT, usage), ms, None))
    price = Price(input_per_mtok=1, output_per_mtok=1)
    prices = {"reference": price, "candidate": Price(input_per_mtok=3, output_per_mtok=3)}
    out = fold.summary(prices, ("reference", "candidate"), stratified=True)
    assert out["sides"]["candidate"]["strata"]["easy"]["latency_ms"]["p50"] == 150
    assert out["ratios"]["strata"]["easy"]["latency_p50"] == 1.5
    assert out["ratios"]["strata"]["hard"]["latency_p50"] == 1.0
    assert out["ratios"]["overall"]["cost_usd"] == 3.0
    assert out["ratios"]["overall"]["ttft_p50"] is None


def test_folds_count_a_second_row_for_one_key_once() -> None:
    """The usage fold keeps what the gate keeps: the first row of a (case, side, sample)."""
    from runner.fixtures.refs import CaseRef

    folds = Folds(1, kinds={"candidate": Kind.OPENAI_CHAT})
    ref = CaseRef("c1", None, "f", 1, 0, 0, b"")
    row = _outcome(usage={"prompt_tokens": 1, "completion_tokens": 1})
    folds.add(row, ref)
    folds.add(row, ref)
    out = folds.usage.summary({}, ("reference", "candidate"), stratified=False)
    assert (out["sides"]["candidate"]["calls"], out["sides"]["candidate"]["total_tokens"]) == (1, 2)


def test_folds_read_each_side_s_usage_by_its_endpoint_s_protocol() -> None:
    """A row keeps its usage as the reply said it: the gate reads it by its side's protocol,
    and a side whose protocol it was not told reads none."""
    from runner.fixtures.refs import CaseRef

    folds = Folds(1, kinds={"reference": Kind.GEMINI, "candidate": Kind.OPENAI_CHAT})
    for n, (_, usage) in enumerate(SHAPES):
        ref = CaseRef(f"c{n}", None, "f", n + 1, 0, 0, b"")
        for side in ("reference", "candidate", "noise"):
            folds.add(_outcome(side, case_id=f"c{n}", usage=usage), ref)
    out = folds.usage.summary({}, ("reference", "candidate"), stratified=False)["sides"]
    said = {side: (block["calls"], block["calls_with_usage"]) for side, block in out.items()}
    assert said == {"reference": (4, 1), "candidate": (4, 1), "noise": (4, 0)}
    assert (out["reference"]["prompt_tokens"], out["candidate"]["prompt_tokens"]) == (9, 9)


def test_a_price_table_without_output_is_refused_naming_the_key(tmp_path: Path) -> None:
    """price needs input_per_mtok and output_per_mtok; a negative rate is refused too."""
    for price, key in (
        ("{ input_per_mtok = 1 }", "price.output_per_mtok"),
        ("{ input_per_mtok = 1, output_per_mtok = -2 }", "price.output_per_mtok"),
    ):
        path = tmp_path / "p.toml"
        path.write_text(
            f'[endpoints.e]\nkind = "recorded"\nprice = {price}\n'
            '[suites.s]\nfixtures = "f.jsonl"\nreference = "e"\ncandidate = "e"\n',
            encoding="utf-8",
        )
        with pytest.raises(ConfigError) as raised:
            load_config(path)
        assert key in str(raised.value)
        assert raised.value.exit_code == 78


def _summary(root: Path) -> dict[str, Any]:
    (path,) = root.glob("runs/s/*/summary.json")
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


CASES = [
    {"case_id": "a", "prompt": "Say hi.", "expect": {}},
    {"case_id": "b", "prompt": "Say bye.", "expect": {}},
]
TEXT_CASES = [  # free text, scored: llmock's replies are admitted, so their latency counts
    {"id": "a", "prompt": "Say hi.", "must_not_include": ["zzqq"]},
    {"id": "b", "prompt": "Say bye.", "must_not_include": ["zzqq"]},
]


def test_a_recorded_run_sums_cassette_usage_and_prices_each_side(tmp_path: Path) -> None:
    """Two prices, known usage: the summary's tokens, cost, ratio and stderr line follow."""
    (tmp_path / "f.jsonl").write_text("".join(json.dumps(c) + "\n" for c in CASES), "utf-8")
    usage = {"a": (1000, 200), "b": (3000, 600)}
    for name, scale in (("ref", 1), ("cand", 2)):
        (tmp_path / f"{name}.jsonl").write_text(
            "".join(
                json.dumps(
                    {
                        "case_id": case,
                        "completion": "{}",
                        "usage": {"prompt_tokens": p * scale, "completion_tokens": c * scale},
                    }
                )
                + "\n"
                for case, (p, c) in usage.items()
            ),
            "utf-8",
        )
    (tmp_path / "parallax.toml").write_text(
        'runs_dir = "runs"\nsnapshots_dir = "snapshots"\n'
        '[endpoints.ref]\nkind = "recorded"\ncassette = "ref.jsonl"\n'
        "price = { input_per_mtok = 0.5, output_per_mtok = 1.5 }\n"
        '[endpoints.cand]\nkind = "recorded"\ncassette = "cand.jsonl"\n'
        "price = { input_per_mtok = 3, output_per_mtok = 15 }\n"
        '[suites.s]\nfixtures = "f.jsonl"\nreference = "ref"\ncandidate = "cand"\n',
        "utf-8",
    )
    done = run_parallax("run", "--config", "parallax.toml", cwd=tmp_path)
    assert done.returncode in (0, 1), done.stderr
    sides = _summary(tmp_path)["usage"]["sides"]
    ref, cand = sides["reference"], sides["candidate"]
    assert (ref["prompt_tokens"], ref["completion_tokens"], ref["total_tokens"]) == (
        4000,
        800,
        4800,
    )
    assert ref["cost_usd"] == 0.0032  # 4000 * 0.5 + 800 * 1.5 = 3200 micro-dollars
    assert cand["cost_usd"] == 0.048  # 8000 * 3 + 1600 * 15 = 48000 micro-dollars
    assert (cand["calls"], cand["calls_with_usage"], cand["cost_unknown_calls"]) == (2, 2, 0)
    assert _summary(tmp_path)["usage"]["ratios"]["overall"]["cost_usd"] == 15.0
    assert "candidate: 2 call(s) · 9600 tokens · $0.0480" in done.stderr
    finished = [
        json.loads(line)
        for line in done.stdout.splitlines()
        if line.startswith("{") and '"run.finished"' in line
    ]
    assert finished[0]["cost_usd"] == {"reference": 0.0032, "candidate": 0.048}
    assert finished[0]["tokens"] == {"reference": 4800, "candidate": 9600}
    (run_dir,) = tmp_path.glob("runs/s/*/")
    report = (run_dir / "report.md").read_text("utf-8")
    assert "| reference | 2 | 2 | 4000 | 800 | 0 | 0.0032 | 0 |" in report
    assert "| candidate / reference |  |  |  |  |  | 15.0000 |" in report
    assert "<h2>Cost and latency</h2>" in (run_dir / "report.html").read_text("utf-8")
    history = run_parallax("history", "--config", "parallax.toml", cwd=tmp_path)
    # a cassette that records no time measured none: no latency, never "p50 0 ms"
    assert (ref["latency_ms"], cand["latency_ms"]) == (None, None)
    assert "reference: 2 call(s) · 4800 tokens · $0.0032 · no latency" in done.stderr
    assert "usage: reference $0.0032, 4800 tokens, no latency; candidate $0.0480" in history.stdout


def test_a_recorded_call_without_a_recorded_time_has_no_latency_not_zero(tmp_path: Path) -> None:
    """A recorded run showed "latency 0 ms" everywhere: a cassette takes no time, so a call
    whose row records none measured none. Its exchange and outcome hold null, its side has no
    latency figures, and its case says none was measured; a row that records its time keeps
    it, and the latency gate still pairs only calls timed on both sides."""
    cases = [{"id": f"c{n}", "prompt": "p", "expect": {"must_include": ["ok"]}} for n in range(2)]
    (tmp_path / "f.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases), "utf-8")
    (tmp_path / "ref.jsonl").write_text(
        "".join(json.dumps({"case_id": c["id"], "completion": "ok"}) + "\n" for c in cases)
    )
    timed = [
        {"case_id": "c0", "completion": "ok", "elapsed_ms": 250},
        {"case_id": "c1", "completion": "ok"},
    ]
    (tmp_path / "cand.jsonl").write_text("".join(json.dumps(r) + "\n" for r in timed))
    (tmp_path / "parallax.toml").write_text(
        'runs_dir = "runs"\nsnapshots_dir = "snapshots"\n'
        '[endpoints.ref]\nkind = "recorded"\ncassette = "ref.jsonl"\n'
        '[endpoints.cand]\nkind = "recorded"\ncassette = "cand.jsonl"\n'
        '[suites.s]\nfixtures = "f.jsonl"\nreference = "ref"\ncandidate = "cand"\n',
        "utf-8",
    )
    done = run_parallax("run", "--config", "parallax.toml", cwd=tmp_path)
    (run_dir,) = tmp_path.glob("runs/s/*/")
    rows = [json.loads(line) for line in (run_dir / "outcomes.jsonl").read_text().splitlines()]
    raw = [json.loads(line) for line in (run_dir / "raw.jsonl").read_text().splitlines()]
    sides = _summary(tmp_path)["usage"]["sides"]
    assert {(r["side"], r["case_id"]): r["elapsed_ms"] for r in rows} == {
        ("reference", "c0"): None,
        ("reference", "c1"): None,
        ("candidate", "c0"): 250,
        ("candidate", "c1"): None,
    }
    assert (
        sorted(
            (e["elapsed_ms"], e["attempts"][0]["elapsed_ms"])
            for e in raw
            if e["side"] == "reference"
        )
        == [(None, None)] * 2
    )
    assert (sides["reference"]["latency_ms"], sides["candidate"]["latency_ms"]) == (
        None,
        {"p50": 250, "p90": 250, "p99": 250},
    )
    assert "reference: 2 call(s) · no usage · cost unpriced · no latency" in done.stderr
    # each case's detail as report.html's data holds it: report.js says "none measured" and
    # "no time measured" for a null, and a number in ms for the rest
    timings = {
        (case.id, side["side"]): (side["ms"], [a[5] for a in side["attempts"]])
        for case in page_cases((run_dir / "report.html").read_text("utf-8"))
        for side in map(case.side, (0, 1))
    }
    assert timings == {
        ("c0", "reference"): (None, [None]),
        ("c1", "reference"): (None, [None]),
        ("c0", "candidate"): (250, [250]),
        ("c1", "candidate"): (None, [None]),
    }
    replayed = run_parallax("replay", run_dir, cwd=tmp_path)
    assert replayed.returncode in (0, 1), replayed.stderr
    (again,) = (p for p in tmp_path.glob("runs/s/*/") if p != run_dir)
    assert (again / "outcomes.jsonl").read_bytes() == (run_dir / "outcomes.jsonl").read_bytes()


@pytest.mark.parametrize("protocol", [Protocol.OPENAI, Protocol.ANTHROPIC])
def test_a_live_run_against_llmock_takes_tokens_and_cost_from_the_replies(
    tmp_path: Path, llmock: LlmockServer, protocol: Protocol
) -> None:
    """Against a real server the summary's tokens are the replies' usage, priced per side."""
    (tmp_path / "f.jsonl").write_text("".join(json.dumps(c) + "\n" for c in TEXT_CASES), "utf-8")
    endpoints = "".join(
        llmock.endpoint_toml(name, protocol, price=(rate, rate * 4))
        for name, rate in (("u-ref", 1), ("u-cand", 2))
    )
    (tmp_path / "parallax.toml").write_text(
        'runs_dir = "runs"\nsnapshots_dir = "snapshots"\n'
        + endpoints
        + '[suites.s]\nfixtures = "f.jsonl"\nreference = "u-ref"\ncandidate = "u-cand"\n',
        "utf-8",
    )
    done = run_parallax("run", "--config", "parallax.toml", cwd=tmp_path)
    assert done.returncode in (0, 1, 2, 3), done.stderr
    (raw,) = tmp_path.glob("runs/s/*/raw.jsonl")
    said: dict[str, list[int]] = {"reference": [0, 0], "candidate": [0, 0]}
    for line in raw.read_text("utf-8").splitlines():
        exchange = json.loads(line)
        usage = json.loads(exchange["response"]["body"])["usage"]  # what the server said
        prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
        completion = usage.get("completion_tokens", usage.get("output_tokens"))
        said[exchange["side"]][0] += prompt
        said[exchange["side"]][1] += completion
    sides = _summary(tmp_path)["usage"]["sides"]
    for side, rate in (("reference", 1), ("candidate", 2)):
        prompt, completion = said[side]
        assert prompt > 0 and completion > 0
        block = sides[side]
        assert (block["prompt_tokens"], block["completion_tokens"]) == (prompt, completion)
        assert block["calls_with_usage"] == 2
        assert block["cost_usd"] == round((prompt * rate + completion * rate * 4) / 1e6, 6)
        assert block["latency_ms"] is not None
    (source,) = (raw.parent,)
    replay = run_parallax("replay", "--config", "parallax.toml", source, cwd=tmp_path)
    assert "Traceback" not in replay.stderr, replay.stderr
    (again,) = (p for p in tmp_path.glob("runs/s/*/summary.json") if p.parent != source)
    replayed = json.loads(again.read_text("utf-8"))["usage"]
    recorded = json.loads((source / "summary.json").read_text("utf-8"))["usage"]
    assert replayed == recorded  # a function of the outcome rows


def _recorded_suite(
    tmp_path: Path, usage: dict[str, Any], *, top: str = "", price: str, extra: str = ""
) -> None:
    """Two recorded cases per side, each reply carrying `usage`, both sides at `price`
    (`extra`: more endpoint keys, such as the protocol a recorded side streams in)."""
    (tmp_path / "f.jsonl").write_text("".join(json.dumps(c) + "\n" for c in TEXT_CASES), "utf-8")
    rows = [{"case_id": c["id"], "completion": "hi", "usage": usage} for c in TEXT_CASES]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    (tmp_path / "parallax.toml").write_text(
        f'runs_dir = "runs"\nsnapshots_dir = "snapshots"\n{top}\n'
        + "".join(
            f'[endpoints.{n}]\nkind = "recorded"\ncassette = "c.jsonl"\nmax_tokens = 64\n'
            f"price = {price}\n{extra}"
            for n in ("ref", "cand")
        )
        + '[suites.s]\nfixtures = "f.jsonl"\nreference = "ref"\ncandidate = "cand"\n',
        "utf-8",
    )


@pytest.mark.parametrize("top", ["", "budget_usd = 5"])
def test_a_price_past_any_real_one_is_a_config_error_not_infinity(tmp_path: Path, top: str) -> None:
    """A price of 1e308 crashed at the budget's estimate (a traceback) or, without a budget,
    wrote `Infinity` into summary.json: it is refused at load, naming the key (exit 78)."""
    _recorded_suite(
        tmp_path,
        {"prompt_tokens": 5, "completion_tokens": 3},
        top=top,
        price="{ input_per_mtok = 1e308, output_per_mtok = 1 }",
    )
    for command in ("validate", "run"):
        done = run_parallax(command, "--config", "parallax.toml", cwd=tmp_path)
        assert done.returncode == 78, done.stderr
        lines = done.stderr.splitlines()  # every error at once: each endpoint's price
        assert {line.split(": ")[2] for line in lines} == {
            "endpoints.ref.price.input_per_mtok",
            "endpoints.cand.price.input_per_mtok",
        }, lines
        assert all(line.startswith("parallax: parallax.toml: endpoints.") for line in lines)
    assert not (tmp_path / "runs" / "s").exists()


def test_the_dearest_price_on_the_largest_usage_is_a_finite_summary(tmp_path: Path) -> None:
    """At the largest price and token counts parallax takes, with a budget, every figure in
    summary.json is a number JSON can hold."""
    _recorded_suite(
        tmp_path,
        {"prompt_tokens": 10**9, "completion_tokens": 10**9},
        top="budget_usd = 1e9",
        price="{ input_per_mtok = 1e6, output_per_mtok = 1e6 }",
    )
    done = run_parallax("run", "--config", "parallax.toml", cwd=tmp_path)
    assert done.returncode in (0, 1, 2, 3), done.stderr
    (summary,) = tmp_path.glob("runs/s/*/summary.json")
    usage = json.loads(summary.read_text("utf-8"), parse_constant=pytest.fail)["usage"]
    cost = usage["sides"]["candidate"]["cost_usd"]  # 2e9 a call: the budget may cut the second
    assert cost in (2e9, 4e9), cost


HUGE = int("9" * 401)


@pytest.mark.parametrize(
    ("extra", "usage"),
    [
        ("", {"prompt_tokens": HUGE, "completion_tokens": 3}),
        ("stream = true\n", {"prompt_tokens": HUGE, "completion_tokens": 3}),
        (
            'protocol = "anthropic-messages"\nstream = true\n',
            {"input_tokens": HUGE, "output_tokens": 3},
        ),
        ("", {"prompt_tokens": 5, "completion_tokens": 10**9 + 1}),
        (
            'protocol = "anthropic-messages"\n',
            {"input_tokens": 5, "output_tokens": 3, "cache_read_input_tokens": HUGE},
        ),
    ],
    ids=["openai-json", "openai-sse", "anthropic-sse", "past-a-billion", "anthropic-cache"],
)
def test_a_usage_count_past_any_call_is_no_usage_and_the_run_finishes(
    tmp_path: Path, extra: str, usage: dict[str, Any]
) -> None:
    """A reply claiming a 401-digit prompt (in an OpenAI body, an OpenAI stream or an
    Anthropic stream) raised OverflowError in the cost math: a traceback, exit 1, an empty
    outcomes.jsonl, and a run dir that resume, replay and report failed on for ever. A count
    past a billion tokens is no usage: the call's cost is unknown, and the run finishes."""
    _recorded_suite(
        tmp_path,
        usage,
        top="budget_usd = 5",
        price="{ input_per_mtok = 3, output_per_mtok = 15 }",
        extra=extra,
    )
    done = run_parallax("run", "--config", "parallax.toml", cwd=tmp_path)
    assert done.returncode in (0, 1, 2, 3), done.stderr
    assert "Traceback" not in done.stderr
    (run_dir,) = tmp_path.glob("runs/s/*/")
    assert len((run_dir / "outcomes.jsonl").read_text("utf-8").splitlines()) == 4
    sides = _summary(tmp_path)["usage"]["sides"]
    for side in ("reference", "candidate"):
        block = sides[side]
        assert (block["calls"], block["calls_with_usage"], block["cost_unknown_calls"]) == (2, 0, 2)
    replay = run_parallax("replay", "--config", "parallax.toml", run_dir, cwd=tmp_path)
    assert replay.returncode == done.returncode, replay.stderr
    report = run_parallax("report", "--config", "parallax.toml", run_dir, cwd=tmp_path)
    assert report.returncode == done.returncode, report.stderr
