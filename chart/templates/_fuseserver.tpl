{{/* A FUSE server of the operator's own (fuseServer.spec, docs/server-spec.md), whose executable comes from the
operator's image (fuseServer.image): an init container of that image copies fuseServer.files into an emptyDir
of each pod that runs or checks the server (the plugin's; with relay-keeper the keeper's too), and the spec
reaches them as a ConfigMap the chart makes from the values: the operator's, never a pod's. */}}

{{/* "true" when the values give a server spec. */}}
{{- define "dummy-fuse-csi.userServer" -}}
{{- if .Values.fuseServer.spec }}true{{ end }}
{{- end }}

{{/* The spec's executable as the pods run it: its base name in the copied files' directory. Checks what the
chart can check before any pod starts. */}}
{{- define "dummy-fuse-csi.userServerPath" -}}
{{- $def := fromYaml .Values.fuseServer.spec }}
{{- if hasKey $def "Error" }}
{{- fail (printf "fuseServer.spec is not YAML: %s" $def.Error) }}
{{- end }}
{{- $exe := required "fuseServer.spec: the spec has no executable" $def.executable }}
{{- $mode := .Values.csi.plugin.fuseMode }}
{{- if eq $mode "keeper" }}
{{- fail "fuseServer.spec cannot run in csi.plugin.fuseMode=keeper: the keeper takes over live FUSE connections, which only dummy-fuse can (relay-keeper keeps them with any server)" }}
{{- end }}
{{- /* Behind the relay a server that cannot serve a passed connection mounts the backend itself, as the
plugin's user; the sidecar and the keeper's relay-keeper cannot mount: the keeper hands the connection to a
server that asks fusermount for it (its spec's fusermount), the sidecar only as /dev/fd/N. */}}
{{- if and (eq $mode "sidecar") (not $def.servesFD) }}
{{- fail (printf "fuseServer.spec: csi.plugin.fuseMode=sidecar hands the server a connection the plugin mounted, and the spec of %s says it cannot serve one (servesFD); it runs in the child, relay and (with fusermount) relay-keeper modes" (default "the server" $def.name)) }}
{{- end }}
{{- if and (eq $mode "relay-keeper") (not $def.servesFD) (not $def.fusermount) }}
{{- fail (printf "fuseServer.spec: csi.plugin.fuseMode=relay-keeper hands the server a connection the plugin mounted, and the spec of %s says it can neither serve one (servesFD) nor ask fusermount for it (fusermount); it runs in the child and relay modes, where it mounts its directory itself" (default "the server" $def.name)) }}
{{- end }}
{{- if not .Values.fuseServer.image }}
{{- fail "fuseServer.spec needs fuseServer.image: the image that holds its executable" }}
{{- end }}
{{- with .Values.fuseServer.interpreter }}
{{- if or (not (isAbs .)) (hasPrefix (printf "%s/" (include "dummy-fuse-csi.userServerDir" $)) .) (has (base .) (list "/" "." "..")) }}
{{- fail (printf "fuseServer.interpreter %q: want the absolute path of the loader in your image (e.g. /lib64/ld-linux-x86-64.so.2), outside %s" . (include "dummy-fuse-csi.userServerDir" $)) }}
{{- end }}
{{- end }}
{{- if not .Values.fuseServer.files }}
{{- fail "fuseServer.spec needs fuseServer.files: the paths in fuseServer.image to copy, the executable among them" }}
{{- end }}
{{- printf "%s/%s" (include "dummy-fuse-csi.userServerDir" .) (base $exe) }}
{{- end }}

{{- define "dummy-fuse-csi.userServerDir" -}}/usr/local/share/dummy-fuse-csi/server{{- end }}
{{- define "dummy-fuse-csi.userServerSpecDir" -}}/etc/dummy-fuse-csi/server{{- end }}

{{/* The flags that name the server (prefix fuse-server for the plugin and a sidecar, relay-server for the
keeper of relay-keeper). */}}
{{- define "dummy-fuse-csi.userServerFlags" -}}
{{- $ := index . 0 }}
{{- $prefix := index . 1 }}
- --{{ $prefix }}={{ include "dummy-fuse-csi.userServerSpecDir" $ }}/spec.yaml
- --{{ $prefix }}-path={{ include "dummy-fuse-csi.userServerPath" $ }}
{{- range $k, $v := $.Values.fuseServer.settings }}
- --{{ $prefix }}-opt={{ $k }}={{ $v }}
{{- end }}
{{- end }}

{{/* The init container that copies the server's files out of the operator's image (runAsUser: the user of
the pod's container that runs the server, so that it owns them). */}}
{{- define "dummy-fuse-csi.userServerInit" -}}
{{- $ := index . 0 }}
- name: server-files
  image: {{ $.Values.fuseServer.image | quote }}
  imagePullPolicy: {{ $.Values.fuseServer.pullPolicy }}
  command: {{ concat $.Values.fuseServer.copyCommand $.Values.fuseServer.files (compact (list $.Values.fuseServer.interpreter)) (list (printf "%s/" (include "dummy-fuse-csi.userServerDir" $))) | toJson }}
  securityContext:
    {{- with index . 1 }}
    runAsUser: {{ . }}
    runAsNonRoot: true
    {{- end }}
    allowPrivilegeEscalation: false
    capabilities:
      drop: ["ALL"]
  volumeMounts:
    - name: server-files
      mountPath: {{ include "dummy-fuse-csi.userServerDir" $ }}
{{- end }}

{{- define "dummy-fuse-csi.userServerMounts" -}}
- name: server-files
  mountPath: {{ include "dummy-fuse-csi.userServerDir" . }}
  readOnly: true
{{- /* A dynamic executable's loader where its ELF header says it is: this project's images have none. */}}
{{- with .Values.fuseServer.interpreter }}
- name: server-files
  mountPath: {{ . }}
  subPath: {{ base . }}
  readOnly: true
{{- end }}
- name: server-spec
  mountPath: {{ include "dummy-fuse-csi.userServerSpecDir" . }}
  readOnly: true
{{- end }}

{{- define "dummy-fuse-csi.userServerVolumes" -}}
- name: server-files
  emptyDir: {}
- name: server-spec
  configMap:
    name: {{ include "dummy-fuse-csi.fullname" . }}-server-spec
{{- end }}
