{{- define "disruption-guard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "disruption-guard.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "disruption-guard.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "disruption-guard.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "disruption-guard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "disruption-guard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "disruption-guard.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{ include "disruption-guard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "disruption-guard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "disruption-guard.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "disruption-guard.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{- /*
The pods' PriorityClass: the value when set; otherwise system-cluster-critical in kube-system,
where every cluster admits it, and none elsewhere (GKE admits the system classes outside
kube-system only under a ResourceQuota that allows them).
*/ -}}
{{- define "disruption-guard.priorityClassName" -}}
{{- if .Values.priorityClassName -}}
{{- .Values.priorityClassName -}}
{{- else if eq .Release.Namespace "kube-system" -}}
system-cluster-critical
{{- end -}}
{{- end -}}

{{- /*
The label matchers every alert expression selects the operator's series with.
*/ -}}
{{- define "disruption-guard.alertSelector" -}}
{{- if .Values.prometheusRule.selector -}}
{{- tpl .Values.prometheusRule.selector . -}}
{{- else -}}
{{- printf "job=\"%s-admin\", namespace=\"%s\"" (include "disruption-guard.fullname" .) .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{- /*
Timeout annotations of the Ingress controllers that read them per Ingress: a request with
`?wait=true` may wait up to 10 minutes for its answer.
*/ -}}
{{- define "disruption-guard.ingressTimeouts" -}}
{{- with int .Values.ingress.requestTimeoutSeconds }}
nginx.ingress.kubernetes.io/proxy-read-timeout: {{ . | quote }}
nginx.ingress.kubernetes.io/proxy-send-timeout: {{ . | quote }}
haproxy.org/timeout-server: {{ printf "%ds" . | quote }}
{{- end }}
{{- end -}}

{{- /*
The audience every token must carry (--token-audience): api.tokenAudience when set, else
disruption-guard:<clusterName>. With neither, `disruption-guard`, the same for every install:
refused when the API trusts OIDC issuers, since a CI id-token minted for one install's guard
would then open windows on every cluster that trusts the same subject.
*/ -}}
{{- define "disruption-guard.tokenAudience" -}}
{{- if .Values.api.tokenAudience -}}
{{- .Values.api.tokenAudience -}}
{{- else if .Values.clusterName -}}
{{- printf "disruption-guard:%s" .Values.clusterName -}}
{{- else if .Values.api.oidc.issuers -}}
{{- fail "api.oidc.issuers needs a token audience of this install's own: set clusterName (the audience becomes disruption-guard:<clusterName>) or api.tokenAudience" -}}
{{- else -}}
disruption-guard
{{- end -}}
{{- end -}}

{{/*
The operator's ServiceAccount as a FlowSchema subject (templates/flowcontrol.yaml).
*/}}
{{- define "disruption-guard.flowSubject" -}}
- kind: ServiceAccount
  serviceAccount:
    name: {{ include "disruption-guard.serviceAccountName" . }}
    namespace: {{ .Release.Namespace }}
{{- end }}

{{/*
The operator's --oidc-ca-file flags: `caBundle` for the only issuer (a bare path), each of
`caBundles` for its own issuer (ISSUER=PATH). Refused: `caBundle` with several issuers (a bare
CA would vouch for all of them), and a `caBundles` key that is not an issuer.
*/}}
{{- define "disruption-guard.oidcCaFiles" -}}
{{- $oidc := .Values.api.oidc -}}
{{- if and $oidc.caBundle $oidc.caBundles -}}
{{- fail "api.oidc.caBundle and api.oidc.caBundles: give the CAs in one of them" -}}
{{- end -}}
{{- if $oidc.caBundle -}}
{{- if gt (len $oidc.issuers) 1 -}}
{{- fail "api.oidc.caBundle serves one issuer only: with several api.oidc.issuers, give each its CA in api.oidc.caBundles ({<issuer URL>: <PEM>})" -}}
{{- end -}}
{{- if $oidc.issuers }}
- --oidc-ca-file=/etc/disruption-guard/oidc-ca/ca.crt
{{- end -}}
{{- end -}}
{{- range $i, $issuer := keys $oidc.caBundles | sortAlpha -}}
{{- if not (has $issuer $oidc.issuers) -}}
{{- fail (printf "api.oidc.caBundles names %s, which is not one of api.oidc.issuers" $issuer) -}}
{{- end }}
- --oidc-ca-file={{ $issuer }}=/etc/disruption-guard/oidc-ca/issuer-{{ $i }}.crt
{{- end -}}
{{- end -}}

{{/*
Namespace the webhook check sends its probe in: intercept.check.namespace; else the namespace
intercept.namespaceSelector names (`kubernetes.io/metadata.name` in its matchLabels, or the
first value of an `In` on it), else the first of `namespaces` (the registration sends only
those), else the release namespace.
*/}}
{{- define "disruption-guard.checkNamespace" -}}
{{- $selector := .Values.intercept.namespaceSelector | default dict -}}
{{- $named := "" -}}
{{- range $selector.matchExpressions -}}
{{- if and (not $named) (eq .key "kubernetes.io/metadata.name") (eq .operator "In") -}}
{{- $named = first .values -}}
{{- end -}}
{{- end -}}
{{- with $selector.matchLabels -}}
{{- with index . "kubernetes.io/metadata.name" -}}
{{- $named = . -}}
{{- end -}}
{{- end -}}
{{- if .Values.intercept.check.namespace -}}
{{- .Values.intercept.check.namespace -}}
{{- else if $named -}}
{{- $named -}}
{{- else if .Values.namespaces -}}
{{- first .Values.namespaces -}}
{{- else -}}
{{- .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{/*
A LabelSelector value (matchLabels, matchExpressions) in the text syntax of kubectl's `-l`,
which the operator's `--*-namespace-selector` flags read: `k=v` for each label (sorted),
then, in order, `k in (a,b)`, `k notin (a,b)`, `k` (Exists) and `!k` (DoesNotExist), joined
by commas. Empty for an empty selector. The schema has already checked operators and values.
*/}}
{{- define "disruption-guard.selectorText" -}}
{{- $terms := list -}}
{{- range $key, $value := .matchLabels -}}
{{- $terms = append $terms (printf "%s=%s" $key $value) -}}
{{- end -}}
{{- range .matchExpressions -}}
{{- if eq .operator "In" -}}
{{- $terms = append $terms (printf "%s in (%s)" .key (join "," .values)) -}}
{{- else if eq .operator "NotIn" -}}
{{- $terms = append $terms (printf "%s notin (%s)" .key (join "," .values)) -}}
{{- else if eq .operator "Exists" -}}
{{- $terms = append $terms .key -}}
{{- else if eq .operator "DoesNotExist" -}}
{{- $terms = append $terms (printf "!%s" .key) -}}
{{- end -}}
{{- end -}}
{{- join "," $terms -}}
{{- end -}}
