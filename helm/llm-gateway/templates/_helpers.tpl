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
config.pools, then the rest of `config`; plus the test key when the chart creates one.
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
