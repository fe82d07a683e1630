{{/* Names and labels, and the checks that refuse inconsistent values (rendering fails with the reason). */}}

{{- define "gangscale.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gangscale.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "gangscale.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gangscale.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end }}

{{- define "gangscale.labels" -}}
{{ include "gangscale.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{- define "gangscale.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gangscale.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "gangscale.leaseName" -}}
{{- default (include "gangscale.fullname" .) .Values.leaderElection.leaseName }}
{{- end }}

{{/* true when the controller reads Ray heads' GCS (and so, for token-auth clusters, their Secrets). */}}
{{- define "gangscale.rayGcs" -}}
{{- if and .Values.ray.enabled .Values.ray.gcs.enabled }}true{{ end }}
{{- end }}

{{/* Every check of the values; included by the Deployment, so any install renders it. */}}
{{- define "gangscale.validate" -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) }}
{{- fail (printf "replicaCount is %d but leaderElection.enabled is false: every replica would act. Turn leader election on or set replicaCount: 1." (int .Values.replicaCount)) }}
{{- end }}
{{- if not (has .Values.provider (list "simulated" "gke" "aws")) }}
{{- fail (printf "provider must be simulated, gke or aws, not %q" .Values.provider) }}
{{- end }}
{{- if and (include "gangscale.rayGcs" .) (not .Values.ray.gcs.namespaces) (not .Values.ray.gcs.secretsClusterWide) }}
{{- fail "ray.gcs.enabled needs the namespaces whose RayClusters' auth Secrets gangscale may read (ray.gcs.namespaces), or ray.gcs.secretsClusterWide: true to grant secrets get in every namespace" }}
{{- end }}
{{- if and .Values.ray.gcs.namespaces .Values.ray.gcs.secretsClusterWide }}
{{- fail "ray.gcs.namespaces and ray.gcs.secretsClusterWide: choose one (the cluster-wide grant covers every namespace)" }}
{{- end }}
{{- if and .Values.podDisruptionBudget.enabled (eq (kindIs "invalid" .Values.podDisruptionBudget.maxUnavailable) (kindIs "invalid" .Values.podDisruptionBudget.minAvailable)) }}
{{- fail "podDisruptionBudget: set exactly one of maxUnavailable and minAvailable (the other to null)" }}
{{- end }}
{{- end }}

{{/* The pool file's text: a mapping rendered as YAML, or a string (--set-file pools=FILE) kept as is. */}}
{{- define "gangscale.poolFile" -}}
{{- if kindIs "string" .Values.pools }}
{{- .Values.pools }}
{{- else }}
{{- toYaml .Values.pools }}
{{- end }}
{{- end }}
