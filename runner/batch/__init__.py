"""Batch mode: a side's calls made through the provider's batch API at the batch price.

A second way to make a side's calls, beside the live client (`runner.client`): the engine
calls a `BatchEndpoint` exactly as it calls an `HttpEndpoint`, one case at a time, and gets
an Exchange back for each, so nothing above it knows a batch happened. One module per stage:

- `endpoint`: `BatchEndpoint`, the calls collected into batches, the batches submitted,
  journaled, polled and read back into each call's attempts and Exchange;
- `openai_batches`, `anthropic_batches`: one `Batcher` per provider's batch API
  (`provider` is the interface and what it hands back), the request bodies the protocol
  modules' own;
- `http`: the requests a batch is made of, each failure a stamp;
- `journal`: batches.jsonl, every batch's intent on disk before it is created and its id
  before it is polled, so a resume polls it again instead of paying twice;
- `lookup`: a resume's search at the provider for a batch a kill cut off from the journal;
- `summary`: what summary.json, report.md and the stderr summary say of a run's batches.

Nothing is imported here: the run's plan reads `journal` at start-up, and `endpoint` brings
httpx (and with it rich) only when a side runs as a batch.
"""
