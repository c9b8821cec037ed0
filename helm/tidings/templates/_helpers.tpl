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

{{/* worker.processes, checked: `tidings worker --processes` takes 1..64. */}}
{{- define "tidings.processes" -}}
{{- $count := toString .Values.worker.processes }}
{{- if or (not (regexMatch "^[0-9]{1,2}$" $count)) (lt (atoi $count) 1) (gt (atoi $count) 64) }}
{{- fail (printf "worker.processes must be a whole number from 1 to 64 (worker processes per pod), not %s" $count) }}
{{- end }}
{{- atoi $count }}
{{- end }}

{{/* worker.terminationGracePeriodSeconds, checked: the worker's stop grace (1..3600 s) is 5 s less. */}}
{{- define "tidings.terminationGrace" -}}
{{- $seconds := toString .Values.worker.terminationGracePeriodSeconds }}
{{- if or (not (regexMatch "^[0-9]{1,5}$" $seconds)) (lt (atoi $seconds) 6) (gt (atoi $seconds) 3605) }}
{{- fail (printf "worker.terminationGracePeriodSeconds must be a whole number of seconds from 6 to 3605 (the worker exits 5 s before the kill), not %s" $seconds) }}
{{- end }}
{{- atoi $seconds }}
{{- end }}

{{/* Non-empty when the workers serve their HTTP port: for metrics, or for the probes. */}}
{{- define "tidings.httpPort" -}}
{{- if or .Values.metrics.enabled .Values.probes.enabled }}true{{ end }}
{{- end }}

{{/*
Environment shared by the workers and the topics Job: the bootstrap servers and the Kafka
settings of .Values.kafka as TIDINGS_KAFKA_<PROPERTY> (docs/kafka.md: "." is "_", "_" is
"__"). Secrets only through secretKeyRef; files are mounted by tidings.kafkaVolumeMounts.
*/}}
{{- define "tidings.env" -}}
{{- $kafka := .Values.kafka }}
{{- include "tidings.kafkaChecks" . -}}
- name: TIDINGS_BOOTSTRAP
  value: {{ required "kafka.bootstrap is required: Kafka bootstrap servers, host:port[,...]" .Values.kafka.bootstrap | quote }}
{{- with $kafka.securityProtocol }}
- name: TIDINGS_KAFKA_SECURITY_PROTOCOL
  value: {{ . | quote }}
{{- end }}
{{- with $kafka.saslMechanism }}
- name: TIDINGS_KAFKA_SASL_MECHANISM
  value: {{ . | quote }}
{{- end }}
{{- with $kafka.credentials.existingSecret }}
- name: TIDINGS_KAFKA_SASL_USERNAME
  {{- if $kafka.credentials.username }}
  value: {{ $kafka.credentials.username | quote }}
  {{- else }}
  valueFrom:
    secretKeyRef:
      name: {{ . | quote }}
      key: {{ $kafka.credentials.usernameKey | quote }}
  {{- end }}
- name: TIDINGS_KAFKA_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ . | quote }}
      key: {{ $kafka.credentials.passwordKey | quote }}
{{- end }}
{{- if or $kafka.tls.ca.secretName $kafka.tls.ca.configMapName }}
- name: TIDINGS_KAFKA_SSL_CA_LOCATION
  value: {{ printf "%s/ca/%s" $kafka.tls.mountPath $kafka.tls.ca.key | quote }}
{{- end }}
{{- with $kafka.tls.clientCert.secretName }}
- name: TIDINGS_KAFKA_SSL_CERTIFICATE_LOCATION
  value: {{ printf "%s/client/%s" $kafka.tls.mountPath $kafka.tls.clientCert.certKey | quote }}
- name: TIDINGS_KAFKA_SSL_KEY_LOCATION
  value: {{ printf "%s/client/%s" $kafka.tls.mountPath $kafka.tls.clientCert.keyKey | quote }}
{{- if $kafka.tls.clientCert.keyPasswordKey }}
- name: TIDINGS_KAFKA_SSL_KEY_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ . | quote }}
      key: {{ $kafka.tls.clientCert.keyPasswordKey | quote }}
{{- end }}
{{- end }}
{{- with $kafka.configSecret.name }}
- name: TIDINGS_KAFKA_CONFIG
  value: {{ printf "/etc/tidings/kafka-config/%s" $kafka.configSecret.key | quote }}
{{- end }}
{{- with $kafka.tokenProvider }}
- name: TIDINGS_KAFKA_TIDINGS_OAUTH_TOKEN_PROVIDER
  value: {{ . | quote }}
{{- end }}
{{- range $property, $value := $kafka.properties }}
- name: {{ printf "TIDINGS_KAFKA_%s" ($property | replace "_" "__" | replace "." "_" | upper) }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- with .Values.env }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The Kafka values, checked: a mistake here would only show as a worker that cannot log in. */}}
{{- define "tidings.kafkaChecks" -}}
{{- $kafka := .Values.kafka }}
{{- $protocol := $kafka.securityProtocol | default "" | upper }}
{{- if and $protocol (not (has $protocol (list "PLAINTEXT" "SSL" "SASL_PLAINTEXT" "SASL_SSL"))) }}
{{- fail (printf "kafka.securityProtocol must be PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, not %q" $kafka.securityProtocol) }}
{{- end }}
{{- if and $kafka.tls.ca.secretName $kafka.tls.ca.configMapName }}
{{- fail "kafka.tls.ca: set secretName or configMapName, not both" }}
{{- end }}
{{- if and (or $kafka.tls.ca.secretName $kafka.tls.ca.configMapName $kafka.tls.clientCert.secretName) (has $protocol (list "PLAINTEXT" "SASL_PLAINTEXT")) }}
{{- fail (printf "kafka.tls is set but kafka.securityProtocol is %s: use SSL or SASL_SSL" $protocol) }}
{{- end }}
{{- if and $kafka.credentials.existingSecret (not $kafka.saslMechanism) (not $kafka.configSecret.name) }}
{{- fail "kafka.credentials.existingSecret needs kafka.saslMechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)" }}
{{- end }}
{{- range $property, $value := $kafka.properties }}
{{- $name := lower $property }}
{{- if or (hasSuffix "password" $name) (hasSuffix "secret" $name) (has $name (list "sasl.jaas.config" "ssl.key.pem" "ssl.keystore.key" "sasl.oauthbearer.config" "sasl.oauthbearer.assertion.private.key.pem")) }}
{{- fail (printf "kafka.properties.%s is a secret: it does not belong in values; put it in a Secret (kafka.credentials, kafka.configSecret, or envFrom)" $property) }}
{{- end }}
{{- end }}
{{- end }}

{{/* Read-only mounts of the Kafka CA, client certificate and properties file, if any. */}}
{{- define "tidings.kafkaVolumeMounts" -}}
{{- $kafka := .Values.kafka }}
{{- if or $kafka.tls.ca.secretName $kafka.tls.ca.configMapName }}
- name: kafka-ca
  mountPath: {{ printf "%s/ca" $kafka.tls.mountPath }}
  readOnly: true
{{- end }}
{{- if $kafka.tls.clientCert.secretName }}
- name: kafka-client-cert
  mountPath: {{ printf "%s/client" $kafka.tls.mountPath }}
  readOnly: true
{{- end }}
{{- if $kafka.configSecret.name }}
- name: kafka-config
  mountPath: /etc/tidings/kafka-config
  readOnly: true
{{- end }}
{{- end }}

{{/*
The volumes of those mounts: only the keys named are projected (a Strimzi user Secret also
holds user.p12 and user.password, which no worker needs), readable by the pod's group only.
*/}}
{{- define "tidings.kafkaVolumes" -}}
{{- $kafka := .Values.kafka }}
{{- with $kafka.tls.ca.secretName }}
- name: kafka-ca
  secret:
    secretName: {{ . | quote }}
    defaultMode: 0440
    items:
      - key: {{ $kafka.tls.ca.key | quote }}
        path: {{ $kafka.tls.ca.key | quote }}
{{- end }}
{{- with $kafka.tls.ca.configMapName }}
- name: kafka-ca
  configMap:
    name: {{ . | quote }}
    defaultMode: 0444
    items:
      - key: {{ $kafka.tls.ca.key | quote }}
        path: {{ $kafka.tls.ca.key | quote }}
{{- end }}
{{- with $kafka.tls.clientCert.secretName }}
- name: kafka-client-cert
  secret:
    secretName: {{ . | quote }}
    defaultMode: 0440
    items:
      - key: {{ $kafka.tls.clientCert.certKey | quote }}
        path: {{ $kafka.tls.clientCert.certKey | quote }}
      - key: {{ $kafka.tls.clientCert.keyKey | quote }}
        path: {{ $kafka.tls.clientCert.keyKey | quote }}
{{- end }}
{{- with $kafka.configSecret.name }}
- name: kafka-config
  secret:
    secretName: {{ . | quote }}
    defaultMode: 0440
    items:
      - key: {{ $kafka.configSecret.key | quote }}
        path: {{ $kafka.configSecret.key | quote }}
{{- end }}
{{- end }}
