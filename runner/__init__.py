"""parallax: a nightly regression runner that compares a frozen reference with a candidate."""

__version__ = "0.1.0"
