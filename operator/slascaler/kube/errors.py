"""What can go wrong talking to the Kubernetes API, in the operator's own terms.

The client library's exceptions (`ApiException`, urllib3's connection and timeout errors)
never leave `kube.clients`: every call there turns them into one of these, so that the
reconcile loop and the Kopf wiring handle API failures without knowing the library, and the
in-memory cluster of the simulator raises exactly the same errors.

- `NotFound` (404): the object does not exist.
- `Forbidden` (403): RBAC does not grant the call.
- `NamespaceTerminating` (403): the namespace is being deleted, so nothing new may be created
  in it (an Event on an InferenceSLA whose namespace goes away); not a fault.
- `Conflict` (409): a write's resourceVersion precondition failed (someone wrote since the
  read), or an object of that name already exists.
- `Unreachable`: no answer at all (connection refused, reset, timed out).
- `KubeError`: any other refusal (403, 422, 500 …), with the server's message.
"""

from __future__ import annotations


class KubeError(Exception):
    """The API server refused or failed a request; `str()` gives status and message."""

    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(f"{status} {message}" if status is not None else message)
        self.status = status
        self.message = message


class NotFound(KubeError):
    def __init__(self, message: str) -> None:
        super().__init__(404, message)


class Forbidden(KubeError):
    def __init__(self, message: str) -> None:
        super().__init__(403, message)


class NamespaceTerminating(Forbidden):
    """The namespace lifecycle admission refused a create: the namespace is being deleted."""


class Conflict(KubeError):
    def __init__(self, message: str) -> None:
        super().__init__(409, message)


class Unreachable(KubeError):
    """No answer from the API server (connection refused or reset, timeout)."""

    def __init__(self, message: str) -> None:
        super().__init__(None, message)
