"""Importers: a suite written for another tool, brought over as parallax fixtures and a config.

One module per source tool reads its files and maps each case and each check to the closest
parallax expectation that means the same thing; `suite` writes the result and checks it as
`validate` would. A check with no honest equivalent (an LLM judge, a JavaScript function) is
never dropped in silence: it is listed, printed and written to IMPORT-NOTES.md beside the
suite, with every mapping that is close but not exact.
"""
