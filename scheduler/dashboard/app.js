// The scheduler's live dashboard: polls /api/status and /api/timeline (incrementally, ?since=next)
// once a second and redraws every panel as hand-made SVG. No framework, no external assets.
'use strict';

const POLL_MS = 1000;
const MAX_POINTS = 50000;  // Timeline points kept; the oldest go first.
const SVG_NS = 'http://www.w3.org/2000/svg';
const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#17becf', '#8c564b', '#e377c2',
                 '#7f7f7f', '#bcbd22'];

const model = {
  status: null,
  points: [],      // Timeline points, ascending seq.
  next: 0,         // The `since` of the next timeline poll.
  lastOk: 0,       // Date.now() of the last successful poll.
  error: '',
};

// ---- Formatting ----

function isNum(x) { return typeof x === 'number' && Number.isFinite(x); }
function fmt(x, digits = 3) { return isNum(x) ? x.toPrecision(digits).replace(/\.?0+(e|$)/, '$1') : 'n/a'; }
function fmtFixed(x, digits) { return isNum(x) ? x.toFixed(digits) : 'n/a'; }
function fmtInt(x) { return isNum(x) ? Math.round(x).toLocaleString('en-US') : 'n/a'; }
function fmtSeconds(s) {
  if (!isNum(s)) return 'n/a';
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 90) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 90) return `${m} min ${Math.round(s - 60 * m)} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}
// A count in at most four characters and a unit: 950, 12.3k, 4.5M.
function fmtCount(x) {
  if (!isNum(x)) return 'n/a';
  const a = Math.abs(x);
  if (a < 1e3) return String(Math.round(x));
  if (a < 1e6) return `${+(x / 1e3).toPrecision(3)}k`;
  if (a < 1e9) return `${+(x / 1e6).toPrecision(3)}M`;
  return `${+(x / 1e9).toPrecision(3)}G`;
}
function fmtMs(s) { return isNum(s) ? `${(s * 1000).toFixed(s < 0.01 ? 2 : 1)} ms` : 'n/a'; }
function fmtBytes(b) {
  if (!isNum(b)) return 'n/a';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (Math.abs(b) >= 1024 && i < units.length - 1) { b /= 1024; ++i; }
  return `${i === 0 ? b : b.toFixed(1)} ${units[i]}`;
}
function workerColor(rank) { return PALETTE[((rank % PALETTE.length) + PALETTE.length) % PALETTE.length]; }

// ---- DOM and SVG helpers ----

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'text') node.textContent = v; else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}
function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}
function chartBox(panelId) { return document.querySelector(`#${panelId} .chart`); }
function showMessage(box, text) {
  box.replaceChildren(el('p', {class: 'empty', text}));
}

// "Nice" tick values covering [lo, hi].
function ticks(lo, hi, count = 5) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / count;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw);
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toPrecision(12));
  return out;
}

function extent(values, padFraction = 0.05, zeroBased = false) {
  const v = values.filter(isNum);
  if (v.length === 0) return null;
  let lo = Math.min(...v), hi = Math.max(...v);
  if (zeroBased) lo = Math.min(0, lo);
  if (hi === lo) { hi += Math.abs(hi) * 0.1 || 1; if (!zeroBased) lo -= Math.abs(lo) * 0.1 || 1; }
  const pad = (hi - lo) * padFraction;
  return [zeroBased && lo === 0 ? 0 : lo - pad, hi + pad];
}

// A line chart. series: [{name, color, dash, points: [[x, y], ...]}]; markers: vertical lines at x
// [{x, label, color}]. Returns the <svg>.
function lineChart({series, xLabel, yLabel, markers = [], xDomain, yDomain, yFormat = fmt, xFormat = fmt,
                    zeroBased = false, dots = false, width = 560, height = 240}) {
  const m = {left: 58, right: 12, top: 10, bottom: 40};
  const w = width - m.left - m.right, h = height - m.top - m.bottom;
  const xs = series.flatMap((s) => s.points.map((p) => p[0])).concat(markers.map((k) => k.x));
  const ys = series.flatMap((s) => s.points.map((p) => p[1]));
  const xd = xDomain || extent(xs, 0) || [0, 1];
  const yd = yDomain || extent(ys, 0.05, zeroBased) || [0, 1];
  if (xd[1] === xd[0]) xd[1] = xd[0] + 1;
  const sx = (x) => m.left + ((x - xd[0]) / (xd[1] - xd[0])) * w;
  const sy = (y) => m.top + h - ((y - yd[0]) / (yd[1] - yd[0])) * h;
  const root = svg('svg', {viewBox: `0 0 ${width} ${height}`, class: 'plot', role: 'img', 'aria-label': yLabel});

  const grid = svg('g', {class: 'axis'});
  for (const t of ticks(yd[0], yd[1])) {
    grid.append(svg('line', {x1: m.left, x2: m.left + w, y1: sy(t), y2: sy(t), class: 'grid'}));
    grid.append(svg('text', {x: m.left - 6, y: sy(t) + 4, 'text-anchor': 'end'}, yFormat(t)));
  }
  for (const t of ticks(xd[0], xd[1], 6)) {
    grid.append(svg('line', {x1: sx(t), x2: sx(t), y1: m.top + h, y2: m.top + h + 4, class: 'tick'}));
    grid.append(svg('text', {x: sx(t), y: m.top + h + 16, 'text-anchor': 'middle'}, xFormat(t)));
  }
  grid.append(svg('line', {x1: m.left, x2: m.left + w, y1: m.top + h, y2: m.top + h, class: 'frame'}));
  grid.append(svg('line', {x1: m.left, x2: m.left, y1: m.top, y2: m.top + h, class: 'frame'}));
  grid.append(svg('text', {x: m.left + w / 2, y: height - 4, 'text-anchor': 'middle', class: 'label'}, xLabel));
  grid.append(svg('text', {x: 12, y: m.top + h / 2, 'text-anchor': 'middle', class: 'label',
                           transform: `rotate(-90 12 ${m.top + h / 2})`}, yLabel));
  root.append(grid);

  const markerGroup = svg('g', {class: 'markers'});
  let lastLabelX = -Infinity;
  for (const k of [...markers].sort((a, b) => a.x - b.x)) {
    const x = sx(k.x);
    const line = svg('line', {x1: x, x2: x, y1: m.top, y2: m.top + h, stroke: k.color, class: 'marker',
                              'data-kind': k.kind || ''});
    line.append(svg('title', {}, k.label));
    markerGroup.append(line);
    if (k.short && x - lastLabelX > 60) {  // Labels of crowded markers would overlap: their lines keep a title.
      markerGroup.append(svg('text', {x: x + 3, y: m.top + 10, fill: k.color, class: 'marker-label'}, k.short));
      lastLabelX = x;
    }
  }
  root.append(markerGroup);

  for (const s of series) {
    const pts = s.points.filter((p) => isNum(p[0]) && isNum(p[1]));
    if (pts.length === 0) continue;
    const d = pts.map((p, i) => `${i ? 'L' : 'M'}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join('');
    const path = svg('path', {d, stroke: s.color, class: 'series', 'data-series': s.name,
                              'data-last-x': pts[pts.length - 1][0]});
    if (s.dash) path.setAttribute('stroke-dasharray', s.dash);
    path.append(svg('title', {}, s.name));
    root.append(path);
    if (dots || pts.length === 1) {
      for (const p of pts) {
        const c = svg('circle', {cx: sx(p[0]), cy: sy(p[1]), r: 3, fill: s.color});
        c.append(svg('title', {}, `${s.name}: ${yFormat(p[1])} at ${xFormat(p[0])}`));
        root.append(c);
      }
    }
  }
  return root;
}

function legend(series) {
  const ul = el('ul', {class: 'legend'});
  for (const s of series) {
    const swatch = el('span', {class: 'swatch'});
    swatch.style.borderTopColor = s.color;
    swatch.style.borderTopStyle = s.dash ? 'dotted' : 'solid';
    ul.append(el('li', {}, swatch, s.name));
  }
  return ul;
}

// ---- Derived data ----

// Membership events as markers on a time axis (seconds since the scheduler started).
function eventMarkers(status) {
  const colors = {joined: '#2ca02c', died: '#d62728', left: '#ff7f0e'};
  return (status.membership_events || []).filter((e) => isNum(e.seconds)).map((e) => ({
    x: e.seconds,
    color: colors[e.kind] || '#555',
    kind: e.kind,
    short: `${e.role === 'worker' ? 'w' : e.role === 'server' ? 's' : ''}${e.rank} ${e.kind}`,
    label: `${e.role} ${e.rank} ${e.kind} at ${fmtSeconds(e.seconds)}`,
  }));
}

function byWorker(points) {
  const map = new Map();
  for (const p of points) {
    if (!map.has(p.worker)) map.set(p.worker, []);
    map.get(p.worker).push(p);
  }
  return [...map.entries()].sort((a, b) => a[0] - b[0]);
}

// At most `n` points per series: means over equal runs of consecutive points.
function thin(points, n) {
  if (points.length <= n) return points;
  const k = Math.ceil(points.length / n);
  const out = [];
  for (let i = 0; i < points.length; i += k) {
    const run = points.slice(i, i + k).filter((p) => isNum(p[1]));
    if (run.length) out.push([run[run.length - 1][0], run.reduce((a, p) => a + p[1], 0) / run.length]);
  }
  return out;
}

function stepSeconds(p) {
  const parts = [p.compute, p.push, p.wait, p.pull].filter(isNum);
  return parts.length ? parts.reduce((a, b) => a + b, 0) : null;
}

// ---- Panels ----

function renderHeader(s) {
  const state = document.getElementById('state');
  state.textContent = s.state || '?';
  state.className = `badge state-${(s.state || '').toLowerCase()}`;
  document.getElementById('mode').textContent = s.mode || 'n/a';
  document.getElementById('epoch').textContent =
      isNum(s.epoch) ? `${Math.min(s.epoch + 1, s.epochs || Infinity)} / ${isNum(s.epochs) ? s.epochs : '?'}` : 'n/a';
  document.getElementById('step').textContent =
      isNum(s.step) ? `${fmtInt(s.step)}${isNum(s.total_steps) ? ' / ' + fmtInt(s.total_steps) : ''}` : 'n/a';
  document.getElementById('step').dataset.value = isNum(s.step) ? String(s.step) : '';
  document.getElementById('rate').textContent = fmtInt(s.samples_per_second);
  document.getElementById('eta').textContent = s.state === 'RUNNING' ? fmtSeconds(s.eta_seconds) : '—';
  document.getElementById('loss').textContent = fmtFixed(s.recent_loss, 4);
  document.getElementById('membership-epoch').textContent = isNum(s.membership_epoch) ? s.membership_epoch : 'n/a';
  // The shard map's server count and version; a change of the count asked for and not cut over yet.
  // The newest change done, once its servers reported their re-cut: the longest pause and the
  // rows whose server changed.
  const changes = s.server_count_changes || [];
  const pendingChange = changes.find((c) => c.step < 0);
  const lastChange = changes.filter((c) => c.step >= 0 && c.servers_reported > 0).pop();
  document.getElementById('map-servers').textContent = isNum(s.map_servers)
    ? `${s.map_servers} (map v${s.shard_map_version})` +
      (pendingChange ? `, ${pendingChange.from} \u2192 ${pendingChange.to} pending` : '') +
      (lastChange ? `, last ${lastChange.from} \u2192 ${lastChange.to}: ` +
        `${(lastChange.max_pause_ms / 1000).toFixed(1)} s pause, ${fmtInt(lastChange.rows_moved)} rows moved` : '')
    : 'n/a';
  const banner = document.getElementById('failure');
  banner.hidden = s.state !== 'FAILED';
  banner.textContent = s.state === 'FAILED' ? `The job failed: ${s.failure || 'no reason given'}` : '';
}

function renderEpochCharts(s) {
  const done = s.epochs_done || [];
  const lossBox = chartBox('loss-epoch'), accBox = chartBox('accuracy-epoch');
  if (done.length === 0) {
    showMessage(lossBox, 'No epoch has ended yet.');
    showMessage(accBox, 'No epoch has ended yet.');
    return;
  }
  const at = (key) => done.map((e) => [e.epoch + 1, e[key]]);
  const lossSeries = [{name: 'train loss', color: '#1f77b4', points: at('train_loss')},
                      {name: 'test loss', color: '#d62728', points: at('test_loss')}];
  const xDomain = [0.8, Math.max(isNum(s.epochs) ? s.epochs : 1, done.length) + 0.2];
  const xFormat = (x) => (Number.isInteger(x) ? String(x) : '');
  lossBox.replaceChildren(legend(lossSeries), lineChart({series: lossSeries, xLabel: 'epoch', yLabel: 'loss',
                                                         xDomain, xFormat, dots: true, zeroBased: true}));
  const accSeries = [{name: 'test accuracy', color: '#2ca02c', points: at('test_accuracy')}];
  if (done.some((e) => isNum(e.test_auc))) accSeries.push({name: 'test AUC', color: '#9467bd', points: at('test_auc')});
  if (done.some((e) => isNum(e.train_auc))) {
    accSeries.push({name: 'progressive AUC', color: '#ff7f0e', points: at('train_auc')});
  }
  const ys = accSeries.flatMap((x) => x.points.map((p) => p[1])).filter(isNum);
  const lo = ys.length ? Math.max(0, Math.floor(Math.min(...ys) * 20) / 20 - 0.05) : 0;
  accBox.replaceChildren(legend(accSeries), lineChart({series: accSeries, xLabel: 'epoch', yLabel: 'fraction',
                                                       xDomain, xFormat, yDomain: [lo, 1], dots: true}));
}

function renderStepLoss(s, groups, xDomain) {
  const box = chartBox('loss-step');
  const series = groups.map(([rank, pts]) => ({
    name: `worker ${rank}`, color: workerColor(rank), points: thin(pts.map((p) => [p.t, p.loss]), 400)}))
      .filter((x) => x.points.length);
  if (!series.length) return showMessage(box, 'No progress report yet.');
  box.replaceChildren(legend(series), lineChart({series, xLabel: 'time since the scheduler started (s)',
                                                 yLabel: 'train loss', markers: eventMarkers(s), xDomain,
                                                 width: 1160, zeroBased: true}));
}

function renderThroughput(s, groups, xDomain) {
  const box = chartBox('throughput');
  const series = [];
  for (const [rank, pts] of groups) {
    // A report's samples over the time since the worker's previous report, in windows of >= 1 s
    // (reports come about every 0.5 s).
    const out = [];
    let t0 = null, samples = 0;
    for (const p of pts) {
      if (t0 === null) { t0 = p.t; continue; }
      samples += isNum(p.samples) ? p.samples : 0;
      if (p.t - t0 >= 1) { out.push([p.t, samples / (p.t - t0)]); t0 = p.t; samples = 0; }
    }
    if (out.length) series.push({name: `worker ${rank}`, color: workerColor(rank), points: out});
  }
  if (!series.length) return showMessage(box, 'Not enough progress reports yet.');
  box.replaceChildren(legend(series), lineChart({series, xLabel: 'time since the scheduler started (s)',
                                                 yLabel: 'samples/s', markers: eventMarkers(s), xDomain,
                                                 yFormat: fmtInt, width: 1160, zeroBased: true}));
}

// The steps a report covers: (step - steps, step], or just its step.
function firstStep(p) { return isNum(p.steps) && p.steps > 0 ? p.step - p.steps + 1 : p.step; }

// Rows: workers; columns: equal step ranges; colour: mean seconds per step (compute + push + wait +
// pull). A report's mean counts in every column its steps fall in, weighted by how many fall there,
// so a report covering many steps (a sync worker's, every half second) fills its whole range.
function renderHeatmap(groups) {
  const box = chartBox('heatmap');
  const all = groups.flatMap(([, pts]) => pts).filter((p) => isNum(p.step) && isNum(stepSeconds(p)));
  if (!all.length) return showMessage(box, 'No step times reported yet.');
  const lo = Math.max(0, Math.min(...all.map(firstStep))), hi = Math.max(...all.map((p) => p.step));
  const columns = Math.min(60, hi - lo + 1);
  const width = Math.max(1, Math.ceil((hi - lo + 1) / columns));
  const cells = [];
  for (const [rank, pts] of groups) {
    const acc = new Map();
    for (const p of pts) {
      const total = stepSeconds(p);
      if (!isNum(p.step) || !isNum(total)) continue;
      const first = Math.max(lo, firstStep(p));
      for (let col = Math.floor((first - lo) / width); col <= Math.floor((p.step - lo) / width); ++col) {
        // Steps of [first, p.step] in this column.
        const n = Math.min(p.step, lo + (col + 1) * width - 1) - Math.max(first, lo + col * width) + 1;
        if (n <= 0) continue;
        const a = acc.get(col) || {n: 0, total: 0, compute: 0, push: 0, wait: 0, pull: 0};
        a.n += n; a.total += n * total;
        for (const k of ['compute', 'push', 'wait', 'pull']) a[k] += n * (isNum(p[k]) ? p[k] : 0);
        acc.set(col, a);
      }
    }
    cells.push([rank, acc]);
  }
  const values = cells.flatMap(([, acc]) => [...acc.values()].map((a) => a.total / a.n));
  const vmax = Math.max(...values), vmin = Math.min(...values);
  const color = (v) => {  // Pale yellow to dark red.
    const f = vmax > vmin ? (v - vmin) / (vmax - vmin) : 0;
    return `hsl(${50 - 50 * f}, ${90}%, ${92 - 62 * f}%)`;
  };
  const m = {left: 74, right: 12, top: 8, bottom: 36};
  const W = 1160, rowH = 22, H = m.top + m.bottom + rowH * cells.length;
  const cw = (W - m.left - m.right) / columns;
  const root = svg('svg', {viewBox: `0 0 ${W} ${H}`, class: 'plot heat', role: 'img', 'aria-label': 'step time'});
  cells.forEach(([rank, acc], row) => {
    const y = m.top + row * rowH;
    root.append(svg('text', {x: m.left - 6, y: y + rowH / 2 + 4, 'text-anchor': 'end', class: 'axis-text'},
                    `worker ${rank}`));
    for (const [col, a] of acc) {
      const v = a.total / a.n;
      const first = lo + col * width, last = Math.min(hi, first + width - 1);
      const rect = svg('rect', {x: m.left + col * cw, y, width: Math.max(cw - 1, 1), height: rowH - 2,
                                fill: color(v), 'data-worker': rank});
      rect.append(svg('title', {}, `worker ${rank}, steps ${first}–${last}: ${fmtMs(v)}/step\n` +
                                  `compute ${fmtMs(a.compute / a.n)}, push ${fmtMs(a.push / a.n)}, ` +
                                  `wait ${fmtMs(a.wait / a.n)}, pull ${fmtMs(a.pull / a.n)}`));
      root.append(rect);
    }
  });
  const axisY = m.top + rowH * cells.length;
  for (const t of ticks(lo, hi + 1, 8)) {
    const x = m.left + ((t - lo) / width) * cw;
    if (x > W - m.right) continue;
    root.append(svg('line', {x1: x, x2: x, y1: axisY, y2: axisY + 4, class: 'tick'}));
    root.append(svg('text', {x, y: axisY + 16, 'text-anchor': 'middle', class: 'axis-text'}, fmtInt(t)));
  }
  root.append(svg('text', {x: m.left + (W - m.left - m.right) / 2, y: H - 4, 'text-anchor': 'middle',
                           class: 'label'}, `step (${width} per column)`));
  const scale = el('p', {class: 'scale'});
  const bar = el('span', {class: 'scale-bar'});
  bar.style.background = `linear-gradient(to right, ${color(vmin)}, ${color((vmin + vmax) / 2)}, ${color(vmax)})`;
  scale.append(`${fmtMs(vmin)}/step `, bar, ` ${fmtMs(vmax)}/step`);
  box.replaceChildren(scale, root);
}

function renderStaleness(s, groups, xDomain) {
  const panel = document.getElementById('staleness');
  const box = chartBox('staleness');
  if (s.mode === 'sync') {
    panel.classList.add('na');
    return showMessage(box, 'n/a: sync mode pulls after every step, so weights are never stale.');
  }
  panel.classList.remove('na');
  const series = [];
  for (const [rank, pts] of groups) {
    const mean = thin(pts.map((p) => [p.t, p.staleness_mean]).filter((p) => isNum(p[1])), 400);
    const max = thin(pts.map((p) => [p.t, p.staleness_max]).filter((p) => isNum(p[1])), 400);
    if (mean.length) series.push({name: `worker ${rank} mean`, color: workerColor(rank), points: mean});
    if (max.length) series.push({name: `worker ${rank} max`, color: workerColor(rank), dash: '2 3', points: max});
  }
  if (!series.length) return showMessage(box, 'No staleness reported yet.');
  box.replaceChildren(legend(series), lineChart({series, xLabel: 'time since the scheduler started (s)',
                                                 yLabel: 'staleness (updates)', markers: eventMarkers(s),
                                                 xDomain, width: 1160, zeroBased: true}));
}

function renderMembers(s) {
  const tbody = document.querySelector('#members tbody');
  const order = {scheduler: 0, server: 1, worker: 2};
  const members = [...(s.members || [])].sort((a, b) => (order[a.role] ?? 3) - (order[b.role] ?? 3) || a.rank - b.rank);
  tbody.replaceChildren(...members.map((m) => {
    const metrics = m.metrics_address
        ? el('a', {href: `http://${m.metrics_address}/metrics`, text: m.metrics_address})
        : document.createTextNode('—');
    return el('tr', {'data-role': m.role, 'data-rank': m.rank, 'data-state': m.state, class: `member-${m.state}`},
              el('td', {text: m.role}), el('td', {text: m.rank}), el('td', {text: m.address || '—'}),
              el('td', {}, metrics), el('td', {}, el('span', {class: `badge member-state ${m.state}`, text: m.state})),
              el('td', {text: isNum(m.last_heartbeat_seconds_ago) ? `${fmtSeconds(m.last_heartbeat_seconds_ago)} ago`
                                                                   : '—'}));
  }));
  const events = document.getElementById('events');
  const list = [...(s.membership_events || [])].reverse().slice(0, 50);
  events.replaceChildren(...list.map((e) => el('li', {class: `event-${e.kind}`, 'data-kind': e.kind},
                                                `${fmtSeconds(e.seconds)}: ${e.role} ${e.rank} ${e.kind}`)));
  if (!list.length) events.replaceChildren(el('li', {class: 'empty', text: 'none yet'}));
}

function renderServerBytes(s) {
  const box = chartBox('server-bytes');
  const servers = [...(s.servers || [])].sort((a, b) => a.rank - b.rank);
  if (!servers.length) return showMessage(box, 'No server traffic reported yet.');
  const W = 560, rowH = 44, m = {left: 74, right: 80, top: 8, bottom: 8};
  const H = m.top + m.bottom + rowH * servers.length;
  const max = Math.max(1, ...servers.flatMap((x) => [x.bytes_received, x.bytes_sent].filter(isNum)));
  const root = svg('svg', {viewBox: `0 0 ${W} ${H}`, class: 'plot bars', role: 'img', 'aria-label': 'bytes per server'});
  const w = W - m.left - m.right;
  servers.forEach((x, i) => {
    const y = m.top + i * rowH;
    root.append(svg('text', {x: m.left - 6, y: y + rowH / 2 + 2, 'text-anchor': 'end', class: 'axis-text'},
                    `server ${x.rank}`));
    [['received', x.bytes_received, '#1f77b4'], ['sent', x.bytes_sent, '#ff7f0e']].forEach(([kind, v, c], j) => {
      const len = isNum(v) ? (v / max) * w : 0;
      const rect = svg('rect', {x: m.left, y: y + 4 + j * 18, width: Math.max(len, 1), height: 15, fill: c,
                                class: `bar bar-${kind}`, 'data-server': x.rank});
      rect.append(svg('title', {}, `server ${x.rank} ${kind}: ${fmtBytes(v)} (${fmtInt(v)} bytes)`));
      root.append(rect);
      root.append(svg('text', {x: m.left + len + 4, y: y + 16 + j * 18, class: 'axis-text'}, fmtBytes(v)));
    });
  });
  const extra = servers.map((x) => `server ${x.rank}: ${fmtInt(x.requests)} requests, ${fmtInt(x.refused)} refused`);
  box.replaceChildren(legend([{name: 'received', color: '#1f77b4'}, {name: 'sent', color: '#ff7f0e'}]), root,
                      el('p', {class: 'note', text: extra.join(' · ')}));
}

// Each server's rows held over time, and the rows its tables evict per second, from /api/status's
// table_history: [{server, points: [[seconds, rows, bytes, evicted so far], ...]}].
function renderTables(s, xDomain) {
  const box = chartBox('tables');
  const history = (s.table_history || []).filter((x) => (x.points || []).length);
  if (!history.length) return showMessage(box, 'No embedding tables reported (a job without tables, or none yet).');
  const held = [], evicted = [];
  for (const x of history) {
    const color = workerColor(x.server), name = `server ${x.server}`;
    held.push({name, color, points: x.points.map((p) => [p[0], p[1]])});
    // Evictions between two points over the time between them; a replaced server counts from 0
    // again, so a drop is no rate.
    const rate = [];
    for (let i = 1; i < x.points.length; ++i) {
      const [t0, , , e0] = x.points[i - 1], [t1, , , e1] = x.points[i];
      if (t1 > t0 && e1 >= e0) rate.push([t1, (e1 - e0) / (t1 - t0)]);
    }
    evicted.push({name, color, points: rate});
  }
  const common = {xLabel: 'time since the scheduler started (s)', markers: eventMarkers(s), xDomain, yFormat: fmtCount,
                  zeroBased: true};
  const pair = el('div', {class: 'pair'}, lineChart({series: held, yLabel: 'rows held', ...common}),
                  lineChart({series: evicted, yLabel: 'rows evicted/s', ...common}));
  const latest = history.map((x) => {
    const p = x.points[x.points.length - 1];
    return `server ${x.server}: ${fmtInt(p[1])} rows in ${fmtBytes(p[2])}, ${fmtInt(p[3])} evicted`;
  });
  box.replaceChildren(legend(held), pair, el('p', {class: 'note', 'data-testid': 'tables-latest', text: latest.join(' · ')}));
}

// A job on a data stream: per file, the progressive AUC and log loss of its records (each predicted
// before the update it led to), and how far training is behind the newest ready file, from
// /api/status's stream: {files_ready, records_ready, ended, trained_records, lag_records, lag_files,
// window_files, window: {samples, auc, logloss}, progressive: [{file, closed, samples, auc, logloss}]}.
function renderStream(s) {
  const box = chartBox('stream');
  const st = s.stream;
  if (!st) return showMessage(box, 'Not a job on a data stream (--data_stream).');
  const files = st.progressive || [];
  const first = files.length ? st.files_ready - files.length : 0;
  const at = (key) => files.map((f, i) => [first + i, f[key]]).filter((p) => isNum(p[1]));
  const common = {xLabel: 'stream file (in name order)', xFormat: (x) => fmtInt(x), dots: true};
  const pair = el('div', {class: 'pair'},
                  lineChart({series: [{name: 'AUC', color: '#ff7f0e', points: at('auc')}], yLabel: 'progressive AUC', ...common}),
                  lineChart({series: [{name: 'log loss', color: '#1f77b4', points: at('logloss')}], yLabel: 'progressive log loss',
                             ...common}));
  const w = st.window || {};
  const lag = `${fmtInt(st.lag_records)} records in ${fmtInt(st.lag_files)} files behind the newest ready file ` +
              `(${fmtInt(st.trained_records)} of ${fmtInt(st.records_ready)} trained, ${fmtInt(st.files_ready)} files ready` +
              `${st.ended ? ', the stream has ended' : ''})`;
  const window = `last ${st.window_files} files: AUC ${isNum(w.auc) ? w.auc.toFixed(4) : '—'}, log loss ` +
                 `${isNum(w.logloss) ? w.logloss.toFixed(4) : '—'} over ${fmtInt(w.samples || 0)} records`;
  box.replaceChildren(pair, el('p', {class: 'note', 'data-testid': 'stream-lag', text: lag}),
                      el('p', {class: 'note', 'data-testid': 'stream-window', text: window}));
}

function describeWorker(s, rank) {
  const m = (s.members || []).find((x) => x.role === 'worker' && x.rank === rank);
  return m ? `worker ${rank} (${m.address || 'no address'}, ${m.state})` : `worker ${rank}`;
}

function fillTable(selector, rows, emptyText, columns) {
  const tbody = document.querySelector(`${selector} tbody`);
  if (!rows.length) {
    tbody.replaceChildren(el('tr', {class: 'empty'}, el('td', {colspan: columns, text: emptyText})));
    return;
  }
  tbody.replaceChildren(...rows);
}

function renderSlowSteps(s) {
  const rows = [...(s.slow_steps || [])].reverse().map((x) => {
    const whom = x.waiting_for || [];
    const names = whom.map((r) => (typeof r === 'number' ? describeWorker(s, r)
                                                         : `${r.role || 'worker'} ${r.rank}${r.address ? ' (' + r.address + ')' : ''}`));
    return el('tr', {}, el('td', {text: fmtSeconds(x.seconds)}), el('td', {text: fmtInt(x.step)}),
              el('td', {text: isNum(x.server) ? x.server : '—'}), el('td', {text: fmtSeconds(x.waited_seconds)}),
              el('td', {text: names.join(', ') || 'no worker'}));
  });
  fillTable('#slow-steps', rows, s.mode === 'sync' ? 'none' : 'n/a outside sync mode', 5);
}

function renderStuckBarriers(s) {
  const rows = (s.stuck_barriers || []).map((b) => el('tr', {},
      el('td', {text: b.name}),
      el('td', {text: `${fmtSeconds(b.waiting_seconds)}${b.released ? ' (released)' : ''}`}),
      el('td', {text: (b.missing || []).map((x) => `${x.role} ${x.rank}${x.address ? ' (' + x.address + ')' : ''}` +
                                                   (isNum(x.last_heartbeat_seconds_ago)
                                                        ? `, heartbeat ${fmtSeconds(x.last_heartbeat_seconds_ago)} ago` : ''))
                              .join('; ')})));
  fillTable('#stuck-barriers', rows, 'none', 3);
}

function render() {
  const s = model.status;
  const conn = document.getElementById('connection');
  const age = model.lastOk ? (Date.now() - model.lastOk) / 1000 : null;
  conn.textContent = model.error ? `${model.error}${age !== null ? ` (last update ${fmtSeconds(age)} ago)` : ''}`
                                 : (s ? `updated, job time ${fmtSeconds(s.now_seconds)}` : 'connecting…');
  conn.classList.toggle('stale', Boolean(model.error));
  if (!s) return;
  renderHeader(s);
  renderEpochCharts(s);
  const groups = byWorker(model.points);
  // The per-step charts share one time axis, from the scheduler's start to now.
  const tmax = Math.max(isNum(s.now_seconds) ? s.now_seconds : 0, ...model.points.map((p) => p.t).filter(isNum));
  const xDomain = [0, Math.max(tmax, 1)];
  renderStepLoss(s, groups, xDomain);
  renderThroughput(s, groups, xDomain);
  renderHeatmap(groups);
  renderStaleness(s, groups, xDomain);
  renderTables(s, xDomain);
  renderStream(s);
  renderMembers(s);
  renderServerBytes(s);
  renderSlowSteps(s);
  renderStuckBarriers(s);
}

async function getJson(url) {
  const response = await fetch(url, {cache: 'no-store'});
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response.json();
}

async function poll() {
  try {
    const status = await getJson('/api/status');
    const timeline = await getJson(`/api/timeline?since=${model.next}`);
    if (isNum(timeline.next) && timeline.next < model.next) model.points = [];  // A restarted scheduler.
    let last = model.points.length ? model.points[model.points.length - 1].seq : -Infinity;
    for (const p of timeline.points || []) {
      if (isNum(p.seq) && p.seq <= last) continue;  // Already have it.
      model.points.push(p);
      if (isNum(p.seq)) last = p.seq;
    }
    if (model.points.length > MAX_POINTS) model.points.splice(0, model.points.length - MAX_POINTS);
    if (isNum(timeline.next)) model.next = timeline.next;
    model.status = status;
    model.lastOk = Date.now();
    model.error = '';
  } catch (e) {
    model.error = `no answer from the scheduler (${e.message})`;
  }
  try {
    render();
  } catch (e) {
    console.error(e);
  }
  const done = model.status && (model.status.state === 'FINISHED' || model.status.state === 'FAILED');
  setTimeout(poll, done && !model.error ? 5 * POLL_MS : POLL_MS);
}

poll();
