{{/*
Names, labels and the derived data every template shares (merged pools, the policy).
*/}}

{{- define "llm-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Release-qualified name; the release name alone when it already contains the chart name. */}}
{{- define "llm-gateway.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "llm-gateway.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "llm-gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "llm-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "llm-gateway.labels" -}}
helm.sh/chart: {{ include "llm-gateway.chart" . }}
{{ include "llm-gateway.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: llm-gateway
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Component-scoped selector: call with (dict "ctx" $ "component" "gateway"). */}}
{{- define "llm-gateway.componentSelector" -}}
{{ include "llm-gateway.selectorLabels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "llm-gateway.gatewaySelector" -}}
{{ include "llm-gateway.componentSelector" (dict "ctx" . "component" "gateway") }}
{{- end -}}

{{- define "llm-gateway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "llm-gateway.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "llm-gateway.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "llm-gateway.redisName" -}}
{{- printf "%s-redis" (include "llm-gateway.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Redis (templates/redis.yaml, the gateway's env and mounts). `redisInChart`: the chart runs Redis itself
(mode internal, or sentinel without external sentinels); `redisSentinelInChart`: the in-chart Sentinel
group. Both non-empty when true.
*/}}
{{- define "llm-gateway.redisSentinelInChart" -}}
{{- if and (eq .Values.redis.mode "sentinel") (not .Values.redis.sentinel.external.sentinels) -}}true{{- end -}}
{{- end -}}

{{- define "llm-gateway.redisInChart" -}}
{{- if or (eq .Values.redis.mode "internal") (include "llm-gateway.redisSentinelInChart" .) -}}true{{- end -}}
{{- end -}}

{{/* Headless Service of the in-chart Sentinel group's data nodes (stable pod DNS names). */}}
{{- define "llm-gateway.redisHeadless" -}}
{{- printf "%s-redis-headless" (include "llm-gateway.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* StatefulSet and headless Service of the in-chart sentinels. */}}
{{- define "llm-gateway.redisSentinelName" -}}
{{- printf "%s-redis-sentinel" (include "llm-gateway.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* `host:port` of every in-chart data node (pod 0 first) as a YAML list; the pods' FQDNs. */}}
{{- define "llm-gateway.redisNodeHosts" -}}
{{- $out := list -}}
{{- range $i := until (int (add1 .Values.redis.sentinel.replicas)) -}}
{{- $out = append $out (printf "%s-%d.%s.%s.svc.%s:6379" (include "llm-gateway.redisName" $) $i (include "llm-gateway.redisHeadless" $) $.Release.Namespace $.Values.clusterDomain) -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* `host:port` of every sentinel the gateway asks (in-chart: the three pods' FQDNs) as a YAML list. */}}
{{- define "llm-gateway.redisSentinelHosts" -}}
{{- if include "llm-gateway.redisSentinelInChart" . -}}
{{- $out := list -}}
{{- $name := include "llm-gateway.redisSentinelName" . -}}
{{- range $i := until 3 -}}
{{- $out = append $out (printf "%s-%d.%s.%s.svc.%s:26379" $name $i $name $.Release.Namespace $.Values.clusterDomain) -}}
{{- end -}}
{{- toYaml $out -}}
{{- else -}}
{{- toYaml .Values.redis.sentinel.external.sentinels -}}
{{- end -}}
{{- end -}}

{{/*
Render-time checks of `redis` that values.schema.json cannot express (or words less clearly: with
--skip-schema-validation these are the only ones).
*/}}
{{- define "llm-gateway.redisChecks" -}}
{{- $r := .Values.redis -}}
{{- $tls := $r.tls -}}
{{- if eq $r.mode "external" -}}
{{- if not (or $r.external.secretName $r.external.url) -}}
{{- fail "redis.mode is external: give redis.external.secretName (preferred) or redis.external.url" -}}
{{- end -}}
{{- if and $r.external.url (not $r.external.secretName) -}}
{{- if and $tls.enabled (hasPrefix "redis://" $r.external.url) -}}
{{- fail (printf "redis.tls.enabled is true but redis.external.url (%s) is redis://: use rediss://" $r.external.url) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and (eq $r.mode "cluster") (not $r.cluster.seeds) -}}
{{- fail "redis.mode is cluster: list seed nodes of the cluster in redis.cluster.seeds (host:port, e.g. the configuration endpoint of a managed cluster-mode Redis)" -}}
{{- end -}}
{{- if and (eq $r.mode "sentinel") (not $r.sentinel.masterName) -}}
{{- fail "redis.mode is sentinel: redis.sentinel.masterName must name the monitored primary" -}}
{{- end -}}
{{- if and (eq $r.mode "cluster") $tls.serverName -}}
{{- fail "redis.tls.serverName does not apply to redis.mode cluster (the gateway checks each node's own name): remove it, or use redis.tls.verify: ca" -}}
{{- end -}}
{{- $sa := $r.sentinel.external.auth -}}
{{- if and $sa.username (not $sa.secretName) -}}
{{- fail (printf "redis.sentinel.external.auth.username (%s) needs its password: set redis.sentinel.external.auth.secretName" $sa.username) -}}
{{- end -}}
{{- if and (or $sa.username $sa.secretName) (not (and (eq $r.mode "sentinel") $r.sentinel.external.sentinels)) -}}
{{- fail "redis.sentinel.external.auth is for external sentinels (redis.mode sentinel with redis.sentinel.external.sentinels); the in-chart sentinels take no password" -}}
{{- end -}}
{{- if and $r.auth.username (not $r.auth.secretName) -}}
{{- fail (printf "redis.auth.username (%s) needs its password: set redis.auth.secretName (and redis.auth.key)" $r.auth.username) -}}
{{- end -}}
{{- if and $tls.ca.secretName $tls.ca.configMapName -}}
{{- fail "redis.tls.ca: give secretName or configMapName, not both" -}}
{{- end -}}
{{- if not $tls.enabled -}}
{{- range $what, $set := dict "redis.tls.ca" (or $tls.ca.secretName $tls.ca.configMapName) "redis.tls.clientCert" $tls.clientCert.secretName "redis.tls.server" $tls.server.secretName "redis.tls.serverName" $tls.serverName -}}
{{- if $set -}}
{{- fail (printf "%s is set but redis.tls.enabled is false: enable TLS or remove it" $what) -}}
{{- end -}}
{{- end -}}
{{- else if include "llm-gateway.redisInChart" . -}}
{{- if not $tls.server.secretName -}}
{{- fail (printf "redis.tls.enabled with the in-chart Redis (redis.mode %s) needs redis.tls.server.secretName: the Secret with the servers' certificate, key and CA (e.g. from cert-manager)" $r.mode) -}}
{{- end -}}
{{- else if $tls.server.secretName -}}
{{- fail (printf "redis.tls.server is for the in-chart Redis (redis.mode internal, or sentinel without redis.sentinel.external.sentinels), not redis.mode %s" $r.mode) -}}
{{- end -}}
{{- if and (eq $r.mode "none") (or $tls.enabled $r.auth.secretName) -}}
{{- fail "redis.mode is none: redis.auth and redis.tls do not apply" -}}
{{- end -}}
{{- end -}}

{{/* The gateway's Redis environment (settings read by gateway/settings.py): a YAML list of EnvVar. */}}
{{- define "llm-gateway.redisGatewayEnv" -}}
{{- $r := .Values.redis -}}
{{- $tls := $r.tls -}}
{{- $env := list -}}
{{- if ne $r.mode "none" -}}
{{- $scheme := ternary "rediss" "redis" (and $tls.enabled true) -}}
{{- if eq $r.mode "internal" -}}
{{- $env = append $env (dict "name" "LLMGW_REDIS_MODE" "value" "standalone") -}}
{{- $env = append $env (dict "name" "LLMGW_REDIS_URL" "value" (printf "%s://%s:6379/0" $scheme (include "llm-gateway.redisName" .))) -}}
{{- else if eq $r.mode "external" -}}
{{- $env = append $env (dict "name" "LLMGW_REDIS_MODE" "value" "standalone") -}}
{{- if $r.external.secretName -}}
{{- $env = append $env (dict "name" "LLMGW_REDIS_URL" "valueFrom" (dict "secretKeyRef" (dict "name" $r.external.secretName "key" $r.external.key))) -}}
{{- else -}}
{{- $env = append $env (dict "name" "LLMGW_REDIS_URL" "value" $r.external.url) -}}
{{- end -}}
{{- else if eq $r.mode "sentinel" -}}
{{- $env = append $env (dict "name" "LLMGW_REDIS_MODE" "value" "sentinel") -}}
{{- $env = append $env (dict "name" "LLMGW_REDIS_SENTINELS" "value" (include "llm-gateway.redisSentinelHosts" . | fromYamlArray | join ",")) -}}
{{- $env = append $env (dict "name" "LLMGW_REDIS_SENTINEL_MASTER" "value" $r.sentinel.masterName) -}}
{{- with $r.sentinel.external.auth.username -}}
{{- $env = append $env (dict "name" "LLMGW_REDIS_SENTINEL_USERNAME" "value" .) -}}
{{- end -}}
{{- if $r.sentinel.external.auth.secretName -}}
{{- /* No file variant of this setting in the gateway: from the Secret into the environment. */ -}}
{{- $env = append $env (dict "name" "LLMGW_REDIS_SENTINEL_PASSWORD" "valueFrom" (dict "secretKeyRef" (dict "name" $r.sentinel.external.auth.secretName "key" $r.sentinel.external.auth.key))) -}}
{{- end -}}
{{- else if eq $r.mode "cluster" -}}
{{- $urls := list -}}
{{- range $r.cluster.seeds -}}
{{- $urls = append $urls (printf "%s://%s" $scheme .) -}}
{{- end -}}
{{- $env = append $env (dict "name" "LLMGW_REDIS_MODE" "value" "cluster") -}}
{{- $env = append $env (dict "name" "LLMGW_REDIS_URL" "value" (join "," $urls)) -}}
{{- end -}}
{{- with $r.auth.username -}}
{{- $env = append $env (dict "name" "LLMGW_REDIS_USERNAME" "value" .) -}}
{{- end -}}
{{- if $r.auth.secretName -}}
{{- $env = append $env (dict "name" "LLMGW_REDIS_PASSWORD_FILE" "value" "/etc/llmgw-redis/auth/password") -}}
{{- end -}}
{{- /* A rediss:// URL means TLS even without redis.tls (system CAs, full verification). */ -}}
{{- $rediss := and (eq $r.mode "external") (not $r.external.secretName) (hasPrefix "rediss://" $r.external.url) -}}
{{- $env = append $env (dict "name" "LLMGW_REDIS_TLS" "value" (ternary "true" "false" (or $tls.enabled $rediss))) -}}
{{- if $tls.enabled -}}
{{- $env = append $env (dict "name" "LLMGW_REDIS_TLS_VERIFY" "value" $tls.verify) -}}
{{- if or $tls.ca.secretName $tls.ca.configMapName (include "llm-gateway.redisInChart" .) -}}
{{- $env = append $env (dict "name" "LLMGW_REDIS_TLS_CA_FILE" "value" "/etc/llmgw-redis/tls-ca/ca.crt") -}}
{{- end -}}
{{- if $tls.clientCert.secretName -}}
{{- $env = append $env (dict "name" "LLMGW_REDIS_TLS_CERT_FILE" "value" "/etc/llmgw-redis/tls-client/tls.crt") -}}
{{- $env = append $env (dict "name" "LLMGW_REDIS_TLS_KEY_FILE" "value" "/etc/llmgw-redis/tls-client/tls.key") -}}
{{- end -}}
{{- with $tls.serverName -}}
{{- $env = append $env (dict "name" "LLMGW_REDIS_TLS_SERVER_NAME" "value" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toYaml $env -}}
{{- end -}}

{{/*
The gateway's Redis files, read-only (YAML map with `mounts` and `volumes`): the password, the CA bundle
(redis.tls.ca, or the in-chart servers' CA) and the client certificate and key.
*/}}
{{- define "llm-gateway.redisGatewayFiles" -}}
{{- $r := .Values.redis -}}
{{- $tls := $r.tls -}}
{{- $mounts := list -}}
{{- $volumes := list -}}
{{- if and (ne $r.mode "none") $r.auth.secretName -}}
{{- $mounts = append $mounts (dict "name" "redis-auth" "mountPath" "/etc/llmgw-redis/auth" "readOnly" true) -}}
{{- $volumes = append $volumes (dict "name" "redis-auth" "secret" (dict "secretName" $r.auth.secretName "defaultMode" 288 "items" (list (dict "key" $r.auth.key "path" "password")))) -}}
{{- end -}}
{{- if and (ne $r.mode "none") $tls.enabled -}}
{{- $ca := dict -}}
{{- if $tls.ca.secretName -}}
{{- $ca = dict "secret" (dict "secretName" $tls.ca.secretName "defaultMode" 292 "items" (list (dict "key" $tls.ca.key "path" "ca.crt"))) -}}
{{- else if $tls.ca.configMapName -}}
{{- $ca = dict "configMap" (dict "name" $tls.ca.configMapName "defaultMode" 292 "items" (list (dict "key" $tls.ca.key "path" "ca.crt"))) -}}
{{- else if include "llm-gateway.redisInChart" . -}}
{{- $ca = dict "secret" (dict "secretName" $tls.server.secretName "defaultMode" 292 "items" (list (dict "key" $tls.server.caKey "path" "ca.crt"))) -}}
{{- end -}}
{{- if $ca -}}
{{- $mounts = append $mounts (dict "name" "redis-tls-ca" "mountPath" "/etc/llmgw-redis/tls-ca" "readOnly" true) -}}
{{- $volumes = append $volumes (merge (dict "name" "redis-tls-ca") $ca) -}}
{{- end -}}
{{- if $tls.clientCert.secretName -}}
{{- $c := $tls.clientCert -}}
{{- $mounts = append $mounts (dict "name" "redis-tls-client" "mountPath" "/etc/llmgw-redis/tls-client" "readOnly" true) -}}
{{- $volumes = append $volumes (dict "name" "redis-tls-client" "secret" (dict "secretName" $c.secretName "defaultMode" 288 "items" (list (dict "key" $c.certKey "path" "tls.crt") (dict "key" $c.keyKey "path" "tls.key")))) -}}
{{- end -}}
{{- end -}}
{{- toYaml (dict "mounts" $mounts "volumes" $volumes) -}}
{{- end -}}

{{/*
Environment of the in-chart Redis containers shared by data nodes and sentinels (redis.sh reads it):
credentials and TLS files, and in Sentinel mode the group's names. Call with (dict "ctx" $ "announce"
"<headless service>" or "").
*/}}
{{- define "llm-gateway.redisServerEnv" -}}
{{- $ := .ctx -}}
{{- $r := $.Values.redis -}}
- {name: REDIS_CONF_DIR, value: /conf}
{{- if $r.auth.secretName }}
- {name: REDIS_PASSWORD_FILE, value: /auth/password}
{{- with $r.auth.username }}
- {name: REDIS_USERNAME, value: {{ . | quote }}}
{{- end }}
{{- end }}
{{- if $r.tls.enabled }}
- {name: REDIS_TLS, value: "yes"}
- {name: REDIS_TLS_CERT_FILE, value: /tls/tls.crt}
- {name: REDIS_TLS_KEY_FILE, value: /tls/tls.key}
- {name: REDIS_TLS_CA_FILE, value: /tls/ca.crt}
# Client certificates required when the gateway has one (redis.tls.clientCert), signed by the same CA.
- {name: REDIS_TLS_AUTH_CLIENTS, value: {{ ternary "yes" "no" (not (empty $r.tls.clientCert.secretName)) | quote }}}
{{- end }}
{{- if .announce }}
- name: POD_NAME
  valueFrom:
    fieldRef: {fieldPath: metadata.name}
- {name: REDIS_ANNOUNCE_HOST, value: {{ printf "$(POD_NAME).%s.%s.svc.%s" .announce $.Release.Namespace $.Values.clusterDomain | quote }}}
- {name: REDIS_MASTER_NAME, value: {{ $r.sentinel.masterName | quote }}}
{{- $nodes := include "llm-gateway.redisNodeHosts" $ | fromYamlArray }}
- {name: REDIS_INITIAL_PRIMARY, value: {{ first $nodes | quote }}}
- {name: REDIS_NODES, value: {{ join " " $nodes | quote }}}
- {name: REDIS_SENTINELS, value: {{ include "llm-gateway.redisSentinelHosts" $ | fromYamlArray | join " " | quote }}}
{{- end }}
{{- end -}}

{{/* Volumes of the in-chart Redis pods besides data: the scripts, the generated config, credentials, TLS. */}}
{{- define "llm-gateway.redisServerVolumes" -}}
{{- $r := .Values.redis -}}
- name: scripts
  configMap:
    name: {{ include "llm-gateway.redisName" . }}-scripts
    defaultMode: 292 # 0444
# The generated configuration (it holds the password): in memory, rewritten at every start.
- name: conf
  emptyDir:
    medium: Memory
    sizeLimit: 1Mi
{{- if $r.auth.secretName }}
- name: auth
  secret:
    secretName: {{ $r.auth.secretName }}
    defaultMode: 288 # 0440
    items:
      - {key: {{ $r.auth.key }}, path: password}
{{- end }}
{{- if $r.tls.enabled }}
- name: tls
  secret:
    secretName: {{ $r.tls.server.secretName }}
    defaultMode: 288 # 0440
    items:
      - {key: {{ $r.tls.server.certKey }}, path: tls.crt}
      - {key: {{ $r.tls.server.keyKey }}, path: tls.key}
      - {key: {{ $r.tls.server.caKey }}, path: ca.crt}
{{- end }}
{{- end -}}

{{- define "llm-gateway.redisServerMounts" -}}
- {name: scripts, mountPath: /scripts, readOnly: true}
- {name: conf, mountPath: /conf}
{{- if .Values.redis.auth.secretName }}
- {name: auth, mountPath: /auth, readOnly: true}
{{- end }}
{{- if .Values.redis.tls.enabled }}
- {name: tls, mountPath: /tls, readOnly: true}
{{- end }}
{{- end -}}

{{/*
PostgreSQL and the spend ledger (templates/postgresql.yaml, templates/ledger-migrate-job.yaml, the
gateway's env and mounts).
*/}}
{{- define "llm-gateway.postgresqlName" -}}
{{- printf "%s-postgresql" (include "llm-gateway.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "llm-gateway.ledgerMigrateName" -}}
{{- printf "%s-ledger-migrate" (include "llm-gateway.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The ledger is on: `ledger.enabled`, or (null) a database is configured. Non-empty when true. */}}
{{- define "llm-gateway.ledgerEnabled" -}}
{{- $on := .Values.ledger.enabled -}}
{{- if kindIs "invalid" $on -}}
{{- $on = ne .Values.postgresql.mode "none" -}}
{{- end -}}
{{- if $on -}}true{{- end -}}
{{- end -}}

{{/* Render-time checks of `postgresql` and `ledger` that values.schema.json cannot express. */}}
{{- define "llm-gateway.ledgerChecks" -}}
{{- $pg := .Values.postgresql -}}
{{- $m := .Values.ledger.migration -}}
{{- if and (eq $pg.mode "external") (not $pg.external.existingSecret) -}}
{{- fail "postgresql.mode is external: set postgresql.external.existingSecret (an existing Secret holding the database URL under postgresql.external.key)" -}}
{{- end -}}
{{- if and (ne $pg.mode "external") $pg.external.existingSecret -}}
{{- fail (printf "postgresql.external.existingSecret is set but postgresql.mode is %s: set postgresql.mode external, or remove it" $pg.mode) -}}
{{- end -}}
{{- if and (eq $pg.mode "none") (eq (toString .Values.ledger.enabled) "true") -}}
{{- fail "ledger.enabled needs a database: set postgresql.mode to internal (the chart runs PostgreSQL) or external (postgresql.external.existingSecret)" -}}
{{- end -}}
{{- if and (include "llm-gateway.ledgerEnabled" .) (le (int $m.activeDeadlineSeconds) (int $m.waitSeconds)) -}}
{{- fail (printf "ledger.migration.activeDeadlineSeconds (%d) must exceed ledger.migration.waitSeconds (%d): the Job would be killed while llmgw db migrate still waits for the database" (int $m.activeDeadlineSeconds) (int $m.waitSeconds)) -}}
{{- end -}}
{{- end -}}

{{/*
The policy's `ledger` block: `enabled: true` and each setting of `ledger` that is not null, under the
policy's names. Empty when the ledger is off.
*/}}
{{- define "llm-gateway.ledgerPolicy" -}}
{{- if include "llm-gateway.ledgerEnabled" . -}}
{{- $l := .Values.ledger -}}
{{- $out := dict "enabled" true -}}
{{- range $value, $key := dict "retentionDays" "retention_days" "batchRows" "batch_rows" "flushMs" "flush_ms" "memoryRows" "memory_rows" "spoolMaxRows" "spool_max_rows" -}}
{{- $v := index $l $value -}}
{{- if not (kindIs "invalid" $v) -}}
{{- $_ := set $out $key (int64 $v) -}}
{{- end -}}
{{- end -}}
{{- if not (kindIs "invalid" $l.migrateOnStart) -}}
{{- $_ := set $out "migrate_on_start" $l.migrateOnStart -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}
{{- end -}}

{{/*
The database URL as the gateway and the migration Job read it: a file from a Secret, never an
environment value. A YAML map with `env`, `mounts` and `volumes` (empty lists with postgresql.mode none).
*/}}
{{- define "llm-gateway.databaseUrlFile" -}}
{{- $pg := .Values.postgresql -}}
{{- $env := list -}}
{{- $mounts := list -}}
{{- $volumes := list -}}
{{- if ne $pg.mode "none" -}}
{{- $secret := dict "secretName" (include "llm-gateway.postgresqlName" .) "key" "database-url" -}}
{{- if eq $pg.mode "external" -}}
{{- $secret = dict "secretName" $pg.external.existingSecret "key" $pg.external.key -}}
{{- end -}}
{{- $env = append $env (dict "name" "LLMGW_DATABASE_URL_FILE" "value" "/etc/llmgw-postgresql/url") -}}
{{- $mounts = append $mounts (dict "name" "database-url" "mountPath" "/etc/llmgw-postgresql" "readOnly" true) -}}
{{- $volumes = append $volumes (dict "name" "database-url" "secret" (dict "secretName" $secret.secretName "defaultMode" 288 "items" (list (dict "key" $secret.key "path" "url")))) -}}
{{- end -}}
{{- toYaml (dict "env" $env "mounts" $mounts "volumes" $volumes) -}}
{{- end -}}

{{/* Resource name of a pool: call with (dict "ctx" $ "pool" $pool). */}}
{{- define "llm-gateway.poolName" -}}
{{- printf "%s-pool-%s" (include "llm-gateway.fullname" .ctx) .pool.name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "llm-gateway.poolSelector" -}}
{{ include "llm-gateway.componentSelector" (dict "ctx" .ctx "component" "pool") }}
llm-gateway.io/pool: {{ .pool.name | quote }}
{{- end -}}

{{/*
Deep merge of two maps as YAML, `over` winning. Unlike sprig's mergeOverwrite it lets false, 0 and ""
override a default (a pool's `keda.enabled: false` or `minReplicaCount: 0` must win over poolDefaults);
lists are replaced, not concatenated.
*/}}
{{- define "llm-gateway.merge" -}}
{{- $out := deepCopy .base -}}
{{- range $k, $v := .over -}}
{{- $cur := get $out $k -}}
{{- if and (kindIs "map" $v) (kindIs "map" $cur) -}}
{{- $_ := set $out $k (include "llm-gateway.merge" (dict "base" $cur "over" $v) | fromYaml) -}}
{{- else -}}
{{- $_ := set $out $k $v -}}
{{- end -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* Every pool merged over poolDefaults, with servedModelName filled in; a YAML list (fromYamlArray). */}}
{{- define "llm-gateway.pools" -}}
{{- $pools := list -}}
{{- $seen := dict -}}
{{- range $p := .Values.pools -}}
{{- if hasKey $seen $p.name -}}
{{- fail (printf "pools: duplicate pool name %q" $p.name) -}}
{{- end -}}
{{- $_ := set $seen $p.name true -}}
{{- $m := include "llm-gateway.merge" (dict "base" $.Values.poolDefaults "over" $p) | fromYaml -}}
{{- if not $m.servedModelName -}}
{{- $_ := set $m "servedModelName" $m.name -}}
{{- end -}}
{{- if gt (int $m.keda.minReplicaCount) (int $m.keda.maxReplicaCount) -}}
{{- fail (printf "pools[%s].keda: minReplicaCount (%d) must not exceed maxReplicaCount (%d)" $m.name (int $m.keda.minReplicaCount) (int $m.keda.maxReplicaCount)) -}}
{{- end -}}
{{- if $m.lora.enabled -}}
{{- include "llm-gateway.loraChecks" $m -}}
{{- end -}}
{{- $pools = append $pools $m -}}
{{- end -}}
{{- toYaml $pools -}}
{{- end -}}

{{/* True (non-empty) when KEDA scales this pool: call with (dict "ctx" $ "pool" $pool). */}}
{{- define "llm-gateway.poolKeda" -}}
{{- if and .ctx.Values.keda.enabled .pool.keda.enabled -}}true{{- end -}}
{{- end -}}

{{- define "llm-gateway.testKeySecret" -}}
{{- printf "%s-test-key" (include "llm-gateway.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The test API key: reused from the existing Secret on upgrades (lookup), new and random otherwise
(`helm template` has no cluster, so it renders a fresh one each time).
*/}}
{{- define "llm-gateway.testKey" -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "llm-gateway.testKeySecret" .) -}}
{{- if and $existing $existing.data (index $existing.data "api-key") -}}
{{- index $existing.data "api-key" | b64dec -}}
{{- else -}}
{{- if not (hasKey .Values "_testKey") -}}
{{- $_ := set .Values "_testKey" (printf "sk-helm-test-%s" (randAlphaNum 40)) -}}
{{- end -}}
{{- .Values._testKey -}}
{{- end -}}
{{- end -}}

{{/*
`--speculative-config` of a pool's `speculative` (what gateway/config_pool.py Speculative.engine_config
gives): the engine's keys, without the gateway's acceptance_window_s, with `extra` merged in.
*/}}
{{- define "llm-gateway.speculativeArg" -}}
{{- $engine := merge (omit . "acceptance_window_s" "extra") (default dict .extra) -}}
{{- printf "--speculative-config=%s" (toJson $engine) -}}
{{- end -}}

{{/* Render-time checks of an enabled `lora` that the schema cannot express; called with a merged pool. */}}
{{- define "llm-gateway.loraChecks" -}}
{{- $l := .lora -}}
{{- if not $l.adapters -}}
{{- fail (printf "pools[%s].lora: enabled needs at least one entry in adapters" .name) -}}
{{- end -}}
{{- if and (not (kindIs "invalid" $l.maxCpuLoras)) (lt (int $l.maxCpuLoras) (int $l.maxLoras)) -}}
{{- fail (printf "pools[%s].lora: maxCpuLoras (%d) must be at least maxLoras (%d)" .name (int $l.maxCpuLoras) (int $l.maxLoras)) -}}
{{- end -}}
{{- $seen := dict -}}
{{- range $a := $l.adapters -}}
{{- if hasKey $seen $a.name -}}
{{- fail (printf "pools[%s].lora: duplicate adapter name %q" $.name $a.name) -}}
{{- end -}}
{{- $_ := set $seen $a.name true -}}
{{- if gt (int $a.rank) (int $l.maxLoraRank) -}}
{{- fail (printf "pools[%s].lora: adapter %q has rank %d, above maxLoraRank %d" $.name $a.name (int $a.rank) (int $l.maxLoraRank)) -}}
{{- end -}}
{{- if eq $a.name $.servedModelName -}}
{{- fail (printf "pools[%s].lora: adapter %q is named like the served model" $.name $a.name) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The adapters of a pool's `lora` as the policy has them: {name, source, rank[, price]}, `source` the
adapter's `path` or <mountPath>/<name>. A YAML list (fromYamlArray).
*/}}
{{- define "llm-gateway.loraAdapters" -}}
{{- $out := list -}}
{{- range $a := .adapters -}}
{{- $src := default (printf "%s/%s" (trimSuffix "/" $.mountPath) $a.name) $a.path -}}
{{- $e := dict "name" $a.name "source" $src "rank" (int $a.rank) -}}
{{- with $a.price -}}
{{- $_ := set $e "price" . -}}
{{- end -}}
{{- $out = append $out $e -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/*
The engine flags of an enabled `lora` (vLLM and the simulator alike; --max-cpu-loras for vLLM only):
a YAML list. `--lora-modules` takes every adapter after one flag (vLLM keeps only the last occurrence
of a repeated one); omitted with runtimeLoading unless preload. Call with (dict "lora" $l "vllm" bool).
*/}}
{{- define "llm-gateway.loraArgs" -}}
{{- $l := .lora -}}
{{- $args := list "--enable-lora" (printf "--max-loras=%d" (int $l.maxLoras)) (printf "--max-lora-rank=%d" (int $l.maxLoraRank)) -}}
{{- if and .vllm (not (kindIs "invalid" $l.maxCpuLoras)) -}}
{{- $args = append $args (printf "--max-cpu-loras=%d" (int $l.maxCpuLoras)) -}}
{{- end -}}
{{- if or (not $l.runtimeLoading) $l.preload -}}
{{- $args = append $args "--lora-modules" -}}
{{- range $a := include "llm-gateway.loraAdapters" $l | fromYamlArray -}}
{{- $args = append $args (printf "%s=%s" $a.name $a.source) -}}
{{- end -}}
{{- end -}}
{{- toYaml $args -}}
{{- end -}}

{{- define "llm-gateway.testModel" -}}
{{- default (index .Values.config.models 0).name .Values.tests.model -}}
{{- end -}}

{{/*
The gateway policy: in-chart pools (DNS discovery of each pool's headless Service) first, then
config.pools, then the rest of `config`; plus the test key when the chart creates one, and the
`ledger` block when the ledger is on.
*/}}
{{- define "llm-gateway.policy" -}}
{{- $pools := list -}}
{{- range $p := include "llm-gateway.pools" . | fromYamlArray -}}
{{- /* Fully qualified with a trailing dot: with ndots:5 a relative name would first walk the pod's
search list on every re-resolve. */ -}}
{{- $svc := printf "%s.%s.svc.%s." (include "llm-gateway.poolName" (dict "ctx" $ "pool" $p)) $.Release.Namespace $.Values.clusterDomain -}}
{{- $endpoints := dict "dns" (dict "name" $svc "port" 8000) -}}
{{- if eq $.Values.discovery "kubernetes" -}}
{{- $endpoints = dict "kubernetes" (dict "service" (include "llm-gateway.poolName" (dict "ctx" $ "pool" $p)) "port" 8000) -}}
{{- end -}}
{{- $gen := dict "name" $p.name "engine" "vllm" "model" $p.servedModelName "endpoints" $endpoints -}}
{{- with $p.speculative -}}
{{- $_ := set $gen "speculative" . -}}
{{- end -}}
{{- if $p.lora.enabled -}}
{{- $l := $p.lora -}}
{{- $_ := set $gen "lora" (dict "max_loras" (int $l.maxLoras) "max_rank" (int $l.maxLoraRank) "runtime_loading" $l.runtimeLoading "affinity" $l.affinity "adapters" (include "llm-gateway.loraAdapters" $l | fromYamlArray)) -}}
{{- end -}}
{{- $pools = append $pools (include "llm-gateway.merge" (dict "base" $gen "over" $p.gateway) | fromYaml) -}}
{{- end -}}
{{- $policy := omit (deepCopy .Values.config) "pools" -}}
{{- $_ := set $policy "pools" (concat $pools .Values.config.pools) -}}
{{- if and .Values.tests.enabled .Values.tests.apiKey.create -}}
{{- $tenancy := default dict $policy.tenancy -}}
{{- $key := dict "id" "helm-test" "sha256" (include "llm-gateway.testKey" . | sha256sum) "org" "helm-test" "app" "helm-test" "models" (list (include "llm-gateway.testModel" .)) -}}
{{- $_ := set $tenancy "keys" (append (default list $tenancy.keys) $key) -}}
{{- $_ := set $policy "tenancy" $tenancy -}}
{{- end -}}
{{- $limits := default dict $policy.limits -}}
{{- $tenancy := default dict $policy.tenancy -}}
{{- $cache := default dict $policy.cache -}}
{{- if and (eq .Values.redis.mode "none") (or (eq (toString $limits.backend) "redis") (eq (toString $tenancy.store) "redis") (eq (toString $cache.backend) "redis")) -}}
{{- fail "redis.mode is none but config.limits.backend, config.tenancy.store or config.cache.backend is redis: set them to memory, or give the chart a Redis" -}}
{{- end -}}
{{- with include "llm-gateway.ledgerPolicy" . -}}
{{- $_ := set $policy "ledger" (fromYaml .) -}}
{{- end -}}
{{- toYaml $policy -}}
{{- end -}}

{{/* Pod security context shared by every pod of the chart. */}}
{{- define "llm-gateway.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .uid }}
runAsGroup: {{ default .uid .gid }}
fsGroup: {{ default .uid .gid }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Container security context shared by every container of the chart. */}}
{{- define "llm-gateway.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}
