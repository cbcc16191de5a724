"""`parallax serve`: each suite on its cron schedule, never two runs of a suite at once.

APScheduler 3.11 (the stable line; 4.0 is a pre-release) supplies the crontab parsing and
field arithmetic, run in UTC against the suite's wall clock; `Trigger` maps wall-clock fire
times to real ones, DST gaps and folds included. It stays behind `trigger`. The loop that
waits and runs is ours (`daemon`), one anyio task group with named children, so a run in
flight sits in a cancel scope we own:

    serve
    ├── heartbeat      rewrites runs/.parallax-serve.json; `parallax health` reads it
    │                  (runner.health: found by the pointer written at start)
    └── suite:<name>   wait for the next fire time, run, repeat (one task per scheduled suite)

Scheduling follows APScheduler's own vocabulary:

- coalesce: fire times that came due together (a suspended host, a stuck loop) run once;
- misfire_grace_time: a fire time found more than `serve_misfire_grace_seconds` late is not
  run (`scheduler.misfire`);
- max_instances = 1: fire times that come due while the suite's run is in flight are skipped
  (`scheduler.job_skipped`, reason "running"), and so is a fire while another process holds
  the suite lock (reason "locked"; see `runner.lock`).

On SIGTERM, SIGINT or SIGHUP (`runner.shutdown`, the same stop as `run`'s) no new run starts; a
run in flight may finish within `serve_grace_seconds`, else it is cancelled, which leaves its
run dir resumable (its manifest keeps `finished_at: null`). A stdout whose reader went away
stops the daemon the same way: the log stream people alert on is gone, so it says why on
stderr and exits 74 for its supervisor to restart it. The daemon then logs exactly one of
`scheduler.stopped` (exit 0, or 74) or `scheduler.crashed` (exit 70). On the next start it
resumes the latest interrupted run of each suite, or logs `scheduler.resume_skipped` with the
reason it cannot. Fire times that passed while no daemon ran (a restart, a redeploy) are made
up as late ones: the heartbeat the last daemon left names the last fire it dealt with for each
suite (`catchup`; the heartbeat's own format is `heartbeat`'s).
"""
