// Opens the window and waits until protection is in effect.
'use strict';
const { input, appendTo, call } = require('./lib');

async function main() {
  const server = input('server', true).replace(/\/$/, '');
  const token = input('token', true);
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
    // A re-run of the same job attempt reuses its window instead of opening a second one.
    idempotencyKey: [process.env.GITHUB_RUN_ID, process.env.GITHUB_RUN_ATTEMPT, process.env.GITHUB_JOB]
      .filter(Boolean).join('-') || undefined,
  };
  const timeout = input('wait-timeout') || '60s';
  const url = `${server}/v1/namespaces/${encodeURIComponent(namespace)}/windows?wait=true&timeout=${encodeURIComponent(timeout)}`;
  const window = await call('POST', url, token, body);
  const name = window.name;
  appendTo('GITHUB_STATE', 'window', name);
  appendTo('GITHUB_STATE', 'namespace', namespace);
  appendTo('GITHUB_OUTPUT', 'window', name);
  console.log(`disruption-guard: window ${namespace}/${name} is open and protection is in effect`);
}

main().catch((err) => {
  console.log(`::error::disruption-guard: ${err.message}`);
  process.exitCode = 1;
});
