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
