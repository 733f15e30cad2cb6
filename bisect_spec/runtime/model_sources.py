"""Which model a pasted ``--model-path`` means: a local directory, a shipped profile, or a hub id.

A pasted launch command names the model the user runs. bisect-spec never evaluates another
one in its place (a note followed by a different answer is a wrong answer):

* a local directory holding ``config.json`` is used as it is;
* a Hugging Face id or a path whose last component names a shipped profile
  (``moonshotai/Kimi-K2.6``, ``/root/models/Kimi-K2.6``) is that profile: the profiles are the
  published ``config.json`` files of those checkpoints (``data/models/SOURCES.md``);
* any other Hugging Face id: its ``config.json`` (and nothing else, never weights) is fetched
  with ``huggingface_hub`` and cached under the bisect-spec home; offline, one refusal;
* any other path: refused, naming ``--model`` and ``--model-path``, unless the caller chose a
  profile explicitly (then that profile is what was asked for).

``huggingface_hub`` is the library for the hub (retries, auth, offline mode, caching); it is
imported only when an unknown id is met.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from bisect_spec.errors import ProfileError

#: Hugging Face ids of the checkpoints whose published config.json the shipped profiles are.
KNOWN_IDS = {
    "moonshotai/kimi-k2.6": "kimi-k2.6",
    "moonshotai/kimi-k2.5": "kimi-k2.5",
    "deepseek-ai/deepseek-v3": "deepseek-v3",
    "deepseek-ai/deepseek-v3-0324": "deepseek-v3",
    "deepseek-ai/deepseek-r1": "deepseek-v3",  # V3 and R1 ship the same config.json
    "meta-llama/llama-3.1-8b-instruct": "llama-3.1-8b",
    "meta-llama/llama-3.1-8b": "llama-3.1-8b",
    "meta-llama/meta-llama-3.1-8b-instruct": "llama-3.1-8b",
    "qwen/qwen3-8b": "qwen3-8b",
    "qwen/qwen3-32b": "qwen3-32b",
    "qwen/qwen3-235b-a22b": "qwen3-235b-a22b",
    "meta-llama/llama-3.3-70b-instruct": "llama-3.3-70b",
    "deepseek-ai/deepseek-v3.2": "deepseek-v3.2",
    "moonshotai/kimi-k2-instruct": "kimi-k2",
    "openai/gpt-oss-20b": "gpt-oss-20b",
    "openai/gpt-oss-120b": "gpt-oss-120b",
}
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")


def is_hub_id(text: str) -> bool:
    """``org/name`` as the hub spells ids (and not an existing relative path)."""
    return bool(_HUB_ID.match(text)) and not text.startswith((".", "~")) and not Path(text).exists()


def profile_named_by(path: str, names: list[str]) -> str | None:
    """The shipped profile a hub id or a path's last component names, if any."""
    known = KNOWN_IDS.get(path.lower().strip("/"))
    if known is not None:
        return known
    tail = path.rstrip("/").rsplit("/", 1)[-1].lower()
    tail = re.sub(r"-(instruct|chat|hf)$", "", tail)  # same config; never -base or -fp8 (different configs)
    for name in names:
        if tail == name or tail.removeprefix("meta-") == name:
            return name
    for hub_id, name in KNOWN_IDS.items():
        if tail == hub_id.rsplit("/", 1)[-1] or tail == re.sub(r"-(instruct|chat)$", "", hub_id.rsplit("/", 1)[-1]):
            return name
    return None


def _offline_reason() -> str | None:
    """Why the hub cannot be reached now, found at once (``HF_HUB_OFFLINE``, or its host does not
    resolve), or None. Without this check an offline fetch retries for half a minute, printing each retry."""
    import os
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return "HF_HUB_OFFLINE is set"
    host = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co").hostname or "huggingface.co"
    try:
        socket.getaddrinfo(host, 443)
    except OSError as exc:
        return f"{host}: {exc.strerror or exc}"
    return None


def fetch_config(hub_id: str, cache: Path, *, what: str = "model") -> Path:
    """The directory holding ``hub_id``'s ``config.json``, fetched once from the hub (never weights).

    :param what: ``model`` or ``draft``: the options the refusal names.
    :raises ProfileError: offline, unknown id, gated repository, or ``huggingface_hub`` missing.
    """
    target = cache / hub_id.replace("/", "--")
    if (target / "config.json").is_file():
        return target
    advice = f"pass --{what} NAME for a shipped profile, or --{what}-path DIR holding its config.json"
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise ProfileError(f"{hub_id} is a Hugging Face id and huggingface_hub is not installed: "
                           f"pip install huggingface_hub, or {advice}") from None
    offline = _offline_reason()
    if offline is not None:
        raise ProfileError(f"cannot fetch config.json of {hub_id} from the Hugging Face hub ({offline}): {advice}")
    hub_logger = logging.getLogger("huggingface_hub")
    level = hub_logger.level
    hub_logger.setLevel(logging.ERROR)  # its retry notices are not the user's business: the refusal says it all
    try:
        downloaded = hf_hub_download(hub_id, "config.json")
    except Exception as exc:  # offline, 404, gated: huggingface_hub raises many types
        reason = type(exc).__name__
        raise ProfileError(f"cannot fetch config.json of {hub_id} from the Hugging Face hub ({reason}): {advice}") from None
    finally:
        hub_logger.setLevel(level)
    target.mkdir(parents=True, exist_ok=True)
    (target / "config.json").write_bytes(Path(downloaded).read_bytes())
    return target
