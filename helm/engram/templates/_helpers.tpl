{{/*
Chart name, truncated to 63 characters (a DNS label).
*/}}
{{- define "engram.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name: the prefix of every resource and of the pod names (<fullname>-<ordinal>).
Truncated to 52 characters so that "<fullname>-headless" and the StatefulSet's
controller-revision-hash label still fit in 63.
*/}}
{{- define "engram.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "engram.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels shared by every resource.
*/}}
{{- define "engram.labels" -}}
helm.sh/chart: {{ include "engram.chart" . }}
app.kubernetes.io/name: {{ include "engram.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: engram
{{- end }}

{{/*
Selector of the server pods. It includes the component so that the hook Job and the test Pod,
which carry the name and instance labels too, are never selected by the Services, the
StatefulSet or the PodDisruptionBudget.
*/}}
{{- define "engram.selectorLabels" -}}
app.kubernetes.io/name: {{ include "engram.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: server
{{- end }}

{{- define "engram.headlessName" -}}
{{- printf "%s-headless" (include "engram.fullname" .) }}
{{- end }}

{{- define "engram.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "engram.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "engram.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository .Values.image.tag }}
{{- end }}
{{- end }}

{{/*
DNS suffix of the peer addresses: <headless>.<namespace>.svc.<clusterDomain>.
*/}}
{{- define "engram.peerDomain" -}}
{{- printf "%s.%s.svc.%s" (include "engram.headlessName" .) .Release.Namespace .Values.cluster.clusterDomain }}
{{- end }}

{{/*
Fully qualified address of the client Service, as HOST:PORT (the name the TLS certificate
covers).
*/}}
{{- define "engram.clientEndpoint" -}}
{{- printf "%s.%s.svc.%s:%d" (include "engram.fullname" .) .Release.Namespace .Values.cluster.clusterDomain (int .Values.ports.grpc) }}
{{- end }}

{{/*
The initial voters, as the comma-separated ID=HOST:PORT list of ENGRAM_PEERS: ids
1..initialMembers at <fullname>-<id-1>.<peerDomain>:<grpc port>.
*/}}
{{- define "engram.initialPeers" -}}
{{- $fullname := include "engram.fullname" . }}
{{- $domain := include "engram.peerDomain" . }}
{{- $peers := list }}
{{- range $i := until (int .Values.cluster.initialMembers) }}
{{- $peers = append $peers (printf "%d=%s-%d.%s:%d" (add1 $i) $fullname $i $domain (int $.Values.ports.grpc)) }}
{{- end }}
{{- join "," $peers }}
{{- end }}

{{/*
Name of the Secret with the node keys, or "" when nodes generate their own.
*/}}
{{- define "engram.keysSecretName" -}}
{{- if .Values.keys.create }}
{{- printf "%s-node-keys" (include "engram.fullname" .) }}
{{- else if .Values.keys.existingSecret }}
{{- .Values.keys.existingSecret }}
{{- end }}
{{- end }}

{{/*
Name of the TLS Secret, or "" without TLS.
*/}}
{{- define "engram.tlsSecretName" -}}
{{- if .Values.tls.enabled }}
{{- if .Values.tls.certManager.enabled }}
{{- printf "%s-tls" (include "engram.fullname" .) }}
{{- else }}
{{- .Values.tls.existingSecret }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Port the probes use: the gRPC port, or the plaintext health port when TLS is on.
*/}}
{{- define "engram.probePort" -}}
{{- if .Values.tls.enabled }}{{ .Values.health.port }}{{ else }}{{ .Values.ports.grpc }}{{ end }}
{{- end }}

{{/*
Cross-field checks that values.schema.json cannot express. Included by the StatefulSet.
*/}}
{{- define "engram.validate" -}}
{{- if and .Release.IsInstall (not .Values.restore.enabled) (lt (int .Values.replicas) (int .Values.cluster.initialMembers)) }}
{{- fail (printf "replicas (%d) must be >= cluster.initialMembers (%d) on install: the initial members wait for each other before the cluster forms. Lower cluster.initialMembers for a smaller cluster." (int .Values.replicas) (int .Values.cluster.initialMembers)) }}
{{- end }}
{{- if .Values.restore.enabled }}
{{- if not .Values.restore.volume }}
{{- fail "restore.enabled needs restore.volume: the volume source holding the backup file (e.g. persistentVolumeClaim: {claimName: engram-backups, readOnly: true})" }}
{{- end }}
{{- if not (or .Values.keys.existingSecret .Values.keys.create) }}
{{- fail (printf "restore.enabled needs the node keys Secret (keys.existingSecret or keys.create): the restored node signs the backup's chain with the backed-up node %d's key, which pod %s-%d must hold" (int .Values.restore.node) (include "engram.fullname" .) (sub (int .Values.restore.node) 1)) }}
{{- end }}
{{- if gt (int .Values.restore.node) (int .Values.replicas) }}
{{- fail (printf "restore.node (%d) must be a pod of this release: at most replicas (%d)" (int .Values.restore.node) (int .Values.replicas)) }}
{{- end }}
{{- end }}
{{- if and .Values.keys.create .Values.keys.existingSecret }}
{{- fail "keys.create and keys.existingSecret are mutually exclusive: either the chart creates the node keys Secret or you provide it" }}
{{- end }}
{{- if .Values.keys.create }}
{{- $fullname := include "engram.fullname" . }}
{{- range $i := until (int .Values.replicas) }}
{{- $pod := printf "%s-%d" $fullname $i }}
{{- if not (hasKey $.Values.keys.seeds $pod) }}
{{- fail (printf "keys.create is set but keys.seeds has no seed for pod %s (keys are named after the pods: %s-0 ... %s-%d)" $pod $fullname $fullname (sub (int $.Values.replicas) 1)) }}
{{- end }}
{{- end }}
{{- range $pod, $seed := .Values.keys.seeds }}
{{- if not (regexMatch (printf "^%s-[0-9]+$" $fullname) $pod) }}
{{- fail (printf "keys.seeds key %q is not a pod name of this release (%s-<ordinal>)" $pod $fullname) }}
{{- end }}
{{- end }}
{{- else if .Values.keys.seeds }}
{{- fail "keys.seeds is only used with keys.create: true" }}
{{- end }}
{{- if eq .Values.security.mode "enforced" }}
{{- if not (and .Values.security.admin.name .Values.security.admin.publicKey) }}
{{- fail "security.mode enforced (the default) needs security.admin.name and security.admin.publicKey: the first administrator (`engram agent keygen admin --out admin.key` prints its public key). To run without signed requests instead, set security.mode: open, which lets anyone who reaches a pod read and write everything (the pods run with --insecure-open)" }}
{{- end }}
{{- if not .Values.security.operatorKeySecret }}
{{- fail "security.mode enforced (the default) needs security.operatorKeySecret: the scale-down hook and helm test sign as that agent" }}
{{- end }}
{{- else if or .Values.security.admin.name .Values.security.admin.publicKey }}
{{- fail "security.admin is only used with security.mode: enforced" }}
{{- end }}
{{- if .Values.tls.enabled }}
{{- if and .Values.tls.certManager.enabled .Values.tls.existingSecret }}
{{- fail "tls.existingSecret and tls.certManager.enabled are mutually exclusive" }}
{{- end }}
{{- if not (or .Values.tls.certManager.enabled .Values.tls.existingSecret) }}
{{- fail "tls.enabled needs a certificate: set tls.existingSecret or tls.certManager.enabled" }}
{{- end }}
{{- if and .Values.tls.certManager.enabled (not .Values.tls.certManager.issuerRef.name) }}
{{- fail "tls.certManager.enabled needs tls.certManager.issuerRef.name" }}
{{- end }}
{{- if eq (int .Values.health.port) (int .Values.ports.grpc) }}
{{- fail "health.port must differ from ports.grpc: with TLS the health service is served in plaintext on its own port" }}
{{- end }}
{{- else if or .Values.tls.existingSecret .Values.tls.certManager.enabled }}
{{- fail "tls.existingSecret / tls.certManager.enabled are set but tls.enabled is false" }}
{{- end }}
{{- with .Values.config }}
{{- if and (not (kindIs "invalid" .electionTimeoutMinMs)) (not (kindIs "invalid" .electionTimeoutMaxMs)) }}
{{- if ge (int64 .electionTimeoutMinMs) (int64 .electionTimeoutMaxMs) }}
{{- fail "config.electionTimeoutMinMs must be lower than config.electionTimeoutMaxMs" }}
{{- end }}
{{- end }}
{{- if and (not (kindIs "invalid" .heartbeatIntervalMs)) (not (kindIs "invalid" .electionTimeoutMinMs)) }}
{{- if ge (int64 .heartbeatIntervalMs) (int64 .electionTimeoutMinMs) }}
{{- fail "config.heartbeatIntervalMs must be lower than config.electionTimeoutMinMs, or followers start elections between heartbeats" }}
{{- end }}
{{- end }}
{{- end }}
{{- range $k, $_ := .Values.podLabels }}
{{- if has $k (list "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/component") }}
{{- fail (printf "podLabels must not set %s: it is part of the pods' selector" $k) }}
{{- end }}
{{- end }}
{{- if and .Values.metrics.serviceMonitor.enabled (not .Values.metrics.enabled) }}
{{- fail "metrics.serviceMonitor.enabled needs metrics.enabled" }}
{{- end }}
{{- if and .Values.metrics.prometheusRule.enabled (not .Values.metrics.enabled) }}
{{- fail "metrics.prometheusRule.enabled needs metrics.enabled: the rules alert on metrics no pod would serve" }}
{{- end }}
{{- if and .Values.metrics.grafanaDashboard.enabled (not .Values.metrics.enabled) }}
{{- fail "metrics.grafanaDashboard.enabled needs metrics.enabled" }}
{{- end }}
{{- if .Values.metrics.enabled }}
{{- if or (eq (int .Values.metrics.port) (int .Values.ports.grpc)) (and .Values.tls.enabled (eq (int .Values.metrics.port) (int .Values.health.port))) }}
{{- fail "metrics.port must differ from ports.grpc and health.port" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Pod-level settings shared by the hook Job and the test Pod.
*/}}
{{- define "engram.hookPodSpecCommon" -}}
serviceAccountName: {{ include "engram.serviceAccountName" . }}
automountServiceAccountToken: false
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
Client-side TLS environment of the CLI in the hook and test pods (only with TLS): the CLI
presents the node certificate and verifies the server against ca.crt.
*/}}
{{- define "engram.cliTLSEnv" -}}
{{- if .Values.tls.enabled }}
- name: ENGRAM_TLS_CA
  value: /tls/ca.crt
- name: ENGRAM_TLS_CERT
  value: /tls/tls.crt
- name: ENGRAM_TLS_KEY
  value: /tls/tls.key
{{- end }}
{{- if .Values.security.operatorKeySecret }}
- name: ENGRAM_AGENT_KEY
  value: /agent/agent.key
{{- end }}
{{- end }}

{{/*
The volume mounts of a pod that runs the CLI against the cluster (hook, test): the TLS client
identity and the operator's agent key, where configured.
*/}}
{{- define "engram.cliVolumeMounts" -}}
{{- if include "engram.tlsSecretName" . }}
- name: tls
  mountPath: /tls
  readOnly: true
{{- end }}
{{- if .Values.security.operatorKeySecret }}
- name: agent-key
  mountPath: /agent
  readOnly: true
{{- end }}
{{- end }}

{{- define "engram.cliVolumes" -}}
{{- with include "engram.tlsSecretName" . }}
- name: tls
  secret:
    secretName: {{ . }}
    defaultMode: 0440
{{- end }}
{{- if .Values.security.operatorKeySecret }}
- name: agent-key
  secret:
    secretName: {{ .Values.security.operatorKeySecret }}
    # Group-readable: the pod runs as a non-root user in the fsGroup that owns the files.
    defaultMode: 0440
    items:
      - key: agent.key
        path: agent.key
{{- end }}
{{- end }}
