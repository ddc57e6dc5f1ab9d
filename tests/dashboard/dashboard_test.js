#!/usr/bin/env node
// End-to-end test of the scheduler's dashboard: a real async job (scheduler, 2 servers, 3 workers on
// 127.0.0.1) with --http_port=-1, the page open in headless Chromium (playwright-core), and one
// worker killed with SIGKILL while it trains.
//
//   node tests/dashboard/dashboard_test.js --bin_dir=build/bin [--out_dir=build] [--data_dir=DIR]
//
// Checks: the per-epoch and per-step curves draw lines, the members table lists the scheduler, the
// servers and the workers as live, the header's step grows, server traffic has bars; after the kill
// the table shows that worker dead, a "died" marker is drawn on the per-step charts and the step and
// the curves keep growing; the page throws no error. Saves OUT_DIR/dashboard-screenshot.png. Then a
// CTR job with TTL eviction (data from pstrain-gen-ctr): the embedding-table panel draws each
// server's rows over time and the rows evicted, where the first job's panel said it has no tables;
// saves that panel as OUT_DIR/dashboard-tables-screenshot.png.
//
// Exit codes: 0 passed, 1 failed, 77 skipped (no Chromium, or playwright-core not installed and
// `npm ci` impossible). Every process it starts is killed on the way out.
'use strict';

const childProcess = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');

const SKIP = 77;
const HERE = __dirname;
const args = Object.fromEntries(process.argv.slice(2).map((a) => {
  const m = /^--([^=]+)=(.*)$/.exec(a);
  if (!m) { console.error(`unexpected argument '${a}', expected --name=value`); process.exit(2); }
  return [m[1], m[2]];
}));
const binDir = path.resolve(args.bin_dir || process.env.PSTRAIN_BIN_DIR || path.join(HERE, '..', '..', 'build', 'bin'));
const outDir = path.resolve(args.out_dir || process.env.OUT_DIR || path.join(binDir, '..'));
const chromiumPath = args.chromium || process.env.PSTRAIN_CHROMIUM || '/usr/bin/chromium';
const DEADLINE_MS = 240 * 1000;  // Under ctest's TIMEOUT, so that the cleanup below still runs.

function log(message) { console.log(`[dashboard_test] ${message}`); }

function loadPlaywright() {
  const modules = path.join(HERE, 'node_modules');
  if (!fs.existsSync(path.join(modules, 'playwright-core'))) {
    log('node_modules missing: npm ci');
    const npm = childProcess.spawnSync('npm', ['ci', '--no-audit', '--no-fund'], {cwd: HERE, stdio: 'inherit'});
    if (npm.status !== 0) return null;
  }
  try {
    return require(path.join(modules, 'playwright-core'));
  } catch (e) {
    log(`cannot load playwright-core: ${e.message}`);
    return null;
  }
}

// ---- Processes ----

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pstrain-dashboard-'));
const children = [];

function spawn(name, binary, argv) {
  const logPath = path.join(tmp, `${name}.log`);
  const out = fs.openSync(logPath, 'w');
  const child = childProcess.spawn(path.join(binDir, binary), argv, {stdio: ['ignore', out, out]});
  fs.closeSync(out);
  const entry = {name, child, logPath, exited: null};
  child.on('exit', (code, signal) => { entry.exited = signal || code; });
  children.push(entry);
  return entry;
}

function killAll() {
  for (const {child, exited} of children) {
    if (exited === null) {
      try { child.kill('SIGKILL'); } catch (e) { /* already gone */ }
    }
  }
}

function tail(file, lines = 15) {
  try {
    return fs.readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch (e) {
    return '(no log)';
  }
}

function cleanup(passed) {
  killAll();
  if (!passed) {
    for (const c of children) log(`--- ${c.name} (exit: ${c.exited ?? 'running'}), last lines:\n${tail(c.logPath)}`);
  }
  fs.rmSync(tmp, {recursive: true, force: true});
}

process.on('exit', killAll);
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => { cleanup(false); process.exit(1); });

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function waitFor(what, fn, timeoutMs = 30000, everyMs = 250) {
  const end = Date.now() + timeoutMs;
  let last = null;
  for (;;) {
    // A process of a job that may end (mayEnd) may exit with 0.
    const died = children.find((c) => c.exited !== null && !c.killed && !(c.mayEnd && c.exited === 0));
    if (died) throw new Error(`${died.name} exited (${died.exited}) while waiting for ${what}`);
    last = await fn();
    if (last) return last;
    if (Date.now() > end) {
      throw new Error(`timed out after ${timeoutMs / 1000} s waiting for ${what}; the page showed ` +
                      JSON.stringify(lastSnapshot));
    }
    await sleep(everyMs);
  }
}

function readPort(file) {
  try {
    const port = Number(fs.readFileSync(file, 'utf8').trim());
    return port > 0 ? port : 0;
  } catch (e) {
    return 0;
  }
}

function check(condition, message) {
  if (!condition) throw new Error(`check failed: ${message}`);
  log(`ok: ${message}`);
}

// ---- The test ----

// A job of 2 servers and `numWorkers` workers with the scheduler's flags `job`; process names start
// with `prefix`.
async function startJob(prefix = '', numWorkers = 3, job = null) {
  if (job === null) {
    job = ['--servers=2', '--workers=3', '--mode=async', '--epochs=20', '--test_limit=2000', '--batch_size=32',
           '--min_workers=1'];
    if (args.data_dir) job.push(`--data_dir=${args.data_dir}`);
  }
  const portFile = path.join(tmp, `${prefix}scheduler.port`), httpPortFile = path.join(tmp, `${prefix}http.port`);
  spawn(`${prefix}scheduler`, 'pstrain-scheduler',
                          ['--port=0', `--port_file=${portFile}`, '--http_port=-1', `--http_port_file=${httpPortFile}`,
                           '--heartbeat_ms=200', '--dead_after_ms=2000', ...job]);
  const [port, httpPort] = await waitFor('the scheduler\'s port files', () => {
    const p = readPort(portFile), h = readPort(httpPortFile);
    return p && h ? [p, h] : null;
  }, 30000, 50);
  const address = `127.0.0.1:${port}`;
  for (let i = 0; i < 2; ++i) spawn(`${prefix}server${i}`, 'pstrain-server', [`--scheduler=${address}`, '--port=0']);
  const workers = [];
  for (let i = 0; i < numWorkers; ++i) {
    workers.push(spawn(`${prefix}worker${i}`, 'pstrain-worker', [`--scheduler=${address}`, '--rpc_timeout_ms=60000']));
  }
  return {url: `http://127.0.0.1:${httpPort}/`, workers};
}

// The second job: CTR over a small generated data set, sync, with TTL eviction. Checks the
// embedding-table panel on its own page.
async function checkTablesPanel(browser) {
  const data = path.join(tmp, 'ctr-data');
  const gen = childProcess.spawnSync(path.join(binDir, 'pstrain-gen-ctr'),
                                     [`--out_dir=${data}`, '--train_samples=20000', '--test_samples=2000'],
                                     {encoding: 'utf8'});
  if (gen.status !== 0) throw new Error(`pstrain-gen-ctr failed: ${gen.stderr}`);
  const {url} = await startJob('ctr-', 2, ['--model=ctr', `--data_dir=${data}`, '--servers=2', '--workers=2',
                                           '--mode=sync', '--epochs=40', '--batch_size=64', '--embedding_dim=8',
                                           '--hidden=16', '--table_ttl_updates=30', '--linger_ms=60000']);
  for (const c of children) c.mayEnd = c.name.startsWith('ctr-');  // the page outlives it (--linger_ms)
  const page = await browser.newPage({viewport: {width: 1280, height: 900}});
  const pageErrors = [];
  page.on('pageerror', (e) => pageErrors.push(e.message));
  await page.goto(url);
  const tables = () => page.evaluate(() => {
    // The panel's two charts: rows held, and rows evicted per second.
    const lines = (n) => [...document.querySelectorAll(`#tables .pair svg:nth-child(${n}) path.series`)]
        .filter((p) => (p.getAttribute('d') || '').includes('L'));
    const note = document.querySelector('#tables [data-testid="tables-latest"]');
    return {
      state: document.getElementById('state').textContent,
      rows: lines(1).length,
      evicted: lines(2).length,
      note: note ? note.textContent : '',
    };
  });
  const t = await waitFor('the job\'s end, with both servers\' rows and some evictions drawn over time', async () => {
    const x = await tables();
    lastSnapshot = x;
    return x.state === 'FINISHED' && x.rows === 2 && x.evicted === 2 ? x : null;
  }, 120000, 500);
  check(true, `embedding tables: ${t.rows} lines of rows held, ${t.evicted} of rows evicted per second; ${t.note}`);
  check(/server 0: [\d,]+ rows in [\d.]+ [KMG]?i?B, [\d,]+ evicted/.test(t.note), 'the latest rows, bytes and evictions');
  check(pageErrors.length === 0, `no page errors${pageErrors.length ? ': ' + pageErrors.join('; ') : ''}`);
  const shot = path.join(outDir, 'dashboard-tables-screenshot.png');
  await page.locator('#tables').screenshot({path: shot});
  log(`screenshot: ${shot}`);
  await page.close();
}

// The third job: CTR on a data stream that pstrain-gen-ctr writes while the job trains. Checks the
// stream panel: a progressive AUC and log loss point per file, the lag, and the window.
async function checkStreamPanel(browser) {
  const stream = path.join(tmp, 'stream');
  fs.mkdirSync(stream, {recursive: true});
  const {url} = await startJob('stream-', 2, ['--model=ctr', `--data_stream=${stream}`, '--servers=2', '--workers=2',
                                              '--batch_size=64', '--embedding_dim=8', '--hidden=16',
                                              '--stream_poll_ms=200', '--linger_ms=60000']);
  spawn('stream-writer', 'pstrain-gen-ctr', [`--stream_dir=${stream}`, '--hours=6', '--records_per_hour=4000',
                                             '--new_key_rate=0.2', '--rate=8000']);
  for (const c of children) c.mayEnd = c.name.startsWith('stream-');  // the page outlives it (--linger_ms)
  const page = await browser.newPage({viewport: {width: 1280, height: 900}});
  const pageErrors = [];
  page.on('pageerror', (e) => pageErrors.push(e.message));
  await page.goto(url);
  const panel = () => page.evaluate(() => {
    const dots = (n) => document.querySelectorAll(`#stream .pair svg:nth-child(${n}) circle`).length;
    const text = (id) => {
      const e = document.querySelector(`#stream [data-testid="${id}"]`);
      return e ? e.textContent : '';
    };
    return {state: document.getElementById('state').textContent, auc: dots(1), logloss: dots(2),
            lag: text('stream-lag'), window: text('stream-window')};
  });
  const p = await waitFor('the stream job\'s end, with a progressive AUC and log loss point for each of its 6 files',
                          async () => {
    const x = await panel();
    lastSnapshot = x;
    return x.state === 'FINISHED' && x.auc === 6 && x.logloss === 6 ? x : null;
  }, 120000, 500);
  check(true, `stream: ${p.auc} AUC points, ${p.logloss} log loss points; ${p.lag}; ${p.window}`);
  check(/^0 records in 0 files behind the newest ready file \(24,000 of 24,000 trained, 6 files ready, the stream has ended\)$/
            .test(p.lag), 'the lag once the stream is trained');
  check(/^last 3 files: AUC 0\.\d{4}, log loss 0\.\d{4} over 12,000 records$/.test(p.window), 'the window\'s figures');
  check(pageErrors.length === 0, `no page errors${pageErrors.length ? ': ' + pageErrors.join('; ') : ''}`);
  const shot = path.join(outDir, 'dashboard-stream-screenshot.png');
  await page.locator('#stream').screenshot({path: shot});
  log(`screenshot: ${shot}`);
  await page.close();
}

// What the test reads off the page.
let lastSnapshot = null;  // For the message of a failed wait.
async function snapshot(page) {
  lastSnapshot = await page.evaluate(() => {
    const rows = [...document.querySelectorAll('#members tbody tr')].map((tr) => ({
      role: tr.dataset.role, rank: Number(tr.dataset.rank), state: tr.dataset.state}));
    const lines = (sel) => [...document.querySelectorAll(`${sel} svg path.series`)]
        .filter((p) => (p.getAttribute('d') || '').includes('L'));  // Two points or more: a line.
    const stepLines = lines('#loss-step');
    return {
      state: document.getElementById('state').textContent,
      step: Number(document.getElementById('step').dataset.value || NaN),
      members: rows,
      epochLines: lines('#loss-epoch').length,
      accuracyLines: lines('#accuracy-epoch').length,
      stepLines: stepLines.length,
      // The time of the newest point drawn per worker: grows while the curves are live.
      stepLastX: Object.fromEntries(stepLines.map((p) => [p.dataset.series, Number(p.dataset.lastX)])),
      throughputLines: lines('#throughput').length,
      stalenessLines: lines('#staleness').length,
      heatCells: document.querySelectorAll('#heatmap svg rect').length,
      serverBars: [...document.querySelectorAll('#server-bytes rect.bar')].filter((r) => Number(r.getAttribute('width')) > 1).length,
      diedMarkers: document.querySelectorAll('#loss-step line.marker[data-kind="died"]').length,
      diedEvents: document.querySelectorAll('#events li[data-kind="died"], #events li[data-kind="left"]').length,
      failureShown: !document.getElementById('failure').hidden,
      tablesEmpty: (document.querySelector('#tables .empty') || {}).textContent || '',
    };
  });
  return lastSnapshot;
}

const count = (s, role, state) => s.members.filter((m) => m.role === role && (!state || m.state === state)).length;

async function main() {
  if (!fs.existsSync(chromiumPath)) {
    log(`no Chromium at ${chromiumPath}: skipped`);
    return SKIP;
  }
  for (const binary of ['pstrain-scheduler', 'pstrain-server', 'pstrain-worker']) {
    if (!fs.existsSync(path.join(binDir, binary))) throw new Error(`${binary} not found in ${binDir}`);
  }
  const playwright = loadPlaywright();
  if (!playwright) {
    log('playwright-core is not installed (npm ci --prefix tests/dashboard): skipped');
    return SKIP;
  }
  const {url, workers} = await startJob();
  log(`dashboard at ${url}`);
  const browser = await playwright.chromium.launch({
    executablePath: chromiumPath,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
           '--disable-component-update', '--disable-sync'],
  });
  try {
    const page = await browser.newPage({viewport: {width: 1280, height: 900}});
    const pageErrors = [];
    page.on('pageerror', (e) => pageErrors.push(e.message));
    page.on('console', (m) => { if (m.type() === 'error') pageErrors.push(m.text()); });
    await page.goto(url);

    // The whole job, live.
    let s = await waitFor('every role live in the members table', async () => {
      const x = await snapshot(page);
      return count(x, 'scheduler', 'live') === 1 && count(x, 'server', 'live') === 2 &&
             count(x, 'worker', 'live') === 3 ? x : null;
    });
    check(s.state === 'RUNNING', `state RUNNING (${s.state})`);
    check(true, `members: scheduler, 2 servers and 3 workers live`);
    s = await waitFor('per-step loss lines for every worker, step-time cells and server traffic bars', async () => {
      const x = await snapshot(page);
      return x.stepLines === 3 && x.heatCells >= 3 && x.serverBars === 4 && x.throughputLines >= 1 &&
             x.stalenessLines >= 1 ? x : null;
    });
    check(true, `per-step loss: ${s.stepLines} lines; heat map: ${s.heatCells} cells; samples/s: ${s.throughputLines} ` +
                `lines; staleness: ${s.stalenessLines} lines; server traffic: ${s.serverBars} bars`);
    const before = s.step;
    await sleep(3000);
    s = await snapshot(page);
    check(s.step > before, `the header's step grows on its own: ${before} -> ${s.step}`);
    s = await waitFor('per-epoch loss and accuracy lines (two epochs ended)', async () => {
      const x = await snapshot(page);
      return x.epochLines === 2 && x.accuracyLines >= 1 ? x : null;
    }, 60000);
    check(true, `per-epoch: ${s.epochLines} loss lines, ${s.accuracyLines} accuracy line(s)`);
    check(s.state === 'RUNNING', `still RUNNING before the kill (${s.state}); a shorter job would end too soon`);

    // One worker dies.
    const victim = workers[workers.length - 1];
    victim.killed = true;
    victim.child.kill('SIGKILL');
    log(`killed ${victim.name} (pid ${victim.child.pid}) with SIGKILL`);
    s = await waitFor('the killed worker dead in the table, and a "died" marker', async () => {
      const x = await snapshot(page);
      return count(x, 'worker', 'live') === 2 && count(x, 'worker') === 3 && x.diedMarkers >= 1 && x.diedEvents >= 1
          ? x : null;
    }, 20000);
    const gone = s.members.filter((m) => m.role === 'worker' && m.state !== 'live');
    check(gone.length === 1, `worker ${gone[0].rank} is ${gone[0].state}, 2 workers live`);
    check(true, `${s.diedMarkers} "died" marker(s) on the per-step loss chart, the event listed`);
    const afterKill = s;
    await sleep(4000);
    s = await snapshot(page);
    check(s.state === 'RUNNING', `the job goes on (${s.state})`);
    check(s.step > afterKill.step, `the step keeps growing after the kill: ${afterKill.step} -> ${s.step}`);
    const grown = Object.keys(s.stepLastX).filter((w) => s.stepLastX[w] > (afterKill.stepLastX[w] ?? Infinity));
    check(grown.length === 2, `the survivors' per-step curves keep growing (${grown.join(', ')}): ` +
                              `${JSON.stringify(afterKill.stepLastX)} -> ${JSON.stringify(s.stepLastX)}`);
    check(!s.failureShown, 'no failure banner');
    check(/No embedding tables/.test(s.tablesEmpty), `the table panel says the job has none ("${s.tablesEmpty}")`);
    check(pageErrors.length === 0, `no page errors${pageErrors.length ? ': ' + pageErrors.join('; ') : ''}`);
    check(children.every((c) => c.exited === null || c.killed), 'every other process is running');

    fs.mkdirSync(outDir, {recursive: true});
    const shot = path.join(outDir, 'dashboard-screenshot.png');
    await page.screenshot({path: shot, fullPage: true});
    log(`screenshot: ${shot}`);
    for (const c of children) c.killed = true;  // the first job is done with
    killAll();
    await checkTablesPanel(browser);
    for (const c of children) c.killed = true;  // the second job is done with
    killAll();
    await checkStreamPanel(browser);
  } finally {
    await browser.close();
  }
  return 0;
}

const watchdog = setTimeout(() => {
  log(`gave up after ${DEADLINE_MS / 1000} s`);
  cleanup(false);
  process.exit(1);
}, DEADLINE_MS);

main().then((code) => {
  clearTimeout(watchdog);
  cleanup(code === 0 || code === SKIP);
  log(code === 0 ? 'PASSED' : 'SKIPPED');
  process.exit(code);
}, (e) => {
  clearTimeout(watchdog);
  log(`FAILED: ${e.message}`);
  cleanup(false);
  process.exit(1);
});
