"""The Prometheus `MetricSource`: one InferenceSLA's window of engine metrics, over HTTP.

For the target's pods (see `metrics.promql`), it rebuilds the increase over the window of the
TTFT, queue-time, prefill-time, inter-token-latency and prompt-length histograms, the window
averages of the waiting and running gauges, the number of pods reporting, and the time of the
newest sample (which becomes `observed_at`, so that a Prometheus that stopped scraping reads as
stale to the policy).

What can go wrong is explicit, and never an exception for the caller:
- unreachable, slow or failing server: retried with backoff (urllib3's Retry, through
  prometheus-api-client), then `source_error` names the URL and the error;
- empty result (no such series for these pods): the field is None and `problems` says which
  metric and what to check;
- NaN or ±Inf in a result: kept, so the Observation reports the histogram as not finite.
Engines that lack a series get it approximated from the others, said in `derived`.

Called by the reconcile loop (one instance per operator) and `slascaler analyze --prometheus`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

from slascaler.engines import ENGINES, EngineFlavour
from slascaler.metrics.promql import (
    HistogramQueries,
    OwnedPods,
    PodSelector,
    gauge_queries,
    histogram_queries,
)
from slascaler.model.histogram import Histogram
from slascaler.model.observation import Observation
from slascaler.spec import SLASpec

RETRY_ON_STATUS = (429, 500, 502, 503, 504)


class _QueryFailed(Exception):
    """Prometheus could not answer a query (after retries)."""


@dataclass(frozen=True)
class PrometheusSettings:
    url: str
    timeout_s: float = 5.0
    retries: int = 2
    backoff_s: float = 0.5
    namespace_label: str = "namespace"
    pod_label: str = "pod"
    bearer_token: str | None = None
    verify_tls: bool = True


def _value(sample: Mapping[str, Any]) -> float:
    """A result's value as a float; Prometheus writes NaN and ±Inf as strings."""
    return float(sample["value"][1])


class PrometheusSource:
    """Observations of InferenceSLA targets from one Prometheus server."""

    def __init__(
        self,
        settings: PrometheusSettings,
        observe_query: Callable[[float], None] | None = None,
    ) -> None:
        """`observe_query`, when given, is told each query's duration in seconds."""
        self.settings = settings
        self.observe_query = observe_query
        retry = Retry(
            total=settings.retries,
            connect=settings.retries,
            read=settings.retries,
            status=settings.retries,
            backoff_factor=settings.backoff_s,
            status_forcelist=RETRY_ON_STATUS,
            allowed_methods=frozenset({"GET", "POST"}),
            raise_on_status=False,
        )
        headers = (
            {"Authorization": f"Bearer {settings.bearer_token}"} if settings.bearer_token else None
        )
        self.client = PrometheusConnect(
            url=settings.url.rstrip("/"),
            headers=headers,
            disable_ssl=not settings.verify_tls,
            retry=retry,
            timeout=settings.timeout_s,
        )

    def _query(self, query: str, now: float) -> list[dict[str, Any]]:
        started = time.monotonic()
        try:
            result = self.client.custom_query(query, params={"time": f"{now:.3f}"})
        except (requests.RequestException, PrometheusApiClientException) as error:
            raise _QueryFailed(f"{type(error).__name__}: {error}") from error
        finally:
            if self.observe_query is not None:
                self.observe_query(time.monotonic() - started)
        if not isinstance(result, list):
            raise _QueryFailed(f"unexpected answer to {query!r}: {result!r}")
        return result

    def _scalar(self, query: str, now: float) -> float | None:
        result = self._query(query, now)
        return _value(result[0]) if result else None

    def _histogram(self, queries: HistogramQueries, now: float, scale: float) -> Histogram | None:
        buckets = self._query(queries.buckets, now)
        if not buckets:
            return None
        points = sorted(
            (float(sample["metric"].get("le", "nan")), _value(sample)) for sample in buckets
        )
        total = self._scalar(queries.sum, now)
        count = self._scalar(queries.count, now)
        return Histogram(
            upper_bounds=tuple(b * scale if math.isfinite(b) else b for b, _ in points),
            cumulative_counts=tuple(c for _, c in points),
            sum=(total if total is not None else math.nan) * scale,
            count=count if count is not None else math.nan,
        )

    def observe(
        self, namespace: str, spec: SLASpec, now: float, pods: OwnedPods | None = None
    ) -> Observation:
        flavour = ENGINES[spec.engine]
        selector = PodSelector(
            namespace,
            spec.target.name,
            namespace_label=self.settings.namespace_label,
            pod_label=self.settings.pod_label,
            owned=pods,
        )
        try:
            return self._observe(
                flavour, selector, spec.window_s, now, need_itl=spec.itl is not None
            )
        except _QueryFailed as error:
            return Observation(
                observed_at=now,
                window_s=spec.window_s,
                ttft=None,
                queue=None,
                prefill=None,
                source_error=f"Prometheus at {self.settings.url} did not answer: {error}",
            )

    def _observe(
        self,
        flavour: EngineFlavour,
        selector: PodSelector,
        window_s: float,
        now: float,
        need_itl: bool,
    ) -> Observation:
        where = f"pods of {selector.deployment} in namespace {selector.namespace}"
        absent: list[str] = []

        def histogram(
            metric: str | None, scale: float = 1000.0, extra: str = "", required: bool = True
        ) -> Histogram | None:
            if metric is None:
                return None
            queries = histogram_queries(metric, selector, window_s, extra)
            found = self._histogram(queries, now, scale)
            if found is None and required:
                absent.append(metric)
            return found

        ttft = histogram(flavour.ttft)
        queue = histogram(flavour.queue_time)
        prefill = histogram(flavour.prefill_time, extra=flavour.prefill_label_filter)
        itl = histogram(flavour.inter_token, required=need_itl)
        prompt_tokens = histogram(flavour.prompt_tokens, scale=1.0, required=False)
        ttft, prefill, derived = _derive_missing(flavour, ttft, queue, prefill)

        gauges = gauge_queries(flavour, selector, window_s)
        newest = self._scalar(gauges.newest_sample, now)
        if newest is None:
            absent.append(flavour.running)
        problems = []
        if absent:
            problems.append(
                f"no {', '.join(absent)} series from {where} (is Prometheus scraping them "
                f"with the '{selector.namespace_label}' and '{selector.pod_label}' labels?)"
            )
        waiting = self._scalar(gauges.waiting_average, now)
        running = self._scalar(gauges.running_average, now)
        waiting_now = self._scalar(gauges.waiting_now, now)
        pods = self._scalar(gauges.reporting_pods, now)
        requests_seen = ttft.total if ttft is not None else math.nan
        return Observation(
            observed_at=min(now, newest) if newest is not None and math.isfinite(newest) else now,
            window_s=window_s,
            ttft=ttft,
            queue=queue,
            prefill=prefill,
            itl=itl,
            prompt_tokens=prompt_tokens,
            request_rate=requests_seen / window_s,
            waiting=waiting if waiting is not None else math.nan,
            running=running if running is not None else math.nan,
            reporting_pods=round(pods) if pods is not None and math.isfinite(pods) else 0,
            waiting_now=waiting_now if waiting_now is not None else math.nan,
            problems=tuple(problems),
            derived=derived,
        )


def _derive_missing(
    flavour: EngineFlavour,
    ttft: Histogram | None,
    queue: Histogram | None,
    prefill: Histogram | None,
) -> tuple[Histogram | None, Histogram | None, tuple[str, ...]]:
    """Approximate a series the engine does not export from the ones it does.

    TGI has no TTFT histogram: TTFT ≈ queue time shifted by the mean prefill time. SGLang has
    no prefill histogram: prefill ≈ TTFT shifted back by the mean queue time. Both keep the
    shape of the series they start from, which is what the regime's counterfactual needs.
    """
    derived: list[str] = []
    if flavour.ttft is None and queue is not None and prefill is not None:
        shift = prefill.mean if prefill.count > 0 else 0.0
        ttft = queue.shifted(shift)
        derived.append(f"TTFT ≈ queue time + mean prefill ({shift:.0f} ms): no TTFT histogram")
    if flavour.prefill_time is None and ttft is not None and queue is not None:
        shift = queue.mean if queue.count > 0 else 0.0
        prefill = ttft.shifted(-shift)
        derived.append(f"prefill ≈ TTFT − mean queue time ({shift:.0f} ms): no prefill histogram")
    return ttft, prefill, tuple(derived)
