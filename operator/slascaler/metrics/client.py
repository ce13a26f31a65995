"""Instant queries to Prometheus's HTTP API, bounded by a deadline, answers checked strictly.

`PrometheusClient.query(promql, at, deadline)` asks `/api/v1/query` and returns the result
vector as `Sample`s, or raises `QueryFailed` with a message that names the problem:

- every try, and every wait between tries, ends by `deadline` (a `time.monotonic()` instant):
  a connection or read timeout is the smaller of the configured timeout and the time left;
  Prometheus is told the same (`timeout=`) so that it stops evaluating too;
- a failed try (no connection, a timeout, HTTP 429 or 5xx) is retried with exponential
  backoff up to `retries` times; a `Retry-After` is honoured only while it ends before the
  deadline — a longer one fails at once ("asked to retry after 3600 s"), so one slow
  Prometheus answer costs one evaluation its deadline and never holds a worker for hours;
- an answer that is not what the API documents — not JSON, a JSON list, `status: error`
  with HTTP 200, `data: null`, a dict or a matrix where a vector was asked, a sample
  without a value or with a value that is not a number, labels that are not strings — is
  `QueryFailed` naming what was wrong, never a `KeyError` or `TypeError` for the caller.

Long queries (a batch over many namespaces) are sent by POST (a form), short ones by GET.
Thread-safe (one urllib3 pool shared by the evaluations running at once). Called by
`metrics.prometheus`.
"""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import urllib3

from slascaler.metrics.answers import Sample

RETRY_ON_STATUS = frozenset({429, 500, 502, 503, 504})
_GET_LIMIT = 4000  # longer queries go as a POST form (URLs are cut at 8 KiB by many proxies)
_MAX_ANSWER = 5000  # characters of a bad answer quoted in a message


class QueryFailed(Exception):
    """Prometheus gave no usable answer to a query; the message says why."""

    def __init__(self, message: str, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out  # the deadline or a timeout ended it, not an answer


@dataclass(frozen=True)
class ClientSettings:
    url: str
    timeout_s: float = 5.0
    retries: int = 2
    backoff_s: float = 0.5
    bearer_token: str | None = None
    verify_tls: bool = True


QueryObserver = Callable[[float, str], None]  # (seconds, outcome: ok | error | timeout)


def _quote(raw: object) -> str:
    text = raw if isinstance(raw, str) else repr(raw)
    return text if len(text) <= 200 else text[:200] + "…"


def parse_answer(body: bytes, status: int) -> list[Sample]:
    """The samples of an instant-vector answer; `QueryFailed` naming what is malformed."""
    try:
        answer: Any = json.loads(body)
    except ValueError:
        raise QueryFailed(
            f"HTTP {status} with a body that is not JSON: "
            + _quote(body[:_MAX_ANSWER].decode("utf-8", "replace"))
        ) from None
    if not isinstance(answer, dict):
        raise QueryFailed(f"HTTP {status} with a JSON {type(answer).__name__}, not an object")
    state = answer.get("status")
    if state == "error":
        kind, error = answer.get("errorType", "error"), answer.get("error", "no message")
        raise QueryFailed(f"HTTP {status}, status error ({_quote(kind)}): {_quote(error)}")
    if state != "success":
        raise QueryFailed(f"HTTP {status} with status {_quote(state)}, not success")
    data = answer.get("data")
    if not isinstance(data, dict):
        raise QueryFailed(f"answer with data {_quote(json.dumps(data))}, not an object")
    kind, result = data.get("resultType"), data.get("result")
    if kind != "vector":
        raise QueryFailed(f"answer of resultType {_quote(kind)}, where a vector was asked")
    if not isinstance(result, list):
        raise QueryFailed(f"vector answer whose result is a {type(result).__name__}, not a list")
    return [_sample(item, index) for index, item in enumerate(result)]


def _sample(item: object, index: int) -> Sample:
    where = f"sample {index} of the answer"
    if not isinstance(item, dict):
        raise QueryFailed(f"{where} is a {type(item).__name__}, not an object")
    labels = item.get("metric")
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise QueryFailed(f"{where} has labels {_quote(labels)}, not a map of strings")
    pair = item.get("value")
    if not isinstance(pair, list) or len(pair) != 2:
        raise QueryFailed(f"{where} ({_quote(labels)}) has no [time, value] pair: {_quote(pair)}")
    raw = pair[1]
    if not isinstance(raw, str):  # the API writes every value as a string
        raise QueryFailed(f"{where} ({_quote(labels)}) has value {_quote(raw)}, not a string")
    try:
        value = float(raw)
    except ValueError:
        raise QueryFailed(
            f"{where} ({_quote(labels)}) has value {_quote(repr(raw))}, not a number"
        ) from None
    return Sample(labels, value)


def _retry_after(header: str | None, now: float) -> float | None:
    """Seconds a Retry-After header asks to wait (delta seconds or an HTTP date)."""
    if not header:
        return None
    header = header.strip()
    try:
        return max(0.0, float(header))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)


class PrometheusClient:
    """Instant queries against one Prometheus server."""

    def __init__(
        self,
        settings: ClientSettings,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        observer: QueryObserver | None = None,
    ) -> None:
        self.settings = settings
        self.base = settings.url.rstrip("/")
        self.clock, self.sleep, self.observer = clock, sleep, observer
        headers = {"Accept": "application/json"}
        if settings.bearer_token:
            headers["Authorization"] = f"Bearer {settings.bearer_token}"
        self.headers = headers
        self.pool = urllib3.PoolManager(
            num_pools=4,
            maxsize=32,
            cert_reqs="CERT_REQUIRED" if settings.verify_tls else "CERT_NONE",
            retries=False,
        )
        if not settings.verify_tls:
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)

    def query(self, promql: str, at: float, deadline: float) -> list[Sample]:
        """The instant vector of `promql` at `at` (epoch seconds), answered by `deadline`."""
        started = self.clock()
        outcome = "error"
        try:
            samples = self._query(promql, at, deadline)
            outcome = "ok"
            return samples
        except QueryFailed as error:
            outcome = "timeout" if error.timed_out else "error"
            raise
        finally:
            if self.observer is not None:
                self.observer(self.clock() - started, outcome)

    def _query(self, promql: str, at: float, deadline: float) -> list[Sample]:
        settings = self.settings
        last = "no try was made"
        for attempt in range(settings.retries + 1):
            left = deadline - self.clock()
            if left <= 0.001:
                raise QueryFailed(f"this evaluation's deadline passed ({last})", timed_out=True)
            timeout = min(settings.timeout_s, left)
            try:
                status, body, headers = self._send(promql, at, timeout)
            except urllib3.exceptions.TimeoutError:
                capped = timeout < settings.timeout_s
                last = f"timed out after {timeout:.1f} s" + (
                    ", at this evaluation's deadline" if capped else ""
                )
            except urllib3.exceptions.HTTPError as error:
                last = f"{type(error).__name__}: {error}"
            else:
                if status not in RETRY_ON_STATUS:
                    if status >= 400:
                        parse_answer(body, status)  # raises with Prometheus's own message
                        raise QueryFailed(f"HTTP {status}")
                    return parse_answer(body, status)
                last = f"HTTP {status}"
                wait = _retry_after(headers.get("Retry-After"), time.time())
                if wait is not None:
                    if self.clock() + wait >= deadline:
                        raise QueryFailed(
                            f"HTTP {status}: Prometheus asked to retry after {wait:.0f} s, "
                            f"past this evaluation's deadline",
                            timed_out=True,
                        )
                    if attempt < settings.retries:
                        self.sleep(wait)
                    continue
            if attempt < settings.retries:
                pause = settings.backoff_s * 2**attempt
                if self.clock() + pause >= deadline:
                    raise QueryFailed(
                        f"{last}; no time left before this evaluation's deadline",
                        timed_out=last.startswith("timed out"),
                    )
                self.sleep(pause)
        raise QueryFailed(
            f"{last} (after {settings.retries + 1} tries)", timed_out=last.startswith("timed out")
        )

    def _send(self, promql: str, at: float, timeout: float) -> tuple[int, bytes, Mapping[str, str]]:
        # Prometheus parses `timeout` as a duration of whole units: milliseconds.
        budget = f"{max(1, int(timeout * 1000))}ms"
        fields = {"query": promql, "time": f"{at:.3f}", "timeout": budget}
        url = f"{self.base}/api/v1/query"
        request_timeout = urllib3.Timeout(connect=timeout, read=timeout)
        if len(promql) <= _GET_LIMIT:
            reply = self.pool.request(
                "GET", f"{url}?{urlencode(fields)}", headers=self.headers, timeout=request_timeout
            )
        else:
            reply = self.pool.request(
                "POST",
                url,
                body=urlencode(fields),
                headers={**self.headers, "Content-Type": "application/x-www-form-urlencoded"},
                timeout=request_timeout,
            )
        return reply.status, reply.data, reply.headers

    def get_json(self, path: str, deadline: float) -> Any:
        """A GET of another API path (e.g. `/api/v1/rules`), its JSON `data`, by `deadline`."""
        left = deadline - self.clock()
        if left <= 0.001:
            raise QueryFailed("this evaluation's deadline passed")
        timeout = min(self.settings.timeout_s, left)
        try:
            reply = self.pool.request(
                "GET",
                f"{self.base}{path}",
                headers=self.headers,
                timeout=urllib3.Timeout(connect=timeout, read=timeout),
            )
        except urllib3.exceptions.HTTPError as error:
            raise QueryFailed(f"{type(error).__name__}: {error}") from None
        try:
            answer = json.loads(reply.data)
        except ValueError:
            raise QueryFailed(f"HTTP {reply.status} with a body that is not JSON") from None
        if not isinstance(answer, dict) or answer.get("status") != "success":
            raise QueryFailed(f"HTTP {reply.status}: {_quote(answer)}")
        return answer.get("data")

