"""slascaler: a Kubernetes operator that holds latency SLAs for LLM inference Deployments.

Layers (checked by .importlinter): `model` and `policy` are the pure core; `spec` parses the
InferenceSLA; `engines` names each engine's metrics and flags; `cli` is the command line.
"""

__version__ = "0.1.0"
