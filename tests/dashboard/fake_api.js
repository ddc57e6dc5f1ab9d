#!/usr/bin/env node
// Serves scheduler/dashboard/ at the scheduler's paths and a simulated async job's /api/status and
// /api/timeline, for working on the dashboard without a cluster:
//   node tests/dashboard/fake_api.js [PORT]     then open http://127.0.0.1:PORT/
// Worker 2 dies 20 s in; worker 1 is a straggler; sync mode with --mode=sync.
'use strict';

const fs = require('fs');
const http = require('http');
const path = require('path');

const ASSETS = path.join(__dirname, '..', '..', 'scheduler', 'dashboard');
const ROUTES = {
  '/': ['index.html', 'text/html; charset=utf-8'],
  '/static/app.js': ['app.js', 'text/javascript; charset=utf-8'],
  '/static/style.css': ['style.css', 'text/css; charset=utf-8'],
};
const mode = process.argv.includes('--mode=sync') ? 'sync' : 'async';
const port = Number(process.argv.find((a) => /^\d+$/.test(a)) || 8077);
const start = Date.now();
const EPOCHS = 6, STEPS_PER_EPOCH = 200, KILL_AT = 20;
const points = [];
const epochsDone = [];
const lastReport = {0: 0, 1: 0, 2: 0};

function simulate(now) {
  for (const w of [0, 1, 2]) {
    const end = w === 2 ? Math.min(now, KILL_AT) : now;
    while (lastReport[w] + 0.5 <= end) {
      const t = (lastReport[w] += 0.5);
      const slow = w === 1 ? 1.8 : 1;
      const step = Math.floor(t * 12);
      points.push({seq: points.length + 1, t, worker: w, epoch: Math.floor(step / STEPS_PER_EPOCH), step,
                   loss: 0.4 + 1.8 * Math.exp(-t / 12) + 0.05 * Math.random(), samples: Math.round(1024 / slow),
                   steps: 4, compute: 0.02 * slow, push: 0.004, wait: mode === 'sync' ? 0.01 * (2 - slow) : 0,
                   pull: 0.005, staleness_mean: mode === 'sync' ? null : 0.8 + Math.random(),
                   staleness_max: mode === 'sync' ? null : 2 + Math.round(Math.random() * 2)});
    }
  }
  const epoch = Math.floor(now * 12 / STEPS_PER_EPOCH);
  while (epochsDone.length < Math.min(epoch, EPOCHS)) {
    const e = epochsDone.length;
    epochsDone.push({epoch: e, train_loss: 0.5 + 0.8 / (e + 1), test_loss: 0.55 + 0.7 / (e + 1),
                     test_accuracy: 0.9 - 0.2 / (e + 1), samples: 60000, seconds: STEPS_PER_EPOCH / 12,
                     end_seconds: (e + 1) * STEPS_PER_EPOCH / 12});
  }
}

function status(now) {
  const dead = now > KILL_AT;
  const step = Math.floor(now * 12);
  const member = (role, rank, p, state = 'live') => ({role, rank, address: `127.0.0.1:${p}`,
    metrics_address: role === 'scheduler' ? '' : `127.0.0.1:${p + 1000}`, state,
    last_heartbeat_seconds_ago: state === 'live' ? 0.2 : now - KILL_AT, joined_seconds: 0.5});
  return {
    state: epochsDone.length >= EPOCHS ? 'FINISHED' : 'RUNNING', failure: '', mode, now_seconds: now,
    epoch: Math.min(Math.floor(step / STEPS_PER_EPOCH), EPOCHS - 1), epochs: EPOCHS, step,
    total_steps: EPOCHS * STEPS_PER_EPOCH, samples_per_second: 2400, eta_seconds: EPOCHS * STEPS_PER_EPOCH / 12 - now,
    recent_loss: points.length ? points[points.length - 1].loss : null, membership_epoch: dead ? 2 : 1,
    epochs_done: epochsDone,
    members: [member('scheduler', 0, 5000), member('server', 0, 5001), member('server', 1, 5002),
              member('worker', 0, 5003), member('worker', 1, 5004), member('worker', 2, 5005, dead ? 'dead' : 'live')],
    workers: [0, 1, 2].map((r) => ({rank: r, samples: 1000 * step, samples_per_second: 800, step, bytes_sent: 1e6 * now,
                                    bytes_received: 1e6 * now, staleness_mean: 1, staleness_max: 3})),
    servers: [0, 1].map((r) => ({rank: r, bytes_received: 3.1e6 * now * (r + 1), bytes_sent: 2.9e6 * now * (r + 1),
                                 requests: 40 * step, refused: dead ? 3 : 0})),
    membership_events: [{seconds: 0.4, role: 'worker', rank: 0, kind: 'joined'},
                        {seconds: 0.5, role: 'worker', rank: 1, kind: 'joined'},
                        {seconds: 0.6, role: 'worker', rank: 2, kind: 'joined'}]
        .concat(dead ? [{seconds: KILL_AT + 3, role: 'worker', rank: 2, kind: 'died'}] : []),
    slow_steps: mode === 'sync' && dead ? [{seconds: KILL_AT + 2, server: 0, step: KILL_AT * 12, waited_seconds: 2.1,
                                            waiting_for: [2]}] : [],
    stuck_barriers: [],
    // Tables that fill, then hold steady under eviction: one point a second.
    table_history: [0, 1].map((r) => ({server: r, points: Array.from({length: Math.floor(now) + 1}, (_, t) => {
      const rows = Math.round(400000 * (1 - Math.exp(-t / 20)) + 1000 * r);
      const evicted = Math.max(0, Math.round(9000 * (t - 25)));
      return [t, rows, rows * 155, evicted];
    })})),
  };
}

http.createServer((req, res) => {
  const url = new URL(req.url, 'http://x');
  const now = (Date.now() - start) / 1000;
  simulate(now);
  let body, type = 'application/json';
  if (ROUTES[url.pathname]) {
    [body, type] = [fs.readFileSync(path.join(ASSETS, ROUTES[url.pathname][0])), ROUTES[url.pathname][1]];
  } else if (url.pathname === '/api/status') {
    body = JSON.stringify(status(now));
  } else if (url.pathname === '/api/timeline') {
    const since = Number(url.searchParams.get('since') || 0);
    const out = points.filter((p) => p.seq > since).slice(0, 2000);
    body = JSON.stringify({next: out.length ? out[out.length - 1].seq : since, points: out});
  } else {
    res.writeHead(404).end('not found');
    return;
  }
  res.writeHead(200, {'Content-Type': type, 'Cache-Control': 'no-store'}).end(body);
}).listen(port, '127.0.0.1', () => console.log(`dashboard at http://127.0.0.1:${port}/`));
