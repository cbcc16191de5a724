"""What a case sends: the request one side makes of a case, and what pins it.

A fixture row says what is asked; an endpoint says how its side asks it. The two meet here:

- `casekeys`: a row's request keys (`messages`, `vars`, `tools`, `tool_choice`,
  `response_format`), checked as a provider would check them;
- `templates`: an endpoint's Jinja2 prompt templates, compiled once, rendered per case, and
  `request_sha`, the digest that pins what a side's requests are shaped from;
- `sandbox`: the bounds a template renders within (work, size, what may become text);
- `shape`: `Shape`, one endpoint's templates, params and stream flag, as the config builds it
  and the wire protocols read it;
- `sha`: request_sha across runs, what resume, retry and the snapshot compare.
"""
