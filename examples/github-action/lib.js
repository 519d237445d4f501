// Shared helpers of the action: inputs, outputs, state, masking, the idempotency key, the step
// summary and the HTTP calls. The action has no dependencies: on a runner it speaks the runner's
// file protocol itself (see `stepIO`).
'use strict';
const crypto = require('crypto');
const fs = require('fs');

function input(name, required) {
  const value = (process.env[`INPUT_${name.replace(/ /g, '_').toUpperCase()}`] || '').trim();
  if (required && !value) throw new Error(`input ${name} is required`);
  return value;
}

// One `name<<DELIMITER` … `DELIMITER` entry of the runner's file commands (GITHUB_OUTPUT,
// GITHUB_STATE), as @actions/core writes it: any value, lines included, is carried whole. The
// delimiter is random and drawn again until it occurs in neither name nor value, so no value can
// end the entry early and set another output. `random` is a parameter for the unit tests.
function fileCommand(name, value, random = () => crypto.randomUUID()) {
  const text = String(value);
  let delimiter;
  do {
    delimiter = `ghadelimiter_${random()}`;
  } while (name.includes(delimiter) || text.includes(delimiter));
  return `${name}<<${delimiter}\n${text}\n${delimiter}\n`;
}

function appendTo(fileVar, key, value, env = process.env) {
  const file = env[fileVar];
  if (file) fs.appendFileSync(file, fileCommand(key, value));
}

// Text made safe as the data of a workflow command (`::warning::…`): one line, `%` escaped, as
// the runner unescapes it.
function commandData(text) {
  return String(text).replace(/%/g, '%25').replace(/\r/g, '%0D').replace(/\n/g, '%0A');
}

// Whether the window (a WindowView) is Ready over no pod: `Ready` True with reason
// `NoPodsSelected`. It is kept open, protecting nothing until a pod it selects appears.
function selectsNoPod(window) {
  const ready = ((window && window.conditions) || []).find((c) => c.type === 'Ready');
  return Boolean(ready && ready.status === 'True' && ready.reason === 'NoPodsSelected');
}

// The `::warning::` for a window Ready over no pod, naming the selector to check; null for any
// other window.
function noPodWarning(window, namespace) {
  if (!selectsNoPod(window)) return null;
  const selector = selectorText(window.selector);
  const check = selector
    ? `check the selector ${selector}`
    : 'the namespace has no pod (DaemonSet pods count only with protect.daemonSets)';
  return `::warning title=disruption-guard: no pod selected::${commandData(
    `window ${window.name} selects no pod in ${namespace}: ${check}; nothing is protected `
    + '(require-pods: true makes this an error)',
  )}`;
}

// The lines of `token` to mask, each on its own (a mask covers one line); none for an empty one.
function secretLines(token) {
  return String(token || '').split(/\r?\n|\r/).map((line) => line.trim()).filter(Boolean);
}

// The workflow commands that mask `token` in the job's log, one per line of it (a command ends at
// its line's end, so a second line would be printed in clear otherwise); none for an empty
// token. `%` is escaped as the runner unescapes it.
function maskCommands(token) {
  return secretLines(token).map((line) => `::add-mask::${line.replace(/%/g, '%25')}`);
}

// How the step hands on its outputs, its state (main to post), the step summary and the token
// to mask, chosen by what runs it:
// - an Actions runner, or anything that runs `node main.js` as it does: the runner's file
//   protocol, spoken here with no package loaded: `name=value` lines appended to the files
//   GITHUB_OUTPUT and GITHUB_STATE (which the runner gives post as STATE_<name>), Markdown
//   appended to GITHUB_STEP_SUMMARY, `::add-mask::` commands;
// - @github/local-action, which names the action it runs in TARGET_ACTION_PATH: its stub of
//   @actions/core, which it hands to any `require('@actions/core')` once `npm ls` where it runs
//   finds the package (the action itself has no copy). The stub keeps state in memory from main
//   to post (one process runs both), lists the outputs at the end of the run, writes the summary
//   to GITHUB_STEP_SUMMARY and redacts the token from what it logs. Without it, a warning: the
//   files are used, and post finds no state.
// `env` and `load` (require) are parameters for the unit tests.
function stepIO({ env = process.env, load = require } = {}) {
  let core = null;
  if (env.TARGET_ACTION_PATH) {
    try {
      core = load('@actions/core');
    } catch (err) {
      console.log('::warning::disruption-guard: run by @github/local-action without its '
        + `@actions/core (${err.message.split('\n')[0]}); outputs and state go to the runner's files`);
    }
  }
  if (core) {
    return {
      via: '@actions/core',
      output: (name, value) => core.setOutput(name, value),
      saveState: (name, value) => core.saveState(name, value),
      state: (name) => core.getState(name),
      summary: async (markdown) => {
        if (env.GITHUB_STEP_SUMMARY) await core.summary.addRaw(markdown).write();
      },
      mask: (token) => secretLines(token).forEach((line) => core.setSecret(line)),
    };
  }
  return {
    via: 'files',
    output: (name, value) => appendTo('GITHUB_OUTPUT', name, value, env),
    saveState: (name, value) => appendTo('GITHUB_STATE', name, value, env),
    state: (name) => env[`STATE_${name}`] || '',
    summary: async (markdown) => {
      if (env.GITHUB_STEP_SUMMARY) fs.appendFileSync(env.GITHUB_STEP_SUMMARY, markdown);
    },
    mask: (token) => maskCommands(token).forEach((line) => console.log(line)),
  };
}

// The runner's id-token endpoint, when the job may request one (`permissions: id-token: write`
// makes the runner set both variables); null otherwise.
function idTokenRequest(env) {
  const url = env.ACTIONS_ID_TOKEN_REQUEST_URL;
  const token = env.ACTIONS_ID_TOKEN_REQUEST_TOKEN;
  return url && token ? { url, token } : null;
}

// When a JWT expires (its `exp`, in ms), read without verifying it (the guard verifies it);
// null when it is not a JWT with an `exp`.
function jwtExpiryMs(jwt) {
  try {
    const payload = JSON.parse(Buffer.from(String(jwt).split('.')[1], 'base64url').toString());
    return typeof payload.exp === 'number' ? payload.exp * 1000 : null;
  } catch {
    return null;
  }
}

// Asks the runner for an id-token for `audience`, as @actions/core's getIDToken does: GET the
// request URL with `audience` added, authorized by the request token; the answer is
// `{"value": "<jwt>"}`. A failure is a CallError (status 0 when the runner was not reached), so
// `call` retries it like a guard's hiccup.
async function requestIdToken({ url, token }, audience) {
  const target = new URL(url);
  target.searchParams.set('audience', audience);
  let res;
  let text;
  try {
    res = await fetch(target, {
      headers: { authorization: `Bearer ${token}`, accept: 'application/json' },
      signal: AbortSignal.timeout(30000),
    });
    text = await res.text();
  } catch (err) {
    throw new CallError(`requesting an id-token from the runner: ${err.message}`, 0);
  }
  let value;
  try { value = JSON.parse(text).value; } catch { value = undefined; }
  if (!res.ok || !value) {
    throw new CallError(`requesting an id-token from the runner: ${res.status} ${text.slice(0, 200)}`,
      res.ok ? 502 : res.status);
  }
  return value;
}

// Where the bearer token comes from: the `token` input when given; otherwise, when the job has
// `permissions: id-token: write`, an id-token for `audience` from the runner, requested again
// when it is within `marginMs` of its expiry (so a long retry or wait never sends an expired
// one). Every token is masked before it is used. Returns an async function giving the token.
function bearer({ io, audience, env = process.env, marginMs = 60000, now = Date.now }) {
  const given = input('token');
  if (given) {
    io.mask(given);
    return async () => given;
  }
  const request = idTokenRequest(env);
  if (!request) {
    throw new Error('input token is required, unless the job has `permissions: id-token: write` '
      + '(then the action requests an id-token from the runner)');
  }
  let cached = null;
  return async () => {
    if (!cached || (cached.expMs != null && cached.expMs - now() < marginMs)) {
      const value = await requestIdToken(request, audience || 'disruption-guard');
      io.mask(value);
      cached = { value, expMs: jwtExpiryMs(value) };
    }
    return cached.value;
  };
}

// A random nonce, made once per run of main (before any retry).
function newNonce() {
  return crypto.randomBytes(6).toString('hex');
}

// The idempotency key of the open: the `key` input when given; otherwise run id, attempt, job
// id and `nonce`. The legs of a matrix job share run id, attempt and job id: the nonce gives
// each leg (and each use of the action in one job) its own window, while every retry of one
// open, which reuses the key, still finds the window a lost attempt made. The job id is cut so
// that the key stays within the API's 255 characters.
function idempotencyKey({ key, env, nonce }) {
  if (key) return key;
  const job = env.GITHUB_JOB && String(env.GITHUB_JOB).slice(0, 200);
  return [env.GITHUB_RUN_ID, env.GITHUB_RUN_ATTEMPT, job, nonce].filter(Boolean).join('-')
    || undefined;
}

// A Go duration such as 90s, 2m or 1h30m, in milliseconds; '0' is 0.
function durationMs(text) {
  const units = { ms: 1, s: 1000, m: 60000, h: 3600000 };
  if (/^\s*0\s*$/.test(text)) return 0;
  const parts = [...text.trim().matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h)/g)];
  if (!parts.length || parts.map((p) => p[0]).join('') !== text.trim()) {
    throw new Error(`${JSON.stringify(text)} is not a duration such as 2m or 90s`);
  }
  return parts.reduce((sum, p) => sum + Number(p[1]) * units[p[2]], 0);
}

// A duration in ms as Go prints it, to the second: 1h2m3s, 12m0s, 45s.
function goDuration(ms) {
  const total = Math.max(0, Math.round(ms / 1000));
  const [h, m, sec] = [Math.floor(total / 3600), Math.floor((total % 3600) / 60), total % 60];
  return `${h ? `${h}h` : ''}${h || m ? `${m}m` : ''}${sec}s`;
}

// A selector object (`matchLabels`, `matchExpressions`) in kubectl's `-l` syntax.
function selectorText(selector) {
  const sel = selector || {};
  const labels = Object.entries(sel.matchLabels || {}).map(([k, v]) => `${k}=${v}`);
  const expressions = (sel.matchExpressions || []).map(({ key, operator, values }) => {
    switch (operator) {
      case 'In': return `${key} in (${(values || []).join(',')})`;
      case 'NotIn': return `${key} notin (${(values || []).join(',')})`;
      case 'Exists': return key;
      case 'DoesNotExist': return `!${key}`;
      default: return `${key} ${operator} (${(values || []).join(',')})`;
    }
  });
  return [...labels, ...expressions].join(',');
}

// Text made safe for a Markdown table cell: no line breaks, no HTML, no table or emphasis marks.
function mdCell(value) {
  return String(value == null ? '' : value)
    .replace(/[\\`*_[\]|]/g, '\\$&')
    .replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')
    .replace(/\s*[\r\n]+\s*/g, ' ')
    .trim();
}

// The step summary of a closed window, as Markdown: a heading with the verdict and a table of
// the close's answer (`window`, a WindowView). Protection is released by the time the close
// answers: what was protected is the report's `peakProtected` (the most at once while open),
// or, from a guard whose report lacks it, what main saw (`atOpen`: `workloads`, `pods`,
// `nodes` once the window was Ready); `atOpen` is null when main let the job go on without
// protection (fail-open).
function summaryMarkdown(window, atOpen) {
  const w = window || {};
  const r = w.report || {};
  const held = atOpen && (r.peakProtected || atOpen);
  const count = (n, one, many) => `${n || 0} ${(n || 0) === 1 ? one : many}`;
  const names = (list) => (list && list.length ? `: ${list.join(', ')}` : '');
  const verdict = r.clean
    ? 'clean, nothing protected was disrupted'
    : `${count(r.podsDisrupted, 'pod', 'pods')} and ${count((r.nodesDisrupted || []).length, 'node', 'nodes')} disrupted`;
  const opened = Date.parse(w.openedAt);
  const ended = Date.parse(w.endedAt);
  const rows = [
    ['Namespace', w.namespace],
    ['Phase', w.phase],
    ['Reason', w.reason || ''],
    ['Pods selected', selectorText(w.selector) || 'all pods of the namespace'],
    ['Opened', w.openedAt || ''],
    ['Ended', w.endedAt
      ? `${w.endedAt}${Number.isNaN(opened) || Number.isNaN(ended) ? '' : ` (open ${goDuration(ended - opened)})`}`
      : ''],
    ['Protected', protectedCell(held)],
    ['Evictions blocked', r.evictionsBlocked || 0],
    ['Pods disrupted', `${r.podsDisrupted || 0}${names(r.disruptedPods)}`],
    ['Nodes disrupted', `${(r.nodesDisrupted || []).length}${names(r.nodesDisrupted)}`],
    ['Rollouts by disruption-guard', r.rollouts || 0],
  ];
  return [
    `### disruption-guard: ${mdCell(verdict)}`,
    '',
    `| Window | ${mdCell(w.name)} |`,
    '|---|---|',
    ...rows.map(([k, v]) => `| ${k} | ${mdCell(v)} |`),
    '',
  ].join('\n');
}

// The summary's Protected cell: `held` (`workloads`, `pods`, `nodes`), or null for fail-open.
function protectedCell(held) {
  const count = (n, one, many) => `${n || 0} ${(n || 0) === 1 ? one : many}`;
  if (!held) return 'not in effect when the job went on (fail-open)';
  if (!held.pods && !held.workloads && !held.nodes) return 'nothing: the window selected no pod';
  return `${count(held.pods, 'pod', 'pods')} on ${count(held.nodes, 'node', 'nodes')}, `
    + `${count(held.workloads, 'workload', 'workloads')} under a PodDisruptionBudget`;
}

// The wait a Retry-After header asks for at `nowMs`: seconds or an HTTP-date; null when neither.
function retryAfterMs(value, nowMs) {
  if (value == null) return null;
  const text = String(value).trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  const at = Date.parse(text);
  return Number.isNaN(at) ? null : Math.max(0, at - nowMs);
}

// Whether to retry and how long to wait, as the CLI decides it (src/client/retry.rs): 429, 502,
// 503, 504 and network errors (status 0) are retried with full jitter under a doubling ceiling
// (0.5 s up to 10 s), or after Retry-After; no attempt starts after the budget. Pure: `random`
// is in [0, 1). Returns the wait in ms, or null to give up.
function retryDelay({ status, retryAfter, failures, elapsedMs, budgetMs, random }) {
  if (![0, 429, 502, 503, 504].includes(status)) return null;
  const left = budgetMs - elapsedMs;
  if (left <= 0) return null;
  if (retryAfter != null) return retryAfter > left ? null : retryAfter;
  const ceiling = Math.min(10000, 500 * 2 ** Math.min(failures - 1, 20));
  return Math.min(left, Math.floor(random * ceiling));
}

// A failed call; `status` 0 when the guard could not be reached at all.
class CallError extends Error {
  constructor(message, status, problem) {
    super(message);
    this.status = status;
    this.problem = problem || {};
  }
}

// Whether a failure is the guard's (unreachable, 429, 5xx), not the caller's own.
function guardFailure(err) {
  return err instanceof CallError && (err.status === 0 || err.status === 429 || err.status >= 500);
}

async function attempt(method, url, token, body, timeoutMs) {
  // A token source (see `bearer`) gives a fresh token for each attempt.
  const bearerToken = typeof token === 'function' ? await token() : token;
  let res;
  let text;
  try {
    res = await fetch(url, {
      method,
      headers: {
        authorization: `Bearer ${bearerToken}`,
        'content-type': 'application/json',
        accept: 'application/json, application/problem+json',
      },
      body: body === undefined ? undefined : JSON.stringify(body),
      // A request to a replica that is gone may never be answered: abandon it and retry.
      signal: AbortSignal.timeout(timeoutMs),
    });
    text = await res.text();
  } catch (err) {
    const cause = err.cause && err.cause.code ? ` (${err.cause.code})` : '';
    throw new CallError(`${method} ${url}: ${err.message}${cause}`, 0);
  }
  let json;
  try { json = text ? JSON.parse(text) : {}; } catch { json = { detail: text }; }
  if (!res.ok) {
    const detail = json.detail || json.title || text;
    const err = new CallError(`${method} ${url}: ${res.status} ${detail}`, res.status, json);
    err.retryAfter = retryAfterMs(res.headers.get('retry-after'), Date.now());
    throw err;
  }
  return json;
}

// One API call (`token`: a string or a token source), retried while the guard hiccups, for at most `retryForMs` in total; each attempt
// is abandoned after `timeoutMs` (longer than the `?wait=true` timeout it asks for).
async function call(method, url, token, body, retryForMs = 120000, timeoutMs = 90000) {
  const started = Date.now();
  for (let failures = 1; ; failures += 1) {
    try {
      return await attempt(method, url, token, body, timeoutMs);
    } catch (err) {
      if (!(err instanceof CallError)) throw err;
      const wait = retryDelay({
        status: err.status,
        retryAfter: err.retryAfter,
        failures,
        elapsedMs: Date.now() - started,
        budgetMs: retryForMs,
        random: Math.random(),
      });
      if (wait == null) throw err;
      console.log(`disruption-guard: ${err.message}; retrying in ${(wait / 1000).toFixed(1)}s`);
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
  }
}

module.exports = {
  input, stepIO, call, durationMs, retryAfterMs, retryDelay, guardFailure, CallError,
  maskCommands, newNonce, idempotencyKey, idTokenRequest, jwtExpiryMs, requestIdToken, bearer, goDuration, selectorText, mdCell, summaryMarkdown,
  fileCommand, commandData, selectsNoPod, noPodWarning,
};
