{{/* Names and labels. */}}
{{- define "plumbline.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "plumbline.fullname" -}}
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

{{- define "plumbline.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "plumbline.selectorLabels" -}}
app.kubernetes.io/name: {{ include "plumbline.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "plumbline.labels" -}}
helm.sh/chart: {{ include "plumbline.chart" . }}
{{ include "plumbline.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The serving pods: the Service, PDB and ServiceMonitor select these, never the CronJob's pods. */}}
{{- define "plumbline.serverSelectorLabels" -}}
{{ include "plumbline.selectorLabels" . }}
app.kubernetes.io/component: server
{{- end }}

{{- define "plumbline.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "plumbline.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* REPOSITORY@DIGEST when image.digest is set (it wins over the tag), else REPOSITORY:TAG (default appVersion). */}}
{{- define "plumbline.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag | toString) }}
{{- end }}
{{- end }}

{{/* The Secret the pods read: the one you manage, or the chart's. */}}
{{- define "plumbline.secretName" -}}
{{- default (include "plumbline.fullname" .) .Values.secrets.existingSecret }}
{{- end }}

{{/* secrets.<value> -> its default key in the Secret: the chart-made Secret always uses these names, an existing
Secret (secrets.existingSecret) these unless secrets.existingSecretKeys maps the value to another key name. */}}
{{- define "plumbline.secretKeys" -}}
apiKeysFile: api-keys.json
qdrantApiKey: qdrant-api-key
stateUrl: state-url
evalApiKey: eval-api-key
metricsApiKey: metrics-api-key
{{- end }}

{{/* The key in the Secret the pods read that holds secrets.<name>, or "" when that Secret does not hold it. Call with
(dict "root" $ "name" "stateUrl"). With secrets.existingSecret, secrets.existingSecretKeys says which keys that Secret
holds: a map {stateUrl: MY-KEY, ...} (value -> key name), or a list of the default key names. */}}
{{- define "plumbline.secretKey" -}}
{{- $root := .root }}
{{- $key := index (include "plumbline.secretKeys" $root | fromYaml) .name }}
{{- $held := $root.Values.secrets.existingSecretKeys }}
{{- if $root.Values.secrets.existingSecret }}
{{- if kindIs "map" $held }}
{{- with index $held .name }}{{ . }}{{ end }}
{{- else if has $key $held }}{{ $key }}
{{- end }}
{{- else if index $root.Values.secrets .name }}{{ $key }}
{{- end }}
{{- end }}

{{/* "true" when the Secret holds the key of secrets.<name>, else "". Call with (dict "root" $ "name" "stateUrl"). */}}
{{- define "plumbline.hasSecret" -}}
{{- if include "plumbline.secretKey" . }}true{{ end }}
{{- end }}

{{/* "true" when /data holds data worth keeping: the embedded index (backend edge) or the SQLite state (no PostgreSQL
state URL). With backend qdrant and a state URL it holds only the lock file. */}}
{{- define "plumbline.dataIsState" -}}
{{- if or (eq (default "edge" .Values.settings.backend) "edge") (not (include "plumbline.hasSecret" (dict "root" . "name" "stateUrl"))) }}true{{ end }}
{{- end }}

{{/* "true" when /data is on a PersistentVolumeClaim: persistence.enabled and /data holds data worth keeping. */}}
{{- define "plumbline.persistent" -}}
{{- if and .Values.persistence.enabled (include "plumbline.dataIsState" .) }}true{{ end }}
{{- end }}

{{/* The claim of /data. */}}
{{- define "plumbline.claimName" -}}
{{- default (printf "%s-data" (include "plumbline.fullname" .)) .Values.persistence.existingClaim }}
{{- end }}

{{/* The ConfigMap's data: PLUMBLINE_<FIELD> for every non-null entry of settings, plus what the chart sets itself. */}}
{{- define "plumbline.configData" -}}
PLUMBLINE_DATA_DIR: "/data"
{{- if include "plumbline.hasSecret" (dict "root" . "name" "apiKeysFile") }}
PLUMBLINE_API_KEYS_FILE: "/etc/plumbline/keys/api-keys.json"
{{- end }}
{{- if eq .Values.evaluation.mode "leader" }}
PLUMBLINE_EVAL_SCHEDULE: {{ .Values.evaluation.leaderSchedule | toJson | quote }}
{{- end }}
{{- if eq .Values.evaluation.mode "cronjob" }}
{{- $expected := dict }}
{{- range .Values.evaluation.cronjob.sets }}
{{- $_ := set $expected .name (.intervalSeconds | default $.Values.evaluation.cronjob.intervalSeconds) }}
{{- end }}
PLUMBLINE_EVAL_EXPECTED_INTERVALS: {{ $expected | toJson | quote }}
{{- end }}
{{- range $field, $value := .Values.settings }}
{{- if not (kindIs "invalid" $value) }}
{{- $env := printf "PLUMBLINE_%s" (upper $field) }}
{{- if and (eq $field "auth") (kindIs "bool" $value) }}
{{ $env }}: {{ ternary "on" "off" $value | quote }}
{{- else if kindIs "string" $value }}
{{ $env }}: {{ $value | quote }}
{{- else }}
{{ $env }}: {{ $value | toJson | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* Refuse values that cannot work, saying why. Included by every template that renders workloads. */}}
{{- define "plumbline.validate" -}}
{{- $s := .Values.settings }}
{{- range $field, $where := dict "qdrant_api_key" "secrets.qdrantApiKey (key qdrant-api-key)" "state_url" "secrets.stateUrl (key state-url)" "api_keys_file" "secrets.apiKeysFile (key api-keys.json)" "data_dir" "nothing: the chart mounts /data" "eval_schedule" "evaluation.mode=leader with evaluation.leaderSchedule" }}
{{- if hasKey $s $field }}
{{- fail (printf "settings.%s is set by the chart: use %s" $field $where) }}
{{- end }}
{{- end }}
{{- if kindIs "map" .Values.secrets.existingSecretKeys }}
{{- range $name, $key := .Values.secrets.existingSecretKeys }}
{{- if not (hasKey (include "plumbline.secretKeys" $ | fromYaml) $name) }}
{{- fail (printf "secrets.existingSecretKeys: %q is not one of apiKeysFile, qdrantApiKey, stateUrl, evalApiKey, metricsApiKey" $name) }}
{{- end }}
{{- end }}
{{- else }}
{{- range $key := .Values.secrets.existingSecretKeys }}
{{- if not (has $key (values (include "plumbline.secretKeys" $ | fromYaml))) }}
{{- fail (printf "secrets.existingSecretKeys: %q is not one of api-keys.json, qdrant-api-key, state-url, eval-api-key, metrics-api-key" $key) }}
{{- end }}
{{- end }}
{{- end }}
{{- if .Values.secrets.existingSecret }}
{{- range $name := keys (include "plumbline.secretKeys" . | fromYaml) | sortAlpha }}
{{- if index $.Values.secrets $name }}
{{- fail (printf "secrets.%s is set but secrets.existingSecret names the Secret to use: put the value in that Secret instead" $name) }}
{{- end }}
{{- end }}
{{- end }}
{{- $backend := default "edge" $s.backend }}
{{- if not (has $backend (list "edge" "qdrant")) }}
{{- fail (printf "settings.backend must be edge or qdrant, not %q" $backend) }}
{{- end }}
{{- if and (eq $backend "qdrant") (not $s.qdrant_url) }}
{{- fail "settings.backend qdrant needs settings.qdrant_url, e.g. http://qdrant:6333" }}
{{- end }}
{{- $hasState := include "plumbline.hasSecret" (dict "root" . "name" "stateUrl") }}
{{- if or (gt (int .Values.replicaCount) 1) .Values.autoscaling.enabled }}
{{- if or (ne $backend "qdrant") (not $hasState) }}
{{- fail "replicaCount > 1 and autoscaling need settings.backend qdrant (with settings.qdrant_url) and a PostgreSQL state URL (secrets.stateUrl, or state-url in secrets.existingSecret): with the embedded engine or the default SQLite state every replica would keep its own index and state" }}
{{- end }}
{{- end }}
{{- if and (include "plumbline.persistent" .) (not .Values.persistence.accessModes) }}
{{- fail "persistence.accessModes must name at least one access mode, e.g. [ReadWriteOncePod] or [ReadWriteOnce]" }}
{{- end }}
{{- $preStop := int .Values.lifecycle.preStopSleepSeconds }}
{{- if and $preStop (ge $preStop (int .Values.terminationGracePeriodSeconds)) }}
{{- fail (printf "lifecycle.preStopSleepSeconds (%d) must be less than terminationGracePeriodSeconds (%d): the sleep counts against the grace period" $preStop (int .Values.terminationGracePeriodSeconds)) }}
{{- end }}
{{- $mode := .Values.evaluation.mode }}
{{- if not (has $mode (list "none" "leader" "cronjob")) }}
{{- fail (printf "evaluation.mode must be none, leader or cronjob, not %q" $mode) }}
{{- end }}
{{- if and (eq $mode "leader") (not .Values.evaluation.leaderSchedule) }}
{{- fail "evaluation.mode leader needs evaluation.leaderSchedule, e.g. {handbook: 3600}" }}
{{- end }}
{{- if eq $mode "cronjob" }}
{{- if not .Values.evaluation.cronjob.sets }}
{{- fail "evaluation.mode cronjob needs evaluation.cronjob.sets, e.g. [{name: handbook}]" }}
{{- end }}
{{- if and (ne (toString $s.auth) "off") (ne (toString $s.auth) "false") (not (include "plumbline.hasSecret" (dict "root" . "name" "evalApiKey"))) }}
{{- fail "evaluation.mode cronjob needs an API key with the eval:admin role: secrets.evalApiKey, or eval-api-key in secrets.existingSecret" }}
{{- end }}
{{- end }}
{{- if and .Values.metrics.serviceMonitor.enabled $s.metrics_auth (not (include "plumbline.hasSecret" (dict "root" . "name" "metricsApiKey"))) }}
{{- fail "settings.metrics_auth with metrics.serviceMonitor needs a key with the metrics role: secrets.metricsApiKey, or metrics-api-key in secrets.existingSecret" }}
{{- end }}
{{- end }}

{{/* The CronJob name of an evaluation set: RELEASE-plumbline-eval-SET, DNS-safe, at most 52 characters. */}}
{{- define "plumbline.evalJobName" -}}
{{- $set := regexReplaceAll "[^a-z0-9-]+" (.set | toString | lower) "-" | trimAll "-" }}
{{- printf "%s-eval-%s" (include "plumbline.fullname" .root) $set | trunc 52 | trimSuffix "-" }}
{{- end }}

{{/* The service container's env beyond the ConfigMap: secrets, then extraEnv. */}}
{{- define "plumbline.serverEnv" -}}
{{- if include "plumbline.hasSecret" (dict "root" . "name" "stateUrl") }}
- name: PLUMBLINE_STATE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "plumbline.secretName" . }}
      key: {{ include "plumbline.secretKey" (dict "root" . "name" "stateUrl") }}
{{- end }}
{{- if include "plumbline.hasSecret" (dict "root" . "name" "qdrantApiKey") }}
- name: PLUMBLINE_QDRANT_API_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "plumbline.secretName" . }}
      key: {{ include "plumbline.secretKey" (dict "root" . "name" "qdrantApiKey") }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The TCP port of a URL, for the NetworkPolicy's egress: its explicit port, else .default when given (qdrant-client
uses 6333 for a URL without a port, https included), else 443 for https and 80 for http. Call with
(dict "url" URL "default" PORT-OR-""). */}}
{{- define "plumbline.urlPort" -}}
{{- $url := urlParse (toString .url) }}
{{- $port := regexFind ":[0-9]+$" $url.host | trimPrefix ":" }}
{{- if $port }}{{ $port }}{{ else if .default }}{{ .default }}{{ else if eq $url.scheme "https" }}443{{ else }}80{{ end }}
{{- end }}

{{/* The NetworkPolicy's egress rules (networkPolicy.egress.enabled), a YAML list or nothing: DNS, the PostgreSQL state
store when the Secret holds a state URL, Qdrant with backend qdrant, the LLM server when settings.llm_base_url is set,
then networkPolicy.egress.extra. */}}
{{- define "plumbline.egressRules" -}}
{{- $np := .Values.networkPolicy }}
{{- $s := .Values.settings }}
{{- if $np.egress.dns.enabled }}
# name resolution
- to:
    {{- toYaml $np.egress.dns.to | nindent 4 }}
  ports:
    - port: 53
      protocol: UDP
    - port: 53
      protocol: TCP
{{- end }}
{{- if include "plumbline.hasSecret" (dict "root" . "name" "stateUrl") }}
# the PostgreSQL state store
- ports:
    - port: {{ $np.egress.stateStore.port }}
      protocol: TCP
  {{- with $np.egress.stateStore.to }}
  to:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- if eq (default "edge" $s.backend) "qdrant" }}
# the Qdrant server (the port of settings.qdrant_url; 6333 when it names none, as qdrant-client assumes)
- ports:
    - port: {{ include "plumbline.urlPort" (dict "url" $s.qdrant_url "default" 6333) }}
      protocol: TCP
  {{- with $np.egress.qdrant.to }}
  to:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- with $s.llm_base_url }}
# the LLM server of synthetic sets and answer grading (the port of settings.llm_base_url)
- ports:
    - port: {{ include "plumbline.urlPort" (dict "url" . "default" "") }}
      protocol: TCP
{{- end }}
{{- with $np.egress.extra }}
{{ toYaml . }}
{{- end }}
{{- end }}
