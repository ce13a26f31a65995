"""`KubeAPI` over the Kubernetes client library: the operator's calls, with errors translated.

Objects are read as the API server's own JSON (`_preload_content=False`), so the code does
not depend on the generated model classes. Every call carries a request timeout (the client
library sets none by default, so a frozen API server would block a worker for ever), and
every failure leaves as a `kube.errors` exception: `ApiException` by its status, a connection
error or timeout as `Unreachable`. Nothing outside this module and the Kopf wiring imports
the client library.

Built once at start-up (`Clients.from_config`) and passed explicitly; the e2e suite extends
it with helpers for the tests.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client import rest
from kubernetes.client.exceptions import ApiException

from slascaler.kube.api import (
    FIELD_MANAGER,
    GROUP,
    PLURAL,
    POOL_PLURAL,
    VERSION,
    DeploymentPatch,
    Json,
)
from slascaler.kube.errors import (
    Conflict,
    Forbidden,
    KubeError,
    NamespaceTerminating,
    NotFound,
    Unreachable,
)

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
DEFAULT_TIMEOUT_S = 10.0


def server_status(error: ApiException) -> Mapping[str, Any]:
    """The API server's Status object from an error's body; empty when the body is not one."""
    try:
        body = json.loads(error.body or "{}")
    except (ValueError, TypeError):
        return {}
    return body if isinstance(body, dict) else {}


def server_message(error: ApiException) -> str:
    """The API server's message from an error, else the HTTP reason."""
    message = server_status(error).get("message")
    return message if isinstance(message, str) and message else str(error.reason)


def namespace_terminating(error: ApiException) -> bool:
    """Whether a 403 is the namespace lifecycle admission's: the namespace is being deleted
    (k8s.io/apiserver's namespace/lifecycle plugin adds the cause NamespaceTerminating)."""
    details = server_status(error).get("details")
    causes = details.get("causes") if isinstance(details, dict) else None
    return isinstance(causes, list) and any(
        isinstance(cause, dict) and cause.get("reason") == "NamespaceTerminating"
        for cause in causes
    )


@contextmanager
def translated_errors(what: str) -> Iterator[None]:
    """Turn the client library's exceptions into `kube.errors` ones, naming the call."""
    try:
        yield
    except ApiException as error:
        message = f"{what}: {server_message(error)}"
        if error.status == 404:
            raise NotFound(message) from None
        if error.status == 409:
            raise Conflict(message) from None
        if error.status == 403:
            if namespace_terminating(error):
                raise NamespaceTerminating(message) from None
            raise Forbidden(message) from None
        if error.status in (0, None):  # the library's way of saying there was no response
            raise Unreachable(message) from None
        raise KubeError(int(error.status), message) from None
    except (urllib3.exceptions.HTTPError, OSError) as error:
        raise Unreachable(f"{what}: {type(error).__name__}: {error}") from None


@dataclass(frozen=True)
class Clients:
    """The operator's `KubeAPI` over one `ApiClient` (one identity, one cluster)."""

    api: client.ApiClient
    timeout_s: float = field(default=DEFAULT_TIMEOUT_S, kw_only=True)

    @classmethod
    def from_config(
        cls,
        kubeconfig: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        pool_size: int | None = None,
    ) -> Clients:
        """In-cluster credentials when running in a pod, else the kubeconfig. `pool_size`:
        connections kept open (at least the evaluations running at once, else each one past
        the pool opens, and pays for, a TLS connection of its own)."""
        api: client.ApiClient | None = None
        if kubeconfig is None:
            try:
                config.load_incluster_config()  # type: ignore[no-untyped-call]
                api = client.ApiClient()
            except config.ConfigException:
                pass
        if api is None:
            api = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        if pool_size is not None:
            api.configuration.connection_pool_maxsize = pool_size
            api.rest_client = rest.RESTClientObject(api.configuration)
        return cls(api, timeout_s=timeout_s)

    @property
    def apps(self) -> client.AppsV1Api:
        return client.AppsV1Api(self.api)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def autoscaling(self) -> client.AutoscalingV2Api:
        return client.AutoscalingV2Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def _json(self, what: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Json:
        with translated_errors(what):
            response = call(
                *args, _preload_content=False, _request_timeout=self.timeout_s, **kwargs
            )
            data: Json = json.loads(response.data)
        return data

    # -- KubeAPI ----------------------------------------------------------------------

    def get_deployment(self, namespace: str, name: str) -> Json:
        return self._json(
            f"reading Deployment {namespace}/{name}",
            self.apps.read_namespaced_deployment, name, namespace,
        )  # fmt: skip

    def patch_deployment(self, namespace: str, name: str, patch: DeploymentPatch) -> Json:
        body: Json = {"metadata": {"resourceVersion": patch.resource_version}}
        spec: Json = {}
        if patch.replicas is not None:
            spec["replicas"] = patch.replicas
        if patch.container is not None:
            container: Json = {"name": patch.container.name}
            if patch.container.args is not None:
                container["args"] = list(patch.container.args)
            if patch.container.command is not None:
                container["command"] = list(patch.container.command)
            if patch.container.env:  # merged by name: the other variables stay as they are
                container["env"] = [{"name": n, "value": v} for n, v in patch.container.env]
            spec["template"] = {"spec": {"containers": [container]}}
        body["spec"] = spec
        return self._json(
            f"patching Deployment {namespace}/{name}",
            self.apps.patch_namespaced_deployment, name, namespace, body,
            field_manager=FIELD_MANAGER, _content_type=STRATEGIC_MERGE_PATCH,
        )  # fmt: skip

    def list_pods(self, namespace: str, label_selector: str) -> list[Json]:
        items: list[Json] = self._json(
            f"listing pods in {namespace}",
            self.core.list_namespaced_pod, namespace, label_selector=label_selector,
        )["items"]  # fmt: skip
        return items

    def list_replica_sets(self, namespace: str, label_selector: str) -> list[Json]:
        items: list[Json] = self._json(
            f"listing ReplicaSets in {namespace}",
            self.apps.list_namespaced_replica_set, namespace, label_selector=label_selector,
        )["items"]  # fmt: skip
        return items

    def get_node(self, name: str) -> Json:
        return self._json(f"reading node {name}", self.core.read_node, name)

    def list_horizontal_pod_autoscalers(self, namespace: str) -> list[Json]:
        items: list[Json] = self._json(
            f"listing HorizontalPodAutoscalers in {namespace}",
            self.autoscaling.list_namespaced_horizontal_pod_autoscaler, namespace,
        )["items"]  # fmt: skip
        return items

    def list_scaled_objects(self, namespace: str) -> list[Json]:
        items: list[Json] = self._json(
            f"listing KEDA ScaledObjects in {namespace}",
            self.custom.list_namespaced_custom_object,
            "keda.sh", "v1alpha1", namespace, "scaledobjects",
        )["items"]  # fmt: skip
        return items

    def get_inference_sla(self, namespace: str, name: str) -> Json:
        return self._json(
            f"reading InferenceSLA {namespace}/{name}",
            self.custom.get_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name,
        )  # fmt: skip

    def patch_inference_sla_status(
        self, namespace: str, name: str, status: Mapping[str, Any]
    ) -> None:
        self._json(
            f"writing the status of InferenceSLA {namespace}/{name}",
            self.custom.patch_namespaced_custom_object_status,
            GROUP, VERSION, namespace, PLURAL, name, {"status": dict(status)},
            field_manager=FIELD_MANAGER, _content_type=MERGE_PATCH,
        )  # fmt: skip

    def create_event(self, namespace: str, event: Json) -> None:
        self._json(
            f"posting an Event in {namespace}",
            self.core.create_namespaced_event, namespace, event,
        )  # fmt: skip

    # -- PoolAPI ------------------------------------------------------------------------

    def list_gpu_pools(self) -> list[Json]:
        items: list[Json] = self._json(
            "listing GPUPools",
            self.custom.list_cluster_custom_object, GROUP, VERSION, POOL_PLURAL,
        )["items"]  # fmt: skip
        return items

    def patch_gpu_pool_status(self, name: str, status: Mapping[str, Any]) -> None:
        self._json(
            f"writing the status of GPUPool {name}",
            self.custom.patch_cluster_custom_object_status,
            GROUP, VERSION, POOL_PLURAL, name, {"status": dict(status)},
            field_manager=FIELD_MANAGER, _content_type=MERGE_PATCH,
        )  # fmt: skip

    def list_inference_slas(self, namespace: str | None) -> list[Json]:
        call: Callable[..., Any] = self.custom.list_cluster_custom_object
        args: tuple[str, ...] = (GROUP, VERSION, PLURAL)
        if namespace is not None:
            call = self.custom.list_namespaced_custom_object
            args = (GROUP, VERSION, namespace, PLURAL)
        items: list[Json] = self._json(
            f"listing InferenceSLAs in {namespace or 'every namespace'}", call, *args
        )["items"]
        return items

    def list_nodes(self, label_selector: str) -> list[Json]:
        items: list[Json] = self._json(
            "listing nodes", self.core.list_node, label_selector=label_selector
        )["items"]
        return items

    def get_resource_quota(self, namespace: str, name: str) -> Json:
        return self._json(
            f"reading ResourceQuota {namespace}/{name}",
            self.core.read_namespaced_resource_quota, name, namespace,
        )  # fmt: skip
