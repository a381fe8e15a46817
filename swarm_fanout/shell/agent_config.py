"""The run's models.json: the product's provider catalog, the file read as the product reads
it, one provider set in it, and the override that points the selected provider at the
recording proxy (contract §11; shell/proxy.py relays what then comes).

Product facts are from prime-agent v0.8.0's source (the commit the contract names); file
names are relative to the product repository.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass

from swarm_fanout.shell.cli import did_you_mean
from swarm_fanout.shell.proxy import (
    ANTHROPIC_MESSAGES,
    OPENAI_COMPLETIONS,
    OPENAI_RESPONSES,
    RecordingProxy,
    Upstream,
)
from swarm_fanout.shell.rundir import write_atomic
from swarm_fanout.shell.sandbox import models_json_key_names


@dataclass(frozen=True)
class Endpoint:
    api: str
    base_url: str


# The built-in providers, the API kind and base URL of their models, as the generated model
# catalog states them (packages/ai/src/models.generated.ts; the nine API kinds are registered
# in packages/ai/src/providers/register-builtins.ts). A provider lists more than one endpoint
# when its models differ. `{NAME}` is filled from the environment at request time
# (packages/ai/src/providers/cloudflare.ts); an empty URL is resolved from the user's Azure
# settings. The proxy reads ids and usage for the first three kinds only.
BUILTIN_PROVIDERS: dict[str, tuple[Endpoint, ...]] = {
    "amazon-bedrock": (
        Endpoint("bedrock-converse-stream", "https://bedrock-runtime.us-east-1.amazonaws.com"),
        Endpoint("bedrock-converse-stream", "https://bedrock-runtime.eu-central-1.amazonaws.com"),
        Endpoint("bedrock-converse-stream", "https://bedrock-runtime.ap-southeast-2.amazonaws.com"),
        Endpoint("bedrock-converse-stream", "https://bedrock-runtime.ap-northeast-1.amazonaws.com"),
    ),
    "anthropic": (Endpoint(ANTHROPIC_MESSAGES, "https://api.anthropic.com"),),
    "azure-openai-responses": (Endpoint("azure-openai-responses", ""),),
    "cerebras": (Endpoint(OPENAI_COMPLETIONS, "https://api.cerebras.ai/v1"),),
    "cloudflare-ai-gateway": (
        Endpoint(
            OPENAI_RESPONSES,
            "https://gateway.ai.cloudflare.com/v1/{CLOUDFLARE_ACCOUNT_ID}/{CLOUDFLARE_GATEWAY_ID}/openai",
        ),
        Endpoint(
            OPENAI_COMPLETIONS,
            "https://gateway.ai.cloudflare.com/v1/{CLOUDFLARE_ACCOUNT_ID}/{CLOUDFLARE_GATEWAY_ID}/compat",
        ),
        Endpoint(
            ANTHROPIC_MESSAGES,
            "https://gateway.ai.cloudflare.com/v1/{CLOUDFLARE_ACCOUNT_ID}/{CLOUDFLARE_GATEWAY_ID}/anthropic",
        ),
    ),
    "cloudflare-workers-ai": (
        Endpoint(
            OPENAI_COMPLETIONS,
            "https://api.cloudflare.com/client/v4/accounts/{CLOUDFLARE_ACCOUNT_ID}/ai/v1",
        ),
    ),
    "deepseek": (Endpoint(OPENAI_COMPLETIONS, "https://api.deepseek.com"),),
    "fireworks": (Endpoint(ANTHROPIC_MESSAGES, "https://api.fireworks.ai/inference"),),
    "github-copilot": (
        Endpoint(ANTHROPIC_MESSAGES, "https://api.individual.githubcopilot.com"),
        Endpoint(OPENAI_COMPLETIONS, "https://api.individual.githubcopilot.com"),
        Endpoint(OPENAI_RESPONSES, "https://api.individual.githubcopilot.com"),
    ),
    "google": (
        Endpoint("google-generative-ai", "https://generativelanguage.googleapis.com/v1beta"),
    ),
    "google-vertex": (Endpoint("google-vertex", "https://{location}-aiplatform.googleapis.com"),),
    "groq": (Endpoint(OPENAI_COMPLETIONS, "https://api.groq.com/openai/v1"),),
    "huggingface": (Endpoint(OPENAI_COMPLETIONS, "https://router.huggingface.co/v1"),),
    "kimi-coding": (Endpoint(ANTHROPIC_MESSAGES, "https://api.kimi.com/coding"),),
    "minimax": (Endpoint(ANTHROPIC_MESSAGES, "https://api.minimax.io/anthropic"),),
    "minimax-cn": (Endpoint(ANTHROPIC_MESSAGES, "https://api.minimaxi.com/anthropic"),),
    "mistral": (Endpoint("mistral-conversations", "https://api.mistral.ai"),),
    "moonshotai": (Endpoint(OPENAI_COMPLETIONS, "https://api.moonshot.ai/v1"),),
    "moonshotai-cn": (Endpoint(OPENAI_COMPLETIONS, "https://api.moonshot.cn/v1"),),
    "openai": (Endpoint(OPENAI_RESPONSES, "https://api.openai.com/v1"),),
    "openai-codex": (Endpoint("openai-codex-responses", "https://chatgpt.com/backend-api"),),
    "opencode": (
        Endpoint(OPENAI_RESPONSES, "https://opencode.ai/zen/v1"),
        Endpoint(OPENAI_COMPLETIONS, "https://opencode.ai/zen/v1"),
        Endpoint(ANTHROPIC_MESSAGES, "https://opencode.ai/zen"),
        Endpoint("google-generative-ai", "https://opencode.ai/zen/v1"),
    ),
    "opencode-go": (
        Endpoint(OPENAI_COMPLETIONS, "https://opencode.ai/zen/go/v1"),
        Endpoint(OPENAI_RESPONSES, "https://opencode.ai/zen/go/v1"),
        Endpoint(ANTHROPIC_MESSAGES, "https://opencode.ai/zen/go"),
    ),
    "openrouter": (Endpoint(OPENAI_COMPLETIONS, "https://openrouter.ai/api/v1"),),
    # and its private `internal/*` models (core/prime-inference-models.ts in coding-agent)
    "prime-inference": (Endpoint(OPENAI_COMPLETIONS, "https://api.pinference.ai/api/v1"),),
    "vercel-ai-gateway": (Endpoint(ANTHROPIC_MESSAGES, "https://ai-gateway.vercel.sh"),),
    "xai": (Endpoint(OPENAI_COMPLETIONS, "https://api.x.ai/v1"),),
    "xiaomi": (Endpoint(ANTHROPIC_MESSAGES, "https://api.xiaomimimo.com/anthropic"),),
    "xiaomi-token-plan-ams": (
        Endpoint(ANTHROPIC_MESSAGES, "https://token-plan-ams.xiaomimimo.com/anthropic"),
    ),
    "xiaomi-token-plan-cn": (
        Endpoint(ANTHROPIC_MESSAGES, "https://token-plan-cn.xiaomimimo.com/anthropic"),
    ),
    "xiaomi-token-plan-sgp": (
        Endpoint(ANTHROPIC_MESSAGES, "https://token-plan-sgp.xiaomimimo.com/anthropic"),
    ),
    "zai": (Endpoint(OPENAI_COMPLETIONS, "https://api.z.ai/api/coding/paas/v4"),),
}

# Providers whose traffic a models.json baseUrl cannot bring to the proxy.
UNWITNESSABLE = {
    # packages/ai/src/utils/oauth/github-copilot.ts `modifyModels` sets every copilot model's
    # baseUrl from the OAuth token, after models.json was applied (core/model-registry.ts).
    "github-copilot": "its OAuth login rewrites the base URL after models.json is applied",
    # packages/ai/src/providers/amazon-bedrock.ts: the AWS SDK signs the request for the host
    # it calls, so a request relayed to another host fails the upstream's signature check.
    "amazon-bedrock": "its requests are signed for the host they are sent to",
}
# core/model-registry.ts appends the private prime-inference models after the provider
# overrides are applied: they keep their own base URL.
PRIVATE_MODEL_PREFIX = {"prime-inference": "internal/"}


def builtin_upstream(
    provider: str, model_id: str | None = None, also_known: tuple[str, ...] = ()
) -> str:
    """The one base URL a built-in provider's models are served from; ValueError when the
    provider is unknown, cannot be routed, or has no single ready-made URL. An unknown
    provider's error names the closest of the built-in ones and `also_known` (the harness's
    own, the user's), as a typo's likeliest fix."""
    if provider in UNWITNESSABLE:
        raise ValueError(
            f"provider {provider!r} cannot be routed through the proxy: {UNWITNESSABLE[provider]}"
        )
    prefix = PRIVATE_MODEL_PREFIX.get(provider)
    if prefix and model_id and model_id.startswith(prefix):
        raise ValueError(
            f"model {provider}/{model_id} keeps its own base URL whatever models.json says"
        )
    endpoints = BUILTIN_PROVIDERS.get(provider)
    if endpoints is None:
        known = sorted({*BUILTIN_PROVIDERS, *also_known})
        raise ValueError(
            f"provider {provider!r} is not built in and the user's models.json gives it no "
            f"baseUrl: {did_you_mean(provider, known)}A provider of your own needs its "
            f"endpoint: --upstream URL. Known providers: {', '.join(known)}"
        )
    urls = sorted({endpoint.base_url for endpoint in endpoints})
    if len(urls) > 1:
        raise ValueError(
            f"provider {provider!r} serves its models from {len(urls)} base URLs "
            f"({', '.join(urls)}): name the one to use with --upstream URL"
        )
    if not urls[0] or "{" in urls[0]:
        raise ValueError(
            f"provider {provider!r} has no ready-made base URL ({urls[0]!r} is filled in from "
            "the user's settings): name it with --upstream URL"
        )
    return urls[0]


def unknown_provider(
    provider: str, agent_dir: str, upstream: str | None, also_known: tuple[str, ...]
) -> str | None:
    """Why `provider` is no provider the run could use, said before anything is made: it is
    not built in, not the harness's own (`also_known`), not in the user's models.json in
    `agent_dir`, and no --upstream names its endpoint. None when it may be (a models.json
    that cannot be read is left to the run, which says what is wrong with it)."""
    if upstream or provider in BUILTIN_PROVIDERS or provider in also_known:
        return None
    path = os.path.join(agent_dir, "models.json")
    user: object = {"providers": {}}
    if os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as handle:
                user = parse_models_json(handle.read())
        except (OSError, UnicodeDecodeError, ValueError):
            return None
    own = user.get("providers") if isinstance(user, dict) else None
    if not isinstance(own, dict):
        return None
    if provider in own:
        return None
    known = sorted({*BUILTIN_PROVIDERS, *also_known, *own})
    return (
        f"provider {provider!r} is not built in, not the harness's own and not in your "
        f"models.json ({path}): {did_you_mean(provider, known)}A provider of your own needs "
        f"its endpoint: --upstream URL. Known providers: {', '.join(known)}"
    )


def parse_models_json(text: str) -> object:
    """A models.json as the product reads it: JSON with `//` and `/* */` comments and
    trailing commas allowed (core/model-registry.ts strips them before parsing). Strings
    are kept as they are."""
    kept: list[str] = []
    index, inside = 0, False
    while index < len(text):
        char = text[index]
        if inside:
            step = 2 if char == "\\" else 1
            kept.append(text[index : index + step])
            index += step
            inside = char != '"'
        elif text.startswith("//", index):
            end = text.find("\n", index)
            index = len(text) if end < 0 else end
        elif text.startswith("/*", index):
            end = text.find("*/", index + 2)
            index = len(text) if end < 0 else end + 2
        elif char == "," and TRAILING.match(text, index + 1):
            index += 1
        else:
            inside = char == '"'
            kept.append(char)
            index += 1
    return json.loads("".join(kept))


# What may follow a trailing comma: white space and comments, then a closing bracket.
TRAILING = re.compile(r"(?:\s|//[^\n]*|/\*.*?\*/)*[}\]]", re.DOTALL)


def set_provider(agent_dir: str, provider: str, entry: dict) -> str:
    """Put `entry` as `providers.<provider>` into `agent_dir/models.json`, keeping every
    other provider and key of the file (read as the product reads it); returns its path.
    Raises ValueError for a file that is not JSON or has no providers object."""
    path = os.path.join(agent_dir, "models.json")
    config: object = {"providers": {}}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            config = parse_models_json(handle.read())
    if not isinstance(config, dict) or not isinstance(config.setdefault("providers", {}), dict):
        raise ValueError(f"{path} has no providers object")
    config["providers"][provider] = entry
    os.makedirs(agent_dir, exist_ok=True)
    temporary = path + ".tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(config, indent=2) + "\n")
    os.replace(temporary, path)
    return path


def models_json_override(
    user_models: dict | None,
    provider: str,
    proxy_base_url: str,
    *,
    upstream: str | None = None,
    model_id: str | None = None,
    also_known: tuple[str, ...] = (),
) -> tuple[dict, str]:
    """The run's models.json and the upstream the proxy forwards `provider` to.

    The user's file is kept, with `providers.<provider>.baseUrl` set to the proxy: for a
    built-in provider that keeps its models and the user's auth (docs/models.md "Overriding
    Built-in Providers"; core/model-registry.ts applies the override to every built-in model
    of the provider). The upstream is `upstream` when given, else the user's own baseUrl for
    the provider, else its built-in one. `model_id` (without the provider) lets a model that
    ignores the override be refused. A user's model with a baseUrl of its own would bypass
    the proxy, so it is refused too. `also_known` are the providers the harness serves
    itself, suggested with the user's own when `provider` is unknown."""
    config = copy.deepcopy(user_models) if user_models is not None else {"providers": {}}
    if not isinstance(config, dict) or not isinstance(config.setdefault("providers", {}), dict):
        raise ValueError("the user's models.json has no providers object")
    known = (*also_known, *(name for name in config["providers"] if name != provider))
    entry = config["providers"].setdefault(provider, {})
    if not isinstance(entry, dict):
        raise ValueError(f"the user's models.json entry for provider {provider!r} is not an object")
    for model in entry.get("models") or []:
        if isinstance(model, dict) and model.get("baseUrl"):
            raise ValueError(
                f"model {provider}/{model.get('id')} has a baseUrl of its own in the user's "
                "models.json, which the proxy's provider baseUrl would not cover"
            )
    if upstream is None:
        own = entry.get("baseUrl")
        if provider in UNWITNESSABLE or not (isinstance(own, str) and own):
            upstream = builtin_upstream(provider, model_id, known)
        else:
            upstream = own
    Upstream(upstream)  # a clear error now rather than at the first request
    entry["baseUrl"] = proxy_base_url
    return config, upstream


# --- the run's model, behind the recording proxy ---------------------------------------------


class ProxyError(Exception):
    """The model's provider cannot be brought behind the recording proxy."""


def route_through_proxy(
    stack: contextlib.ExitStack,
    agent_home: str,
    model: str,
    *,
    upstream: str | None,
    local: tuple[str, Callable[[str], dict]] | None,
    also_known: tuple[str, ...],
    injections: tuple[tuple[str, int], ...] = (),
) -> RecordingProxy:
    """The recording proxy of one run (shell/observer.py), its models.json pointing the
    model's provider at it (docs/witness.md): in front of `local`, the harness's own
    endpoint (its base URL, and the provider entry that names the proxy's URL), else the
    provider's upstream. `injections` are the (worker, calls) the proxy fails itself."""
    provider, _, model_id = model.partition("/")
    try:
        if local is not None:
            base_url, entry = local
            proxy = stack.enter_context(RecordingProxy({provider: base_url}))
            set_provider(agent_home, provider, entry(proxy.url(provider)))
        else:
            path = os.path.join(agent_home, "models.json")
            user = None
            if os.path.exists(path):
                with open(path, encoding="utf-8") as handle:
                    user = parse_models_json(handle.read())
            config, upstream = models_json_override(
                user,
                provider,
                "http://127.0.0.1/",
                upstream=upstream,
                model_id=model_id,
                also_known=also_known,
            )
            # The route is the upstream's host: the product sends some fields only when
            # the baseUrl names it (OpenRouter's and Vercel's routing, OpenAI's
            # prompt_cache_key: packages/ai openai-completions.ts), and the proxy's URL
            # then still does.
            route = urllib.parse.urlsplit(upstream).hostname or provider
            proxy = stack.enter_context(RecordingProxy({route: upstream}))
            config, _ = models_json_override(
                user, provider, proxy.url(route), upstream=upstream, model_id=model_id
            )
            write_atomic(path, json.dumps(config, indent=2) + "\n")
    except (OSError, ValueError) as error:
        # The user's models.json, or the model's provider, cannot be brought behind it.
        raise ProxyError(f"model {model!r}: {error}") from None
    for worker, count in injections:
        proxy.inject_failures(worker, count)
    return proxy


def api_key_names(agent_home: str) -> tuple[str, ...]:
    """The variables the run's models.json names as a provider's apiKey: the sandboxed
    agent gets them too (sandbox.agent_env)."""
    path = os.path.join(agent_home, "models.json")
    try:
        with open(path, encoding="utf-8") as handle:
            return models_json_key_names(parse_models_json(handle.read()))
    except (OSError, ValueError):
        return ()


def agent_config_dir(explicit: str | None) -> str:
    """Where the user's auth.json and models.json are: --agent-config, else the product's."""
    if explicit:
        return explicit
    return os.environ.get("PRIME_AGENT_CODING_AGENT_DIR") or os.path.join(
        os.path.expanduser("~"), ".prime", "agent"
    )
