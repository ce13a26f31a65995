"""One target's Observation from a batch's answers: its pods summed, every fault said.

`metrics.prometheus` sends one query per metric family (and the gauges, and the token
counters) for each (engine, window) of a batch; `observation_for` builds one target's
Observation from those answers: its pods picked and summed (`metrics.targets`), the
quantities an engine lacks approximated (`metrics.derived`, said in `derived`), the token
work and short window (`metrics.work`), and whatever is missing said in `problems` (with a
hint: wrong labels, or an engine release that does not export the series) so that the
policy holds instead of acting on a guess.

Pure (no I/O). Called by `metrics.prometheus`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from slascaler.engine_metrics import EngineMetrics, Series
from slascaler.metrics.answers import TargetAnswers
from slascaler.metrics.derived import sglang_prefill, tgi_prefill_and_ttft
from slascaler.metrics.promql import oldest_sample_step_s
from slascaler.metrics.targets import (
    FamilyReading,
    GaugeReading,
    read_counters,
    read_family,
    read_gauges,
    target_pods,
)
from slascaler.metrics.work import work
from slascaler.model.observation import Observation, recent_window_s
from slascaler.spec import Engine


@dataclass(frozen=True)
class Request:
    """What one target's Observation is asked for."""

    namespace: str
    deployment: str
    pod_pattern: str  # anchored RE2 of its pods' names
    window_s: float
    need_itl: bool

    @property
    def recent_window_s(self) -> float:
        return recent_window_s(self.window_s)


def observation_for(
    metrics: EngineMetrics,
    answers: TargetAnswers,
    request: Request,
    now: float,
    labels: tuple[str, str] = ("namespace", "pod"),
) -> Observation:
    """One target's Observation from a batch's answers: its pods summed, every fault said."""
    namespace = request.namespace
    where = f"pods of {request.deployment} in namespace {namespace}"
    pods = target_pods(answers, namespace, request.pod_pattern)
    readings = {
        key: read_family(answers.families[key], family, namespace, pods)
        if key in answers.families
        else FamilyReading(None)
        for key, family in metrics.histograms.items()
    }
    gauges = read_gauges(answers.gauges, metrics.waiting, metrics.running, namespace, pods)
    counters = (
        read_counters(answers.counters, tuple(metrics.tokens.values()), namespace, pods)
        if answers.counters is not None
        else None
    )
    # A fleet younger than the window: its increases are rates over the span it served.
    window_s = gauges.served_s(request.window_s, now, oldest_sample_step_s(request.window_s))
    recent_s = min(request.recent_window_s, window_s)
    token_work = work(metrics, counters, gauges, window_s, recent_s)
    problems = [p for r in readings.values() for p in r.problems] + list(gauges.problems)
    notes = [n for r in readings.values() for n in r.notes] + list(gauges.notes)
    derived: list[str] = []

    required = [k for k in ("ttft", "queue", "prefill") if k in metrics.histograms]
    if request.need_itl:
        required.append("itl")
    if metrics.engine is Engine.SGLANG and not readings["prefill"].pods:
        required.remove("prefill")  # older releases: approximated below
    absent = [metrics.histograms[k].current for k in required if not readings[k].pods]
    if math.isnan(gauges.running):
        absent.append(metrics.running.current)
    if absent:
        problems.append(_absent_hint(metrics, absent, pods, readings, gauges, where, labels))

    histograms = {k: r.histogram for k, r in readings.items()}
    ttft, queue = histograms.get("ttft"), histograms.get("queue")
    prefill = histograms.get("prefill")
    if metrics.engine is Engine.TGI:
        prefill, ttft, notes_tgi = tgi_prefill_and_ttft(queue, prefill)
        derived += notes_tgi
    elif metrics.engine is Engine.SGLANG and not readings["prefill"].pods:
        prefill, notes_sglang = sglang_prefill(ttft, queue)
        derived += notes_sglang
    if gauges.waiting_series is not None and gauges.waiting_series is not metrics.waiting.current:
        notes.append(
            f"waiting requests read from {gauges.waiting_series} "
            f"({gauges.waiting_series.releases}): it also counts requests waiting for other "
            f"reasons than capacity; {metrics.waiting.current} counts only those"
        )
    requests_seen = ttft.total if ttft is not None else math.nan
    newest = gauges.newest
    return Observation(
        observed_at=min(now, newest) if newest is not None else now,
        window_s=window_s,
        ttft=ttft,
        queue=queue,
        prefill=prefill,
        itl=histograms.get("itl"),
        prompt_tokens=histograms.get("prompt_tokens"),
        request_rate=requests_seen / window_s,
        waiting=gauges.waiting,
        running=gauges.running,
        reporting_pods=round(gauges.reporting_pods),
        waiting_now=gauges.waiting_now,
        prompt_token_rate=token_work.prompt_token_rate,
        generation_token_rate=token_work.generation_token_rate,
        recent_window_s=token_work.recent_window_s,
        recent_request_rate=token_work.recent_request_rate,
        recent_waiting_growth=token_work.recent_waiting_growth,
        problems=tuple(dict.fromkeys(problems)),
        derived=(*derived, *token_work.derived),
        notes=tuple(dict.fromkeys((*notes, *token_work.notes))),
    )


def _absent_hint(
    metrics: EngineMetrics,
    absent: list[Series],
    pods: frozenset[str],
    readings: Mapping[str, FamilyReading],
    gauges: GaugeReading,
    where: str,
    labels: tuple[str, str],
) -> str:
    names = ", ".join(s.name for s in absent)
    if not pods:
        hint = (
            f"no {names} series from {where} (is Prometheus scraping them with the "
            f"'{labels[0]}' and '{labels[1]}' labels?)"
        )
        if metrics.enable:
            hint += f"; {metrics.name} exports metrics only when started with {metrics.enable}"
        return hint
    present = [r.series.name for r in readings.values() if r.series is not None and r.pods]
    if gauges.pods and not math.isnan(gauges.running):
        present.append(metrics.running.current.name)
    releases = "; ".join(f"{s.name}: {s.releases}" for s in absent if s.releases)
    return (
        f"no {names} series from {where}, though they export {', '.join(present) or 'others'}: "
        f"the labels are right; the engine creates a histogram only once it has observed a "
        f"value, or this release does not export it" + (f" ({releases})" if releases else "")
    )
