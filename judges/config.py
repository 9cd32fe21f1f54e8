"""The LLM judge's settings as typed pydantic models: a scenario's `judge.args` are validated here,
so a misspelt key or a bad value fails at start-up with the field named, never mid-run.

`LLMJudgeConfig` is what `LLMJudge(**args)` (or `LLMJudge(config)`) is built from;
`LocalServerConfig` is its `local_server` block (the `python -m judges.server` subprocess).
Secrets are never fields: only the NAME of the env var that holds a key (`api_key_env`,
`token_env`) is configured, so a config can be printed, stored or hashed safely.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails

__all__ = ["DRILLS", "JudgeConfigError", "LLMJudgeConfig", "LocalServerConfig", "validate_config"]

# The local server's GLM-4.7 drills (judges/drills.py says what each one answers).
DRILLS = ("reasoning_content", "think_tags", "lone_close", "truncate", "draft", "quota", "slow_reasoning")
Drill = Literal["reasoning_content", "think_tags", "lone_close", "truncate", "draft", "quota", "slow_reasoning"]

# extra="forbid": an unknown key is an error, not silently ignored; no inf/nan in any number.
_STRICT = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)


class JudgeConfigError(ValueError):
    """Bad judge arguments; the message names each bad field and says what was wrong."""


class LocalServerConfig(BaseModel):
    """`local_server:` start `python -m judges.server --port 0` wrapping another judge."""

    model_config = _STRICT

    judge: str = Field("rubric", min_length=1, description="registry name or import path of the wrapped judge")
    args: dict[str, Any] = Field(default_factory=dict, description="the wrapped judge's constructor arguments")
    error_rate: float = Field(0.0, ge=0.0, le=1.0, description="share of chat requests answered with HTTP 500")
    malformed_rate: float = Field(0.0, ge=0.0, le=1.0, description="share of replies that are not the JSON verdict")
    latency_ms: float = Field(0.0, ge=0.0, description="added latency per chat request")
    rate_limit: float | None = Field(None, gt=0.0, description="requests/s; excess gets 429 + Retry-After")
    seed: int = Field(0, description="seed of the fault-injection generator")
    token_env: str | None = Field(None, min_length=1, description="env var holding the bearer token")
    drill: Drill | None = Field(None, description="answer as a GLM-4.7 endpoint can (judges/drills.py)")
    reasoning_tokens: int | None = Field(None, ge=1, description="a drill's reasoning length (default per drill)")
    reasoning_ms: float | None = Field(None, ge=0.0, description="a drill's reasoning time (slow_reasoning: 1500)")
    max_body_bytes: int | None = Field(None, ge=1, description="larger request bodies get 413 (server default 4 MiB)")
    read_timeout_s: float | None = Field(None, gt=0.0, description="a body slower than this gets 408 (default 30)")
    startup_timeout_s: float = Field(60.0, gt=0.0)
    verbose: bool = False

    def cli_args(self) -> list[str]:
        """The server's command-line flags for these settings (startup_timeout_s is the parent's)."""
        import json

        out = ["--judge", self.judge, "--judge-args", json.dumps(self.args)]
        for key in (
            "error_rate",
            "malformed_rate",
            "latency_ms",
            "rate_limit",
            "seed",
            "token_env",
            "drill",
            "reasoning_tokens",
            "reasoning_ms",
            "max_body_bytes",
            "read_timeout_s",
        ):
            value = getattr(self, key)
            if value is not None:
                out += [f"--{key.replace('_', '-')}", str(value)]
        return out + (["--verbose"] if self.verbose else [])


class LLMJudgeConfig(BaseModel):
    """Every argument of the LLM judge (see judges/README.md for what each one does)."""

    model_config = _STRICT

    model: str = Field("openai/glm-4.7", min_length=1, description="LiteLLM model string")
    api_base: str | None = Field(None, min_length=1, description="the endpoint, e.g. https://host/v1")
    api_key_env: str | None = Field(None, min_length=1, description="NAME of the env var holding the API key")
    local_server: LocalServerConfig | None = None
    template: str = Field("style_judge_v1", min_length=1, description="prompt template in judges/templates")
    concurrency: int = Field(16, ge=1, description="HTTP calls in flight at most (per event loop)")
    timeout_s: float = Field(60.0, gt=0.0, description="per HTTP call")
    max_retries: int = Field(4, ge=0, description="re-attempts after a timeout / 429 / 5xx / connection error")
    backoff_base_s: float = Field(0.5, ge=0.0)
    backoff_max_s: float = Field(20.0, ge=0.0)
    max_retry_after_s: float = Field(120.0, ge=0.0, description="a longer Retry-After fails the call instead")
    max_tokens: int = Field(1024, ge=1, description="per call: a reasoning model's thinking counts against it")
    temperature: float = Field(0.0, ge=0.0)
    thinking: Literal["on", "off"] | None = Field(
        None, description="a reasoning model's thinking on/off (the provider's parameter); None: the endpoint's default"
    )
    json_mode: bool = Field(False, description="ask for a JSON object (response_format) where the route takes it")
    on_truncation: Literal["more_tokens", "thinking_off"] = Field(
        "more_tokens", description="the one retry after a truncated reply: a larger budget, or thinking off"
    )
    truncation_max_tokens: int | None = Field(
        None, ge=1, description="max_tokens of the retry after a truncated reply (default 4 x max_tokens)"
    )
    requests_per_minute: int | None = Field(None, ge=1, description="client-side limit on calls in any 60 s")
    tokens_per_minute: int | None = Field(None, ge=1, description="client-side limit on tokens in any 60 s")
    refusal_codes: tuple[str, ...] = Field(
        ("1113", "insufficient_quota"), description="429 body codes that mean no balance or the wrong plan: stop"
    )
    cache: bool = Field(True, description="the SQLite verdict cache on/off")
    cache_path: str | None = Field(
        None, min_length=1, description="default: testbed.paths.cache_dir()/judge_cache.sqlite"
    )
    cache_namespace: str | None = Field(None, description="extra cache-key text (default: the local server's spec)")
    input_cost_per_token: float | None = Field(None, ge=0.0)
    output_cost_per_token: float | None = Field(None, ge=0.0)
    extra_params: dict[str, Any] = Field(default_factory=dict, description="more litellm.acompletion keywords")
    seed: int = Field(0, description="seed of the backoff jitter")

    @field_validator("thinking", mode="before")
    @classmethod
    def _yaml_on_off(cls, value: Any) -> Any:
        return (
            {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value
        )  # YAML reads off as false

    @model_validator(mode="after")
    def _consistent(self) -> LLMJudgeConfig:
        if self.local_server is not None and self.api_base is not None:
            raise ValueError("give either api_base or local_server, not both")
        if self.truncation_max_tokens is not None and self.truncation_max_tokens <= self.max_tokens:
            raise ValueError(f"truncation_max_tokens must be more than max_tokens ({self.max_tokens})")
        body = self.extra_params.get("extra_body")
        if self.thinking is not None and (
            "thinking" in self.extra_params or (isinstance(body, dict) and "thinking" in body)
        ):
            raise ValueError("thinking is set twice: as `thinking` and in extra_params; keep one")
        if self.json_mode and "response_format" in self.extra_params:
            raise ValueError("json_mode and extra_params.response_format both set the response format; keep one")
        return self


def _describe(err: ErrorDetails, model: type[BaseModel]) -> str:
    where = ".".join(str(p) for p in err["loc"]) or "(arguments)"
    if err["type"] == "extra_forbidden":
        owner: type[BaseModel] = model
        for part in err["loc"][:-1]:  # walk to the model the unknown key was given to
            field = owner.model_fields.get(str(part))
            inner = getattr(field, "annotation", None)
            for cand in getattr(inner, "__args__", (inner,)):
                if isinstance(cand, type) and issubclass(cand, BaseModel):
                    owner = cand
        return f"{where}: unknown key (known: {', '.join(owner.model_fields)})"
    return f"{where}: {err['msg']} (got {err.get('input')!r:.80})"


def validate_config(model: type[BaseModel], data: Any, what: str = "judge args") -> Any:
    """`model.model_validate(data)`, with a JudgeConfigError naming every bad field."""
    if isinstance(data, model):
        return data
    try:
        return model.model_validate(data if data is not None else {})
    except ValidationError as exc:
        lines = [_describe(e, model) for e in exc.errors(include_url=False)]
        raise JudgeConfigError(f"{what}: " + "; ".join(lines)) from None
