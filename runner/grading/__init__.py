"""How a reply is graded: the task stamp, code graders only, bounded by work.

- `graders`: the built-in expectation keys and custom graders, one admitted reply into miss
  codes and a task_score (`grade`), and the suite's graders as loaded (`GraderSet`);
- `tools`: a reply's tool calls against the case's tool expectations;
- `checks`: the checks both share, bounded by work instead of the clock: JSON Schema and RE2
  patterns, JSON equality.
"""
