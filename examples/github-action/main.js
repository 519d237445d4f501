// Opens the window and waits until protection is in effect. The runner runs this file; test
// tools such as @github/local-action require it and call `run`.
'use strict';
const {
  input, stepIO, call, durationMs, guardFailure, newNonce, idempotencyKey, bearer, noPodWarning,
} = require('./lib');

async function open(io) {
  // The `token` input (masked at once), or the runner's id-token for `audience`.
  const token = bearer({ io, audience: input('audience') });
  const retryFor = durationMs(input('retry-for') || '2m');
  const server = input('server', true).replace(/\/$/, '');
  const namespace = input('namespace', true);
  const body = {
    // Kubernetes selector syntax, parsed by the server: `tier=backend,app in (api,web)`.
    selector: input('selector') || undefined,
    ttl: input('ttl') || '30m',
    reason: input('reason') || `${process.env.GITHUB_WORKFLOW || 'workflow'} #${process.env.GITHUB_RUN_NUMBER || '?'}`,
    ci: {
      provider: 'github',
      repository: process.env.GITHUB_REPOSITORY,
      runId: process.env.GITHUB_RUN_ID,
      url: process.env.GITHUB_SERVER_URL && process.env.GITHUB_RUN_ID
        ? `${process.env.GITHUB_SERVER_URL}/${process.env.GITHUB_REPOSITORY}/actions/runs/${process.env.GITHUB_RUN_ID}`
        : undefined,
    },
    // Made once, before the retries: a retried open finds the window a lost attempt made, and
    // each leg of a matrix job (same run, attempt and job id) opens its own window.
    idempotencyKey: idempotencyKey({ key: input('key'), env: process.env, nonce: newNonce() }),
    // The guard refuses (422) a window Ready over no pod, and closes it again.
    requirePods: input('require-pods') === 'true' || undefined,
  };
  const timeout = input('wait-timeout') || '60s';
  const url = `${server}/v1/namespaces/${encodeURIComponent(namespace)}/windows?wait=true&timeout=${encodeURIComponent(timeout)}`;
  let window;
  try {
    window = await call('POST', url, token, body, retryFor, durationMs(timeout) + 30000);
  } catch (err) {
    if (!(input('fail-open') === 'true' && guardFailure(err))) throw err;
    // A window that was opened but not Ready in time is still closed by post.
    const opened = err.problem.window && err.problem.window.name;
    if (opened) {
      io.saveState('window', opened);
      io.saveState('namespace', namespace);
    }
    console.log(`::warning title=disruption-guard: running unprotected::fail-open: ${err.message}. `
      + 'The job goes on WITHOUT PROTECTION: node autoscalers may disrupt the pods under test.');
    io.output('protected', 'false');
    return;
  }
  const name = window.name;
  io.saveState('window', name);
  io.saveState('namespace', namespace);
  // What is protected now, for post's summary: the close answers once protection is released.
  const { workloads, pods, nodes } = window.protected || {};
  io.saveState('protection', JSON.stringify({ workloads, pods, nodes }));
  io.output('window', name);
  io.output('protected', 'true');
  io.output('report', JSON.stringify(window.report || {}));
  const warning = noPodWarning(window, namespace);
  if (warning) {
    console.log(warning);
  } else {
    console.log(`disruption-guard: window ${namespace}/${name} is open and protection is in effect`);
  }
}

// The step: a failure is an error annotation and a failed step (exit code 1).
async function run() {
  try {
    await open(stepIO());
  } catch (err) {
    console.log(`::error::disruption-guard: ${err.message}`);
    process.exitCode = 1;
  }
}

module.exports = { run };

if (require.main === module) run();
