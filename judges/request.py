"""What the LLM judge asks LiteLLM for: the keyword arguments of its `litellm.acompletion` calls,
from its settings (what the route takes natively, what must travel in the request body, and what
the verdict cache keys on), and what LiteLLM's local price map knows of the model.

Read from LiteLLM 1.110's source and checked against it on a real HTTP server:

- `thinking`: the `zai/` route lists `thinking` among its supported parameters (for a model its
  price map marks as reasoning, as GLM-4.7) and sends it as is; the `openai/` route refuses it
  (UnsupportedParamsError), so there it goes in `extra_body`, which LiteLLM merges into the JSON
  body. Either way the provider receives `"thinking": {"type": "enabled" | "disabled"}`.
- `json_mode`: `response_format: {"type": "json_object"}`, where the route lists
  `response_format` (both routes do); a route that does not is a config error, never a silent
  drop.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from judges.config import JudgeConfigError, LLMJudgeConfig

__all__ = ["Requests", "known_output_price", "register_free_model", "supported_params"]

TRUNCATION_BUDGET_FACTOR = 4  # the retry after a truncated reply: this many times max_tokens by default


def supported_params(litellm: Any, model: str) -> frozenset[str]:
    """The OpenAI parameters LiteLLM's route for `model` passes on (empty if it has no route)."""
    try:
        name, provider, _, _ = litellm.get_llm_provider(model)
        return frozenset(litellm.get_supported_openai_params(model=name, custom_llm_provider=provider) or ())
    except Exception:  # noqa: BLE001 - an unknown route takes nothing natively
        return frozenset()


def register_free_model(litellm: Any, model: str) -> None:
    """A local judge costs nothing; registering it also spares LiteLLM a slow failed price lookup
    on every call."""
    provider, _, name = model.partition("/")
    if not name:
        provider, name = "openai", model
    logger = logging.getLogger("LiteLLM")
    level = logger.level
    logger.setLevel(logging.ERROR)  # register_model warns that a zero price has no cache prices
    try:
        litellm.register_model(
            {
                name: {
                    "input_cost_per_token": 0.0,
                    "output_cost_per_token": 0.0,
                    "litellm_provider": provider,
                    "mode": "chat",
                }
            }
        )
    finally:
        logger.setLevel(level)


def known_output_price(litellm: Any, model: str) -> float | None:
    """The output price per token in LiteLLM's local price map, if it knows the model."""
    try:
        price = litellm.get_model_info(model).get("output_cost_per_token")
    except Exception:  # noqa: BLE001 - an unknown model has no price
        return None
    return float(price) if isinstance(price, (int, float)) else None


@dataclass(frozen=True)
class Requests:
    """The request settings of one judge. `kwargs()` is one call's keywords; `retry_after_truncation`
    is how the one retry after a truncated reply differs; `cache_fields()` what the verdict cache
    keys on besides the request."""

    config: LLMJudgeConfig
    native: frozenset[str]  # supported_params of the route

    @classmethod
    def of(cls, config: LLMJudgeConfig, litellm: Any) -> Requests:
        native = supported_params(litellm, config.model)
        if config.json_mode and "response_format" not in native:
            raise JudgeConfigError(
                f"json_mode: LiteLLM's route for {config.model} does not take response_format; set json_mode: false"
            )
        return cls(config, native)

    def retry_after_truncation(self) -> tuple[int, str | None]:
        """(max_tokens, thinking) of the retry: thinking off if `on_truncation` says so and it is
        not off already, else a larger budget."""
        cfg = self.config
        if cfg.on_truncation == "thinking_off" and cfg.thinking != "off":
            return cfg.max_tokens, "off"
        return cfg.truncation_max_tokens or TRUNCATION_BUDGET_FACTOR * cfg.max_tokens, cfg.thinking

    def kwargs(self, max_tokens: int | None = None, thinking: str | None = None) -> dict[str, Any]:
        """One call's keywords (less messages, api_base and api_key); `max_tokens` / `thinking`
        override the settings (the retry after a truncated reply)."""
        cfg = self.config
        out: dict[str, Any] = dict(
            model=cfg.model,
            temperature=cfg.temperature,
            max_tokens=max_tokens or cfg.max_tokens,
            timeout=cfg.timeout_s,
            max_retries=0,
            **cfg.extra_params,
        )
        thinking = thinking or cfg.thinking
        if thinking is not None:
            param = {"type": "enabled" if thinking == "on" else "disabled"}
            if "thinking" in self.native:
                out["thinking"] = param
            else:
                out["extra_body"] = {**(out.get("extra_body") or {}), "thinking": param}
        if cfg.json_mode:
            out["response_format"] = {"type": "json_object"}
        return out

    def cache_fields(self) -> dict[str, Any]:
        """Every setting that can change a verdict (the model and template are keyed apart)."""
        cfg = self.config
        return {
            "temperature": cfg.temperature,
            "max_tokens": cfg.max_tokens,
            "thinking": cfg.thinking,
            "json_mode": cfg.json_mode,
            "on_truncation": cfg.on_truncation,
            "retry_after_truncation": list(self.retry_after_truncation()),
            "extra_params": cfg.extra_params,
        }
