"""Kopf glue: which events run a reconcile, and how the operator process starts.

- A timer per InferenceSLA (every `SLASCALER_RECONCILE_INTERVAL`) submits it to the
  evaluation cycle (`cycle`), which batches the Prometheus queries of everything falling due
  together and runs `Reconciler.reconcile` concurrently, each within a deadline; the
  handlers are async and return at once, so no Kopf worker thread waits on an evaluation.
- A spec change (metadata.generation ahead of status.observedGeneration, which covers
  creation too) is submitted at once, so `kubectl apply` gets a status within a batch window.
- `SLASCALER_SELECTOR` (a label selector) narrows both handlers to one shard's
  InferenceSLAs; releases with disjoint selectors or `watchNamespaces` split the load, each
  with its own peering.
- A deletion drops the SLA's telemetry series. Kopf puts its finalizer on every
  InferenceSLA that has a timer, so that the timer is stopped before the object goes; with
  the operator uninstalled, a deletion waits for that finalizer to be removed
  (docs/operations.md says how). slascaler itself owns nothing it would have to clean up.
- Every reconcile of one object reads the object fresh from the API and holds a per-object
  lock, so the timer and an event never decide at once on stale status (which could repeat
  an action). An API server that does not answer (every call has a timeout, `kube.clients`)
  or refuses that read costs one evaluation and a warning in the log, never a traceback;
  the reconcile itself turns API failures into conditions.
- Shared GPU pools (GPUPool): before an evaluation, the pool coordinator (`pools`)
  arbitrates every pool if its last arbitration is an interval old, so each InferenceSLA
  of a pool decides with a fresh grant. No Kopf handler watches GPUPools: the arbitration
  runs in the InferenceSLAs' own cycle (and so only on the active peer).

Kopf itself: peering for HA (one active instance when `SLASCALER_PEERING` is set), its
liveness endpoint (`/healthz`), namespace scoping, and no Kopf-posted events or annotations
on the objects (the reconcile posts its own events).

Called by `slascaler run` (cli).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import kopf

from slascaler.cycle import Cycle, Due
from slascaler.kube.api import GROUP, PLURAL, VERSION, KubeAPI
from slascaler.kube.clients import Clients
from slascaler.kube.errors import KubeError, NotFound
from slascaler.metrics.prometheus import PrometheusSettings, PrometheusSource
from slascaler.metrics.source import MetricSource
from slascaler.pools import PoolCoordinator
from slascaler.reconcile import Reconciler
from slascaler.settings import LabelRequirement, Settings, selector_matches
from slascaler.spec import SLASpec, SpecError, parse_spec
from slascaler.telemetry import Telemetry

log = logging.getLogger("slascaler")


class Operator:
    """The reconciler, and the per-object locks that serialize its runs."""

    def __init__(
        self, reconciler: Reconciler, clients: KubeAPI, pools: PoolCoordinator | None = None
    ) -> None:
        self.reconciler = reconciler
        self.clients = clients
        self.pools = pools
        self._locks: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)
        self._guard = threading.Lock()

    def _lock(self, uid: str) -> threading.Lock:
        with self._guard:
            return self._locks[uid]

    def evaluate(
        self,
        namespace: str,
        name: str,
        uid: str,
        spec_changed: bool = False,
        source: MetricSource | None = None,
    ) -> None:
        """Reconcile now (with `source`'s metrics, else the reconciler's); with
        `spec_changed`, only if the fresh object still needs it."""
        with self._lock(uid):
            try:
                sla = self.clients.get_inference_sla(namespace, name)
            except NotFound:
                return  # deleted meanwhile
            except KubeError as error:  # no answer, or refused: the next interval tries again
                log.warning("%s/%s: not evaluated: %s", namespace, name, error)
                return
            meta = sla["metadata"]
            if meta.get("uid") != uid or meta.get("deletionTimestamp"):
                return
            seen = (sla.get("status") or {}).get("observedGeneration")
            if spec_changed and meta.get("generation") == seen:
                return  # another run already evaluated this generation
            if self.pools is not None:
                self.pools.refresh_if_due()
            self.reconciler.reconcile(sla, source)

    def forget(self, namespace: str, name: str, uid: str) -> None:
        with self._guard:
            self._locks.pop(uid, None)
        self.reconciler.telemetry.forget(namespace, name)


def label_filter(selector: tuple[LabelRequirement, ...]) -> dict[str, Any]:
    """Kopf's label filter for a label selector (requirements on one key are ANDed)."""
    by_key: dict[str, list[LabelRequirement]] = defaultdict(list)
    for requirement in selector:
        by_key[requirement.key].append(requirement)

    def matcher(requirements: list[LabelRequirement]) -> Any:
        def matches(value: str | None, **_: Any) -> bool:
            return all(r.matches(value) for r in requirements)

        return matches

    return {key: matcher(requirements) for key, requirements in by_key.items()}


def _spec(raw: Mapping[str, Any] | None) -> SLASpec | None:
    try:
        return parse_spec(raw or {})
    except SpecError:
        return None  # the evaluation itself says why (Ready=False, SpecInvalid)


def register(
    registry: kopf.OperatorRegistry, settings: Settings, operator: Operator, cycle: Cycle
) -> None:
    """Register the handlers on `registry` with the interval and shard from `settings`."""
    labels = label_filter(settings.selector) or None

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # The same credentials as the kubernetes client: in-cluster, else KUBECONFIG.
        return kopf.login_via_client(**kwargs)

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.enabled = False
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
            prefix="slascaler.io"
        )
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix="slascaler.io"
        )
        settings.watching.server_timeout = 300
        settings.execution.max_workers = 8
        cycle.start()

    @kopf.on.cleanup(registry=registry)
    def stop(**_: Any) -> None:
        cycle.stop()

    @kopf.timer(
        GROUP,
        VERSION,
        PLURAL,
        id="evaluate",
        interval=settings.reconcile_interval_s,
        initial_delay=min(5.0, settings.reconcile_interval_s),
        sharp=True,
        labels=labels,
        registry=registry,
    )
    async def evaluate(
        namespace: str | None, name: str, uid: str, spec: Any, stopped: Any = None, **_: Any
    ) -> None:
        if namespace is not None:  # InferenceSLA is namespaced; never None in practice
            cycle.submit(
                Due(namespace, name, uid, _spec(spec), time.time(), stopped=lambda: bool(stopped))
            )

    @kopf.on.event(GROUP, VERSION, PLURAL, labels=labels, registry=registry)
    async def changed(event: Any, namespace: str | None, name: str, uid: str, **_: Any) -> None:
        if namespace is None:
            return
        if event.get("type") == "DELETED":
            operator.forget(namespace, name, uid)
            cycle.forget(uid)
            return
        body = event.get("object") or {}
        generation = body.get("metadata", {}).get("generation")
        seen = (body.get("status") or {}).get("observedGeneration")
        if generation is not None and generation != seen:
            due = Due(namespace, name, uid, _spec(body.get("spec")), time.time(), True)
            cycle.submit(due)


def run(settings: Settings) -> None:
    """Start the operator and block until it is stopped (SIGINT/SIGTERM)."""
    kopf.configure(verbose=settings.log_level == "DEBUG")
    logging.getLogger().setLevel(settings.log_level)
    if settings.log_level != "DEBUG":
        # Kopf logs every handler run per object ("Handler ... succeeded"): with timers and
        # status writes that is several lines per evaluation. The reconcile logs its own.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    clients = Clients.from_config(pool_size=settings.max_concurrent_evaluations + 8)
    token = (
        settings.prometheus_bearer_token_file.read_text(encoding="utf-8").strip()
        if settings.prometheus_bearer_token_file
        else None
    )
    telemetry = Telemetry()
    source = PrometheusSource(
        PrometheusSettings(
            url=settings.prometheus_url,
            timeout_s=settings.prometheus_timeout_s,
            retries=settings.prometheus_retries,
            namespace_label=settings.namespace_label,
            pod_label=settings.pod_label,
            bearer_token=token,
            verify_tls=not settings.prometheus_insecure_skip_verify,
            deadline_s=settings.evaluation_timeout_s,
            recording_rules=settings.recording_rules,
        ),
        observer=telemetry.query_done,
    )
    if settings.metrics_port:
        telemetry.serve(settings.metrics_port, settings.bind_address)
    pools = None
    if settings.gpu_pools:
        pools = PoolCoordinator(
            clients,
            clock=time.time,
            interval_s=settings.reconcile_interval_s,
            dry_run=settings.dry_run,
            namespaces=settings.watch_namespaces,
            on_error=lambda where: telemetry.errors.labels(where).inc(),
            in_shard=lambda labels: selector_matches(settings.selector, labels),
        )
    reconciler = Reconciler(
        clients, source, telemetry, clock=time.time, dry_run=settings.dry_run, pools=pools
    )
    operator = Operator(reconciler, clients, pools)
    cycle = Cycle(
        operator.evaluate,
        source,
        telemetry,
        max_concurrency=settings.max_concurrent_evaluations,
        deadline_s=settings.evaluation_timeout_s,
        batch_window_s=settings.batch_window_s,
        max_age_s=settings.reconcile_interval_s,
    )
    registry = kopf.OperatorRegistry()
    register(registry, settings, operator, cycle)
    log.info(
        "slascaler starting: Prometheus %s, namespaces %s, selector %s, interval %gs, "
        "%d evaluations at once%s",
        settings.prometheus_url,
        ",".join(settings.watch_namespaces) or "all",
        ",".join(f"{r.key} {r.operator} {','.join(r.values)}" for r in settings.selector)
        or "none",
        settings.reconcile_interval_s,
        settings.max_concurrent_evaluations,
        ", dry run" if settings.dry_run else "",
    )
    kopf.run(
        registry=registry,
        standalone=settings.peering is None,
        peering_name=settings.peering,
        priority=settings.priority,
        liveness_endpoint=(
            f"http://{settings.bind_address}:{settings.health_port}/healthz"
            if settings.health_port
            else None
        ),
        clusterwide=not settings.watch_namespaces,
        namespaces=settings.watch_namespaces,
    )
