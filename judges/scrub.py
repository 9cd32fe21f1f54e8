"""Secret scrubbing: every text the LLM judge keeps or shows (verdict raw text, errors) passes
through a Scrubber holding the key, so the key reaches no verdict, log, table or cache entry."""

from __future__ import annotations

__all__ = ["REDACTED", "Scrubber"]

REDACTED = "[redacted]"
_NOT_SECRET = {"", "no-key"}  # the placeholder sent to keyless endpoints


class Scrubber:
    def __init__(self, *secrets: str | None) -> None:
        # Longest first, so a secret that contains another is replaced whole.
        self._secrets = sorted({s for s in secrets if s and s not in _NOT_SECRET}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def __repr__(self) -> str:  # never the secrets themselves
        return f"Scrubber({len(self._secrets)} secret(s))"
