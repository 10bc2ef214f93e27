{{/* The release's name, cut to the 63 characters a label value may have. */}}
{{- define "mqstore.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "mqstore.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "mqstore.labels" -}}
{{ include "mqstore.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "mqstore.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "mqstore.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "mqstore.secretName" -}}
{{- default (include "mqstore.fullname" .) .Values.existingSecret -}}
{{- end -}}

{{/* Values that cannot work together fail the install, saying why. */}}
{{- define "mqstore.validate" -}}
{{- if not (has .Values.store.kind (list "disk" "redis" "memory")) -}}
{{- fail (printf "store.kind is disk, redis or memory, not %q" .Values.store.kind) -}}
{{- end -}}
{{- if and (eq .Values.store.kind "redis") (not .Values.store.redis.url) (not .Values.existingSecret) -}}
{{- fail "store.kind redis needs store.redis.url (or existingSecret with MQSTORE_STORE)" -}}
{{- end -}}
{{- if and .Values.broker.tls.enabled (not .Values.broker.tls.secretName) -}}
{{- fail "broker.tls.enabled needs broker.tls.secretName (a Secret with ca.crt)" -}}
{{- end -}}
{{- if and .Values.store.redis.tls.secretName (ne .Values.store.kind "redis") -}}
{{- fail "store.redis.tls.secretName is for store.kind redis (a rediss:// URL)" -}}
{{- end -}}
{{- if and .Values.store.redis.tls.clientCertificate (not .Values.store.redis.tls.secretName) -}}
{{- fail "store.redis.tls.clientCertificate needs store.redis.tls.secretName (a Secret with ca.crt, tls.crt and tls.key)" -}}
{{- end -}}
{{- end -}}

{{/* Non-empty when the nodes mount TLS files for Redis. */}}
{{- define "mqstore.redisTls" -}}
{{- if and (eq .Values.store.kind "redis") .Values.store.redis.tls.secretName -}}yes{{- end -}}
{{- end -}}

{{/* `mqstore serve`'s arguments for the flags that have no environment variable. */}}
{{- define "mqstore.args" -}}
{{- if eq .Values.store.kind "disk" }}
- --fsync
- {{ .Values.store.disk.fsync | quote }}
{{- end }}
{{- if not .Values.serve.stateStore }}
- --no-state-store
{{- end }}
{{- if not .Values.serve.jobs }}
- --no-jobs
{{- end }}
{{- if not .Values.serve.commands }}
- --no-commands
{{- end }}
{{- if .Values.commandProfiles }}
- --command-profiles
- /etc/mqstore/profiles/command-profiles.json
{{- end }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}

{{/* The pod: shared by the Deployment (memory, Redis) and the StatefulSet (disk). */}}
{{- define "mqstore.podTemplate" -}}
metadata:
  labels:
    {{- include "mqstore.selectorLabels" . | nindent 4 }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    checksum/config: {{ include (print $.Template.BasePath "/configmap.yaml") . | sha256sum }}
    checksum/profiles: {{ toJson .Values.commandProfiles | sha256sum }}
    {{- if not .Values.existingSecret }}
    checksum/secret: {{ include (print $.Template.BasePath "/secret.yaml") . | sha256sum }}
    {{- end }}
    {{- with .Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "mqstore.serviceAccountName" . }}
  automountServiceAccountToken: false
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml .Values.podSecurityContext | nindent 4 }}
  terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
  containers:
    - name: mqstore
      image: "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      {{- with include "mqstore.args" . }}
      args:
        {{- . | trim | nindent 8 }}
      {{- end }}
      envFrom:
        - configMapRef:
            name: {{ include "mqstore.fullname" . }}
        - secretRef:
            name: {{ include "mqstore.secretName" . }}
      env:
        # The node id: the pod's name, unique among the nodes and kept across restarts of a
        # StatefulSet's pod.
        - name: MQSTORE_NODE_ID
          valueFrom:
            fieldRef:
              fieldPath: metadata.name
      ports:
        - name: metrics
          containerPort: {{ .Values.metrics.port }}
          protocol: TCP
      # Live while the process answers; ready once connected to the broker and the store (it
      # waits for them at start instead of exiting: no restart loop while they come up).
      livenessProbe:
        httpGet:
          path: /healthz
          port: metrics
        periodSeconds: 10
        timeoutSeconds: 3
        failureThreshold: 3
      readinessProbe:
        httpGet:
          path: /readyz
          port: metrics
        periodSeconds: 5
        timeoutSeconds: 3
        failureThreshold: 2
      resources:
        {{- toYaml .Values.resources | nindent 8 }}
      securityContext:
        {{- toYaml .Values.securityContext | nindent 8 }}
      {{- if or (eq .Values.store.kind "disk") .Values.commandProfiles .Values.broker.tls.enabled (include "mqstore.redisTls" .) }}
      volumeMounts:
        {{- if eq .Values.store.kind "disk" }}
        - name: data
          mountPath: /data
        {{- end }}
        {{- if .Values.commandProfiles }}
        - name: profiles
          mountPath: /etc/mqstore/profiles
          readOnly: true
        {{- end }}
        {{- if .Values.broker.tls.enabled }}
        - name: broker-tls
          mountPath: /etc/mqstore/broker-tls
          readOnly: true
        {{- end }}
        {{- if include "mqstore.redisTls" . }}
        - name: redis-tls
          mountPath: /etc/mqstore/redis-tls
          readOnly: true
        {{- end }}
      {{- end }}
  {{- if or .Values.commandProfiles .Values.broker.tls.enabled (include "mqstore.redisTls" .) }}
  volumes:
    {{- if .Values.commandProfiles }}
    - name: profiles
      configMap:
        name: {{ include "mqstore.fullname" . }}-profiles
        items:
          - key: command-profiles.json
            path: command-profiles.json
    {{- end }}
    {{- if .Values.broker.tls.enabled }}
    - name: broker-tls
      secret:
        secretName: {{ .Values.broker.tls.secretName }}
    {{- end }}
    {{- if include "mqstore.redisTls" . }}
    - name: redis-tls
      secret:
        secretName: {{ .Values.store.redis.tls.secretName }}
    {{- end }}
  {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.topologySpreadConstraints }}
  topologySpreadConstraints:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
