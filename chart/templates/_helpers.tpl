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

{{/* The FUSE server flags of csi-plugin (--fuse-server...), one list item each; none for dummy-fuse, the default.
The sidecar mode's pods run `csi-plugin sidecar` with the same flags (the scenario runner copies them). */}}
{{- define "dummy-fuse-csi.fuseServerArgs" -}}
{{- $server := .Values.csi.plugin.fuseServer }}
{{- if include "dummy-fuse-csi.userServer" . }}
{{- include "dummy-fuse-csi.userServerFlags" (list . "fuse-server") }}
{{- else if ne $server "dummy-fuse" }}
{{- if eq .Values.csi.plugin.fuseMode "keeper" }}
{{- fail (printf "csi.plugin.fuseServer=%s cannot run in csi.plugin.fuseMode=keeper: the keeper takes over live FUSE connections, which only dummy-fuse can" $server) }}
{{- end }}
{{- if and .Values.csi.plugin.directIO (not (has .Values.csi.plugin.fuseMode (list "relay" "relay-keeper"))) }}
{{- fail (printf "csi.plugin.directIO=true: %s has no direct-I/O mode (in csi.plugin.fuseMode=relay or relay-keeper it is the relay's)" $server) }}
{{- end }}
- --fuse-server={{ $server }}
- --fuse-server-path=/usr/local/bin/{{ $server }}
{{- if eq $server "gcsfuse" }}
- --fuse-server-opt=endpoint={{ include "dummy-fuse-csi.gcsEndpoint" . }}
- --fuse-server-opt=metadata-cache-ttl-secs={{ .Values.gcsfuse.metadataCacheTTLSecs }}
{{- else if eq $server "squashfuse" }}
{{- /* The squashfs image of the served tree that make image puts into the image. */}}
- --fuse-server-opt=image=/usr/local/share/dummy-fuse-csi/tree.squashfs
{{- end }}
{{- end }}
{{- end }}

{{/* gcsfuse's endpoint: gcsfuse.endpoint, else the fake GCS server beside it. */}}
{{- define "dummy-fuse-csi.gcsEndpoint" -}}
{{- .Values.gcsfuse.endpoint | default (printf "http://%s/storage/v1/" (include "dummy-fuse-csi.fakeGCSHost" .)) }}
{{- end }}

{{/* Whether the pod that runs gcsfuse gets the fake GCS server as a native sidecar: no gcsfuse.endpoint. */}}
{{- define "dummy-fuse-csi.fakeGCSBeside" -}}
{{- if and (eq .Values.csi.plugin.fuseServer "gcsfuse") (not .Values.gcsfuse.endpoint) }}true{{ end }}
{{- end }}

{{/* host:port of the fake GCS server beside gcsfuse: the pod's loopback. gcsfuse's endpoint and the fake's
-public-host must both be this. */}}
{{- define "dummy-fuse-csi.fakeGCSHost" -}}
{{- printf "127.0.0.1:%d" (int .Values.gcsfuse.fakeGCS.port) }}
{{- end }}

{{/* The fake GCS server gcsfuse reads, as a native sidecar (an init container that keeps running) of the pod
that runs gcsfuse: its startup probe holds back the containers after it until it serves the bucket. The image
holds the bucket dummy-fuse-csi with dummy-file.txt in /usr/local/share/dummy-fuse-csi/gcs (make image). */}}
{{- define "dummy-fuse-csi.fakeGCSContainer" -}}
{{- $port := int .Values.gcsfuse.fakeGCS.port }}
{{- if eq $port (int .Values.healthPort) }}
{{- fail (printf "gcsfuse.fakeGCS.port %d is healthPort too: both listen in the plugin pod" $port) }}
{{- end }}
- name: fake-gcs
  image: {{ include "dummy-fuse-csi.image" . | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  restartPolicy: Always
  command: ["/usr/local/bin/fake-gcs-server"]
  args:
    - -backend=memory
    - -scheme=http
    - -port={{ $port }}
    - -public-host={{ include "dummy-fuse-csi.fakeGCSHost" . }}
    - -data=/usr/local/share/dummy-fuse-csi/gcs
    - -log-level=warn
  ports:
    - name: fake-gcs
      containerPort: {{ $port }}
      protocol: TCP
  startupProbe:
    httpGet:
      path: /storage/v1/b/dummy-fuse-csi/o
      port: fake-gcs
    periodSeconds: 1
    failureThreshold: 60
  securityContext:
    runAsNonRoot: true
    runAsUser: 65534
    runAsGroup: 65534
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    capabilities:
      drop: ["ALL"]
  {{- with .Values.gcsfuse.fakeGCS.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}

{{/* The relay mode's parts of the plugin DaemonSet (csi.plugin.fuseMode relay), each empty in any other mode, so
that a mode adds its pieces here instead of switches in daemonset.yaml. relayDir is where the plugin mounts each
volume's real server: an emptyDir of the plugin pod, mounted without propagation, so those mounts stay in the
plugin container's mount namespace (no walker of the node's mount table, kubelet's included, meets a dead one)
and the directory goes with the pod. */}}
{{- define "dummy-fuse-csi.relayDir" -}}
/relay
{{- end }}

{{- define "dummy-fuse-csi.relayArgs" -}}
{{- if has .Values.csi.plugin.fuseMode (list "relay" "relay-keeper") }}
- --relay-dir={{ include "dummy-fuse-csi.relayDir" . }}
- --relay-backend-wait={{ .Values.relay.backendWait }}
{{- if .Values.relay.writable }}
- --relay-writable
{{- end }}
{{- else if .Values.relay.writable }}
{{- fail (printf "relay.writable=true is for csi.plugin.fuseMode=relay or relay-keeper (not %s): only a relay forwards and journals writes" .Values.csi.plugin.fuseMode) }}
{{- end }}
{{- if eq .Values.csi.plugin.fuseMode "relay" }}
- --relay-server-uid={{ int .Values.relay.serverUID }}
{{- end }}
{{- end }}

{{- define "dummy-fuse-csi.relayMount" -}}
{{- if has .Values.csi.plugin.fuseMode (list "relay" "relay-keeper") }}
- name: relay-dir
  mountPath: {{ include "dummy-fuse-csi.relayDir" . }}
{{- end }}
{{- end }}

{{- define "dummy-fuse-csi.relayVolume" -}}
{{- if has .Values.csi.plugin.fuseMode (list "relay" "relay-keeper") }}
- name: relay-dir
  emptyDir: {}
{{- end }}
{{- end }}

{{/* The relay-keeper mode's flags of the keeper (csi.plugin.fuseMode relay-keeper): its servers are relays whose
node tables live in relay-nodes of the socket directory, a hostPath that outlives every keeper pod, which the
plugin (root) creates owned by the keeper's user; the keeper runs the real server itself, so its settings are
the keeper's (for gcsfuse the fake GCS server runs in the keeper's pod). */}}
{{- define "dummy-fuse-csi.keeperRelayArgs" -}}
{{- if eq .Values.csi.plugin.fuseMode "relay-keeper" }}
{{- $server := .Values.csi.plugin.fuseServer }}
- --relay-node-dir=/csi/relay-nodes
- --relay-backend-wait={{ .Values.relay.backendWait }}
{{- if .Values.relay.writable }}
- --relay-writable
{{- end }}
{{- if include "dummy-fuse-csi.userServer" . }}
{{- include "dummy-fuse-csi.userServerFlags" (list . "relay-server") | nindent 0 }}
{{- else }}
- --relay-server={{ $server }}
- --relay-server-path=/usr/local/bin/{{ $server }}
{{- if eq $server "gcsfuse" }}
- --relay-server-opt=endpoint={{ include "dummy-fuse-csi.gcsEndpoint" . }}
- --relay-server-opt=metadata-cache-ttl-secs={{ .Values.gcsfuse.metadataCacheTTLSecs }}
{{- else if eq $server "squashfuse" }}
- --relay-server-opt=image=/usr/local/share/dummy-fuse-csi/tree.squashfs
{{- end }}
{{- end }}
{{- range .Values.keeper.relayServerArgs }}
- --relay-server-arg={{ . }}
{{- end }}
{{- end }}
{{- end }}
