"""How one endpoint shapes its requests beyond the case: the `Shape` the config builds.

It lives with the templates it holds, apart from the wire protocols that read it, so the
config (which builds a Shape per endpoint as it loads) and the protocols (which build a body
from one) both depend on it and neither on the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runner.request.templates import PromptTemplate

__all__ = ["PLAIN", "Shape"]


@dataclass(frozen=True, slots=True)
class Shape:
    """How one endpoint shapes its requests beyond the case: its templates, compiled once at
    load, its extra body keys and stream flag, and `request_sha`, the digest that pins them
    with its protocol, model alias, temperature and max_tokens (`templates.request_sha`).

    `system_prompt` and `user_prompt` are the one rule for what a case is sent: a protocol asks
    them instead of reading the case's `system` and `prompt` itself.
    """

    system: PromptTemplate | None
    user_template: PromptTemplate | None
    params: Mapping[str, Any]
    stream: bool
    request_sha: str | None

    def system_prompt(
        self,
        *,
        case_id: str,
        prompt: str | None,
        system: str | None,
        vars: Mapping[str, str] | None,
        path: str,
        line: int | None,
    ) -> str | None:
        """The system prompt sent for a case: the endpoint's system template rendered over it,
        else the case's own `system` (None: no system prompt). For a `messages` case it is the
        leading system turn, replaced or added, when the endpoint sets a template."""
        if self.system is None:
            return system
        return self.system.render(
            case_id=case_id, prompt=prompt, system=system, vars=vars, path=path, line=line
        )

    def user_prompt(
        self,
        *,
        case_id: str,
        prompt: str | None,
        system: str | None,
        vars: Mapping[str, str] | None,
        path: str,
        line: int | None,
    ) -> str | None:
        """The user turn sent for a prompt case: the endpoint's user template rendered over it,
        else the prompt. A `messages` case (prompt None) is sent as written: None."""
        if self.user_template is None or prompt is None:
            return prompt
        return self.user_template.render(
            case_id=case_id, prompt=prompt, system=system, vars=vars, path=path, line=line
        )


# the shape of an endpoint that sets none: the case as written, nothing streamed
PLAIN = Shape(None, None, MappingProxyType({}), False, None)
