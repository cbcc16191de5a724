"""What a run costs: tokens, dollars and the model's latency, counted, capped and gated.

- `usage`: what each side used and cost and how fast it answered, summary.json's `usage`;
- `budget`: `budget_usd`, reserved per case before its calls and checked before every attempt;
- `regressions`: the latency and cost gates, on paired per-case ratios.
"""
