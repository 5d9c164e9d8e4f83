{{/* Labels every object carries (as in manifests/). */}}
{{- define "koord-qos.webhookLabels" -}}
app.kubernetes.io/name: koord-webhook
app.kubernetes.io/part-of: koord-qos
{{- end }}

{{- define "koord-qos.applierLabels" -}}
app.kubernetes.io/name: koord-applier
app.kubernetes.io/part-of: koord-qos
{{- end }}

{{/*
The effective --feature-gates. The reference documents
  helm install ... --set featureGates="CPICollector=true,PSICollector=true"
and helm's --set splits at the comma: featureGates gets "CPICollector=true" and the rest becomes
a top-level value PSICollector=true. So a top-level value named like a koordlet gate is a gate
too, appended in this order; the applier takes the last setting of a gate.
*/}}
{{- define "koord-qos.featureGates" -}}
{{- $gates := list -}}
{{- with .Values.featureGates }}{{ $gates = append $gates (toString .) }}{{ end -}}
{{- range $name := list "CPICollector" "PSICollector" "Libpfm4" "Accelerators" "AuditEvents" "AuditEventsHTTPHandler" "BECPUEvict" "BECPUSuppress" "BEMemoryEvict" "BlkIOReconcile" "CgroupReconcile" "ColdPageCollector" "CoreSched" "CPUBurst" "HugePageReport" "NodeTopologyReport" "RdtResctrl" "SystemConfig" -}}
{{- if hasKey $.Values $name }}{{ $gates = append $gates (printf "%s=%v" $name (index $.Values $name)) }}{{ end -}}
{{- end -}}
{{- join "," $gates -}}
{{- end }}

{{/* "true" when the effective gates turn CPICollector on (the last setting wins). */}}
{{- define "koord-qos.cpiOn" -}}
{{- $on := false -}}
{{- range $g := splitList "," (include "koord-qos.featureGates" .) -}}
{{- $kv := splitList "=" (trim $g) -}}
{{- if and (eq (len $kv) 2) (eq (trim (first $kv)) "CPICollector") -}}
{{- $on = eq (trim (last $kv)) "true" -}}
{{- end -}}
{{- end -}}
{{- if $on }}true{{ end -}}
{{- end }}
