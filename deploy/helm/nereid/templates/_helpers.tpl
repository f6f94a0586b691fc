{{/*
Names and labels shared by the templates.
*/}}

{{/* The chart's name: "nereid" unless nameOverride. */}}
{{- define "nereid.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The base of every resource name: the release name, with the chart name added when the
release name does not contain it; fullnameOverride replaces it. At most 63 characters. */}}
{{- define "nereid.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "nereid.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The operator's resources: "<fullname>-operator". */}}
{{- define "nereid.operator.fullname" -}}
{{- printf "%s-operator" (include "nereid.fullname" . | trunc 54 | trimSuffix "-") -}}
{{- end -}}

{{/* The plain server's resources: "<fullname>-server". */}}
{{- define "nereid.server.fullname" -}}
{{- printf "%s-server" (include "nereid.fullname" . | trunc 56 | trimSuffix "-") -}}
{{- end -}}

{{/* The operator's ServiceAccount. */}}
{{- define "nereid.operator.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create -}}
{{- default (include "nereid.operator.fullname" .) .Values.operator.serviceAccount.name -}}
{{- else -}}
{{- required "operator.serviceAccount.name is required when operator.serviceAccount.create is false" .Values.operator.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* "name-version" of the chart, for the helm.sh/chart label. */}}
{{- define "nereid.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The labels that select a component's pods: pass (dict "context" $ "component" "server"). */}}
{{- define "nereid.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nereid.name" .context }}
app.kubernetes.io/instance: {{ .context.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Every label of a component's resources. */}}
{{- define "nereid.labels" -}}
{{ include "nereid.selectorLabels" . }}
app.kubernetes.io/version: {{ .context.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .context.Release.Service }}
app.kubernetes.io/part-of: nereid
helm.sh/chart: {{ include "nereid.chart" .context }}
{{- end -}}

{{/* The Secret with the S3 credentials, if any: s3.existingSecret, else the one the chart
creates from secret.id and secret.key. */}}
{{- define "nereid.s3.secretName" -}}
{{- if .Values.s3.existingSecret -}}
{{- .Values.s3.existingSecret -}}
{{- else if and .Values.secret.id .Values.secret.key -}}
{{- printf "%s-aws-credentials" (include "nereid.fullname" . | trunc 46 | trimSuffix "-") -}}
{{- end -}}
{{- end -}}

{{/* The prometheus.io annotations of a pod that serves /metrics on a port. */}}
{{- define "nereid.prometheusAnnotations" -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ . | quote }}
prometheus.io/path: /metrics
{{- end -}}
