"""The Kubernetes API clients the operator uses, and raw-JSON access to them.

Objects are handled as the API server's own JSON (camelCase dicts), read with
`_preload_content=False`, so that the code reads like the manifests users write and does not
depend on the generated model classes. Built once at start-up (`Clients.from_config`) and
passed explicitly.

Used by `kube.fleet`, `kube.actuation` and `reconcile`.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

GROUP, VERSION, PLURAL = "slascaler.io", "v1alpha1", "inferenceslas"
KIND = "InferenceSLA"

Json = dict[str, Any]


@dataclass(frozen=True)
class Clients:
    api: client.ApiClient

    @classmethod
    def from_config(cls, kubeconfig: str | None = None) -> Clients:
        """In-cluster credentials when running in a pod, else the kubeconfig."""
        if kubeconfig is None:
            try:
                config.load_incluster_config()  # type: ignore[no-untyped-call]
                return cls(client.ApiClient())
            except config.ConfigException:
                pass
        return cls(config.new_client_from_config(config_file=kubeconfig))  # type: ignore[no-untyped-call]

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


def raw(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Json:
    """Call a client method and return the API server's JSON answer as a dict."""
    response = call(*args, _preload_content=False, **kwargs)
    data: Json = json.loads(response.data)
    return data


def kube_time(epoch_s: float) -> str:
    """RFC 3339 UTC with seconds, as Kubernetes writes times."""
    return dt.datetime.fromtimestamp(epoch_s, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def not_found(error: ApiException) -> bool:
    return bool(error.status == 404)


def describe(error: ApiException) -> str:
    """The API server's message from an error, else the HTTP reason."""
    try:
        body = json.loads(error.body or "{}")
        message = body.get("message")
        if isinstance(message, str) and message:
            return f"{error.status} {message}"
    except (ValueError, TypeError):
        pass
    return f"{error.status} {error.reason}"
