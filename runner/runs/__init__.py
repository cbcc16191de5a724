"""A run directory from start to verdict: plan, call, stamp, gate, summarise.

`runs/<suite>/<UTC timestamp>-<short id>/` holds manifest.json, raw.jsonl, outcomes.jsonl,
disagreement.json and summary.json. Ledgers are appended as results arrive, so a killed run
resumes from what it wrote; everything after the exchange is recomputed from raw.jsonl, which
is also how `replay` regrades a run offline. One module per stage:

- `mode`: how a run came to be (`RunMode`), the word its manifest records;
- `names`: what a run dir's name says: when it started;
- `rundir`: a new run dir and its manifest, read back by every later command;
- `plan`: what a resume, a retry or a replay starts from;
- `calls`: the endpoints, and every call not yet in raw.jsonl;
- `finalize`: the gate's verdicts, the alerts, summary.json and the exit code;
- `summary`: a finished run's summary read back, and its lines on stderr;
- `run`: the stages in order, under the suite's lock;
- `shard`: which cases a shard of a suite calls, and its share of the quota and budget;
- `merge`: one run of a suite made from its shards' run dirs.
"""
