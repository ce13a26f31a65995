{{/* The chart's name, overridable, as Helm's conventions have it. */}}
{{- define "slascaler.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name: the release name when it already contains the chart's. */}}
{{- define "slascaler.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels that select the operator's pods; never change across upgrades. */}}
{{- define "slascaler.selectorLabels" -}}
app.kubernetes.io/name: {{ include "slascaler.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels on every object of the release. */}}
{{- define "slascaler.labels" -}}
{{ include "slascaler.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: slascaler
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "slascaler.serviceAccountName" -}}
{{- if .Values.serviceAccountCreate -}}
{{- default (include "slascaler.fullname" .) .Values.serviceAccountName -}}
{{- else -}}
{{- required "serviceAccountName is required when serviceAccountCreate is false" .Values.serviceAccountName -}}
{{- end -}}
{{- end -}}

{{/* Kopf peering is on when more than one replica runs. */}}
{{- define "slascaler.peering" -}}
{{- if gt (int .Values.replicaCount) 1 -}}{{ include "slascaler.fullname" . }}{{- end -}}
{{- end -}}

{{/*
The RBAC rules of the operator, with the reason for each verb.
*/}}
{{- define "slascaler.rules" -}}
# InferenceSLAs: watched by Kopf (list, watch) and read fresh before each decision (get);
# patch only for Kopf's finalizer, which lets it stop an object's timer when it is deleted.
- apiGroups: ["slascaler.io"]
  resources: ["inferenceslas"]
  verbs: ["get", "list", "watch", "patch"]
# Their status: written after each evaluation (patch) and read back (get).
- apiGroups: ["slascaler.io"]
  resources: ["inferenceslas/status"]
  verbs: ["get", "patch"]
# Target Deployments: read to decide (get); engine flags set in the pod template (patch).
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "patch"]
# Replicas through the scale subresource, as kubectl scale and the HPA do.
- apiGroups: ["apps"]
  resources: ["deployments/scale"]
  verbs: ["get", "patch"]
# Pods of the target: counted when Pending unschedulable (no GPU left); their nodes say the
# GPU; their names select the engines' series.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list"]
# ReplicaSets: the target's pods are those of the ReplicaSets it owns (not a name prefix).
- apiGroups: ["apps"]
  resources: ["replicasets"]
  verbs: ["list"]
# Events on InferenceSLAs: one per action and per change of hold reason.
- apiGroups: ["", "events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
# Other autoscalers of the same Deployment, which slascaler then leaves alone.
- apiGroups: ["autoscaling"]
  resources: ["horizontalpodautoscalers"]
  verbs: ["list"]
- apiGroups: ["keda.sh"]
  resources: ["scaledobjects"]
  verbs: ["list"]
{{- end -}}

{{/*
Cluster-scoped reads of the operator (read-only), with the reason for each.
*/}}
{{- define "slascaler.clusterReadRules" -}}
# Nodes: the GPU model and memory in their labels (NVIDIA GPU feature discovery), on which
# an engine's default batch and chunk size depend when the Deployment does not set them.
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["get"]
# CRDs: Kopf watches them to notice its resources being installed or upgraded (without this
# read it logs a 403 on every retry).
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["get", "list", "watch"]
{{- end -}}

{{/*
The rules for shared GPU pools (gpuPoolsEnabled), with the reason for each verb. GPUPools and
nodes are cluster-scoped, so these go in a ClusterRole even when the operator serves listed
namespaces only (clusterrole-gpupools.yaml).
*/}}
{{- define "slascaler.poolClusterRules" -}}
# GPUPools: listed once a cycle by the pool coordinator, which arbitrates each.
- apiGroups: ["slascaler.io"]
  resources: ["gpupools"]
  verbs: ["list"]
# Their status: the arbitration's outcome, which is also its memory.
- apiGroups: ["slascaler.io"]
  resources: ["gpupools/status"]
  verbs: ["patch"]
# Nodes: a pool's limit from the allocatable GPUs of the nodes its nodeSelector matches.
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["list"]
{{- end -}}

{{/* The namespaced rule for shared GPU pools, granted where the operator's rules are. */}}
{{- define "slascaler.poolNamespacedRules" -}}
# ResourceQuotas: a pool's limit from a quota's hard requests of GPUs (read by name).
- apiGroups: [""]
  resources: ["resourcequotas"]
  verbs: ["get"]
{{- end -}}
