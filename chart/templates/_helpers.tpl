{{/* Chart name, overridable with nameOverride. */}}
{{- define "dummy-fuse-csi.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Object-name prefix: fullnameOverride, else the release name, plus the chart name unless the release
name already contains it. Truncated so that "-node" still fits 63 characters. */}}
{{- define "dummy-fuse-csi.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 58 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 58 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 58 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels that select the plugin pods; the scenario runner kills the plugin pod by these. */}}
{{- define "dummy-fuse-csi.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dummy-fuse-csi.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: node
{{- end }}

{{/* Labels of every object. */}}
{{- define "dummy-fuse-csi.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "dummy-fuse-csi.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* repository:tag, the tag defaulting to the chart's appVersion. */}}
{{- define "dummy-fuse-csi.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Host dir of the plugin socket; kubelet finds the socket there through the registration. */}}
{{- define "dummy-fuse-csi.socketDir" -}}
{{- printf "%s/plugins/%s" .Values.kubeletDir .Values.driverName }}
{{- end }}

{{/* Image of a sidecar: fails with a clear message when its repository is not set. */}}
{{- define "dummy-fuse-csi.sidecarImage" -}}
{{- $img := index . 0 }}
{{- $key := index . 1 }}
{{- $repo := required (printf "registrar.mode=sidecar needs %s.image.repository (the upstream image name without tag)" $key) $img.repository }}
{{- printf "%s:%s" $repo $img.tag }}
{{- end }}
