"""The results database: an index of finished runs and merges, for a fleet and for Grafana.

Files under runs/ stay the record; the database (SQLite at `runs/parallax.db` by default,
PostgreSQL when `results_url` is set) is rebuilt from them at any time, so it is never
required for a run to succeed. One module per concern:

- `schema`: the tables, their documented columns, and the one SQL difference between engines;
- `rows`: a finished run dir read as the rows it adds;
- `store`: the writes and reads both engines share (idempotent, keyed by run id);
- `sqlite`, `postgres`: opening each engine;
- `record`: a run's rows written after it finished, and whatever an outage left unwritten;
- `index`: `parallax index RUNS_DIR`, every finished run dir recorded again;
- `listing`: `parallax history --all`, every suite's runs from the database.
"""
