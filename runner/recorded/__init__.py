"""The recorded endpoint: replies from a cassette, for offline runs, the demo and tests.

- `endpoint`: `RecordedEndpoint`, a cassette read into the same `Exchange` a live call of
  its protocol returns, faults included;
- `wire`: the bytes a server of that protocol would have sent for a recorded reply.
"""
