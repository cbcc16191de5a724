"""Wire protocols: how each provider's reply, sent whole or streamed, reads into a Message.

One module per protocol (`openai_chat`, `anthropic_messages`), each with the same two pure
functions over the stored body text: `fold_body(text) -> Message | str` for a reply sent
whole, `fold_stream(text) -> StreamFold` for a Server-Sent Events body (`sse` frames it).
`message.graded` then turns any Message into what graders see, or a schema-fail detail, the
same way for every protocol. Nothing here raises on what a server sent: a hostile body is a
detail string, so a live call, a cassette and a replay are judged by the same code.
"""
