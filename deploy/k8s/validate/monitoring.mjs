// The checks of validate.mjs that concern Prometheus:
//   - the Prometheus Operator's PodMonitor (monitoring.coreos.com/v1), a custom resource that
//     kubernetes-models does not know: its fields are checked against the CRD's field names (as of
//     prometheus-operator 0.8x; a field outside these lists is reported like an unknown Kubernetes
//     field), its required fields and their types, and across objects that it selects some pod
//     template that declares the port it scrapes;
//   - the prometheus.io/* annotations of pstrain's role pod templates: a role is scraped (or says
//     prometheus.io/scrape: "false"), on a port its container names "metrics" and gives the role
//     as PSTRAIN_METRICS_PORT, so the annotation, the port and the flag cannot drift apart.

const POD_MONITOR = "monitoring.coreos.com/v1/PodMonitor";

const POD_MONITOR_FIELDS = new Set(["apiVersion", "kind", "metadata", "spec"]);
const POD_MONITOR_SPEC_FIELDS = new Set([
  "attachMetadata", "bodySizeLimit", "convertClassicHistogramsToNHCB", "fallbackScrapeProtocol", "jobLabel",
  "keepDroppedTargets", "labelLimit", "labelNameLengthLimit", "labelValueLengthLimit", "namespaceSelector",
  "nativeHistogramBucketLimit", "nativeHistogramMinBucketFactor", "podMetricsEndpoints", "podTargetLabels",
  "sampleLimit", "scrapeClass", "scrapeClassicHistograms", "scrapeProtocols", "selector", "selectorMechanism",
  "targetLimit",
]);
const POD_METRICS_ENDPOINT_FIELDS = new Set([
  "authorization", "basicAuth", "bearerTokenSecret", "enableHttp2", "filterRunning", "followRedirects",
  "honorLabels", "honorTimestamps", "interval", "metricRelabelings", "noProxy", "oauth2", "params", "path",
  "port", "portNumber", "proxyConnectHeader", "proxyFromEnvironment", "proxyUrl", "relabelings", "scheme",
  "scrapeTimeout", "targetPort", "tlsConfig", "trackTimestampsStaleness",
]);

// True for the custom kinds this module checks instead of kubernetes-models.
export function isCustomKind(obj) {
  return `${obj.apiVersion}/${obj.kind}` === POD_MONITOR;
}

function isObject(value) {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function unknown(value, fields, path) {
  return Object.keys(value).filter((key) => !fields.has(key)).map((key) => `${path}${key}: unknown field`);
}

// What is wrong with PodMonitor `obj` on its own, as `path: what` lines (metadata aside: the caller
// checks it as Kubernetes' ObjectMeta).
export function podMonitorProblems(obj) {
  const out = unknown(obj, POD_MONITOR_FIELDS, "");
  const spec = obj.spec;
  if (!isObject(spec)) return [...out, "spec: missing (required) or not an object"];
  out.push(...unknown(spec, POD_MONITOR_SPEC_FIELDS, "spec."));
  if (!isObject(spec.selector)) out.push("spec.selector: missing (required) or not an object");
  const endpoints = spec.podMetricsEndpoints;
  if (!Array.isArray(endpoints) || endpoints.length === 0) {
    out.push("spec.podMetricsEndpoints: missing or empty (nothing would be scraped)");
    return out;
  }
  endpoints.forEach((e, i) => {
    const path = `spec.podMetricsEndpoints[${i}]`;
    if (!isObject(e)) {
      out.push(`${path}: not an object`);
      return;
    }
    out.push(...unknown(e, POD_METRICS_ENDPOINT_FIELDS, `${path}.`));
    if (typeof e.port !== "string" || e.port === "") out.push(`${path}.port: missing or not a port name`);
    if (e.path !== undefined && (typeof e.path !== "string" || !e.path.startsWith("/"))) {
      out.push(`${path}.path: ${JSON.stringify(e.path)} is not an absolute URL path`);
    }
  });
  return out;
}

// Across objects: PodMonitor `obj` must select some pod template of `templates` ({namespace,
// template} of the input's workloads) in its own namespace (the operator's default without a
// namespaceSelector), and each endpoint's port must be a port one of them names. `matches` is
// validate.mjs's label-selector test.
export function podMonitorTargetProblems(obj, templates, matches) {
  const spec = obj.spec;
  if (!isObject(spec) || !isObject(spec.selector) || spec.namespaceSelector !== undefined) return [];
  const selected = templates.filter((t) => t.namespace === obj.metadata?.namespace &&
    matches(spec.selector, t.template.metadata?.labels));
  if (selected.length === 0) return ["spec.selector: matches no pod template in the input"];
  const portNames = new Set(selected.flatMap((t) => (t.template.spec?.containers ?? [])
    .flatMap((c) => (c.ports ?? []).map((p) => p.name))));
  const out = [];
  (spec.podMetricsEndpoints ?? []).forEach((e, i) => {
    if (typeof e?.port === "string" && !portNames.has(e.port)) {
      out.push(`spec.podMetricsEndpoints[${i}].port: ${JSON.stringify(e.port)} is not a port of any pod it selects`);
    }
  });
  return out;
}

// What the pod template `template` (at `base`, e.g. "spec.template") of a pstrain role lacks for
// being scraped.
export function roleScrapeProblems(template, base) {
  const annotations = template.metadata?.annotations ?? {};
  const at = `${base}.metadata.annotations`;
  const scrape = annotations["prometheus.io/scrape"];
  if (scrape === "false") return [];
  if (scrape !== "true") {
    return [`${at}["prometheus.io/scrape"]: must be "true" (or "false" for a role without /metrics), ` +
            `got ${JSON.stringify(scrape ?? null)}`];
  }
  const port = annotations["prometheus.io/port"];
  if (typeof port !== "string" || !/^\d+$/.test(port)) {
    return [`${at}["prometheus.io/port"]: must be a port number, got ${JSON.stringify(port ?? null)}`];
  }
  const out = [];
  if (annotations["prometheus.io/path"] !== "/metrics") {
    out.push(`${at}["prometheus.io/path"]: must be "/metrics", got ${JSON.stringify(annotations["prometheus.io/path"] ?? null)}`);
  }
  const containers = template.spec?.containers ?? [];
  const index = containers.findIndex((c) => (c.ports ?? []).some((p) => p.containerPort === Number(port)));
  if (index < 0) {
    out.push(`${at}["prometheus.io/port"]: ${port} is not a port of any container`);
    return out;
  }
  const c = containers[index];
  const path = `${base}.spec.containers[${index}]`;
  const declared = c.ports.find((p) => p.containerPort === Number(port));
  if (declared.name !== "metrics") {
    out.push(`${path}.ports: port ${port} (prometheus.io/port) must be named "metrics", got ${JSON.stringify(declared.name ?? null)}`);
  }
  const env = (c.env ?? []).find((e) => e.name === "PSTRAIN_METRICS_PORT");
  if (env?.value !== port) {
    out.push(`${path}.env.PSTRAIN_METRICS_PORT: must be "${port}" (prometheus.io/port), got ${JSON.stringify(env?.value ?? null)}`);
  }
  return out;
}
