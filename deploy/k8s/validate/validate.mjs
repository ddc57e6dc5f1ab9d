// Validates rendered Kubernetes manifests (multi-document YAML, e.g. `kubectl kustomize` output)
// without a cluster. For every object:
//   - the Kubernetes API schema: kubernetes-models' class for its apiVersion/kind and validate()
//     (types, required fields, enums);
//   - unknown fields, which the schema lets through but the API server drops or refuses: the object
//     is walked with @kubernetes/client-node's model type maps (each model's attributeTypeMap);
//   - workloads: spec.selector is present and matches the pod template's labels;
//   - across objects: a Service's selector matches some pod template, a StatefulSet's serviceName
//     names a Service, probes use ports the container declares, a Job's restartPolicy is allowed,
//     no object appears twice;
//   - pstrain's roles (pod templates labelled app.kubernetes.io/name: pstrain with component
//     scheduler, server or worker): every container mounts its own role's TLS Secret
//     (pstrain-tls-<component>, or a projected volume holding it; another role's is refused: a
//     worker's certificate cannot act as a server) read-only, as a whole (a subPath mount never
//     sees a rotated Secret), and points PSTRAIN_TLS_CERT,
//     PSTRAIN_TLS_KEY, PSTRAIN_TLS_CA and PSTRAIN_JOB_TOKEN_FILE at files in it; its gRPC probes
//     ask the port named "health", the plaintext health listener (a kubelet cannot pass the main
//     port's mutual TLS); it is scraped by Prometheus on the port it names "metrics" (monitoring.mjs);
//   - the Prometheus Operator's PodMonitor, which kubernetes-models does not know (monitoring.mjs).
//
// Usage: node validate.mjs [FILE...]   (no FILE or "-": standard input)
// Prints one line per problem, `<Kind> <name>: <path>: <what>`, and exits 1 if there is any;
// otherwise prints `ok: N objects` and exits 0. Exit 2: a file cannot be read.
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";
import { isCustomKind, podMonitorProblems, podMonitorTargetProblems, roleScrapeProblems } from "./monitoring.mjs";

// Only the client's generated models (a third of its load time); the whole client if a future
// version moves them.
const k8s = await import("@kubernetes/client-node/dist/gen/models/all.js")
  .catch(() => import("@kubernetes/client-node"));

// --- reading ---

function readInputs(args) {
  const files = args.length === 0 ? ["-"] : args;
  return files.map((file) => {
    try {
      return { file, text: readFileSync(file === "-" ? 0 : file, "utf8") };
    } catch (err) {
      console.error(`validate: cannot read ${file}: ${err.message}`);
      process.exit(2);
    }
  });
}

// --- paths ---

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;

function child(path, key) {
  if (typeof key === "number") return `${path}[${key}]`;
  if (!IDENTIFIER.test(key)) return `${path}[${JSON.stringify(key)}]`;
  return path === "" ? key : `${path}.${key}`;
}

// ajv's "/spec/template/spec/containers/0/name" as "spec.template.spec.containers[0].name".
function pointerToPath(pointer) {
  let path = "";
  for (const raw of pointer.split("/").slice(1)) {
    const key = raw.replace(/~1/g, "/").replace(/~0/g, "~");
    path = child(path, /^\d+$/.test(key) ? Number(key) : key);
  }
  return path;
}

// --- schema (kubernetes-models) ---

const modelCache = new Map();

// The kubernetes-models class for apiVersion/kind, or null if it has none.
async function schemaClass(apiVersion, kind) {
  const key = `${apiVersion}/${kind}`;
  if (!modelCache.has(key)) {
    let cls = null;
    if (/^([a-z0-9.-]+\/)?v\d+[a-z0-9]*$/.test(apiVersion) && /^[A-Z][A-Za-z0-9]*$/.test(kind)) {
      try {
        cls = (await import(`kubernetes-models/${apiVersion}/${kind}`))[kind] ?? null;
      } catch {
        cls = null;
      }
    }
    modelCache.set(key, cls);
  }
  return modelCache.get(key);
}

function schemaProblems(cls, obj) {
  try {
    new cls(obj).validate();
    return [];
  } catch (err) {
    if (!Array.isArray(err.errors)) return [`: ${err.message}`];
    const lines = err.errors.map((e) => {
      let path = pointerToPath(e.instancePath ?? "");
      let what = e.message;
      if (e.keyword === "required") {
        path = child(path, e.params.missingProperty);
        what = "missing (required)";
      }
      if (e.keyword === "enum") what += ` (${e.params.allowedValues.map((v) => JSON.stringify(v)).join(", ")})`;
      return `${path}: ${what}`;
    });
    return [...new Set(lines)];
  }
}

// --- unknown fields (@kubernetes/client-node type maps) ---

// The client's model class name: apps/v1 StatefulSet -> V1StatefulSet, autoscaling/v2 -> V2...
function typeMapName(apiVersion, kind) {
  const version = apiVersion.split("/").pop();
  return version.charAt(0).toUpperCase() + version.slice(1) + kind;
}

const LEAF_TYPES = new Set(["string", "boolean", "number", "integer", "long", "float", "double", "any", "object",
                            "Date", "IntOrString"]);

// Appends to `out` every field of `value` (at `path`) that `type` does not have.
function unknownFields(value, type, path, out) {
  type = type.replace(/ \| (null|undefined)$/, "");
  if (value === null || value === undefined || LEAF_TYPES.has(type)) return;
  const array = /^Array<(.+)>$/.exec(type);
  if (array) {
    if (Array.isArray(value)) value.forEach((item, i) => unknownFields(item, array[1], child(path, i), out));
    return;
  }
  const map = /^\{ \[key: string\]: (.+); \}$/.exec(type);
  if (map) {
    if (typeof value === "object" && !Array.isArray(value)) {
      for (const [key, item] of Object.entries(value)) unknownFields(item, map[1], child(path, key), out);
    }
    return;
  }
  const model = k8s[type];
  if (typeof model?.getAttributeTypeMap !== "function") return;  // a type the client only names
  if (typeof value !== "object" || Array.isArray(value)) return;  // a wrong type: the schema says so
  const fields = new Map(model.getAttributeTypeMap().map((a) => [a.baseName, a.type]));
  for (const [key, item] of Object.entries(value)) {
    if (!fields.has(key)) {
      out.push(`${child(path, key)}: unknown field`);
    } else {
      unknownFields(item, fields.get(key), child(path, key), out);
    }
  }
}

// --- selectors ---

function matches(selector, labels) {
  labels = labels ?? {};
  for (const [key, value] of Object.entries(selector.matchLabels ?? {})) {
    if (labels[key] !== value) return false;
  }
  for (const e of selector.matchExpressions ?? []) {
    const has = Object.prototype.hasOwnProperty.call(labels, e.key);
    const inValues = has && (e.values ?? []).includes(labels[e.key]);
    if (e.operator === "In" && !inValues) return false;
    if (e.operator === "NotIn" && inValues) return false;
    if (e.operator === "Exists" && !has) return false;
    if (e.operator === "DoesNotExist" && has) return false;
  }
  return true;
}

const WORKLOADS = new Set(["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"]);

function podTemplate(obj) {
  if (WORKLOADS.has(obj.kind) || obj.kind === "Job") return obj.spec?.template;
  if (obj.kind === "CronJob") return obj.spec?.jobTemplate?.spec?.template;
  return undefined;
}

function selectorProblems(obj) {
  const spec = obj.spec ?? {};
  const labels = spec.template?.metadata?.labels ?? {};
  if (WORKLOADS.has(obj.kind)) {
    const selector = spec.selector;
    if (selector === undefined || selector === null) return ["spec.selector: missing (required)"];
    if (Object.keys(selector.matchLabels ?? {}).length === 0 && (selector.matchExpressions ?? []).length === 0) {
      return ["spec.selector: empty (it would select every pod)"];
    }
    if (!matches(selector, labels)) {
      return [`spec.selector: does not match the pod template's labels ${JSON.stringify(labels)}`];
    }
  }
  if (obj.kind === "Job" && spec.selector !== undefined) {
    if (spec.manualSelector !== true) return ["spec.selector: set without spec.manualSelector: true"];
    if (!matches(spec.selector, labels)) {
      return [`spec.selector: does not match the pod template's labels ${JSON.stringify(labels)}`];
    }
  }
  return [];
}

// --- pods ---

function podProblems(obj) {
  const template = podTemplate(obj);
  const pod = template?.spec;
  if (!pod || typeof pod !== "object") return [];
  const base = obj.kind === "CronJob" ? "spec.jobTemplate.spec.template.spec" : "spec.template.spec";
  const out = [];
  if (["Job", "CronJob"].includes(obj.kind)) {
    const policy = pod.restartPolicy;
    if (policy !== "OnFailure" && policy !== "Never") {
      out.push(`${base}.restartPolicy: must be OnFailure or Never in a ${obj.kind}, got ${JSON.stringify(policy)}`);
    }
    if (obj.kind === "Job" && obj.spec.podFailurePolicy !== undefined && policy !== "Never") {
      out.push(`spec.podFailurePolicy: needs spec.template.spec.restartPolicy Never, got ${JSON.stringify(policy)}`);
    }
  }
  if (WORKLOADS.has(obj.kind) && pod.restartPolicy !== undefined && pod.restartPolicy !== "Always") {
    out.push(`${base}.restartPolicy: must be Always in a ${obj.kind}, got ${JSON.stringify(pod.restartPolicy)}`);
  }
  const volumes = new Set((pod.volumes ?? []).map((v) => v.name));
  if (obj.kind === "StatefulSet") {
    for (const t of obj.spec.volumeClaimTemplates ?? []) volumes.add(t.metadata?.name);
  }
  for (const kind of ["initContainers", "containers"]) {
    (pod[kind] ?? []).forEach((c, i) => {
      const path = `${base}.${kind}[${i}]`;
      const ports = c.ports ?? [];
      const numbers = new Set(ports.map((p) => p.containerPort));
      const names = new Set(ports.map((p) => p.name).filter(Boolean));
      for (const probe of ["startupProbe", "readinessProbe", "livenessProbe"]) {
        for (const action of ["grpc", "httpGet", "tcpSocket"]) {
          const port = c[probe]?.[action]?.port;
          if (port === undefined) continue;
          const known = typeof port === "number" ? numbers.has(port) : names.has(port);
          if (!known) out.push(`${path}.${probe}.${action}.port: ${JSON.stringify(port)} is not a port of the container`);
        }
      }
      (c.volumeMounts ?? []).forEach((m, j) => {
        if (!volumes.has(m.name)) out.push(`${path}.volumeMounts[${j}].name: no volume ${JSON.stringify(m.name)}`);
      });
      if (kind === "containers" && isRole(template)) {
        out.push(...roleContainerProblems(pod, c, path, template.metadata.labels["app.kubernetes.io/component"]));
      }
    });
  }
  if (isRole(template)) out.push(...roleScrapeProblems(template, base.replace(/\.spec$/, "")));
  return out;
}

// --- pstrain's roles ---

const ROLES = new Set(["scheduler", "server", "worker", "serving"]);
// Each role's own Secret (tools/make-tls-secret.sh): its certificate carries its role.
const tlsSecretOf = (component) => `pstrain-tls-${component}`;
const TLS_ENV = ["PSTRAIN_TLS_CERT", "PSTRAIN_TLS_KEY", "PSTRAIN_TLS_CA", "PSTRAIN_JOB_TOKEN_FILE"];

function isRole(template) {
  const labels = template?.metadata?.labels ?? {};
  return labels["app.kubernetes.io/name"] === "pstrain" && ROLES.has(labels["app.kubernetes.io/component"]);
}

// What container `c` (at `path`) of a role's pod `pod` lacks: the TLS Secret and the variables
// that point at it, and gRPC probes on the health port.
function roleContainerProblems(pod, c, path, component) {
  const out = [];
  const TLS_SECRET = tlsSecretOf(component);
  const secretsOf = (v) => [v.secret?.secretName, ...(v.projected?.sources ?? []).map((source) => source.secret?.name)];
  const holdsTls = (v) => secretsOf(v).includes(TLS_SECRET);
  const tlsVolumes = new Set((pod.volumes ?? []).filter(holdsTls).map((v) => v.name));
  const mounts = (c.volumeMounts ?? []).filter((m) => tlsVolumes.has(m.name));
  if (mounts.length === 0) {
    out.push(`${path}.volumeMounts: does not mount the Secret ${JSON.stringify(TLS_SECRET)} (the ${component}'s TLS credentials)`);
  }
  // Another role's credentials (or the old shared pstrain-tls) in a volume this container mounts.
  const mounted = new Set((c.volumeMounts ?? []).map((m) => m.name));
  for (const v of pod.volumes ?? []) {
    if (!mounted.has(v.name)) continue;
    for (const name of secretsOf(v)) {
      if (name !== undefined && /^pstrain-tls(-|$)/.test(name) && name !== TLS_SECRET) {
        out.push(`${path}.volumeMounts: mounts the Secret ${JSON.stringify(name)}; a ${component} mounts only its own, ` +
                 `${JSON.stringify(TLS_SECRET)} (a certificate is for one role)`);
      }
    }
  }
  (c.volumeMounts ?? []).forEach((m, j) => {
    if (!tlsVolumes.has(m.name)) return;
    if (m.readOnly !== true) out.push(`${path}.volumeMounts[${j}].readOnly: the TLS Secret must be mounted read-only`);
    if (m.subPath !== undefined || m.subPathExpr !== undefined) {
      out.push(`${path}.volumeMounts[${j}].subPath: mount the whole TLS Secret; a subPath mount never sees a rotated one`);
    }
  });
  const dirs = mounts.map((m) => (m.mountPath ?? "").replace(/\/+$/, "") + "/");
  const env = new Map((c.env ?? []).map((e) => [e.name, e]));
  for (const name of TLS_ENV) {
    const e = env.get(name);
    if (e === undefined) {
      out.push(`${path}.env: ${name} is not set`);
    } else if (typeof e.value !== "string" || !dirs.some((d) => e.value.startsWith(d) && e.value.length > d.length)) {
      out.push(`${path}.env.${name}: ${JSON.stringify(e.value ?? null)} is not a file of the mounted TLS Secret`);
    }
  }
  const byNumber = new Map((c.ports ?? []).map((p) => [p.containerPort, p.name]));
  for (const probe of ["startupProbe", "readinessProbe", "livenessProbe"]) {
    const port = c[probe]?.grpc?.port;
    if (port === undefined || !byNumber.has(port)) continue;  // none, or not a port at all: said above
    if (byNumber.get(port) !== "health") {
      out.push(`${path}.${probe}.grpc.port: ${port} is not the container's health port (the port named "health"); ` +
               "a kubelet cannot pass the main port's mutual TLS");
    }
  }
  return out;
}

// --- main ---

async function main() {
  const problems = [];
  const objects = [];
  for (const { file, text } of readInputs(process.argv.slice(2))) {
    const where = file === "-" ? "<stdin>" : file;
    for (const doc of parseAllDocuments(text)) {
      if (doc.errors.length > 0) {
        for (const e of doc.errors) problems.push(`${where}: YAML: ${e.message.split("\n")[0]}`);
        continue;
      }
      const obj = doc.toJS();
      if (obj === null || obj === undefined) continue;  // an empty document
      if (typeof obj !== "object" || Array.isArray(obj)) {
        problems.push(`${where}: a document is not an object`);
        continue;
      }
      objects.push(obj);
    }
  }

  const seen = new Set();
  for (const obj of objects) {
    const name = obj.metadata?.name ?? "(no name)";
    const label = `${obj.kind ?? "(no kind)"} ${name}`;
    const report = (line) => problems.push(`${label}: ${line}`);
    if (typeof obj.apiVersion !== "string" || typeof obj.kind !== "string") {
      report("apiVersion and kind: missing");
      continue;
    }
    const key = `${obj.apiVersion}/${obj.kind}/${obj.metadata?.namespace ?? ""}/${name}`;
    if (seen.has(key)) report("defined twice");
    seen.add(key);
    if (isCustomKind(obj)) {
      podMonitorProblems(obj).forEach(report);
      const unknown = [];
      unknownFields(obj.metadata, "V1ObjectMeta", "metadata", unknown);
      unknown.forEach(report);
      continue;
    }
    const cls = await schemaClass(obj.apiVersion, obj.kind);
    if (cls === null) {
      report(`apiVersion ${obj.apiVersion} kind ${obj.kind}: not a Kubernetes API type`);
      continue;
    }
    schemaProblems(cls, obj).forEach(report);
    const typeName = typeMapName(obj.apiVersion, obj.kind);
    if (typeof k8s[typeName]?.getAttributeTypeMap !== "function") {
      report(`apiVersion ${obj.apiVersion} kind ${obj.kind}: no type map to check its fields against`);
    } else {
      const unknown = [];
      unknownFields(obj, typeName, "", unknown);
      unknown.forEach(report);
    }
    selectorProblems(obj).forEach(report);
    podProblems(obj).forEach(report);
  }

  // Across objects: what a Service or a StatefulSet refers to must be in the same input.
  const templates = objects.map((o) => ({ namespace: o.metadata?.namespace, template: podTemplate(o) }))
    .filter((t) => t.template);
  const services = new Set(objects.filter((o) => o.kind === "Service")
    .map((o) => `${o.metadata?.namespace ?? ""}/${o.metadata?.name}`));
  for (const obj of objects) {
    const namespace = obj.metadata?.namespace;
    const label = `${obj.kind} ${obj.metadata?.name}`;
    if (obj.kind === "Service" && obj.spec?.selector && Object.keys(obj.spec.selector).length > 0) {
      const selected = templates.some((t) => t.namespace === namespace &&
        matches({ matchLabels: obj.spec.selector }, t.template.metadata?.labels));
      if (!selected) problems.push(`${label}: spec.selector: matches no pod template in the input`);
    }
    if (isCustomKind(obj)) {
      podMonitorTargetProblems(obj, templates, matches).forEach((line) => problems.push(`${label}: ${line}`));
    }
    if (obj.kind === "StatefulSet" && typeof obj.spec?.serviceName === "string" &&
        !services.has(`${namespace ?? ""}/${obj.spec.serviceName}`)) {
      problems.push(`${label}: spec.serviceName: no Service ${JSON.stringify(obj.spec.serviceName)} in the input`);
    }
  }

  if (problems.length > 0) {
    for (const p of new Set(problems)) console.log(p);
    process.exit(1);
  }
  console.log(`ok: ${objects.length} objects`);
}

await main();
