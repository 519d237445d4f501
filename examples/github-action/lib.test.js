// Unit tests of the action's pure helpers: `node --test examples/github-action/` (run by
// tests/github_action.rs).
'use strict';
const test = require('node:test');
const assert = require('node:assert');
const fs = require('fs');
const path = require('path');
const {
  durationMs, retryAfterMs, retryDelay, guardFailure, CallError, maskCommands, newNonce,
  idempotencyKey, goDuration, selectorText, mdCell, summaryMarkdown, stepIO, idTokenRequest,
  jwtExpiryMs, bearer, fileCommand, commandData, selectsNoPod, noPodWarning,
} = require('./lib');

test('file commands carry any value whole, under a delimiter that occurs in neither part', () => {
  const report = JSON.stringify({ evictionsBlocked: 1 }, null, 2);
  assert.strictEqual(fileCommand('report', report, () => 'd1'),
    `report<<ghadelimiter_d1\n${report}\nghadelimiter_d1\n`);
  // A value that holds the first delimiter drawn (say, one a step printed): a new one is drawn.
  const draws = ['aa', 'bb'];
  const forged = 'x\nghadelimiter_aa\nprotected=true';
  assert.strictEqual(fileCommand('reason', forged, () => draws.shift()),
    `reason<<ghadelimiter_bb\n${forged}\nghadelimiter_bb\n`);
  const random = fileCommand('window', 'tw-1').split('\n');
  assert.match(random[0], /^window<<ghadelimiter_[0-9a-f-]{36}$/);
  assert.deepStrictEqual(random.slice(1), ['tw-1', random[0].split('<<')[1], '']);
});

test('a window Ready over no pod gets one warning naming its selector', () => {
  const ready = (reason, status = 'True') => ({
    name: 'tw-1',
    selector: { matchLabels: { tier: 'backnd' } },
    conditions: [{ type: 'Ready', status, reason }],
  });
  assert.ok(selectsNoPod(ready('NoPodsSelected')));
  assert.ok(!selectsNoPod(ready('Protected')));
  assert.ok(!selectsNoPod(ready('NoPodsSelected', 'False')));
  assert.ok(!selectsNoPod({}));
  assert.strictEqual(noPodWarning(ready('Protected'), 'shop'), null);
  assert.strictEqual(noPodWarning(ready('NoPodsSelected'), 'shop'),
    '::warning title=disruption-guard: no pod selected::window tw-1 selects no pod in shop: '
    + 'check the selector tier=backnd; nothing is protected (require-pods: true makes this an error)');
  const all = noPodWarning({ ...ready('NoPodsSelected'), selector: {} }, 'shop');
  assert.match(all, /selects no pod in shop: the namespace has no pod/);
  assert.strictEqual(commandData('50%\r\nnext'), '50%25%0D%0Anext');
});

test('durations are Go durations', () => {
  assert.strictEqual(durationMs('2m'), 120000);
  assert.strictEqual(durationMs('1h30m'), 5400000);
  assert.strictEqual(durationMs('1.5s'), 1500);
  assert.strictEqual(durationMs('0'), 0);
  assert.throws(() => durationMs('soon'));
  assert.throws(() => durationMs('5 minutes'));
});

test('Retry-After is seconds or an HTTP-date', () => {
  const now = Date.parse('Sun, 06 Nov 1994 08:49:37 GMT');
  assert.strictEqual(retryAfterMs('7', now), 7000);
  assert.strictEqual(retryAfterMs('Sun, 06 Nov 1994 08:50:07 GMT', now), 30000);
  assert.strictEqual(retryAfterMs('Sun, 06 Nov 1994 08:00:00 GMT', now), 0);
  assert.strictEqual(retryAfterMs('soon', now), null);
  assert.strictEqual(retryAfterMs(null, now), null);
});

test('only the guard hiccups are retried, with full jitter, within the budget', () => {
  const at = (over) => retryDelay({
    status: 503, failures: 1, elapsedMs: 0, budgetMs: 120000, random: 0.5, ...over,
  });
  for (const status of [0, 429, 502, 503, 504]) assert.notStrictEqual(at({ status }), null);
  for (const status of [400, 401, 403, 404, 409, 422, 500]) assert.strictEqual(at({ status }), null);
  assert.strictEqual(at({ failures: 1 }), 250);
  assert.strictEqual(at({ failures: 3 }), 1000);
  assert.strictEqual(at({ failures: 30 }), 5000, 'capped at 10 s');
  assert.strictEqual(at({ failures: 3, random: 0 }), 0);
  assert.strictEqual(at({ retryAfter: 7000 }), 7000);
  assert.strictEqual(at({ retryAfter: 7000, elapsedMs: 115000 }), null);
  assert.strictEqual(at({ failures: 9, random: 1, elapsedMs: 118000 }), 2000);
  assert.strictEqual(at({ elapsedMs: 120000 }), null);
});

test('fail-open covers the guard failures, never the caller own', () => {
  assert.ok(guardFailure(new CallError('refused', 0)));
  assert.ok(guardFailure(new CallError('busy', 429)));
  assert.ok(guardFailure(new CallError('down', 503)));
  assert.ok(guardFailure(new CallError('not ready', 504)));
  assert.ok(!guardFailure(new CallError('denied', 403)));
  assert.ok(!guardFailure(new CallError('bad', 422)));
  assert.ok(!guardFailure(new Error('input server is required')));
});

test('the token is masked line by line, and nothing is masked without one', () => {
  assert.deepStrictEqual(maskCommands('s3cr3t-token'), ['::add-mask::s3cr3t-token']);
  assert.deepStrictEqual(maskCommands('  padded \n'), ['::add-mask::padded']);
  assert.deepStrictEqual(maskCommands('line-one\r\nline-two'),
    ['::add-mask::line-one', '::add-mask::line-two']);
  assert.deepStrictEqual(maskCommands('50%off'), ['::add-mask::50%25off']);
  assert.deepStrictEqual(maskCommands(''), []);
  assert.deepStrictEqual(maskCommands('   '), []);
  assert.deepStrictEqual(maskCommands(undefined), []);
});

test('the default key is one per run attempt, job and run of main; the key input wins', () => {
  const env = { GITHUB_RUN_ID: '4242', GITHUB_RUN_ATTEMPT: '2', GITHUB_JOB: 'e2e' };
  assert.strictEqual(idempotencyKey({ env, nonce: 'a1b2c3' }), '4242-2-e2e-a1b2c3');
  // Two legs of one matrix job: same run, attempt and job id, each its own nonce and window.
  const legs = [newNonce(), newNonce()].map((nonce) => idempotencyKey({ env, nonce }));
  assert.notStrictEqual(legs[0], legs[1]);
  for (const leg of legs) assert.match(leg, /^4242-2-e2e-[0-9a-f]{12}$/);
  // A retry of one open reuses its key.
  assert.strictEqual(idempotencyKey({ env, nonce: 'n' }), idempotencyKey({ env, nonce: 'n' }));
  assert.strictEqual(idempotencyKey({ key: 'shared-by-two-jobs', env, nonce: 'n' }), 'shared-by-two-jobs');
  assert.strictEqual(idempotencyKey({ key: '', env, nonce: 'n' }), '4242-2-e2e-n');
  assert.strictEqual(idempotencyKey({ env: {}, nonce: 'n' }), 'n');
  assert.strictEqual(idempotencyKey({ env: {} }), undefined);
  const long = idempotencyKey({ env: { ...env, GITHUB_JOB: 'j'.repeat(400) }, nonce: newNonce() });
  assert.ok(long.length <= 255 && /-[0-9a-f]{12}$/.test(long), long);
});

test('selectors read as kubectl -l', () => {
  assert.strictEqual(selectorText({}), '');
  assert.strictEqual(selectorText(undefined), '');
  assert.strictEqual(selectorText({
    matchLabels: { tier: 'backend' },
    matchExpressions: [
      { key: 'app', operator: 'In', values: ['api', 'web'] },
      { key: 'canary', operator: 'NotIn', values: ['true'] },
      { key: 'team', operator: 'Exists' },
      { key: 'legacy', operator: 'DoesNotExist' },
    ],
  }), 'tier=backend,app in (api,web),canary notin (true),team,!legacy');
});

test('durations print as Go prints them', () => {
  assert.strictEqual(goDuration(45000), '45s');
  assert.strictEqual(goDuration(720000), '12m0s');
  assert.strictEqual(goDuration(3723000), '1h2m3s');
  assert.strictEqual(goDuration(3600000), '1h0m0s');
});

test('table cells keep to one line and hold no markup', () => {
  assert.strictEqual(mdCell('a | b'), 'a \\| b');
  assert.strictEqual(mdCell('line one\nline two'), 'line one line two');
  assert.strictEqual(mdCell('<img src=x> & *bold*'), '&lt;img src=x&gt; &amp; \\*bold\\*');
  assert.strictEqual(mdCell(null), '');
  assert.strictEqual(mdCell(0), '0');
});

// A close's answer (WindowView) as the API gives it.
const closed = {
  name: 'tw-0123456789abcdef',
  namespace: 'shop',
  phase: 'Closed',
  ready: false,
  closed: true,
  selector: { matchLabels: { tier: 'backend' } },
  ttl: '30m0s',
  reason: 'e2e #12 | nightly',
  openedAt: '2025-06-01T10:00:00Z',
  expiresAt: '2025-06-01T10:30:00Z',
  endedAt: '2025-06-01T10:12:03Z',
  protected: { workloads: 0, pods: 0, nodes: 0 },
  report: { clean: true, evictionsBlocked: 1, podsDisrupted: 0, rollouts: 0 },
};

test('the step summary is a table of the closed window', () => {
  const md = summaryMarkdown(closed, { workloads: 1, pods: 2, nodes: 1 });
  assert.deepStrictEqual(md.split('\n'), [
    '### disruption-guard: clean, nothing protected was disrupted',
    '',
    '| Window | tw-0123456789abcdef |',
    '|---|---|',
    '| Namespace | shop |',
    '| Phase | Closed |',
    '| Reason | e2e #12 \\| nightly |',
    '| Pods selected | tier=backend |',
    '| Opened | 2025-06-01T10:00:00Z |',
    '| Ended | 2025-06-01T10:12:03Z (open 12m3s) |',
    '| Protected | 2 pods on 1 node, 1 workload under a PodDisruptionBudget |',
    '| Evictions blocked | 1 |',
    '| Pods disrupted | 0 |',
    '| Nodes disrupted | 0 |',
    '| Rollouts by disruption-guard | 0 |',
    '',
  ]);
});

test('the step summary names what was disrupted, and protection that never was', () => {
  const md = summaryMarkdown({
    ...closed,
    selector: {},
    reason: '',
    report: {
      clean: false,
      evictionsBlocked: 0,
      podsDisrupted: 2,
      disruptedPods: ['api-1', 'api-2'],
      rollouts: 1,
      nodesDisrupted: ['node-a'],
    },
  }, null);
  const lines = md.split('\n');
  assert.strictEqual(lines[0], '### disruption-guard: 2 pods and 1 node disrupted');
  assert.ok(lines.includes('| Pods selected | all pods of the namespace |'), md);
  assert.ok(lines.includes('| Reason |  |'), md);
  assert.ok(lines.includes('| Protected | not in effect when the job went on (fail-open) |'), md);
  assert.ok(lines.includes('| Pods disrupted | 2: api-1, api-2 |'), md);
  assert.ok(lines.includes('| Nodes disrupted | 1: node-a |'), md);
  assert.ok(lines.includes('| Rollouts by disruption-guard | 1 |'), md);
  assert.ok(!summaryMarkdown({ ...closed, endedAt: undefined }, null).includes('(open'));
});

test('the step summary says what the window protected at most, and when that was nothing', () => {
  const peak = { workloads: 2, pods: 3, nodes: 2 };
  const md = summaryMarkdown({ ...closed, report: { ...closed.report, peakProtected: peak } },
    { workloads: 1, pods: 1, nodes: 1 });
  assert.ok(md.includes('| Protected | 3 pods on 2 nodes, 2 workloads under a PodDisruptionBudget |'), md);
  const none = { workloads: 0, pods: 0, nodes: 0 };
  const empty = summaryMarkdown({ ...closed, report: { ...closed.report, peakProtected: none } },
    { workloads: 0, pods: 0, nodes: 0 });
  assert.ok(empty.includes('| Protected | nothing: the window selected no pod |'), empty);
});

test('the root action.yml offers what examples/github-action/action.yml offers', () => {
  const head = (file) => fs.readFileSync(file, 'utf8').split(/^runs:/m)[0];
  const root = path.join(__dirname, '..', '..', 'action.yml');
  const example = path.join(__dirname, 'action.yml');
  assert.strictEqual(head(root), head(example), 'name, inputs and outputs are the same');
  const runs = (file) => fs.readFileSync(file, 'utf8').split(/^runs:/m)[1];
  assert.match(runs(root), /using: node24\n {2}main: examples\/github-action\/main\.js\n {2}post: examples\/github-action\/post\.js\n {2}post-if: always\(\)/);
  assert.match(runs(example), /using: node24\n {2}main: main\.js\n {2}post: post\.js\n {2}post-if: always\(\)/);
});

// Runs `fn` with console.log captured; returns what it printed, one entry a call.
async function printed(fn) {
  const lines = [];
  const log = console.log;
  console.log = (line) => lines.push(line);
  try {
    await fn();
  } finally {
    console.log = log;
  }
  return lines;
}

test('on a runner, outputs, state and the summary go through the files, and nothing is loaded', async () => {
  const dir = fs.mkdtempSync(path.join(require('os').tmpdir(), 'gha-io-'));
  const env = {
    GITHUB_OUTPUT: path.join(dir, 'output'),
    GITHUB_STATE: path.join(dir, 'state'),
    GITHUB_STEP_SUMMARY: path.join(dir, 'summary'),
    STATE_window: 'tw-from-main',
  };
  const io = stepIO({ env, load: () => assert.fail('no package is loaded on a runner') });
  assert.strictEqual(io.via, 'files');
  const lines = await printed(async () => {
    io.mask('s3cr3t');
    io.output('window', 'tw-1');
    io.saveState('namespace', 'shop');
    await io.summary('### report\n');
  });
  assert.deepStrictEqual(lines, ['::add-mask::s3cr3t']);
  assert.match(fs.readFileSync(env.GITHUB_OUTPUT, 'utf8'),
    /^window<<(ghadelimiter_[0-9a-f-]{36})\ntw-1\n\1\n$/);
  assert.match(fs.readFileSync(env.GITHUB_STATE, 'utf8'),
    /^namespace<<(ghadelimiter_[0-9a-f-]{36})\nshop\n\1\n$/);
  assert.strictEqual(fs.readFileSync(env.GITHUB_STEP_SUMMARY, 'utf8'), '### report\n');
  assert.strictEqual(io.state('window'), 'tw-from-main');
  assert.strictEqual(io.state('protection'), '');
  // No summary file: nothing is written, nothing fails.
  await stepIO({ env: {} }).summary('### report\n');
});

test('under @github/local-action, outputs, state and the summary go through its @actions/core', async () => {
  const calls = [];
  const state = {};
  const core = {
    setOutput: (k, v) => calls.push(['setOutput', k, v]),
    saveState: (k, v) => { state[k] = v; },
    getState: (k) => state[k] || '',
    setSecret: (s) => calls.push(['setSecret', s]),
    summary: {
      addRaw(md) { calls.push(['addRaw', md]); return this; },
      async write() { calls.push(['write']); return this; },
    },
  };
  const env = { TARGET_ACTION_PATH: '/actions/guard', GITHUB_STEP_SUMMARY: '/tmp/summary' };
  const io = stepIO({ env, load: (name) => (name === '@actions/core' ? core : assert.fail(name)) });
  assert.strictEqual(io.via, '@actions/core');
  const lines = await printed(async () => {
    io.mask('line-one\nline-two');
    io.output('window', 'tw-1');
    io.saveState('window', 'tw-1');
    await io.summary('### report\n');
  });
  assert.deepStrictEqual(lines, [], 'the stub masks: no ::add-mask:: printed in clear');
  assert.strictEqual(io.state('window'), 'tw-1', 'post reads what main saved, in one process');
  assert.deepStrictEqual(calls, [
    ['setSecret', 'line-one'], ['setSecret', 'line-two'],
    ['setOutput', 'window', 'tw-1'],
    ['addRaw', '### report\n'], ['write'],
  ]);
  // Without a step summary file the stub is not asked to write one (it would throw).
  calls.length = 0;
  await stepIO({ env: { TARGET_ACTION_PATH: '/a' }, load: () => core }).summary('x');
  assert.deepStrictEqual(calls, []);
});

test('under @github/local-action without its @actions/core, a warning and the files', async () => {
  let io;
  const lines = await printed(() => {
    io = stepIO({
      env: { TARGET_ACTION_PATH: '/a' },
      load: () => { throw new Error("Cannot find module '@actions/core'\nRequire stack: …"); },
    });
  });
  assert.strictEqual(io.via, 'files');
  assert.deepStrictEqual(lines, [
    "::warning::disruption-guard: run by @github/local-action without its @actions/core (Cannot find module '@actions/core'); outputs and state go to the runner's files",
  ]);
});

test('main and post export run for test tools, and run only when run directly', () => {
  for (const file of ['main.js', 'post.js']) {
    // Requiring the entry point starts nothing (no input is read, no call made).
    const { run } = require(`./${file}`);
    assert.strictEqual(typeof run, 'function', file);
  }
});

// A JWT-shaped token with `exp` (seconds); unsigned: only its shape matters here.
function jwtWithExp(exp) {
  const part = (o) => Buffer.from(JSON.stringify(o)).toString('base64url');
  return `${part({ alg: 'RS256' })}.${part({ exp, sub: 'repo:org/shop:ref:refs/heads/main' })}.sig`;
}

test('the runner offers an id-token only with both request variables', () => {
  assert.strictEqual(idTokenRequest({}), null);
  assert.strictEqual(idTokenRequest({ ACTIONS_ID_TOKEN_REQUEST_URL: 'https://r/x' }), null);
  assert.deepStrictEqual(
    idTokenRequest({ ACTIONS_ID_TOKEN_REQUEST_URL: 'https://r/x', ACTIONS_ID_TOKEN_REQUEST_TOKEN: 't' }),
    { url: 'https://r/x', token: 't' },
  );
});

test('a JWT expiry is read from its exp claim; anything else has none', () => {
  assert.strictEqual(jwtExpiryMs(jwtWithExp(1700000000)), 1700000000000);
  assert.strictEqual(jwtExpiryMs('static-token'), null);
  assert.strictEqual(jwtExpiryMs(''), null);
});

test('without a token input or id-token permission the step says what to give', () => {
  delete process.env.INPUT_TOKEN;
  assert.throws(() => bearer({ io: { mask() {} }, env: {} }), /id-token: write/);
});

test('the id-token is requested for the audience, masked, reused, and requested again near expiry', async () => {
  delete process.env.INPUT_TOKEN;
  const realFetch = global.fetch;
  const asked = [];
  let now = 1000000000000;
  const tokens = [jwtWithExp(now / 1000 + 300), jwtWithExp(now / 1000 + 900)];
  global.fetch = async (url, init) => {
    asked.push({ audience: new URL(url).searchParams.get('audience'), auth: init.headers.authorization });
    return new Response(JSON.stringify({ value: tokens[asked.length - 1] }), { status: 200 });
  };
  try {
    const masked = [];
    const env = { ACTIONS_ID_TOKEN_REQUEST_URL: 'https://runner/idtoken?api-version=2.0', ACTIONS_ID_TOKEN_REQUEST_TOKEN: 'rt' };
    const source = bearer({ io: { mask: (t) => masked.push(t) }, audience: 'guard', env, now: () => now });
    assert.strictEqual(await source(), tokens[0]);
    now += 200 * 1000; // 100 s left: more than the margin, reused
    assert.strictEqual(await source(), tokens[0]);
    now += 50 * 1000; // 50 s left: requested again
    assert.strictEqual(await source(), tokens[1]);
    assert.deepStrictEqual(asked, [{ audience: 'guard', auth: 'Bearer rt' }, { audience: 'guard', auth: 'Bearer rt' }]);
    assert.deepStrictEqual(masked, tokens);
  } finally {
    global.fetch = realFetch;
  }
});
