{{/*
Names. The namespaced objects keep the names of deploy/kubernetes (gpu-exporter, gpu-costsvc):
the Services' names are the Prometheus jobs the alert rules assume. Cluster-scoped objects are
prefixed with the release's full name, so two releases in two namespaces do not collide.
*/}}
{{- define "gpu-finops.fullname" -}}
{{- $name := .Values.nameOverride | default .Chart.Name -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The namespace of every namespaced object: namespaceOverride, else the release's. */}}
{{- define "gpu-finops.namespace" -}}
{{- .Values.namespaceOverride | default .Release.Namespace -}}
{{- end -}}

{{/* repository@digest (the tag left out: a digest names the image alone), else :tag. */}}
{{- define "gpu-finops.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* What Helm adds to every object's labels (and the release to the pods'). */}}
{{- define "gpu-finops.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{- define "gpu-finops.exporterSelector" -}}
app.kubernetes.io/name: gpu-exporter
{{- end -}}

{{- define "gpu-finops.exporterLabels" -}}
app.kubernetes.io/name: gpu-exporter
app.kubernetes.io/component: exporter
app.kubernetes.io/part-of: gpu-finops
{{- end -}}

{{- define "gpu-finops.costsvcSelector" -}}
app.kubernetes.io/name: gpu-costsvc
{{- end -}}

{{- define "gpu-finops.costsvcLabels" -}}
app.kubernetes.io/name: gpu-costsvc
app.kubernetes.io/component: cost-service
app.kubernetes.io/part-of: gpu-finops
{{- end -}}

{{/* The exporter's web configuration: is it on, and what can the kubelet's probe do. */}}
{{- define "gpu-finops.webConfig" -}}
{{- if or .Values.exporter.webConfig.tls.enabled .Values.exporter.webConfig.basicAuth.users -}}
true
{{- end -}}
{{- end -}}

{{/* A client certificate is demanded (RequireAnyClientCert, RequireAndVerifyClientCert). */}}
{{- define "gpu-finops.clientCertRequired" -}}
{{- $tls := .Values.exporter.webConfig.tls -}}
{{- if and $tls.enabled (has $tls.clientAuthType (list "RequireAnyClientCert" "RequireAndVerifyClientCert")) -}}
true
{{- end -}}
{{- end -}}

{{- define "gpu-finops.scheme" -}}
{{- ternary "https" "http" .Values.exporter.webConfig.tls.enabled -}}
{{- end -}}

{{/* The endpoint settings both the ServiceMonitor and the PodMonitor of the exporter use. */}}
{{- define "gpu-finops.exporterEndpoint" -}}
{{- $m := .Values.exporter.monitor -}}
port: metrics
path: /metrics
interval: {{ $m.interval }}
scrapeTimeout: {{ $m.scrapeTimeout }}
{{- if .Values.exporter.webConfig.tls.enabled }}
scheme: https
tlsConfig:
  {{- if $m.tlsConfig }}
  {{- toYaml $m.tlsConfig | nindent 2 }}
  {{- else }}
  # the serving certificate's CA (ca.crt of the Secret) and the name it was issued for
  ca:
    secret:
      name: {{ .Values.exporter.webConfig.tls.existingSecret }}
      key: ca.crt
  serverName: gpu-exporter.{{ include "gpu-finops.namespace" . }}.svc
  {{- end }}
{{- end }}
{{- with $m.basicAuth.secretName }}
basicAuth:
  username:
    name: {{ . }}
    key: {{ $m.basicAuth.usernameKey }}
  password:
    name: {{ . }}
    key: {{ $m.basicAuth.passwordKey }}
{{- end }}
{{- if $m.honorLabels }}
honorLabels: true
{{- end }}
relabelings:
  # The exporter's namespace/pod/container labels name the GPU's holder. Drop the
  # operator's target labels of the same names (the exporter pod's own), so they are
  # neither renamed to exported_* nor stamped on GPUs that nobody holds.
  - action: labeldrop
    regex: (namespace|pod|container|service|endpoint)
  - sourceLabels: [__meta_kubernetes_pod_node_name]
    targetLabel: node
  {{- with $m.relabelings }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with $m.metricRelabelings }}
metricRelabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The admin token's Secret: the user's, or the one this chart creates; empty for none. */}}
{{- define "gpu-finops.adminTokenSecret" -}}
{{- $t := .Values.costsvc.adminToken -}}
{{- if $t.existingSecret -}}
{{- $t.existingSecret -}}
{{- else if $t.create -}}
gpu-costsvc-admin-token
{{- end -}}
{{- end -}}

{{- define "gpu-finops.databaseEnv" -}}
- name: COSTSVC_DATABASE_URL
{{- if .Values.costsvc.database.sqlite.enabled }}
  value: sqlite:////var/lib/gpu-costsvc/costsvc.db
{{- else }}
  valueFrom:
    secretKeyRef:
      name: {{ .Values.costsvc.database.existingSecret }}
      key: {{ .Values.costsvc.database.secretKey }}
{{- end }}
{{- end -}}

{{/* The hardened container securityContext every container of the chart runs with. */}}
{{- define "gpu-finops.containerSecurity" -}}
privileged: false
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}
