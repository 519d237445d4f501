// Closes the window (runs even when the job failed or was cancelled) and prints the report.
'use strict';
const { input, call, durationMs, maskToken } = require('./lib');

async function post() {
  maskToken();
  // The window main opened, by its name: each leg of a matrix job has its own state.
  const name = process.env.STATE_window;
  const namespace = process.env.STATE_namespace;
  if (!name) {
    console.log('disruption-guard: no window was opened, nothing to close');
    return;
  }
  const server = input('server', true).replace(/\/$/, '');
  const url = `${server}/v1/namespaces/${encodeURIComponent(namespace)}/windows/${encodeURIComponent(name)}?wait=true`;
  const closed = await call('DELETE', url, input('token', true), undefined,
    durationMs(input('retry-for') || '2m'));
  const report = closed.report || {};
  console.log(`disruption-guard: window ${namespace}/${name} closed`);
  console.log(JSON.stringify(report, null, 2));
  if ((report.podsDisrupted || 0) > 0) {
    console.log(`::warning::disruption-guard: ${report.podsDisrupted} protected pod(s) were disrupted during the window`);
  }
}

post().catch((err) => {
  // The window's TTL is the backstop: warn, do not fail the job's clean-up.
  console.log(`::warning::disruption-guard: closing the window failed (${err.message}); its TTL will end it`);
});
