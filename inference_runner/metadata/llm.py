"""Optional LLM extractor: an OpenAI-compatible chat-completions endpoint given by URL.

The model is asked for JSON ``[{"field": ..., "value": ..., "evidence": ...}]``. An
answer counts only when its ``evidence`` is a verbatim substring of the source text
(its first occurrence gives ``start``/``end``) and its value is allowed for the field
(race: a value of :data:`.race.RACE_VALUES` or a phrasing of one, and the evidence must
itself state it, :func:`_supports`); everything else is rejected and counted. The prompt
asks for asserted statements about the current study and the patient only (no negated,
prior-study, recommended or family mentions); the model's answer is not checked for
context beyond that. Only the standard library (urllib) is used.
"""
from __future__ import annotations

import json
import re
import socket
import urllib.error
import urllib.parse
import urllib.request

from ..config import ConfigError
from . import PHASES
from .race import RACE_VALUES, race_value

FIELDS = ("phase", "age", "sex", "race")
PROMPT = (
    "Extract from the radiology report below the contrast phase of the current study (one "
    "of non_contrast, arterial, venous, delayed), the patient's age in years, sex (F or M) "
    "and race (one of " + ", ".join(RACE_VALUES) + "; African American or AA is Black, "
    "Caucasian is White, Hispanic or Latino is Hispanic/Latino, a patient who declined to "
    "state it is Declined, a recorded unknown is Unknown). Use only statements about the "
    "current study and the patient that are asserted: leave out a phase or contrast that "
    "was not given or not acquired, belongs to a prior or comparison study, or is "
    "recommended or conditional, and an age, sex or race of a relative. Answer with JSON "
    "only: a list of objects with keys field, value, evidence, where evidence is an exact "
    "substring of the report that states the value. Leave out fields the report does not "
    "state.\n\nREPORT:\n{text}"
)


#: seconds to wait for the endpoint to accept a connection before giving up
CONNECT_TIMEOUT = 5.0

MSG_BAD_URL = ("--llm-url {url}: not an http(s) URL; give the endpoint as "
               "http://HOST:PORT/v1 (OpenAI-compatible), or leave out --llm-url")
MSG_UNREACHABLE = ("--llm-url {url}: cannot connect to {host}:{port} ({reason}) within "
                   "{timeout:g} s; start the server or correct the URL, or leave out --llm-url")


class LLMError(ConfigError):
    """The endpoint could not be reached or answered in an unexpected form (a bad input:
    the CLI exits 2 naming the URL)."""


def check_endpoint(url: str, *, timeout: float = CONNECT_TIMEOUT) -> None:
    """Fail fast (:class:`LLMError`) when ``url`` is not an http(s) URL or nothing accepts a
    connection at its host and port within ``timeout`` seconds."""
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = None
    if parts.scheme not in ("http", "https") or not parts.hostname or port is None:
        raise LLMError(MSG_BAD_URL.format(url=url))
    try:
        socket.create_connection((parts.hostname, port), timeout=timeout).close()
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise LLMError(MSG_UNREACHABLE.format(url=url, host=parts.hostname, port=port,
                                              reason=reason, timeout=timeout)) from None


def _endpoint(url: str) -> str:
    url = url.rstrip("/")
    return url if url.endswith("/chat/completions") else f"{url}/chat/completions"


def ask(url: str, text: str, *, model: str = "local", timeout: float = 30.0,
        api_key: str | None = None) -> str:
    """POST one chat-completions request; return the message content."""
    body = json.dumps({"model": model, "temperature": 0,
                       "messages": [{"role": "user", "content": PROMPT.format(text=text)}]}).encode()
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    try:
        req = urllib.request.Request(_endpoint(url), data=body, headers=headers, method="POST")
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - user-given URL
            payload = json.loads(resp.read().decode("utf-8"))
        return payload["choices"][0]["message"]["content"]
    except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError) as exc:
        raise LLMError(f"LLM endpoint {url}: {type(exc).__name__}: {exc}") from exc


def _valid(field: str, value) -> str | None:
    v = str(value).strip()
    if field == "phase":
        v = v.lower().replace("-", "_").replace(" ", "_")
        v = {"portal_venous": "venous", "portal": "venous", "noncontrast": "non_contrast"}.get(v, v)
        return v if v in PHASES else None
    if field == "sex":
        v = v.upper()[:1]
        return v if v in ("F", "M") else None
    if field == "age":
        return v if re.fullmatch(r"\d{1,3}", v) and int(v) <= 120 else None
    if field == "race":
        return race_value(v)
    return None


def _supports(field: str, value: str, evidence: str) -> bool:
    """For race, the evidence must itself say the value (a phrasing of it, by the text
    rules, :mod:`.race`): a model may not map "unremarkable" to White. Other fields: the
    verbatim-substring check alone."""
    if field != "race":
        return True
    from .race import description_mentions, label_mentions

    said = {v for v, _, _ in label_mentions(evidence) + description_mentions(evidence)}
    return value in said or race_value(evidence) == value


def parse_answer(content: str, text: str, *, case_id: str, source: str) -> tuple[list[dict], int]:
    """Accepted evidence rows and the number of rejected items of one answer."""
    m = re.search(r"\[.*\]", content, re.DOTALL)
    try:
        items = json.loads(m.group(0) if m else content)
    except ValueError:
        return [], 1
    if isinstance(items, dict):
        items = [items]
    rows, rejected = [], 0
    for it in items if isinstance(items, list) else []:
        if not isinstance(it, dict) or it.get("field") not in FIELDS:
            rejected += 1
            continue
        ev = it.get("evidence")
        value = _valid(it["field"], it.get("value"))
        start = text.find(ev) if isinstance(ev, str) and ev else -1
        if value is None or start < 0 or not _supports(it["field"], value, ev):
            rejected += 1
            continue
        rows.append({"case_id": case_id, "field": it["field"], "value": value, "extractor": "llm",
                     "evidence": ev, "start": start, "end": start + len(ev), "source": source,
                     "context": "asserted"})
    return rows, rejected


def extract_llm(reports, url: str, *, model: str = "local", source_prefix: str = "text:",
                timeout: float = 30.0, advance=None) -> tuple[list[dict], int]:
    """LLM evidence rows for ``reports`` (DataFrame case_id, text) and the rejected count."""
    rows, rejected = [], 0
    for cid, text in zip(reports["case_id"], reports["text"]):
        content = ask(url, text, model=model, timeout=timeout)
        r, n = parse_answer(content, text, case_id=cid, source=f"{source_prefix}#{cid}")
        rows += r
        rejected += n
        if advance:
            advance(1)
    return rows, rejected
