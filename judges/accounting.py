"""The LLM judge's own counters: what it was asked, what it paid, how long it took.

`stats()` is a flat dict of floats. No key starts with `judge_`: those names belong to the
training loop's own counts (judge calls made for training, for evaluation), and the loop stores
these beside them under a prefix of its own. Identities that hold at any moment between batches:

    requests == cache_hits + judged + failures
    calls + not_sent == judged + failures - deduplicated + retries + repairs + truncation_retries
    completion_tokens == reasoning_tokens + answer_tokens
"""

from __future__ import annotations

import math
import threading
from typing import Any

__all__ = ["COUNTERS", "Accounting", "percentile"]

COUNTERS = (
    "requests",  # verdicts asked for
    "cache_hits",  # served from the SQLite verdict cache (no call)
    "judged",  # fresh verdicts without an error
    "failures",  # verdicts carrying an error (the episode is excluded, not scored 0)
    "deduplicated",  # of judged + failures: copies of an identical request in the same batch
    "calls",  # HTTP calls made (first attempts + retries + repairs)
    "retries",  # re-attempts after a timeout / 429 / 5xx / connection error
    "repairs",  # repair turns after an unparseable reply
    "truncated",  # replies cut off (finish_reason "length", or reasoning never closed): no answer
    "truncation_retries",  # calls sent again after a truncated reply (larger budget, or thinking off)
    "timeouts",
    "rate_limited",
    "server_errors",  # failed calls by kind
    "refused",  # calls the provider refused for good (401/403, a 429 with a quota code): the judge stops
    "not_sent",  # calls never made because the provider had refused the key already
    "unparseable",  # verdicts that failed because the reply stayed unparseable
    "retry_wait_s",  # seconds spent waiting between retries
    "throttle_wait_s",  # seconds spent waiting for requests_per_minute / tokens_per_minute
    "prompt_tokens",
    "completion_tokens",  # from the replies' `usage`; reasoning included
    "reasoning_tokens",  # of completion_tokens: the thinking, where the provider reports it
    "answer_tokens",  # of completion_tokens: the rest
    "cost_usd",  # where LiteLLM (or the given per-token prices) knows the price
    "reasoning_cost_usd",  # of cost_usd: the reasoning tokens, at the output price where it is known
    "cost_unknown_calls",  # successful calls with no known price
)


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks; 0.0 for no values."""
    if not sorted_values:
        return 0.0
    k = (len(sorted_values) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


class Accounting:
    """Thread-safe counters (a judge may be awaited from several threads' loops)."""

    def __init__(
        self,
        input_cost_per_token: float | None = None,
        output_cost_per_token: float | None = None,
        known_output_price: float | None = None,
    ) -> None:
        """The given prices (both None: LiteLLM's cost of each reply); `known_output_price`: the
        output price LiteLLM's map knows, for the reasoning share where none is given."""
        self._prices = (input_cost_per_token, output_cost_per_token)
        given = None if self._prices == (None, None) else (output_cost_per_token or 0.0)
        self._output_price = given if given is not None else known_output_price
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(COUNTERS, 0.0)
        self._latencies: list[float] = []

    def add(self, key: str, n: float = 1.0) -> None:
        with self._lock:
            self._counts[key] += n

    def failed_call(self, status: int | None, refused: bool = False) -> None:
        """A failed attempt, by kind (a timeout counts as 408)."""
        if refused:
            self.add("refused")
        elif status == 408:
            self.add("timeouts")
        elif status == 429:
            self.add("rate_limited")
        elif status is not None and status >= 500:
            self.add("server_errors")

    def latency(self, seconds: float) -> None:
        """One fresh verdict's latency, from its first call to the verdict (retries, backoff and
        repair included; waiting for a concurrency slot is not)."""
        with self._lock:
            self._latencies.append(seconds)

    def usage(self, resp: Any, reasoning: int = 0) -> None:
        """Tokens and cost of one successful reply, `reasoning` of its completion tokens thinking."""
        usage = getattr(resp, "usage", None)
        pt = int(getattr(usage, "prompt_tokens", 0) or 0)
        ct = int(getattr(usage, "completion_tokens", 0) or 0)
        reasoning = min(reasoning, ct)
        self.add("prompt_tokens", pt)
        self.add("completion_tokens", ct)
        self.add("reasoning_tokens", reasoning)
        self.add("answer_tokens", ct - reasoning)
        if self._output_price is not None:
            self.add("reasoning_cost_usd", reasoning * self._output_price)
        if self._prices != (None, None):
            cost: Any = pt * (self._prices[0] or 0.0) + ct * (self._prices[1] or 0.0)
        else:
            hidden = getattr(resp, "_hidden_params", None) or {}
            cost = hidden.get("response_cost") if isinstance(hidden, dict) else None
        if isinstance(cost, (int, float)) and cost >= 0:
            self.add("cost_usd", float(cost))
        else:
            self.add("cost_unknown_calls")

    def stats(self) -> dict[str, float]:
        """The counters (see COUNTERS) plus latency_{mean,p50,p90,p99}_s, all floats."""
        with self._lock:
            out = {k: float(v) for k, v in self._counts.items()}
            lat = sorted(self._latencies)
        out["latency_mean_s"] = sum(lat) / len(lat) if lat else 0.0
        for q in (50, 90, 99):
            out[f"latency_p{q}_s"] = percentile(lat, q / 100)
        return out
