{{- define "switchyard.name" -}}
{{- printf "%s" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "switchyard.labels" -}}
app.kubernetes.io/name: switchyard
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "switchyard.selector" -}}
app.kubernetes.io/name: switchyard
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "switchyard.image" -}}
{{ printf "%s:%s" .Values.image.repository .Values.image.tag }}
{{- end -}}

{{- define "switchyard.storageArgs" -}}
{{- if .Values.gcsScratchLocation }}
- --gcs_scratch_location={{ .Values.gcsScratchLocation }}
{{- end }}
{{- if .Values.storageMountRoot }}
- --storage_mount_root={{ .Values.storageMountRoot }}
{{- end }}
{{- end -}}

{{/* Read-only root: the containers write only to these. */}}
{{- define "switchyard.containerSecurity" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities: {drop: ["ALL"]}
{{- end -}}

{{- define "switchyard.mounts" -}}
- {name: tmp, mountPath: /tmp}
{{- with .Values.volumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The fleet's TLS flags and files (0440: the pods' fsGroup reads them), from the
     user's Secret or the one the chart makes (tls.yaml). */}}
{{- define "switchyard.tlsSecret" -}}
{{- .Values.tls.secretName | default (printf "%s-tls" (include "switchyard.name" .)) -}}
{{- end -}}

{{- define "switchyard.tlsArgs" -}}
{{- if .Values.tls.enabled }}
- --tls_ca_file=/etc/switchyard/tls/ca.crt
- --tls_cert_file=/etc/switchyard/tls/tls.crt
- --tls_key_file=/etc/switchyard/tls/tls.key
{{- end }}
{{- end -}}

{{- define "switchyard.tlsMount" -}}
{{- if .Values.tls.enabled }}
- {name: tls, mountPath: /etc/switchyard/tls, readOnly: true}
{{- end }}
{{- end -}}

{{- define "switchyard.tlsVolume" -}}
{{- if .Values.tls.enabled }}
- name: tls
  secret: {secretName: {{ include "switchyard.tlsSecret" . }}, defaultMode: 0440}
{{- end }}
{{- end -}}
