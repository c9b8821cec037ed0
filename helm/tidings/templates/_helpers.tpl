{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "tidings.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: release-chart, unless the release name already contains the chart name. */}}
{{- define "tidings.fullname" -}}
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

{{- define "tidings.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "tidings.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tidings.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "tidings.labels" -}}
helm.sh/chart: {{ include "tidings.chart" . }}
{{ include "tidings.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The workers' ServiceAccount. */}}
{{- define "tidings.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tidings.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The topics Job's ServiceAccount. A pre-install hook runs before the release's own resources
exist, so with serviceAccount.create it gets its own hook-created account.
*/}}
{{- define "tidings.topicsServiceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- printf "%s-topics" (include "tidings.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "tidings.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* MODULE:APP, checked: a worker with a malformed one would only crash-loop. */}}
{{- define "tidings.app" -}}
{{- $app := required "app is required: the App as MODULE:ATTRIBUTE, e.g. examples.bank.app:app" .Values.app }}
{{- if not (regexMatch "^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$" $app) }}
{{- fail (printf "app must be MODULE:ATTRIBUTE (e.g. examples.bank.app:app), not %q" $app) }}
{{- end }}
{{- $app }}
{{- end }}

{{/* Environment shared by the workers and the topics Job. */}}
{{- define "tidings.env" -}}
- name: TIDINGS_BOOTSTRAP
  value: {{ required "kafka.bootstrap is required: Kafka bootstrap servers, host:port[,...]" .Values.kafka.bootstrap | quote }}
{{- with .Values.env }}
{{ toYaml . }}
{{- end }}
{{- end }}
